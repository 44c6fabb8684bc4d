"""``nonoka ui`` in a real headless Chromium over a database filled by real bridge turns."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import BrowserContext, expect

from tests.ui.fill import Filled
from tests.ui.harness import UiServer, open_page
from tests.ui.screens import check_screenshot, take_screenshots


def test_the_list_shows_the_sessions_newest_first(browser: BrowserContext, ui: UiServer,
                                                  filled: Filled) -> None:
    page = open_page(browser, ui)
    assert "token" not in page.url, "the token is dropped from the address bar"
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(8)  # the chat sessions; no title-generation ones here
    shown = rows.evaluate_all("rows => rows.map(r => r.dataset.session)")
    assert shown[0] == filled.ids["plan"] and shown[-1] == filled.ids["host_tool"]
    assert set(filled.ids.values()) <= set(shown)
    first = page.locator(f"tr[data-session='{filled.ids['host_tool']}']")
    expect(first).to_contain_text("Create notes.txt with a haiku about a pond")
    expect(first).to_contain_text("completed", ignore_case=True)
    expect(first).to_contain_text("openai:test-model")
    expect(page.locator(f"tr[data-session='{filled.ids['plan']}']")).to_contain_text(
        "failed", ignore_case=True)
    page.close()


def test_search_and_filters_find_sessions(browser: BrowserContext, ui: UiServer,
                                          filled: Filled) -> None:
    page = open_page(browser, ui)
    page.fill("#q", "haiku")
    page.press("#q", "Enter")
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-session", filled.ids["host_tool"])
    # The conversation's text is searched too, not only titles.
    page.fill("#q", "two nights")
    page.press("#q", "Enter")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-session", filled.ids["branch_1"])
    page.goto(ui.base + "?status=failed")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-session", filled.ids["plan"])
    page.goto(ui.base + "?q=no+such+thing+anywhere")
    expect(page.locator(".empty")).to_contain_text("No session matches")
    page.close()


def test_paging_walks_the_list_both_ways(browser: BrowserContext, ui: UiServer,
                                         filled: Filled) -> None:
    page = open_page(browser, ui, "?n=25")
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(8)  # the chat sessions, drawn
    everything = rows.evaluate_all("rows => rows.map(r => r.dataset.session)")
    page.goto(ui.base + "?sort=tokens&order=desc&n=25")
    expect(rows).to_have_count(8)
    by_tokens = rows.evaluate_all("rows => rows.map(r => r.dataset.session)")
    assert sorted(by_tokens) == sorted(everything)
    assert by_tokens[0] == filled.ids["host_tool"], "the most tokens"
    page.close()


def test_the_session_page_shows_the_timeline(browser: BrowserContext, ui: UiServer,
                                             filled: Filled) -> None:
    page = open_page(browser, ui, f"s/{filled.ids['host_tool']}")
    expect(page.locator("h1")).to_have_text("Create notes.txt with a haiku about a pond")
    conversation = page.locator("#conversation")
    expect(conversation.locator(".entry")).to_have_count(8)
    expect(conversation.locator(".md strong")).to_have_text("haiku")  # markdown rendered
    expect(conversation.locator("pre.code")).to_contain_text("A frog jumps into the pond")
    page.click("[data-tab=timeline]")
    timeline = page.locator("#timeline-list")
    expect(timeline).to_be_visible()
    expect(timeline.locator("[data-kind=request]")).to_have_count(4)
    expect(timeline.locator("[data-kind=model_call]")).to_have_count(4)
    call = timeline.locator("[data-kind=tool_call]")
    expect(call).to_contain_text("write (run by host)")
    result = timeline.locator("[data-kind=tool_result]")
    expect(result).to_contain_text("wrote 62 bytes")
    expect(result.locator(".dur")).to_have_text(re.compile(r"\d+(\.\d)? (ms|s)"))
    first_call = timeline.locator("[data-kind=model_call]").first
    expect(first_call).to_contain_text("→")  # tokens in → out
    expect(timeline.locator("[data-kind=finish]").last).to_contain_text("$0.0023")
    page.click("[data-tab=usage]")
    expect(page.locator(".chart").first.locator(".bar")).to_have_count(4)
    page.close()


def test_recoveries_and_errors_are_highlighted(browser: BrowserContext, ui: UiServer,
                                               filled: Filled) -> None:
    page = open_page(browser, ui, f"s/{filled.ids['recovered']}#timeline")
    recovered = page.locator("#timeline-list .tone-recovery")
    expect(recovered).to_have_count(1)
    expect(recovered).to_contain_text("session recovered (session_id_missing)")
    page.goto(ui.base + f"s/{filled.ids['plan']}#timeline")
    expect(page.locator("#timeline-list .tone-error[data-kind=error]")).to_contain_text(
        "deploy: staging cluster unreachable")
    page.close()


def test_the_plan_is_a_graph_coloured_by_status(browser: BrowserContext, ui: UiServer,
                                                filled: Filled) -> None:
    page = open_page(browser, ui, f"s/{filled.ids['plan']}#plan")
    graph = page.locator("#plan-graph")
    expect(graph).to_be_visible()
    expect(graph.locator(".node")).to_have_count(12)
    expect(graph.locator(".node-completed")).to_have_count(9)
    expect(graph.locator(".node-failed")).to_have_attribute("data-step", "deploy_check")
    expect(graph.locator(".node-pending")).to_have_count(2)
    expect(graph.locator(".edge")).to_have_count(11)  # one per dependency
    failed = page.locator("#step-deploy_check")
    expect(failed).to_contain_text("2 attempts")
    expect(failed).to_contain_text("RuntimeError: deploy: staging cluster unreachable")
    expect(page.locator("#step-summarize")).to_contain_text("Triage: 3 regressions")
    graph.locator("[data-step=fetch_ci]").click()
    assert page.url.endswith("#step-fetch_ci")
    ledger = page.locator(".ledger")
    expect(ledger).to_contain_text("Model turns")
    expect(ledger).to_contain_text("Tool calls")
    page.close()


def test_lineage_is_a_tree_to_click_through(browser: BrowserContext, ui: UiServer,
                                            filled: Filled) -> None:
    ids = filled.ids
    page = open_page(browser, ui, f"s/{ids['branch_1']}")
    tree = page.locator(".lineage")
    expect(tree.locator(".lineage-node")).to_have_count(4)
    expect(tree.locator(".lineage-node.current")).to_have_attribute(
        "href", f"/s/{ids['branch_1']}")
    nested = tree.locator(f"a[href='/s/{ids['branch_1']}'] + ul a")
    expect(nested).to_have_attribute("href", f"/s/{ids['branch_3']}")
    expect(nested).to_contain_text("Make it vegetarian-friendly")
    expect(page.locator(".branch-of")).to_contain_text(ids["branch_root"][:8])
    tree.locator(f"a[href='/s/{ids['branch_root']}']").click()
    expect(page).to_have_url(re.compile(f"/s/{ids['branch_root']}$"))
    expect(page.locator(".lineage .lineage-node.current")).to_contain_text(
        "Plan a three-day trip to Kyoto")
    page.close()


def test_markup_in_entries_renders_as_text_and_never_runs(
        browser: BrowserContext, ui: UiServer, filled: Filled) -> None:
    page = open_page(browser, ui)
    row = page.locator(f"tr[data-session='{filled.ids['hostile']}']")
    expect(row).to_contain_text("<script>window.__pwned")
    page.goto(ui.base + f"s/{filled.ids['hostile']}")
    entries = page.locator("#conversation .md")
    expect(entries).to_have_count(2)
    expect(entries.first).to_contain_text('<script>window.__pwned = "script"</script>')
    expect(entries.last).to_contain_text("""<img src="x" onerror="window.__pwned = 'img'">""")
    expect(page.locator("#conversation img")).to_have_count(0)
    expect(page.locator("#conversation script")).to_have_count(0)
    page.wait_for_timeout(300)  # an onerror handler would have run by now
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.close()


def test_screenshots_of_both_pages(browser: BrowserContext, ui: UiServer, filled: Filled,
                                   tmp_path: Path) -> None:
    """The pictures docs/ shows, taken as ``python -m tests.ui.screens`` takes them, into a
    scratch directory: a test run leaves docs/ as it is."""
    shots = take_screenshots(browser, ui, filled, tmp_path)
    assert [shot.name for shot in shots] == ["ui-sessions.png", "ui-session.png"]
    for shot in shots:
        check_screenshot(shot)

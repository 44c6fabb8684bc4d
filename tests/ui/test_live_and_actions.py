"""What changes under a page: a turn run by another process, the token, the actions."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, Route, expect

from nonoka.state.session_state import SessionStatus
from nonoka.store.project import open_project_stores
from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer, Step
from tests.support.bridge import Bridge, assistant, chat, one, user
from tests.ui.fill import WRITE
from tests.ui.harness import UiServer, open_page, run_async


def stored_status(project: Path, session_id: str) -> SessionStatus | None:
    async def load() -> SessionStatus | None:
        async with open_project_stores(project) as stores:
            state = await stores.checkpoints.load_session(session_id)
            return state.status if state else None

    return run_async(load())


def stored_entries(project: Path, session_id: str) -> list[tuple[str, str | None, str]]:
    async def load() -> list[tuple[str, str | None, str]]:
        async with open_project_stores(project) as stores:
            state = await stores.checkpoints.load_session(session_id)
            assert state is not None
            return [(e.role, e.tool_call_id, e.content) for e in state.memory_entries]

    return run_async(load())


def test_a_turn_run_in_another_process_appears_live(
        browser: BrowserContext, project: Path, server: ScriptedOpenAIServer,
        scripted: list[Step]) -> None:
    bridge = Bridge(project, server)
    scripted.append(text("The first answer."))
    history = [user("Watch this conversation")]
    sid = one(bridge.run(chat(history)), "session_init")["session_id"]
    history.append(assistant("The first answer."))
    ui = UiServer(project)
    try:
        page = open_page(browser, ui, f"s/{sid}")
        expect(page.locator("#conversation .entry")).to_have_count(2)
        expect(page.locator("#live")).to_have_class("live on")
        page.evaluate("window.__sameDocument = true")
        events_tab = page.locator("#part-tabs [data-tab=timeline] .count").first
        events_before = events_tab.inner_text()
        # Another process (a host's next step) runs a turn of this session.
        scripted.append(text("A **second** answer, written while you watched."))
        history.append(user("And another thing"))
        events = bridge.run(chat(history, session_id=sid))
        assert one(events, "session_init")["session_id"] == sid
        entries = page.locator("#conversation .entry")
        expect(entries).to_have_count(4, timeout=60_000)
        expect(entries.last).to_contain_text("A second answer, written while you watched.")
        expect(page.locator("#part-summary")).to_contain_text("4 messages")
        expect(events_tab).not_to_have_text(events_before)  # the timeline grew too
        assert page.evaluate("window.__sameDocument") is True, "the page was not reloaded"
        page.close()
    finally:
        ui.stop()


def test_an_answer_stored_while_the_page_fetches_the_turn_is_shown_too(
        browser: BrowserContext, project: Path, server: ScriptedOpenAIServer,
        scripted: list[Any]) -> None:
    """A turn's prompt and its answer are stored apart. When the answer lands after the
    page fetched the prompt but before it fetched the other sections, the page must still
    fetch the answer: it once took the sections' newer revision as what it showed, and
    stayed one message short until something else changed."""
    bridge = Bridge(project, server)
    scripted.append(text("The first answer."))
    history = [user("Watch this conversation")]
    sid = one(bridge.run(chat(history)), "session_init")["session_id"]
    history.append(assistant("The first answer."))
    release = threading.Event()

    def held_answer(body: dict[str, Any]) -> Step:
        assert release.wait(120), "the page never fetched the sections"
        return text("The answer stored mid-refresh.")

    scripted.append(held_answer)
    history.append(user("And another thing"))
    turn = threading.Thread(target=bridge.run, args=(chat(history, session_id=sid),))
    ui = UiServer(project)
    try:
        page = open_page(browser, ui, f"s/{sid}")
        entries = page.locator("#conversation .entry")
        expect(entries).to_have_count(2)

        def answer_first(route: Route) -> None:
            """The sections' first fetch after the prompt shows: the turn ends first."""
            if not release.is_set() and entries.count() == 3:
                release.set()
                turn.join(120)
            route.continue_()

        page.route("**/parts", answer_first)
        turn.start()
        expect(entries).to_have_count(4, timeout=60_000)
        expect(entries.last).to_contain_text("The answer stored mid-refresh.")
        assert release.is_set(), "the answer was not held back until the sections' fetch"
        page.close()
    finally:
        release.set()
        if turn.ident is not None:
            turn.join(120)
        ui.stop()


def test_every_request_needs_the_token(project: Path, server: ScriptedOpenAIServer,
                                       scripted: list[Step]) -> None:
    scripted.append(text("hello"))
    sid = one(Bridge(project, server).run(chat([user("hi")])), "session_init")["session_id"]
    ui = UiServer(project)
    try:
        for path in ("/", f"/s/{sid}", f"/s/{sid}/revision", f"/s/{sid}/entries",
                     "/?token=wrong-token"):
            for headers in ({}, {"Accept": "text/html"}, {"Authorization": "Bearer wrong"}):
                status, answer, body = ui.request(path, headers=headers)
                assert status == 403, (path, headers)
                assert b"hello" not in body and b"hi" not in body.replace(b"this", b"")
                assert "content-security-policy" in answer
        status, headers, body = ui.request(f"/s/{sid}", token=True)
        assert status == 200 and b"hello" in body
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["cache-control"] == "no-store" and "set-cookie" not in headers
        # A page that rebinds its own host name to 127.0.0.1 is refused too.
        status, _, _ = ui.request("/", token=True, headers={"Host": "evil.example"})
        assert status == 403
        # Reading only: actions are refused without --allow-actions.
        status, _, body = ui.request(f"/s/{sid}/cancel", method="POST", token=True,
                                     headers={"X-Nonoka-Action": "1"})
        assert status == 403 and b"--allow-actions" in body
    finally:
        ui.stop()


def test_actions_cancel_a_paused_session_and_say_what_is_not_available(
        browser: BrowserContext, project: Path, server: ScriptedOpenAIServer,
        scripted: list[Step]) -> None:
    bridge = Bridge(project, server)
    scripted.append(call("write", {"path": "a.txt", "content": "x"}, id="call_1"))
    events = bridge.run(chat([user("Write a.txt")], tools=[WRITE]))
    sid = one(events, "session_init")["session_id"]
    assert events[-1]["finish_reason"] == "tool_calls"
    assert stored_status(project, sid) == SessionStatus.PAUSED
    ui = UiServer(project, "--allow-actions")
    try:
        page = open_page(browser, ui, f"s/{sid}")
        page.on("dialog", lambda dialog: dialog.accept())
        status, _, _ = ui.request(f"/s/{sid}/cancel", method="POST", token=True)
        assert status == 403, "a request without the page's header is refused"
        with page.expect_download() as download:
            page.click("[data-action=export]")
        exported = Path(download.value.path()).read_text().splitlines()
        assert download.value.suggested_filename == f"{sid}.jsonl"
        assert len(exported) > 1 and sid in exported[1]
        page.click("[data-action=cancel]")
        expect(page.locator("#toast")).to_have_text("session cancelled")
        expect(page.locator("#part-header .status")).to_have_text("cancelled", timeout=60_000)
        expect(page.locator("#timeline-list [data-kind=cancel]")).to_have_count(1)
        assert stored_status(project, sid) == SessionStatus.CANCELLED
        page.click("[data-action=cancel]")
        expect(page.locator("#toast")).to_contain_text("nothing to cancel")
        page.click("[data-action=fork][data-entry='0']", force=True)
        page.wait_for_url(lambda url: f"/s/{sid}" not in url, timeout=60_000)
        branch = page.url.rstrip("/").rsplit("/", 1)[-1].split("#")[0]
        expect(page.locator("#part-header")).to_contain_text("branch of")
        assert stored_entries(project, branch) == stored_entries(project, sid)[:1]
        page.close()
    finally:
        ui.stop()
    # The history stays valid for any chat API: the open call got a result.
    assert stored_entries(project, sid)[-1][:2] == ("tool", "call_1")


def test_the_command_names_the_extra_when_it_is_missing(project: Path) -> None:
    code = ("import sys; sys.modules['starlette'] = None; sys.argv = ['nonoka', 'ui']; "
            "from nonoka.cli.main import main; main()")
    done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "pip install '.[ui]'" in done.stderr and "starlette" in done.stderr


def test_a_project_without_sessions_is_refused_and_nothing_is_created(project: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "nonoka", "ui", "--port", "0"], cwd=project,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "NONOKA_DATABASE_URL": ""})
    assert done.returncode == 1 and "no sessions" in done.stderr
    assert not (project / ".nonoka").exists()


def test_binding_another_interface_warns(project: Path, server: ScriptedOpenAIServer,
                                         scripted: list[Step]) -> None:
    scripted.append(text("hello"))
    Bridge(project, server).run(chat([user("hi")]))
    ui = UiServer(project, "--host", "0.0.0.0")
    errors = ui.stop()
    assert "warning: binding 0.0.0.0" in errors

"""Markdown from models and tools: the usual constructs render, nothing from the input runs."""

from __future__ import annotations

import time

import pytest

from nonoka.ui.markdown import MARKUP_CHARS, QUOTE_DEPTH, render

HOSTILE = [
    ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
    ('<img src=x onerror="alert(1)">', "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;"),
    ("[click](javascript:alert(1))", "[click](javascript:alert(1))"),
    ('[x](https://a.example/" onmouseover="alert(1))',
     "<p>[x](https://a.example/&#34; onmouseover=&#34;alert(1))</p>"),
    ("`<b>code</b>`", "<code>&lt;b&gt;code&lt;/b&gt;</code>"),
    ("```\n<svg onload=alert(1)>\n```", "<pre class=\"code\"><code>&lt;svg onload=alert(1)&gt;"),
    ("**<i>bold</i>**", "<strong>&lt;i&gt;bold&lt;/i&gt;</strong>"),
]


@pytest.mark.parametrize(("source", "expected"), HOSTILE)
def test_markup_in_the_input_is_text(source: str, expected: str) -> None:
    html = str(render(source))
    assert expected in html
    for tag in ("<script", "<img", "<svg", "<i>", "<b>", "onerror=\"", "javascript:alert(1)\""):
        assert tag not in html


def test_common_markdown_renders() -> None:
    html = str(render("# Title\n\nSome **bold**, *em* and `code`.\n\n- one\n- two\n\n"
                      "1. first\n2. second\n\n> quoted\n\n```python\nx = 1 < 2\n```\n"
                      "See [docs](https://example.com/a?b=1&c=2)."))
    assert "<h3>Title</h3>" in html
    assert "<strong>bold</strong>" in html and "<em>em</em>" in html
    assert "<code>code</code>" in html
    assert "<ul><li>one</li><li>two</li></ul>" in html
    assert "<ol><li>first</li><li>second</li></ol>" in html
    assert "<blockquote><p>quoted</p></blockquote>" in html
    assert '<pre class="code"><code>x = 1 &lt; 2</code></pre>' in html
    assert ('<a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer nofollow" '
            'target="_blank">docs</a>') in html


def test_an_unclosed_fence_runs_to_the_end_and_nul_bytes_are_dropped() -> None:
    html = str(render("before\n```\n<b>never closed\n\x00"))
    assert html.startswith("<p>before</p>")
    assert "&lt;b&gt;never closed" in html and "\x00" not in html


def test_quotes_nested_past_the_depth_stay_text() -> None:
    html = str(render(">" * 1200 + " deep"))  # was a RecursionError: the page answered 500
    assert html.count("<blockquote>") == QUOTE_DEPTH
    assert "&gt;" * 100 in html and "deep</p>" in html
    assert str(render("> a\n>\n> > b")) == (
        "<blockquote><p>a</p><blockquote><p>b</p></blockquote></blockquote>")


PATHOLOGICAL = [
    "**a " * 12_000,  # each `**` opened a scan to the end of the line: 9 s at 48 KB
    "[" * 48_000,  # each `[` did the same, looking for `]`
    "**a [b](https://c) *d* `e` " * 1_700,
    ">" * 48_000,
]


@pytest.mark.parametrize("source", PATHOLOGICAL, ids=["bold", "brackets", "mixed", "quotes"])
def test_hostile_text_under_the_markup_bound_renders_in_bounded_time(source: str) -> None:
    assert len(source) <= MARKUP_CHARS
    started = time.perf_counter()
    html = str(render(source))
    assert time.perf_counter() - started < 1.0
    assert "<script" not in html and html.startswith(("<p>", "<blockquote>"))


def test_text_over_the_bound_is_escaped_text_without_markup() -> None:
    source = "**a " * 30_000 + "\n<script>alert(1)</script>"  # 120 KB: blocked 32 s
    started = time.perf_counter()
    html = str(render(source))
    assert time.perf_counter() - started < 1.0
    assert "<strong>" not in html and "**a **a" in html
    assert html.endswith("<br>&lt;script&gt;alert(1)&lt;/script&gt;</p>")

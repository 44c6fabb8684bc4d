"""Markdown from models and tools: the usual constructs render, nothing from the input runs."""

from __future__ import annotations

import pytest

from nonoka.ui.markdown import render

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

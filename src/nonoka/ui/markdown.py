"""Markdown from models and tools, rendered so that nothing in it can run.

Everything is HTML-escaped first; only then are the few constructs people expect turned
into tags this module writes itself (code blocks and spans, emphasis, headings, lists,
quotes, ``http(s)``/``mailto`` links). No tag, attribute or URL scheme from the input
survives, so a ``<script>`` or an ``<img onerror>`` in a model's answer shows as text.

The text is hostile too, so the work is bounded: quotes nest at most ``QUOTE_DEPTH``
levels (deeper ``>`` lines stay text), every pattern scans a character a bounded number
of times (no construct spans another's opening mark), and a text over ``MARKUP_CHARS``
is shown as escaped text without markup. A page never fails or stalls on a message.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

QUOTE_DEPTH = 8
"""Quotes nested deeper than this show their ``>`` marks as text."""
MARKUP_CHARS = 50_000
"""Longer texts are shown escaped, line by line, without markup."""

_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)(?:^\1[ \t]*$|\Z)", re.S | re.M)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*(?=\S)((?:(?!\*\*).)+?)(?<=\S)\*\*")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(((?:https?://|mailto:)[^\s()<>\"']+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(.*)$")


def render(text: str) -> Markup:
    """``text`` as safe HTML."""
    text = text.replace("\x00", "")  # the inline pass uses NUL as a placeholder
    if len(text) > MARKUP_CHARS:
        return Markup(_plain(text))
    out: list[str] = []
    position = 0
    for match in _FENCE.finditer(text):
        out.append(_blocks(text[position:match.start()]))
        out.append(f'<pre class="code"><code>{escape(match.group(2).rstrip(chr(10)))}'
                   "</code></pre>")
        position = match.end()
    out.append(_blocks(text[position:]))
    return Markup("".join(out))


def _blocks(text: str, depth: int = 0) -> str:
    html: list[str] = []
    for block in re.split(r"\n[ \t]*\n", text.strip("\n")):
        lines = block.split("\n")
        if not block.strip():
            continue
        heading = _HEADING.match(lines[0])
        if heading and len(lines) == 1:
            level = min(6, len(heading.group(1)) + 2)
            html.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif all(_BULLET.match(line) for line in lines):
            html.append(_list("ul", [_BULLET.match(line) for line in lines]))
        elif all(_NUMBERED.match(line) for line in lines):
            html.append(_list("ol", [_NUMBERED.match(line) for line in lines]))
        elif depth < QUOTE_DEPTH and all(line.startswith(">") for line in lines):
            inner = "\n".join(line[1:].lstrip() for line in lines)
            html.append(f"<blockquote>{_blocks(inner, depth + 1)}</blockquote>")
        else:
            html.append("<p>" + "<br>".join(_inline(line) for line in lines) + "</p>")
    return "".join(html)


def _plain(text: str) -> str:
    return "<p>" + "<br>".join(str(escape(line)) for line in text.split("\n")) + "</p>"


def _list(tag: str, matches: list[re.Match[str] | None]) -> str:
    items = "".join(f"<li>{_inline(m.group(1))}</li>" for m in matches if m is not None)
    return f"<{tag}>{items}</{tag}>"


def _inline(text: str) -> str:
    """Escape, then mark up; code spans are set aside so nothing inside them changes."""
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(f"<code>{match.group(1)}</code>")
        return f"\x00{len(spans) - 1}\x00"

    html = _CODE_SPAN.sub(keep, str(escape(text)))
    html = _LINK.sub(r'<a href="\2" rel="noopener noreferrer nofollow" target="_blank">\1</a>',
                     html)
    html = _BOLD.sub(r"<strong>\1</strong>", html)
    html = _ITALIC.sub(r"<em>\1</em>", html)
    return re.sub("\x00(\\d+)\x00", lambda m: spans[int(m.group(1))], html)

"""Text made safe to print: control characters escaped, credentials masked.

Model output, tool results, file contents and titles are written by others; raw on a
terminal an ``ESC ] 52`` sequence writes the clipboard and ``ESC [ 2J`` clears the screen.
Everything the human commands print goes through here, on a terminal or in a pipe alike
(the escaping itself is ``nonoka.ops.printable``, which the Markdown export shares).
"""

from __future__ import annotations

from collections.abc import Sequence

from nonoka.ops.printable import printable
from nonoka.redact import redact_text

__all__ = ("highlighted", "printable", "shown")


def shown(text: object, *, one_line: bool = False) -> str:
    """A stored or reported field as it may be printed: credentials masked, controls
    escaped."""
    return printable(redact_text(str(text)), one_line=one_line)


def highlighted(snippet: str, marks: Sequence[tuple[int, int]], colour: bool) -> str:
    """A search snippet on one line, safe to print; with ``colour`` its matches (at
    ``marks``, inside their brackets) in bold yellow instead of bracketed. Only the
    marks are highlighted: a bracket of the text itself stays a bracket."""
    if not colour:
        return printable(snippet, one_line=True)
    out, at = [], 0
    for start, end in marks:
        out += [printable(snippet[at:start - 1], one_line=True), _BOLD_YELLOW,
                printable(snippet[start:end], one_line=True), _RESET]
        at = end + 1
    out.append(printable(snippet[at:], one_line=True))
    return "".join(out)


_BOLD_YELLOW, _RESET = "\x1b[1;33m", "\x1b[0m"

"""Text made safe to print: control characters escaped, credentials masked.

Model output, tool results, file contents and titles are written by others; raw on a
terminal an ``ESC ] 52`` sequence writes the clipboard and ``ESC [ 2J`` clears the screen.
Everything the human commands print goes through here, on a terminal or in a pipe alike.
"""

from __future__ import annotations

import re

from nonoka.redact import redact_text

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 controls except tab and newline, DEL, and the C1 controls (``\\x9b`` is a CSI too)."""
_CONTROLS_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with control characters shown as ``\\x1b`` instead of acted upon
    (tab and newline too when ``one_line``; a CRLF line end is a newline)."""
    if one_line:
        return _CONTROLS_ONE_LINE.sub(_escape, text)
    return _CONTROLS.sub(_escape, text.replace("\r\n", "\n"))


def shown(text: object, *, one_line: bool = False) -> str:
    """A stored or reported field as it may be printed: credentials masked, controls
    escaped."""
    return printable(redact_text(str(text)), one_line=one_line)

"""Control characters shown, never acted upon, in text people read.

Model output, tool results, file contents and titles are written by others; raw on a
terminal an ``ESC ] 52`` sequence writes the clipboard, ``ESC c`` resets it and ``ESC [
2J`` clears the screen. The human commands (``nonoka.cli.safe_text``) and the Markdown
export, which is read in terminals and pagers too, show them as ``\\x1b`` instead.
"""

from __future__ import annotations

import re

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

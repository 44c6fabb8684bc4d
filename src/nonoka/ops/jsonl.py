"""The JSONL export format: one self-describing header line, then each session's rows.

```
{"format": "nonoka-sessions", "version": 2, "nonoka": "...", "exported_at": ...}
{"type": "media", "digest": "sha256:...", "media_type": ..., "size": n, "data": "<base64>"}
                                           (each file, once, before the first session using it)
{"type": "session", "session_id": ..., "snapshot": "<text>", "revision": ..., ...,
 "index": {...} | null, "lineage": {"forked_from": ..., "fork_point": ...} | null}
{"type": "entry", "seq": 0, "entry": "<entry JSON text>"}            (every entry, in order)
{"type": "step", "step_id": ..., "update_type": ..., "payload": "<text>", "updated_at": ...}
{"type": "event", "seq": ..., "at": ..., "kind": ..., "data": "<text>"}
{"type": "end_session", "session_id": ..., "entries": n, "steps": n, "events": n,
 "digest": "<sha256 of the session's lines>"}
{"type": "end", "sessions": n}
```

Stored JSON travels as strings, byte for byte, so an export imported anywhere stores the
very same text. The closing lines make truncation visible: a file without ``end`` is
incomplete, and ``digest`` catches a changed line. No control character is written raw
(JSON escapes C0 itself; DEL and C1, which a terminal acts on, are written ``\u009b``),
so an export printed on a terminal is safe, and still decodes to the very same text.
incomplete, and ``digest`` catches a changed line. An entry that refers to a stored file
(``nonoka.store.media``) carries its digest, which the session's ``digest`` covers; the
file travels once in a ``media`` line of its own before the first session that refers
to it (and is checked against its digest on import), so a screenshot sent in 20 turns of
5 sessions is in the file once. Version 1 files (no ``media`` lines: every file inline in
its entry) import as they are.
"""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring
from typing import Any

from nonoka.store.media import Media, base64_text

FORMAT = "nonoka-sessions"
VERSION = 2
MAX_LINE = 64 * 1024 * 1024
"""The longest line an import reads (a 64 MB entry); longer is refused, not read."""


_RAW = re.compile("[\x7f-\x9f]")
"""DEL and the C1 controls, which ``json`` leaves raw (only inside strings, where an
escape is the same character)."""


def _escaped(text: str) -> str:
    return _RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(value: Any) -> str:
    return _escaped(json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                               allow_nan=False, sort_keys=True))


string = encode_basestring
"""A JSON string literal, as ``json.dumps(text, ensure_ascii=False)`` writes it (its C
function, without the encoder's layers)."""


def entry_lines(rows: list[tuple[int, str]]) -> str:
    """The lines of a batch of entries, written by hand: the hot path of a long export
    (``dumps`` would sort the keys to this same order)."""
    return _escaped("".join([f'{{"entry":{string(text)},"seq":{seq},"type":"entry"}}\n'
                             for seq, text in rows]))


def media_line(file: Media) -> str:
    """A file's line: its digest, type, size and bytes (base64)."""
    return (f'{{"data":"{base64_text(file.data)}","digest":{string(file.digest)},'
            f'"media_type":{string(file.media_type)},"size":{file.size},"type":"media"}}\n')

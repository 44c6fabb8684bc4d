"""The files a session's conversation holds, named without reading their bytes.

``nonoka sessions show`` lists them (``[image shot.png, image/png, 2.0 MiB]`` at entry
3). The entries are read as stored rows, through a branch's bases (``SessionReader``):
a reference names its file by digest with its size, an inline part (a row written
before files were stored apart) gives its size from its base64 length; no file's bytes
are read and no row without a file part is decoded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nonoka.ops.backends import backend_for
from nonoka.store.media import describe, file_parts, part_size
from nonoka.store.project import ProjectStores


@dataclass(frozen=True)
class SessionFile:
    """One file part of a conversation entry."""

    position: int
    """The entry's position in the conversation."""
    part: dict[str, Any]
    """The part as stored (a reference: ``media``, ``size``; or inline ``data``)."""

    @property
    def label(self) -> str:
        """``[image shot.png, image/png, 2.0 MiB]``."""
        return describe(self.part)

    def as_json(self) -> dict[str, Any]:
        part = self.part
        return {"entry": self.position, "media_type": part.get("media_type"),
                "filename": part.get("filename"), "size": part_size(part),
                "digest": part.get("media"), "url": part.get("url"), "label": self.label}


async def session_files(stores: ProjectStores, session_id: str) -> list[SessionFile]:
    """The session's file parts in conversation order (none for an unknown session)."""
    found: list[SessionFile] = []
    async with backend_for(stores).reader() as reader:
        if await reader.head(session_id) is None:
            return []
        async for rows in reader.entries(session_id):
            for seq, text in rows:
                if '"file"' not in text:  # most rows: settled without decoding
                    continue
                try:
                    entry = json.loads(text)
                except ValueError:
                    continue
                meta = entry.get("metadata") if isinstance(entry, dict) else None
                if isinstance(meta, dict):
                    found += [SessionFile(seq, dict(p)) for p in file_parts(meta)]
    return found

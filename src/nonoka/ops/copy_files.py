"""``nonoka db copy`` for the Files API's uploads (``serve_files`` and their bytes).

A file is no session, so it is copied beside them: every live file of the source, with
its owner, name, purpose, times and bytes, under the same id, so a ``file_id`` a client
kept still names it in the destination. As for sessions, a file the destination has
already (the same record) was copied by an earlier run and is skipped; one the
destination holds under that id with another record, or deleted there, is a conflict,
reported and never overwritten. Each copied file's bytes are read back from the
destination and their digest compared with the record's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nonoka.store.files import FileRecord, FileStore, open_files
from nonoka.store.media import digest_of
from nonoka.store.project import ProjectStores


@dataclass
class FilesCopied:
    """What the copy did with each file of the source, by id."""

    copied: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    """Copied, but the destination's bytes are not the file's."""
    source_files: int = 0

    @property
    def ok(self) -> bool:
        return not (self.conflicts or self.mismatched)

    def as_json(self) -> dict[str, Any]:
        return {"copied": self.copied, "already": self.already,
                "conflicts": self.conflicts, "mismatched": self.mismatched,
                "source_files": self.source_files}


async def copy_files(source: ProjectStores, target: ProjectStores) -> FilesCopied:
    """Copy every live file of ``source`` into ``target`` (see the module docstring)."""
    src, dst = open_files(source.checkpoints), open_files(target.checkpoints)
    report = FilesCopied()
    there = {r.file_id: r for r in await dst.every(deleted=True)}
    live = {r.file_id for r in await dst.every()}
    files = await src.every()
    report.source_files = len(files)
    for record in files:
        found = there.get(record.file_id)
        if found is not None:
            same = found == record and record.file_id in live
            (report.already if same else report.conflicts).append(record.file_id)
            continue
        data = await src.content(record.owner, record.file_id)
        if data is None:
            continue  # deleted meanwhile
        await dst.add(record, data)
        report.copied.append(record.file_id)
    held = {*report.copied, *report.already}
    for record in files:
        if record.file_id in held and not await _faithful(dst, record):
            report.mismatched.append(record.file_id)
    return report


async def _faithful(dst: FileStore, record: FileRecord) -> bool:
    """The destination holds ``record`` and its bytes."""
    data = await dst.content(record.owner, record.file_id)
    return data is not None and len(data) == record.size and digest_of(data) == record.digest

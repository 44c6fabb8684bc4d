"""``nonoka db copy``: every session from one database to another, verified (and the
Files API's uploads beside them: ``nonoka.ops.copy_files``).

Each session is copied under its lease in the source (so no writer changes it
meanwhile; a session that is running is reported and left for the next run; one whose
stored rows the export cannot read, or the import refuses, is reported and left too),
through the JSONL format in a temporary file (the same checked import as ``sessions
import``), and verified: its digest in the destination must equal the
source's. A session already in the destination with the same digest was copied by an
earlier, interrupted run and is skipped, so running the copy again resumes it; one with
a different digest is a conflict, reported and never overwritten. At the end the counts
and every session's digest are compared again.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nonoka.errors import ConfigurationError, StoreError
from nonoka.ops import jsonl
from nonoka.ops.backends import backend_for
from nonoka.ops.copy_files import FilesCopied, copy_files
from nonoka.ops.export import header_line, session_digest, session_lines
from nonoka.ops.importer import ImportInterruptedError, import_jsonl
from nonoka.store.leases import new_lease_owner
from nonoka.store.project import ProjectStores

LEASE_TTL = 120.0


@dataclass
class CopyReport:
    copied: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    """Present with the same digest (an earlier run copied them)."""
    busy: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    """Copied but the digests differ: the copy is not faithful."""
    damaged: dict[str, str] = field(default_factory=dict)
    """Sessions whose stored rows cannot be exported or imported, and why (left)."""
    source_sessions: int = 0
    target_sessions: int = 0
    files: FilesCopied = field(default_factory=FilesCopied)
    """The Files API's uploads, copied beside the sessions."""

    @property
    def ok(self) -> bool:
        return not (self.busy or self.conflicts or self.mismatched or self.damaged) and \
            self.files.ok

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "copied": self.copied, "already": self.already,
                "busy": self.busy, "conflicts": self.conflicts, "mismatched": self.mismatched,
                "damaged": self.damaged,
                "source_sessions": self.source_sessions,
                "target_sessions": self.target_sessions, "files": self.files.as_json()}


async def copy_database(source: ProjectStores, target: ProjectStores) -> CopyReport:
    """Copy every session of ``source`` into ``target`` (see the module docstring)."""
    src, dst = backend_for(source), backend_for(target)
    report = CopyReport()
    ids = await src.session_ids()
    report.source_sessions = len(ids)
    owner = new_lease_owner()
    with tempfile.TemporaryDirectory(prefix="nonoka-copy-") as tmp:
        spool = Path(tmp) / "session.jsonl"
        for sid in ids:
            if not await source.leases.acquire_lease(sid, owner, LEASE_TTL):
                report.busy.append(sid)
                continue
            try:
                await _copy(src, dst, target, sid, spool, report)
            except ImportInterruptedError:
                raise  # the destination failed to store it: stop there
            except StoreError as exc:
                if exc.retryable:
                    raise
                report.damaged[sid] = " ".join(str(exc).split())
            except ConfigurationError as exc:
                report.damaged[sid] = f"the import refuses it: {exc}"
            finally:
                await source.leases.release_lease(sid, owner)
        await _verify(src, dst, ids, report)
    report.files = await copy_files(source, target)
    return report


async def _copy(src: Any, dst: Any, target: ProjectStores, sid: str, spool: Path,
                report: CopyReport) -> None:
    """Copy one session held under its lease, unless the destination has it already."""
    async with src.reader() as reader:
        want = await session_digest(reader, sid)
    async with dst.reader() as reader:
        have = await session_digest(reader, sid)
    if want is None:
        return  # deleted meanwhile
    if have is not None:
        (report.already if have == want else report.conflicts).append(sid)
        return
    async with src.reader() as reader:
        with spool.open("w", encoding="utf-8") as out:
            out.write(header_line())
            async for line in session_lines(reader, sid, set()):
                out.write(line)
            out.write(jsonl.dumps({"type": "end", "sessions": 1}) + "\n")
    await import_jsonl(target, spool, on_conflict="skip")
    report.copied.append(sid)


async def _verify(src: Any, dst: Any, ids: list[str], report: CopyReport) -> None:
    """Compare counts and every copied session's digest on both sides."""
    present = set(await dst.session_ids())
    report.target_sessions = len(present)
    for sid in [*report.copied, *report.already]:
        async with src.reader() as reader:
            want = await session_digest(reader, sid)
        async with dst.reader() as reader:
            have = await session_digest(reader, sid) if sid in present else None
        if want != have:
            report.mismatched.append(sid)

"""Session operations on the in-memory engine: the reference the SQL engines match.

Search reads every entry (there is no index) with the same word rules as the SQL
engines, ordered like PostgreSQL: matching titles first, then entries of the most
recently active session first, latest position first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from nonoka.ops.backends.sql import media_findings
from nonoka.ops.model import (
    EventRow,
    Finding,
    RawHit,
    SearchQuery,
    SessionHead,
    SessionSummary,
    Stats,
    StepRow,
)
from nonoka.ops.sharing import Facts, Lineage, attribute, keeps
from nonoka.ops.text import document_words, entry_text
from nonoka.store.media import Media, digests, needed, references
from nonoka.store.memory.checkpoints import MemoryCheckpointStore, collect_media
from nonoka.store.memory.database import CheckpointRow, StoredEvent
from nonoka.store.memory.database import StepRow as MemoryStepRow
from nonoka.store.memory.records import MemoryRecordStore
from nonoka.store.project import ProjectStores
from nonoka.store.records import SessionRecord


class MemoryOps:
    engine = "memory"

    def __init__(self, stores: ProjectStores) -> None:
        checkpoints, index = stores.checkpoints, stores.index
        assert isinstance(checkpoints, MemoryCheckpointStore)
        assert isinstance(index, MemoryRecordStore)
        self.db = checkpoints.database
        self.records = index.database

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[_Reader]:
        yield _Reader(self)

    async def session_ids(self) -> list[str]:
        with self.db.lock:
            return sorted(self.db.checkpoints)

    async def write_session(self, head: SessionHead, entries: Iterable[str],
                            steps: list[StepRow], events: Iterable[EventRow],
                            index: dict[str, Any] | None,
                            media: Sequence[Media] = ()) -> bool:
        sid = head.session_id
        texts = list(entries)
        marks = {seq: refs for seq, refs in ((seq, references(t)) for seq, t in
                                             enumerate(texts)) if refs is not None}
        log = [StoredEvent(e.seq, e.at, e.kind, e.data) for e in events]
        with self.db.lock, self.records.lock:
            if sid in self.db.checkpoints:
                return False
            for file in media:
                self.db.media.setdefault(file.digest, file)
            self.db.checkpoints[sid] = CheckpointRow(head.snapshot, head.revision,
                                                     head.memory_generation, texts,
                                                     head.created_at, head.updated_at, marks)
            for key in [k for k in self.db.step_updates if k[0] == sid]:
                del self.db.step_updates[key]
            for step in steps:
                order, self.db.next_order = self.db.next_order, self.db.next_order + 1
                self.db.step_updates[(sid, step.step_id, step.update_type)] = MemoryStepRow(
                    step.payload, step.updated_at, order)
            self.records.events.pop(sid, None)
            if log:
                self.records.events[sid] = log
            self.records.sessions.pop(sid, None)
            if index is not None:
                self.records.sessions[sid] = SessionRecord.model_validate(index).model_dump_json()
        return True

    async def search(self, query: SearchQuery, words: list[str]) -> list[RawHit]:
        wanted = set(words)
        with self.db.lock, self.records.lock:
            rows = {sid: list(row.entries) for sid, row in self.db.checkpoints.items()}
            index = {sid: SessionRecord.model_validate_json(t)
                     for sid, t in self.records.sessions.items()}
        facts = {sid: Facts(r.title, r.status, r.last_active, r.model, r.purpose)
                 for sid, r in index.items()}
        lineage = _lineage(rows, index)
        titles: list[tuple[float, str, RawHit]] = []
        hits: list[tuple[float, str, int, RawHit]] = []
        for sid in set(rows) | set(index):
            fact = facts.get(sid)
            title = fact.title if fact else ""
            last = fact.last_active if fact else None
            status = fact.status if fact else ""
            kept = keeps(sid, fact, query)
            if kept and title and all(w in title.casefold() for w in wanted):
                titles.append((-(last or 0.0), sid, RawHit(sid, -1, title, title, status, last)))
            if not kept and sid not in lineage.bases:
                continue
            shared = lineage.base.get(sid, ("", 0))[1]  # the base holds these (copied here)
            for seq, raw in enumerate(rows.get(sid, [])):
                if seq >= shared and wanted <= document_words(entry_text(raw)[1]):
                    hits.append((-(last or 0.0), sid, -seq,
                                 RawHit(sid, seq, raw, title, status, last)))
        titles.sort(key=lambda h: (h[0], h[1]))
        hits.sort(key=lambda h: (h[0], h[1], h[2]))
        found = [h[2] for h in titles[: query.limit]]
        for *_, raw_hit in hits:
            if len(found) >= query.limit:
                break
            hit = attribute(raw_hit, lineage, facts, query)
            if hit is not None:
                found.append(hit)
        return found[: query.limit]

    async def summaries(self) -> list[SessionSummary]:
        with self.db.lock, self.records.lock:
            heads = {sid: (row.state_json, row.updated_at)
                     for sid, row in self.db.checkpoints.items()}
            index = {sid: SessionRecord.model_validate_json(t)
                     for sid, t in self.records.sessions.items()}
        out: list[SessionSummary] = []
        for sid in sorted(set(heads) | set(index)):
            record = index.get(sid)
            snapshot, updated = heads.get(sid, ("{}", 0.0))
            status = record.status if record else _status(snapshot)
            last = record.last_active if record else updated
            parent = record.metadata.get("forked_from") if record else None
            out.append(SessionSummary(sid, status, last, record.model if record else "",
                                      record.purpose if record else "chat",
                                      parent if isinstance(parent, str) else None))
        return out

    async def session_bytes(self, session_id: str) -> int:
        with self.db.lock, self.records.lock:
            row = self.db.checkpoints.get(session_id)
            size = 0 if row is None else len(row.state_json.encode()) + sum(
                len(e.encode()) for e in row.entries)
            if row is not None and row.media:  # the files only this session refers to
                others = {d for sid, other in self.db.checkpoints.items()
                          if sid != session_id for d in needed(other.media.values())}
                size += sum(self.db.media[d].size for d in needed(row.media.values())
                            if d in self.db.media and d not in others)
            size += sum(len(s.payload_json.encode()) for k, s in self.db.step_updates.items()
                        if k[0] == session_id)
            size += sum(len(e.data_json.encode())
                        for e in self.records.events.get(session_id, []))
        return size

    async def check(self) -> list[Finding]:
        with self.db.lock, self.records.lock:
            stored = set(self.db.checkpoints)
            orphans = {k[0] for k in self.db.step_updates} - stored
            index_only = set(self.records.sessions) - stored
            logs = {sid: len(log) for sid, log in self.records.events.items()
                    if sid not in stored and sid not in self.records.sessions}
        found = [Finding("error", "orphan_rows", "step_updates row(s) without a checkpoint",
                         sid) for sid in sorted(orphans)]
        found += [Finding("warning", "index_without_checkpoint",
                          "an index row without a checkpoint", sid)
                  for sid in sorted(index_only)]
        found += [Finding("warning", "orphan_events", f"{n} event(s) of a session that is "
                          "not stored", sid) for sid, n in sorted(logs.items()) if n]
        with self.db.lock:
            missing, referenced = self._references()
            files = [(d, f.data) for d, f in sorted(self.db.media.items())]
            unreferenced = [(d, f.size) for d, f in sorted(self.db.media.items())
                            if d not in referenced]
        return found + media_findings(missing, unreferenced, files)

    def _references(self) -> tuple[list[tuple[str, int, str]], set[str]]:
        """References without their file, and every digest referred to (lock held)."""
        missing, referenced = [], set()
        for sid, row in sorted(self.db.checkpoints.items()):
            for seq, value in sorted(row.media.items()):
                for digest in digests(value):
                    referenced.add(digest)
                    if digest not in self.db.media:
                        missing.append((sid, seq, digest))
        return missing, referenced

    async def repair(self) -> list[Finding]:
        """Nothing to rebuild: this engine stores nothing derived from other rows."""
        return []

    async def vacuum(self) -> tuple[int, int]:
        before = await self._size()
        with self.db.lock:
            collect_media(self.db, list(self.db.media))
        return before, await self._size()

    async def _size(self) -> int:
        text = sum([await self.session_bytes(s) for s in await self.session_ids()])
        with self.db.lock:
            return text + sum(f.size for f in self.db.media.values())

    async def stats(self, largest: int = 10) -> Stats:
        with self.db.lock, self.records.lock:
            sizes = [(sid, len(row.entries), sum(len(e.encode()) for e in row.entries))
                     for sid, row in self.db.checkpoints.items()]
            events = sum(len(log) for log in self.records.events.values())
            files = [f.size for f in self.db.media.values()]
        sizes.sort(key=lambda s: (-s[2], s[0]))
        by_table = {"session_entries": sum(s[2] for s in sizes)}
        if files:
            by_table["media"] = sum(files)
        return Stats("memory", len(sizes), sum(s[1] for s in sizes), events, by_table,
                     sizes[:largest], len(files), sum(files))


def _lineage(rows: dict[str, list[str]], index: dict[str, SessionRecord]) -> Lineage:
    """Branches from the index rows (this engine copies a branch's entries): a branch
    still shares its first ``fork_point`` entries while its parent holds the same ones
    (a parent's compaction rewrites them, as the SQL engines then detach the branch)."""
    links: list[tuple[str, str, int]] = []
    for sid, record in index.items():
        parent, point = record.metadata.get("forked_from"), record.metadata.get("fork_point")
        if not isinstance(parent, str) or not isinstance(point, int) or point <= 0:
            continue
        mine, theirs = rows.get(sid), rows.get(parent)
        if mine is not None and theirs is not None and mine[:point] == theirs[:point] \
                and len(theirs) >= point:
            links.append((sid, parent, point))
    return Lineage(links)


def _status(snapshot: str) -> str:
    try:
        value = json.loads(snapshot).get("status", "")
    except (ValueError, AttributeError):
        return ""
    return str(value)


class _Reader:
    def __init__(self, ops: MemoryOps) -> None:
        self._ops = ops

    async def head(self, session_id: str) -> SessionHead | None:
        with self._ops.db.lock:
            row = self._ops.db.checkpoints.get(session_id)
        if row is None:
            return None
        return SessionHead(session_id, row.state_json, row.revision, len(row.entries),
                           row.memory_generation, row.created_at, row.updated_at)

    async def entries(self, session_id: str) -> AsyncIterator[list[tuple[int, str]]]:
        with self._ops.db.lock:
            row = self._ops.db.checkpoints.get(session_id)
            texts = list(row.entries) if row else []
        for start in range(0, len(texts), 1000):
            yield list(enumerate(texts[start:start + 1000], start))

    async def steps(self, session_id: str) -> list[StepRow]:
        with self._ops.db.lock:
            rows = [(s.updated_at, s.order, StepRow(k[1], k[2], s.payload_json, s.updated_at))
                    for k, s in self._ops.db.step_updates.items() if k[0] == session_id]
        return [r[2] for r in sorted(rows, key=lambda r: (r[0], r[1]))]

    async def events(self, session_id: str) -> AsyncIterator[EventRow]:
        with self._ops.records.lock:
            log = list(self._ops.records.events.get(session_id, []))
        for e in log:
            yield EventRow(e.seq, e.at, e.kind, e.data_json)

    async def index(self, session_id: str) -> dict[str, Any] | None:
        with self._ops.records.lock:
            text = self._ops.records.sessions.get(session_id)
        return None if text is None else SessionRecord.model_validate_json(text).model_dump(
            mode="json")

    async def files(self, session_id: str) -> list[str]:
        with self._ops.db.lock:
            row = self._ops.db.checkpoints.get(session_id)
            return [] if row is None else needed(v for _, v in sorted(row.media.items()))

    async def file(self, digest: str) -> Media | None:
        with self._ops.db.lock:
            return self._ops.db.media.get(digest)



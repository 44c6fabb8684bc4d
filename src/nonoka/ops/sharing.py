"""Search hits in entries a branch shares with the session it was forked from.

A branch's first ``fork_point`` entries are its parent's rows (the SQL engines store
them once; ``store/sqlite/lineage.py``), so a match there is one stored document that
several conversations hold. It is reported once: in the session storing it when the
query's filters keep that session, else in the first branch they keep, with every other
kept session holding it in ``shared_with``. A filter naming a branch (``--session``,
``--status``, ...) thus still finds the entries the branch shares.

Engines hand over candidate hits whose storing session passed the filters or is the
base of a branch (the only sessions whose rows other conversations hold); ``attribute``
decides the rest here, the same way for every engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from nonoka.ops.model import RawHit, SearchQuery

_MAX_DEPTH = 10_000


@dataclass(frozen=True)
class Facts:
    """What the filters look at in a session's index row."""

    title: str
    status: str
    last_active: float | None
    model: str
    purpose: str


def keeps(session_id: str, facts: Facts | None, query: SearchQuery) -> bool:
    """Whether the query's filters keep the session (one without an index row only
    when no filter needs the row)."""
    if query.session is not None and session_id != query.session:
        return False
    if facts is None:
        return not (query.status or query.since is not None or query.model)
    if not query.everything and facts.purpose != "chat":
        return False
    if query.status and facts.status not in query.status:
        return False
    if query.since is not None and (facts.last_active or 0.0) < query.since:
        return False
    return not (query.model and facts.model != query.model)


class Lineage:
    """Which sessions share which stored entries: ``(branch, base, count)`` links, each
    branch holding its base's first ``count`` entries."""

    def __init__(self, links: Iterable[tuple[str, str, int]]) -> None:
        self.base: dict[str, tuple[str, int]] = {}
        self.children: dict[str, list[tuple[str, int]]] = {}
        for branch, base, count in sorted(links):
            self.base[branch] = (base, int(count))
            self.children.setdefault(base, []).append((branch, int(count)))

    def __bool__(self) -> bool:
        return bool(self.base)

    @property
    def bases(self) -> set[str]:
        return set(self.children)

    def sharers(self, owner: str, seq: int) -> list[str]:
        """The branches (and their branches) whose conversation holds ``owner``'s stored
        entry ``seq`` at the same position."""
        found: list[str] = []
        todo = [owner]
        while todo and len(found) < _MAX_DEPTH:
            for branch, count in self.children.get(todo.pop(0), ()):
                if seq < count and branch not in found:
                    found.append(branch)
                    todo.append(branch)
        return found

    def holders(self, session_id: str) -> list[str]:
        """The session and the sessions whose rows its conversation reads (its bases)."""
        chain = [session_id]
        while chain[-1] in self.base and len(chain) < _MAX_DEPTH:
            base = self.base[chain[-1]][0]
            if base in chain:
                break  # a cycle: a damaged file; ``db check`` reports it
            chain.append(base)
        return chain


def attribute(hit: RawHit, lineage: Lineage, facts: Mapping[str, Facts],
              query: SearchQuery) -> RawHit | None:
    """The hit as reported (see the module), or ``None`` when no session holding it is
    kept. Hits in a title, or stored by a session no branch shares, pass unchanged (the
    engine's own filters kept them)."""
    if hit.seq < 0 or hit.session_id not in lineage.children:
        return hit
    holders = [hit.session_id, *lineage.sharers(hit.session_id, hit.seq)]
    kept = [s for s in holders if keeps(s, facts.get(s), query)]
    if not kept:
        return None
    first = facts.get(kept[0])
    if first is None:
        return replace(hit, session_id=kept[0], title="", status="", last_active=None,
                       shared_with=tuple(kept[1:]))
    return replace(hit, session_id=kept[0], title=first.title, status=first.status,
                   last_active=first.last_active, shared_with=tuple(kept[1:]))

"""Per-entry digests of a conversation, chained, so one comparison covers a prefix.

Stores keep, with every entry row, the *chain* up to it: the number of host entries so
far (nonoka's own system prompts, summaries and repair notes are not the host's and do
not count), whether a summary was stored, a digest that folds each host entry's
comparison key (``nonoka.bridge.reconcile``: the role, the text with its whitespace
normalised, the tool-call ids) into the previous digest, and a digest of the stored
rows' exact text. The chain of a row stands for every row up to it: a process that
decoded a session's entries knows they are still the stored ones from one row's chain
(``nonoka.store.sqlite.entry_cache``), and decodes only the rows stored since.

Standard library only: the stores write it before pydantic loads.
Internal: this module's layout may change.
"""

from __future__ import annotations

import hashlib
import json
from typing import NamedTuple

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's import budget
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

Key = tuple[str, ...]


def _norm(text: str) -> str:
    return " ".join(text.split())


def message_key(role: str, content: str, call_ids: Sequence[str] = (),
                tool_call_id: str | None = None) -> Key:
    """What must agree for two messages to be "the same message" of a conversation
    (the same key as ``nonoka.bridge.reconcile.message_key``; a test holds them equal)."""
    if role == "assistant":
        return ("assistant", _norm(content), *call_ids)
    if role == "tool":
        return ("tool", tool_call_id or "", _norm(content))
    return (role, _norm(content))


def internal(role: str, metadata: Mapping[str, Any]) -> bool:
    """Entries only nonoka has: system prompts, its own summaries and repair notes."""
    return role == "system" or bool(metadata.get("summary") or metadata.get("contract_repair"))


def entry_key(role: str, content: str, metadata: Mapping[str, Any]) -> Key:
    """The key of a stored entry, from its fields (a ``MemoryEntry`` or a decoded row)."""
    calls = [str(c.get("id", "")) for c in metadata.get("tool_calls") or []]
    call_id = metadata.get("tool_call_id")
    return message_key(role, content, calls, None if call_id is None else str(call_id))


def link(digest: str, key: Key) -> str:
    """Fold one key into a digest (the key is JSON-encoded: no two keys encode alike)."""
    text = digest + json.dumps(key, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Chain(NamedTuple):
    """The chain after some entries: host entries counted, a summary seen, the digest of
    their keys, and the digest of the stored rows' exact text (which tells a process
    that the rows it decoded earlier are still the stored ones)."""

    hosted: int = 0
    summary: bool = False
    digest: str = ""
    rows: str = ""

    def encode(self) -> str:
        """The text stored with an entry row."""
        return f"{self.hosted}:{int(self.summary)}:{self.digest}:{self.rows}"

    @classmethod
    def decode(cls, text: str) -> Chain:
        hosted, summary, digest, rows = text.split(":", 3)
        return cls(int(hosted), summary == "1", digest, rows)

    def add(self, role: str, content: str, metadata: Mapping[str, Any],
            text: str = "") -> Chain:
        """The chain after one more stored entry (``text``: its stored JSON)."""
        rows = _fold(self.rows, text)
        if internal(role, metadata):
            return Chain(self.hosted, self.summary or bool(metadata.get("summary")),
                         self.digest, rows)
        return Chain(self.hosted + 1, self.summary,
                     link(self.digest, entry_key(role, content, metadata)), rows)


def _fold(digest: str, text: str) -> str:
    return hashlib.sha256(f"{digest}{len(text)}:{text}".encode()).hexdigest()[:32]


def entry_chains(start: Chain, entries: Iterable[tuple[str, str, Mapping[str, Any], str]]
                 ) -> list[Chain]:
    """The chain after each of ``entries`` (``(role, content, metadata, stored JSON)``),
    from ``start``."""
    chains = []
    chain = start
    for role, content, metadata, text in entries:
        chain = chain.add(role, content, metadata, text)
        chains.append(chain)
    return chains

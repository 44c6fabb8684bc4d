"""A digest chained over a conversation's stored rows, so one comparison covers a prefix.

Stores keep, with every entry row, a digest of that row's exact text folded into the
previous row's digest (column ``key_chain``). The digest on a row stands for every row
up to it: a process that decoded a session's entries knows they are still the stored
ones from one row's digest (``nonoka.store.reuse.DecodedEntries``), and decodes only the
rows stored since, so a turn's repeated reads and a long-lived bridge's turns do not
decode the whole conversation again.

Rows written before this form carry ``hosted:summary:key digest:rows digest``; the
last field is the same rows digest, so both forms continue one chain.

Standard library only: the stores write it before pydantic loads.
Internal: this module's layout may change.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's import budget
if TYPE_CHECKING:
    from collections.abc import Iterable


class Chain(NamedTuple):
    """The digest of the stored rows' exact text, up to some row."""

    rows: str = ""

    def encode(self) -> str:
        """The text stored with an entry row."""
        return self.rows

    @classmethod
    def decode(cls, text: str) -> Chain:
        return cls(text.rpartition(":")[2])

    def add(self, text: str) -> Chain:
        """The chain after one more stored row (``text``: its stored JSON)."""
        return Chain(_fold(self.rows, text))


def _fold(digest: str, text: str) -> str:
    return hashlib.sha256(f"{digest}{len(text)}:{text}".encode()).hexdigest()[:32]


def entry_chains(start: Chain, texts: Iterable[str]) -> list[Chain]:
    """The chain after each of the rows ``texts`` (their stored JSON), from ``start``."""
    chains = []
    chain = start
    for text in texts:
        chain = chain.add(text)
        chains.append(chain)
    return chains

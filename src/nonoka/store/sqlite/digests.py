"""A digest chained over a conversation's stored rows, so one comparison covers a prefix.

Stores keep, with every entry row, a digest of that row's exact text folded into the
previous row's digest (column ``key_chain``). The digest on a row stands for every row
up to it: a process that decoded a session's entries knows they are still the stored
ones from one row's digest (``nonoka.store.reuse.DecodedEntries``), and decodes only the
rows stored since, so a turn's repeated reads and a long-lived bridge's turns do not
decode the whole conversation again.

A row stores the digest as its 16 bytes (``stored``: a blob). Rows written before
carry it as text, the 32 hex digits, and rows older still as ``hosted:summary:key
digest:rows digest``, whose last field is the same digest; ``decode`` reads all three,
so every form continues one chain.

Standard library only: the stores write it before pydantic loads.
Internal: this module's layout may change.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's import budget
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import TypeGuard


class Chain(NamedTuple):
    """The digest of the stored rows' exact text, up to some row."""

    rows: str = ""

    def encode(self) -> str:
        """The digest as text (what rows stored before ``stored``)."""
        return self.rows

    def stored(self) -> bytes | str:
        """What an entry row stores: the digest's 16 bytes (a chain that is not a
        digest, which no row of nonoka's holds, as its text)."""
        try:
            raw = bytes.fromhex(self.rows)
        except ValueError:
            return self.rows
        return raw if len(self.rows) == _DIGITS and raw.hex() == self.rows else self.rows

    @classmethod
    def decode(cls, value: str | bytes) -> Chain:
        """The chain a row stores (``stored``), in any of its forms."""
        if isinstance(value, bytes):
            return cls(value.hex())
        return cls(value.rpartition(":")[2])

    def add(self, text: str) -> Chain:
        """The chain after one more stored row (``text``: its stored JSON)."""
        return Chain(_fold(self.rows, text))


_DIGITS = 32
"""Hex digits of a digest: 128 bits."""


def is_stored(value: object) -> TypeGuard[str | bytes]:
    """Whether a row's ``key_chain`` holds a chain (in any form ``decode`` reads)."""
    return isinstance(value, (str, bytes))


def _fold(digest: str, text: str) -> str:
    return hashlib.sha256(f"{digest}{len(text)}:{text}".encode()).hexdigest()[:_DIGITS]


def entry_chains(start: Chain, texts: Iterable[str]) -> list[Chain]:
    """The chain after each of the rows ``texts`` (their stored JSON), from ``start``."""
    chains = []
    chain = start
    for text in texts:
        chain = chain.add(text)
        chains.append(chain)
    return chains

"""What the server keeps between requests that resend a growing history.

A Chat Completions or Messages client sends the whole conversation every turn, one
exchange longer. Parsing it into messages, comparing it with the stored session and
encoding it for the model would each cost a turn more the longer it grows. The server
keeps, per conversation it answered lately:

- the messages each raw message of the body parsed to (``parsed``): a body that starts
  with the raw messages of an earlier one (compared by value, in C) parses only the rest,
  and gets the very ``Message`` objects of before, which the passes below then compare
  by identity;
- the bridge's passes over the conversation (``take`` / ``give``: a ``BridgeReuse`` per
  conversation key, the host comparison, the runtime's passes and the next-call
  template; the stores, the store's reuse and the model calls' threads are the
  server's, shared by all).

A request running while another of the same conversation runs gets passes of its own
(``take`` hands each out once). Whatever is kept, a request gets the same answer as
without it: a body that does not extend a kept one is parsed whole, and each pass checks
that it resumes on the same prefix.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from nonoka.bridge.reuse import BridgeReuse
from nonoka.llm.workers import Workers
from nonoka.store.kept import KeptStores
from nonoka.store.reuse import StoreReuse

T = TypeVar("T")

SHORT = 16
"""Bodies with fewer raw messages are parsed whole and not kept."""


class ParsedBodies(Generic[T]):
    """The parse of the last few bodies' raw messages, each raw message's own."""

    def __init__(self, bodies: int = 16) -> None:
        self.bodies = bodies
        self._kept: list[tuple[list[Any], list[T]]] = []
        """Most recent last: the raw messages, and what each parsed to."""

    def parsed(self, given: list[Any], parse: Callable[[Any, int], T]) -> list[T]:
        """``parse(raw, n)`` of each raw message ``given``, taken from a kept body that
        ``given`` starts with where there is one (``parse`` must depend only on the raw
        message and its place)."""
        best: tuple[list[Any], list[T]] | None = None
        for kept in self._kept:
            raw, _ = kept
            n = len(raw)
            if n <= len(given) and (best is None or n > len(best[0])) and given[:n] == raw:
                best = kept
        done = [] if best is None else best[1]
        out = [*done, *(parse(raw, n) for n, raw in enumerate(given[len(done):], len(done)))]
        if len(given) >= SHORT and self.bodies > 0:
            if best is not None:
                self._kept.remove(best)
            self._kept.append((list(given), list(out)))  # the caller's list may change
            while len(self._kept) > self.bodies:
                del self._kept[0]
        return out


class KeptPasses:
    """A ``BridgeReuse`` per conversation key answered lately, over the server's stores."""

    def __init__(self, store: StoreReuse, kept: KeptStores, workers: Workers,
                 conversations: int = 16) -> None:
        self.store = store
        self.kept = kept
        self.workers = workers
        self.conversations = conversations
        self._idle: OrderedDict[str, BridgeReuse] = OrderedDict()

    def take(self, key: str | None) -> BridgeReuse:
        """The passes a request of conversation ``key`` runs with (no other request uses
        them until ``give``)."""
        found = self._idle.pop(key, None) if key is not None else None
        if found is None:
            found = BridgeReuse()
            found.store, found.kept, found.workers = self.store, self.kept, self.workers
        return found

    def give(self, key: str | None, reuse: BridgeReuse) -> None:
        """``reuse`` back, for the conversation's next request."""
        if key is None:
            return
        self._idle[key] = reuse
        self._idle.move_to_end(key)
        while len(self._idle) > self.conversations:
            self._idle.popitem(last=False)

"""What a long-lived ``nonoka bridge`` keeps between requests, in one owner.

A host resends its whole history every turn and the bridge reloads the same session
one exchange longer. Each pass over either would cost a turn more the longer the
conversation grows, so each keeps where it stopped, and the next request goes on from
there: the request lines (``RequestLines``: the last line's decoded and validated
messages), the comparison of the host's history with the stored one
(``HostComparison``), the runtime's passes over the conversation
(``ConversationPasses``: tool-call pairing, token count, the model request's wire
text), what the store keeps (``StoreReuse``: decoded rows, snapshot texts), the
next-call template's digest state (``nonoka.bridge.next_call``), the project's open
database (``KeptStores``, while it is still the file on disk) and the threads the model
calls read their answers on (``nonoka.llm.workers``).

``nonoka.bridge.server.main`` creates one per process and hands it to every request;
a request handled without one computes everything from scratch, with the same result.

Internal: this module's layout may change.
"""

from __future__ import annotations

from typing import Any

from nonoka.bridge.reconcile import HostComparison
from nonoka.llm.workers import Workers
from nonoka.protocol.frames import RequestLines
from nonoka.state.prefix_memo import ConversationPasses, PrefixMemo
from nonoka.store.kept import KeptStores
from nonoka.store.reuse import StoreReuse


class BridgeReuse:
    """Everything one bridge process keeps between the requests it serves."""

    __slots__ = ("comparison", "kept", "lines", "passes", "store", "template", "workers")

    def __init__(self, lines: RequestLines | None = None) -> None:
        self.lines = lines if lines is not None else RequestLines()
        """The request lines read so far (created first, before the runtime loads)."""
        self.comparison = HostComparison()
        self.passes = ConversationPasses()
        self.store = StoreReuse()
        self.template: PrefixMemo[tuple[str, Any, bool, int]] = PrefixMemo()
        """The next-call template's conversation digest state."""
        self.kept = KeptStores()
        """The project's stores, open between requests (closed when the process leaves)."""
        self.workers = Workers()
        """The threads of the model calls' HTTP exchanges, idle between calls."""

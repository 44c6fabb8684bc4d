"""``classify`` without decoding the stored conversation, when the digest chain settles it.

Most requests continue the stored conversation: the host resends it and adds a message.
The store keeps the digest chain of its entries (``nonoka.digests``), so that case is
recognised from one stored value and the request's own messages: the host's first
``hosted`` messages (system ones left out) fold to the stored digest. Anything else —
a different history, or a stored conversation nonoka compacted — returns ``None`` and
the caller runs ``nonoka.bridge.reconcile.classify`` on the decoded entries. Either way
the answer is the one ``classify`` gives (``tests/bridge/test_chained.py`` checks it on
generated histories).
"""

from __future__ import annotations

from collections.abc import Sequence

from nonoka.bridge.reconcile import Lineage, Reconciliation
from nonoka.digests import Chain, host_digest, message_key
from nonoka.messages import Message


def classify_by_chain(count: int, chain: Chain,
                      messages: Sequence[Message]) -> Reconciliation | None:
    """``classify``'s answer for a stored conversation of ``count`` entries whose last
    chain is ``chain``, when the history continues it; ``None`` when only the entries
    can tell."""
    if chain.summary or chain.hosted == 0:
        return None  # a compacted copy can sit anywhere in the host's history
    hosted = [m for m in messages if m.role != "system"]
    if len(hosted) < chain.hosted:
        return None
    keys = (message_key(m.role, m.content, [c.id for c in m.tool_calls or []],
                        m.tool_call_id) for m in hosted[:chain.hosted])
    if host_digest(keys) != chain.digest:
        return None
    return Reconciliation(Lineage.CONTINUATION, count, new=hosted[chain.hosted:],
                          shared=chain.hosted)

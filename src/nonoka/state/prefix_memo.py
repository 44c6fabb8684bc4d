"""Passes over a conversation that pick up where the last one stopped.

A host resends its whole history every turn, and a long-lived bridge reloads the same
conversation every turn, one exchange longer. Every pass over it (the token count, the
tool-call pairing, the comparison with the host's copy, the wire text of the model
request) then cost a turn more the longer the conversation was. ``PrefixMemo`` keeps the
sequences one pass last went over and the pass's state at their end: when the next
call's sequences start with them, the pass resumes there and reads only what is new.

"Starts with them" is one list comparison in C: the entries a process reuses are the
same objects (the store's decoded-entry cache, the bridge's validated messages), so it
is settled by identity, a few nanoseconds an item; items that are equal but not the same
object are compared by value, which is slower but gives the same answer. Only plain
lists and ``EntrySnapshot``\\ s are accepted: slicing either yields a list in C.

Internal: this module's layout may change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

State = TypeVar("State")

SHORT = 64
"""Sequences shorter than this are read whole, and not kept."""


class PrefixMemo(Generic[State]):
    """The state one pass reached at the end of the sequences it last went over.

    One tuple, replaced whole, so a reader on another thread sees one call's sequences
    with that call's state, never a mix.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[tuple[list[Any], ...], State] | None = None

    def resume(self, *sequences: Sequence[Any]) -> tuple[tuple[int, ...], State] | None:
        """Where each of ``sequences`` stops matching the last kept ones (their lengths)
        and the state kept there, when every one starts with its kept sequence;
        ``None`` when the pass must start from the beginning."""
        last = self._last
        if last is None or len(last[0]) != len(sequences):
            return None
        kept, state = last
        for sequence, seen in zip(sequences, kept, strict=True):
            n = len(seen)
            if len(sequence) < n or sequence[:n] != seen:
                return None
        return tuple(map(len, kept)), state

    def keep(self, state: State, *sequences: Sequence[Any]) -> None:
        """Remember ``state`` as the pass's state at the end of ``sequences`` (copied:
        a caller's list may grow afterwards). Short sequences are not kept: reading
        them costs little, and they would push out the long one a later call resumes."""
        if len(sequences[0]) < SHORT:
            return
        self._last = (tuple(list(s) for s in sequences), state)

    def forget(self) -> None:
        self._last = None


class ConversationPasses:
    """Where the passes a turn makes over its conversation stopped last: the tool-call
    pairing (``entries.dangling_tool_calls``), the token count (the window's), and the
    wire text of the model request (the OpenAI-compatible adapter's; the Messages API
    adapter's conversation).

    A process that serves one growing conversation turn after turn (a long-lived
    bridge) creates one at its entry point and hands it to the runner and the model it
    builds for each turn; each pass then reads only what the turn added. Without one,
    every pass reads the whole conversation, with the same result.
    """

    __slots__ = ("blocks", "marks", "pairing", "tokens", "wire")

    def __init__(self) -> None:
        self.pairing: PrefixMemo[tuple[int | None, set[Any]]] = PrefixMemo()
        self.tokens: PrefixMemo[int] = PrefixMemo()
        self.wire: PrefixMemo[str] = PrefixMemo()
        self.blocks: PrefixMemo[Any] = PrefixMemo()
        """The Messages API adapter's conversation (``nonoka.llm.anthropic``)."""
        self.marks: PrefixMemo[Any] = PrefixMemo()
        """What ``nonoka serve`` looks for in a stored conversation (``serve.marks``)."""

"""The models a server runs: which one a request gets, and the wrapper that stamps answers.

``Models`` picks the model of a request: the request's ``model`` when nonoka knows it
(the server's own model, under its spec or its bare name; a ``provider:model`` spec the
catalog or the project's ``.nonoka/config.toml`` describes), else the server's own
(``--model``, ``NONOKA_MODEL`` or the project's config). The provider's key is read
from the server's environment by the adapter and never appears in anything a client
gets.

``StampedModel`` is the model a response's turn runs: it sends the response's
``instructions`` before the conversation (for this response only: a continuation does
not inherit them, as in OpenAI's API), offers the request's hosted, custom and
namespace tools in the Responses API's shapes (to another model, custom tools' calls
as function calls: ``nonoka.serve.as_functions``) and asks for its ``include`` values,
hands the upstream's hosted items to the response's stream as they come,
notes which entry the answer will be, and adds the response's stamp to each answer
(``nonoka.serve.record``).
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nonoka.llm.base import (
    CallOptions,
    ChatModel,
    CompletesWithOptions,
    ModelResponse,
    ReasoningSink,
    TextSink,
    ToolSpec,
    takes_options,
)
from nonoka.llm.loop_exchange import LoopConnections
from nonoka.llm.responses import OpenAIResponsesModel
from nonoka.llm.workers import Workers
from nonoka.serve.additional import without_carriers
from nonoka.serve.as_functions import Calls, function_choice, sent_as_functions
from nonoka.serve.hosted import Wired
from nonoka.serve.ids import ResponsePoint
from nonoka.serve.marks import Marks, marks_of
from nonoka.serve.record import STAMP, Asked
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import Message
from nonoka.state.prefix_memo import ConversationPasses, PrefixMemo


class Models:
    """The server's model and the ones a request may name."""

    def __init__(self, project: Path, default: str) -> None:
        self.project = project
        self.default = default
        self.workers = Workers(on_loop=LoopConnections())
        """How the model calls' HTTP exchanges run: on the server's event loop, their
        connections kept between requests (``close`` closes them)."""

    def pick(self, asked: str | None) -> str:
        """The spec a request runs with (see the module's docstring)."""
        if not asked or asked == self.default:
            return self.default
        if asked == self.default.partition(":")[2]:
            return self.default
        from nonoka.turn.project import described

        if ":" in asked and described(self.project, asked) is not None:
            return asked
        return self.default

    def resolve(self, spec: str, passes: ConversationPasses | None = None) -> ChatModel:
        """The model for ``spec`` (a ``ModelNotConfiguredError`` when it cannot be used);
        ``passes``: where its passes over the session's conversation stopped last."""
        from nonoka.turn.project import configured

        return configured(self.project, spec, passes=passes, workers=self.workers)

    def close(self) -> None:
        """Close the connections to the model endpoints (on the server's loop)."""
        self.workers.close()

    def listing(self) -> dict[str, Any]:
        """``GET /v1/models``."""
        return {"object": "list", "data": [
            {"id": self.default, "object": "model", "created": 0, "owned_by": "nonoka"}]}


class KeptPasses:
    """The passes over the conversations of the sessions this process answered last
    (``nonoka.state.prefix_memo``), so the next turn of a session reads only what it
    adds (the model request's wire text above all). A turn takes its session's passes
    (no other turn uses them meanwhile) and gives them back when it ends."""

    def __init__(self, sessions: int = 16) -> None:
        self.sessions = sessions
        self._kept: OrderedDict[str, ConversationPasses] = OrderedDict()

    def take(self, session_id: str | None) -> ConversationPasses:
        found = self._kept.pop(session_id, None) if session_id is not None else None
        return found if found is not None else ConversationPasses()

    def give(self, session_id: str, passes: ConversationPasses) -> None:
        self._kept[session_id] = passes
        self._kept.move_to_end(session_id)
        while len(self._kept) > self.sessions:
            self._kept.popitem(last=False)


@dataclasses.dataclass
class Answering:
    """One response's turn, as its model and its event stream share it."""

    asked: Asked
    point: ResponsePoint | None = None
    """Known once the turn's session is (``SessionOpened``)."""
    tools_at: int | None = None
    """The entry whose record holds this response's tools (an earlier response's)."""
    entry: int = 0
    """The entry the answer being made will be."""
    answers: list[ModelResponse] = dataclasses.field(default_factory=list)
    """The answers made so far, stamped."""
    hidden: frozenset[int] = frozenset()
    """Entries left out of what the model is sent (a conversation's deleted items)."""
    announce: Callable[[], None] = lambda: None
    """Tells the client the response exists (``response.created``): called when the
    model is first asked, which is after the turn's input is stored."""
    sealed_reasoning: bool = False
    """Whether the client asked for its reasoning's ``encrypted_content``
    (``nonoka.serve.reasoning``)."""
    wired: Wired = dataclasses.field(default_factory=Wired)
    """The request's tools that go to the upstream in the Responses API's shapes
    (``nonoka.serve.hosted``)."""
    calls: Calls = dataclasses.field(default_factory=Calls)
    """The request's custom and namespace tools, whose calls a model that takes function
    tools only makes as function calls (``nonoka.serve.as_functions``)."""
    include: tuple[str, ...] = ()
    marks: PrefixMemo[Marks] | None = None
    """Where the last pass over the session's conversation for its marks stopped
    (``nonoka.serve.marks``), kept with the session's other passes."""
    """The ``include`` values the upstream is asked for (``nonoka.serve.included``)."""
    on_item: Callable[[dict[str, Any]], None] = lambda event: None
    """Takes the upstream's stream events of its hosted tools' items as they come, for
    the response's own stream (``nonoka.serve.stream``)."""

    @property
    def offset(self) -> int:
        """The answer's entry, counted from the response's start."""
        assert self.point is not None
        return self.entry - self.point.start


class StampedModel(CompletesWithOptions):
    """``model``, answering for one response (see the module's docstring)."""

    def __init__(self, model: ChatModel, run: Answering) -> None:
        self.model = model
        self.run = run

    @property
    def name(self) -> str:
        return self.model.name

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *,
                       on_text: TextSink | None = None) -> ModelResponse:
        """A call that is not the response's answer (a compaction's summary)."""
        self.run.announce()
        if not isinstance(self.model, OpenAIResponsesModel):
            messages = without_carriers(sent_as_functions(messages))
        return await self.model.complete(messages, tools, on_text=on_text)

    async def complete_with(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (),
                            *, on_text: TextSink | None = None,
                            on_reasoning: ReasoningSink | None = None,
                            options: CallOptions | None = None) -> ModelResponse:
        run = self.run
        run.announce()
        run.entry = len(messages)
        sent = _instructed(_without(messages, run.hidden), run.asked.instructions)
        tools = run.wired.specs(tools)
        if run.include:
            options = options or CallOptions()
            options = dataclasses.replace(options, extra={**options.extra,
                                                          "include": list(run.include)})
        model = self.model
        if isinstance(model, OpenAIResponsesModel):
            answer = await model.complete_with(sent, tools, on_text=on_text,
                                               on_reasoning=on_reasoning, options=options,
                                               on_item=run.on_item)
        else:
            marks = marks_of(messages.entries, run.marks) \
                if isinstance(messages, EntryMessages) else None
            if marks is None or marks.custom_calls:
                sent = sent_as_functions(sent)
            if marks is None or marks.carriers:
                sent = without_carriers(sent)
            options = function_choice(options)
            if takes_options(model):
                answer = await model.complete_with(sent, tools, on_text=on_text,
                                                   on_reasoning=on_reasoning, options=options)
            else:
                answer = await model.complete(sent, tools, on_text=on_text)
            answer = run.calls.answer(answer)
        assert run.point is not None
        stamp: dict[str, Any] = {"id": run.point.id, "finish": answer.finish_reason,
                                 "completed_at": int(time.time())}
        if not run.answers:
            stamp["record"] = run.asked.stamp(run.tools_at)
        stamped = dataclasses.replace(answer, provider_metadata={
            **(answer.provider_metadata or {}), STAMP: stamp})
        run.answers.append(stamped)
        return stamped


def _without(messages: Sequence[Message], hidden: frozenset[int]) -> Sequence[Message]:
    """The conversation less the entries ``hidden`` names."""
    if not hidden:
        return messages
    if isinstance(messages, EntryMessages):
        return EntryMessages([e for at, e in enumerate(messages.entries) if at not in hidden])
    return [m for at, m in enumerate(messages) if at not in hidden]


def _instructed(messages: Sequence[Message], instructions: str | None) -> Sequence[Message]:
    """The conversation with the response's instructions before it, as a system message."""
    if not instructions:
        return messages
    if isinstance(messages, EntryMessages):
        return EntryMessages([MemoryEntry.make("system", instructions), *messages.entries])
    return [Message(role="system", content=instructions), *messages]

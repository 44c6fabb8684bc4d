"""Test doubles for the model port, so agents can be tested offline.

``ScriptedModel`` answers from a script and complains when called more often than
scripted (``ScriptExhaustedError``) or, on ``assert_done()``, when steps are left over.
``FunctionModel`` answers by calling a function with the messages and tools it got.
The helpers ``text``, ``call`` and ``calls`` build script steps.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nonoka.llm.base import ModelResponse, TextSink, ToolSpec, Usage
from nonoka.state.messages import Message, ToolCall
from nonoka.state.tokens import estimate_tokens

__all__ = (
    "FunctionModel",
    "ModelRequestRecord",
    "ScriptExhaustedError",
    "ScriptedModel",
    "call",
    "calls",
    "text",
)

_ids = itertools.count(1)


class ScriptExhaustedError(AssertionError):
    """The scripted model was called more often than its script allows."""


def text(content: str, *, input_tokens: int | None = None, output_tokens: int | None = None,
         cost_usd: float | None = None) -> ModelResponse:
    """A step that answers with plain text."""
    return ModelResponse(text=content, finish_reason="stop",
                         usage=_usage(content, input_tokens, output_tokens, cost_usd))


def call(name: str, arguments: dict[str, Any] | None = None, *, id: str | None = None,
         content: str = "") -> ModelResponse:
    """A step that calls one tool."""
    return calls((name, arguments or {}, id), content=content)


def calls(*items: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str | None],
          content: str = "") -> ModelResponse:
    """A step that calls several tools at once: ``calls(("a", {...}), ("b", {...}))``."""
    tool_calls = []
    for item in items:
        name, arguments = item[0], item[1]
        call_id = item[2] if len(item) > 2 and item[2] else f"call_{next(_ids)}"
        tool_calls.append(ToolCall(id=str(call_id), name=name, arguments=json.dumps(arguments)))
    return ModelResponse(text=content, tool_calls=tool_calls, finish_reason="tool_calls",
                         usage=_usage(content + str(items), None, None, None))


def _usage(content: str, input_tokens: int | None, output_tokens: int | None,
           cost_usd: float | None) -> Usage:
    return Usage(input_tokens=10 if input_tokens is None else input_tokens,
                 output_tokens=estimate_tokens(content) if output_tokens is None else output_tokens,
                 cost_usd=cost_usd)


@dataclass(frozen=True)
class ModelRequestRecord:
    """What the model was asked: the messages and the tools offered."""

    messages: list[Message]
    tools: list[ToolSpec]


ScriptStep = ModelResponse | str | BaseException


class ScriptedModel:
    """Answers from a fixed script, one step per call; records every request."""

    def __init__(self, steps: Sequence[ScriptStep], *, name: str = "test:scripted") -> None:
        self._steps = list(steps)
        self._name = name
        self.requests: list[ModelRequestRecord] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def remaining(self) -> int:
        return len(self._steps) - len(self.requests)

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *,
                       on_text: TextSink | None = None) -> ModelResponse:
        index = len(self.requests)
        self.requests.append(ModelRequestRecord(list(messages), list(tools)))
        if index >= len(self._steps):
            raise ScriptExhaustedError(
                f"scripted model called {index + 1} times but the script has "
                f"{len(self._steps)} step(s); last message: {messages[-1].content[:80]!r}"
                if messages else f"scripted model called more than {len(self._steps)} times"
            )
        step = self._steps[index]
        if isinstance(step, BaseException):
            raise step
        response = text(step) if isinstance(step, str) else step
        if on_text is not None and response.text:
            await _emit(on_text, response.text)
        return response

    def assert_done(self) -> None:
        """Fail when scripted steps were never used."""
        if self.remaining > 0:
            raise AssertionError(
                f"scripted model has {self.remaining} unused step(s) of {len(self._steps)}"
            )


ModelFunction = Callable[[list[Message], list[ToolSpec]],
                         ModelResponse | str | Awaitable[ModelResponse | str]]


class FunctionModel:
    """Answers by calling ``function(messages, tools)``; it may be sync or async."""

    def __init__(self, function: ModelFunction, *, name: str = "test:function") -> None:
        self._function = function
        self._name = name
        self.requests: list[ModelRequestRecord] = []

    @property
    def name(self) -> str:
        return self._name

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *,
                       on_text: TextSink | None = None) -> ModelResponse:
        self.requests.append(ModelRequestRecord(list(messages), list(tools)))
        result = self._function(list(messages), list(tools))
        if inspect.isawaitable(result):
            result = await result
        response = text(result) if isinstance(result, str) else result
        if on_text is not None and response.text:
            await _emit(on_text, response.text)
        return response


async def _emit(sink: TextSink, chunk: str) -> None:
    outcome = sink(chunk)
    if inspect.isawaitable(outcome):
        await outcome

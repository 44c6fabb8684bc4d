"""Streams without an end: every adapter stops reading at its API's last event, keeps a
whole answer whatever the connection does after it, and bounds a stream by time without
progress (keep-alive pings and comments are not progress), by an overall deadline and
by the size of one line or event, each with a one-line error saying what happened and
what to do. Real HTTP against the scripted servers; small limits, and the assertions are
on what came back, never on how long it took (``asyncio.wait_for`` is only a safety net
for a client that would otherwise wait for ever)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from nonoka.errors import ConfigurationError, ModelError
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.loop_exchange import LoopConnections
from nonoka.llm.openai import OpenAIChatModel
from nonoka.llm.responses import OpenAIResponsesModel
from nonoka.llm.transport import StreamLimits
from nonoka.llm.workers import Workers
from nonoka.state.messages import Message
from nonoka.testing.server import (
    AnthropicReply,
    DropConnection,
    Flood,
    Linger,
    Reply,
    ResponsesReply,
    ScriptedAnthropicServer,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)

HI = [Message(role="user", content="hi")]
SAFETY = 30.0
"""Seconds after which a test gives up on a client that never returns (a failure)."""
T = TypeVar("T")


@pytest.fixture(params=["thread", "loop"])
def workers(request: pytest.FixtureRequest) -> Workers | None:
    """Each limit both ways an exchange reads: on a thread of its own, and on the event
    loop (``nonoka.llm.loop_exchange``, a server's way)."""
    return None if request.param == "thread" else Workers(on_loop=LoopConnections())


async def settled(call: Awaitable[T]) -> T:
    return await asyncio.wait_for(call, SAFETY)


def _openai(server: ScriptedOpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=server.base_url, api_key="sk-test", max_retries=0,
                           **kwargs)


def _anthropic(server: ScriptedAnthropicServer, **kwargs: Any) -> AnthropicChatModel:
    return AnthropicChatModel("claude-test", base_url=server.base_url, api_key="sk-test",
                              max_retries=0, **kwargs)


def _responses(server: ScriptedResponsesServer, **kwargs: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("m", base_url=server.base_url, api_key="sk-test", max_retries=0,
                                **kwargs)


# the last event ends the reading ------------------------------------------------------------


async def test_the_responses_adapter_stops_reading_at_response_completed(
        workers: Workers | None) -> None:
    """An endpoint that keeps the connection open after ``response.completed`` (no more
    events, no close): the answer is returned at once, not after the connection's
    60-second timeout."""
    reply = ResponsesReply(output=("Done.",), input_tokens=12, output_tokens=3)
    with ScriptedResponsesServer([Linger(reply)]) as server:
        response = await settled(_responses(server, workers=workers).complete(HI))
    assert response.text == "Done."
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)


async def test_the_anthropic_adapter_stops_reading_at_message_stop(
        workers: Workers | None) -> None:
    with ScriptedAnthropicServer([Linger(AnthropicReply(text="Done."))]) as server:
        response = await settled(_anthropic(server, workers=workers).complete(HI))
    assert response.text == "Done."


async def test_a_whole_answer_is_kept_when_the_connection_then_times_out(
        workers: Workers | None) -> None:
    """Chat Completions ends with ``[DONE]``; a server that never sends it and idles
    after the finish and usage chunks times the connection out: the answer is whole,
    so it is kept (with its usage), not failed."""
    with ScriptedOpenAIServer([Linger(Reply(text="Whole.", input_tokens=4))]) as server:
        response = await settled(_openai(server, workers=workers, timeout=0.2).complete(HI))
    assert response.text == "Whole."
    assert response.usage.input_tokens == 4


# time without progress, and the deadline ----------------------------------------------------


async def test_keep_alive_comments_are_not_progress(workers: Workers | None) -> None:
    """A stream that sends part of an answer and then only SSE comments, for ever: it
    ends with the stall error (the comments keep the socket busy, so the connection's
    own timeout never fires)."""
    stuck = Linger(DropConnection("partial ans"), ping=0.01)
    with ScriptedOpenAIServer([stuck]) as server:
        model = _openai(server, workers=workers, limits=StreamLimits(stall=0.3))
        with pytest.raises(ModelError) as caught:
            await settled(model.complete(HI))
    message = str(caught.value)
    assert "made no progress for 0.3s" in message
    assert "NONOKA_STREAM_STALL_SECONDS" in message
    assert "\n" not in message


async def test_anthropic_ping_events_are_not_progress(workers: Workers | None) -> None:
    stuck = Linger(DropConnection("partial"), ping=0.01)  # ``event: ping`` every 10 ms
    with ScriptedAnthropicServer([stuck]) as server:
        model = _anthropic(server, workers=workers, limits=StreamLimits(stall=0.3))
        with pytest.raises(ModelError, match=r"made no progress for 0\.3s"):
            await settled(model.complete(HI))


async def test_a_stall_before_any_text_is_retried_and_then_answered(
        workers: Workers | None) -> None:
    """A stall is the connection's failure: retried while nothing reached the caller."""
    stuck = Linger(DropConnection(""), ping=0.01)
    with ScriptedOpenAIServer([stuck, "Second time lucky."]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="sk-test", max_retries=1,
                                backoff_base=0.01, limits=StreamLimits(stall=0.3),
                                workers=workers)
        response = await settled(model.complete(HI, on_text=lambda _: None))
    assert response.text == "Second time lucky."
    assert len(server.requests) == 2


async def test_an_answer_still_streaming_at_the_deadline_fails_with_its_limit(
        workers: Workers | None) -> None:
    stuck = Linger(DropConnection("partial"), ping=0.01)
    with ScriptedResponsesServer([stuck]) as server:
        model = _responses(server, workers=workers,
                           limits=StreamLimits(stall=60, deadline=0.4))
        with pytest.raises(ModelError) as caught:
            await settled(model.complete(HI))
    message = str(caught.value)
    assert "still streaming after 0.4s" in message
    assert "NONOKA_STREAM_DEADLINE_SECONDS" in message
    assert not caught.value.retryable


async def test_text_reaches_the_caller_while_the_endpoint_still_answers(
        workers: Workers | None) -> None:
    """What arrived is handed over at once, not when more arrives: a stream that sends
    part of an answer and then waits has its text at the caller while the call is still
    under way."""
    stuck = Linger(DropConnection("Hello there, still thinking"))
    with ScriptedOpenAIServer([stuck], keep_alive=True, chunk_size=4) as server:
        model = _openai(server, workers=workers, limits=StreamLimits(stall=60))
        said = asyncio.Event()
        call = asyncio.create_task(model.complete(HI, on_text=lambda _: said.set()))
        await settled(said.wait())
        assert not call.done()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    if workers is not None:
        workers.close()


# size -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic", "responses"])
async def test_a_line_without_end_is_cut_at_the_event_size_limit(
        kind: str, workers: Workers | None) -> None:
    """3 MiB of one ``data:`` line that never ends, against a 1 MiB limit: the read
    stops at the limit, with an error naming it (not a JSON error after reading it all)."""
    limits = StreamLimits(max_event_bytes=1 << 20)
    flood = Flood(size=3 << 20)
    model: Any
    server: Any
    if kind == "openai":
        server = ScriptedOpenAIServer([flood])
        model = _openai
    elif kind == "anthropic":
        server = ScriptedAnthropicServer([flood])
        model = _anthropic
    else:
        server = ScriptedResponsesServer([flood])
        model = _responses
    with server, pytest.raises(ModelError) as caught:
        await settled(model(server, workers=workers, limits=limits).complete(HI))
    message = str(caught.value)
    assert "over 1,048,576 bytes" in message
    assert "NONOKA_STREAM_MAX_EVENT_BYTES" in message
    assert not caught.value.retryable
    assert len(server.requests) == 1


# the settings -----------------------------------------------------------------------------


def test_limits_come_from_the_environment() -> None:
    limits = StreamLimits.from_environ({"NONOKA_STREAM_STALL_SECONDS": "12.5",
                                        "NONOKA_STREAM_DEADLINE_SECONDS": "600",
                                        "NONOKA_STREAM_MAX_EVENT_BYTES": "1048576"})
    assert limits == StreamLimits(stall=12.5, deadline=600.0, max_event_bytes=1 << 20)
    assert StreamLimits.from_environ({}) == StreamLimits()


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_limit_that_is_not_a_positive_number_is_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match="NONOKA_STREAM_STALL_SECONDS"):
        StreamLimits.from_environ({"NONOKA_STREAM_STALL_SECONDS": value})

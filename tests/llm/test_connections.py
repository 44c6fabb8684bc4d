"""Keep-alive connections to the model endpoint (``nonoka.llm.connections``, and
``nonoka.llm.loop_exchange`` for exchanges on the event loop), against the scripted
endpoints speaking HTTP/1.1 keep-alive: reused call after call by every adapter, replaced
when the server closed them, never kept after a cancel or an answer that closes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from nonoka.llm import connections as kept_connections
from nonoka.llm import loop_exchange
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.base import ChatModel
from nonoka.llm.loop_exchange import LoopConnections
from nonoka.llm.openai import OpenAIChatModel
from nonoka.llm.responses import OpenAIResponsesModel
from nonoka.llm.workers import Workers
from nonoka.state.messages import Message
from nonoka.testing.anthropic_server import ScriptedAnthropicServer
from nonoka.testing.server import ScriptedOpenAIServer, ScriptedResponsesServer
from nonoka.testing.steps import DropConnection, Linger, Step

HI = [Message(role="user", content="hi")]
Served = ScriptedOpenAIServer | ScriptedAnthropicServer


class Way:
    """How a process's exchanges run: each on a worker thread (``Workers``' own
    ``connections``), or on the event loop (``LoopConnections``); the same connection
    rules either way."""

    def __init__(self, name: str) -> None:
        self.loop = LoopConnections() if name == "loop" else None
        self.workers = Workers(on_loop=self.loop)

    @property
    def pool(self) -> kept_connections.Connections | LoopConnections:
        return self.loop if self.loop is not None else self.workers.connections

    async def settled(self) -> None:
        """The last exchange has kept (or closed) its connection."""
        if self.loop is not None:
            await self.loop.settled()
        else:
            assert self.workers.wait_idle(1, 5)

    def close(self) -> None:
        self.pool.close()


@pytest.fixture(params=["thread", "loop"])
async def way(request: pytest.FixtureRequest) -> AsyncIterator[Way]:
    """The exchanges' way, its kept connections closed on the test's event loop."""
    made = Way(request.param)
    yield made
    made.close()


def chat(server: Any, workers: Workers | None) -> ChatModel:
    return OpenAIChatModel("m", base_url=server.base_url, api_key="sk-test", workers=workers)


def responses(server: Any, workers: Workers | None) -> ChatModel:
    return OpenAIResponsesModel("m", base_url=server.base_url, api_key="sk-test",
                                workers=workers)


def anthropic(server: Any, workers: Workers | None) -> ChatModel:
    return AnthropicChatModel("claude-test", base_url=server.base_url,
                              api_key="sk-ant-test", workers=workers)


ADAPTERS: dict[str, tuple[Callable[..., Served], Callable[[Any, Workers | None], ChatModel]]] = {
    "chat": (ScriptedOpenAIServer, chat),
    "responses": (ScriptedResponsesServer, responses),
    "anthropic": (ScriptedAnthropicServer, anthropic)}


async def ask(model: ChatModel, way: Way) -> str:
    text = (await model.complete(HI)).text
    await way.settled()
    return text


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_calls_one_after_another_share_one_connection(adapter: str, way: Way) -> None:
    kind, make = ADAPTERS[adapter]
    with kind(["one", "two", "three"], keep_alive=True) as server:
        model = make(server, way.workers)
        answers = [await ask(model, way) for _ in range(3)]
        assert server.connections == 1
    assert answers == ["one", "two", "three"]
    assert (way.pool.opened, way.pool.reused) == (1, 2)
    if way.loop is not None:
        assert way.workers.started == 0  # no thread was woken for a call


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_requests_on_a_kept_connection_are_the_same_bytes(adapter: str) -> None:
    """A new connection each call, a kept one on a thread, a kept one on the loop: the
    endpoint receives the same requests, headers and bodies."""
    kind, make = ADAPTERS[adapter]
    seen = []
    for way, keep in ((None, False), (Way("thread"), True), (Way("loop"), True)):
        with kind(["one", "two"], keep_alive=keep) as server:
            model = make(server, None if way is None else way.workers)
            for _ in range(2):
                await model.complete(HI)
                if way is not None:
                    await way.settled()
            headers = [{**h, "host": h["host"].replace(str(server.port), "PORT")}
                       for h in server.headers]
            seen.append((server.requests, headers, getattr(server, "bodies", None)))
        if way is not None:
            way.close()
    assert seen[0] == seen[1] == seen[2]


async def test_an_answer_that_closes_its_connection_is_not_kept(way: Way) -> None:
    with ScriptedOpenAIServer(["one", "two"]) as server:  # "Connection: close"
        model = chat(server, way.workers)
        assert [await ask(model, way) for _ in range(2)] == ["one", "two"]
        assert server.connections == 2
        assert way.pool.idle(("http", "127.0.0.1", server.port)) == 0
    assert way.pool.reused == 0


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
async def test_a_connection_the_server_closed_is_replaced(adapter: str, way: Way) -> None:
    kind, make = ADAPTERS[adapter]
    with kind(["one", "two"], keep_alive=True) as server:
        model = make(server, way.workers)
        assert await ask(model, way) == "one"
        assert server.close_idle() == 1
        assert await ask(model, way) == "two"
        assert server.connections == 2 and len(server.requests) == 2


async def test_a_kept_connection_found_dead_when_sending_is_replaced_once(
        monkeypatch: pytest.MonkeyPatch, way: Way) -> None:
    """The server closed the connection and the check before reuse missed it: the
    request fails on it before any answer, and goes once on a fresh one."""
    monkeypatch.setattr(kept_connections, "_quiet", lambda conn: True)
    monkeypatch.setattr(loop_exchange, "_quiet", lambda reader, writer: True)
    with ScriptedOpenAIServer(["one", "two"], keep_alive=True) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="sk-test",
                                workers=way.workers, max_retries=0)
        assert await ask(model, way) == "one"
        assert server.close_idle() == 1
        assert await ask(model, way) == "two"
        assert server.connections == 2 and len(server.requests) == 2
    assert (way.pool.opened, way.pool.reused) == (2, 1)


async def test_a_cancelled_streams_connection_is_not_kept(way: Way) -> None:
    script: list[Step] = [Linger(DropConnection("Hello there, stuck")), "two"]
    with ScriptedOpenAIServer(script, keep_alive=True, chunk_size=4) as server:
        model = chat(server, way.workers)
        streaming = asyncio.Event()
        call = asyncio.create_task(model.complete(HI, on_text=lambda _: streaming.set()))
        await streaming.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await ask(model, way) == "two"
        assert server.connections == 2
    assert way.pool.reused == 0


class Fake:
    """A connection that only knows whether it was closed (never readable: no socket
    checks apply to it)."""

    sock = None

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_idle_connections_are_bounded_and_the_oldest_go_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept_connections, "_quiet", lambda conn: True)
    pool = kept_connections.Connections(per_host=2, total=3)
    a, b = ("http", "a", 80), ("http", "b", 80)
    made = [Fake() for _ in range(5)]
    for conn in made[:3]:
        pool.give(a, conn)  # type: ignore[arg-type]
    assert made[0].closed and pool.idle(a) == 2
    for conn in made[3:]:
        pool.give(b, conn)  # type: ignore[arg-type]
    assert made[1].closed and (pool.idle(a), pool.idle(b)) == (1, 2)
    taken: list[object] = [pool.take(b), pool.take(a), pool.take(a)]
    assert taken == [made[4], made[2], None]


def test_a_connection_idle_too_long_is_closed_not_reused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept_connections, "_quiet", lambda conn: True)
    pool = kept_connections.Connections(idle_seconds=-1.0)  # every one is too old
    conn = Fake()
    pool.give(("http", "a", 80), conn)  # type: ignore[arg-type]
    assert pool.take(("http", "a", 80)) is None and conn.closed

"""The threads a process keeps for its model calls' HTTP exchanges (``nonoka.llm.workers``)."""

from __future__ import annotations

import threading

from nonoka.llm.openai import OpenAIChatModel
from nonoka.llm.workers import IDLE, Workers
from nonoka.state.messages import Message
from nonoka.testing.server import ScriptedOpenAIServer

HI = [Message(role="user", content="hi")]


async def test_calls_one_after_another_share_one_thread() -> None:
    workers = Workers()
    with ScriptedOpenAIServer(["one", "two", "three"]) as server:
        answers = []
        for _ in range(3):
            model = OpenAIChatModel("m", base_url=server.base_url, workers=workers)
            answers.append((await model.complete(HI)).text)
            assert workers.wait_idle(1, 5)
    assert answers == ["one", "two", "three"]
    assert workers.started == 1
    idle = [t for t in threading.enumerate() if t.name == IDLE]
    assert idle and all(t.daemon for t in idle)
    # No thread is left under the adapter's name: an idle one is no exchange.
    assert not [t for t in threading.enumerate() if t.name == "nonoka-openai-http"]


def test_a_thread_beyond_the_idle_limit_ends() -> None:
    workers = Workers(idle=0)
    ran: list[threading.Thread] = []
    done = threading.Event()

    def job() -> None:
        ran.append(threading.current_thread())
        done.set()

    workers.run(job, "nonoka-test-worker")
    assert done.wait(5)
    ran[0].join(5)
    assert not ran[0].is_alive()
    workers.run(lambda: None, "nonoka-test-worker")
    assert workers.started == 2


def test_an_idle_thread_takes_the_next_job_under_its_name() -> None:
    workers = Workers()
    names: list[str] = []
    done = threading.Semaphore(0)

    def job() -> None:
        names.append(threading.current_thread().name)
        done.release()

    workers.run(job, "first")
    assert done.acquire(timeout=5)
    assert workers.wait_idle(1, 5)
    workers.run(job, "second")
    assert done.acquire(timeout=5)
    assert names == ["first", "second"] and workers.started == 1

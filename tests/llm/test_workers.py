"""The threads a process keeps for its model calls' HTTP exchanges (``nonoka.llm.workers``)."""

from __future__ import annotations

import threading

from nonoka.llm.openai import OpenAIChatModel
from nonoka.llm.workers import Workers
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
    kept = [t for t in threading.enumerate() if t.name == "nonoka-openai-http"]
    assert len(kept) == 1 and kept[0].daemon


def test_a_thread_beyond_the_idle_limit_ends() -> None:
    workers = Workers(idle=0)
    ran = threading.Event()
    workers.run(ran.set, "nonoka-test-worker")
    assert ran.wait(5)
    for thread in [t for t in threading.enumerate() if t.name == "nonoka-test-worker"]:
        thread.join(5)
        assert not thread.is_alive()
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

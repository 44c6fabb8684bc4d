"""After a failed turn, ``run -c`` replaces the unanswered message instead of sending two
user messages in a row."""

from __future__ import annotations

import os
from pathlib import Path

from nonoka.testing import text
from nonoka.testing.server import HttpError, ScriptedOpenAIServer
from tests.support.processes import model_env, run_nonoka


def test_a_retry_replaces_the_unanswered_message(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([HttpError(400), text("done")]) as server:
        env = {**os.environ, **model_env(server.base_url)}
        env.pop("NONOKA_DATABASE_URL", None)
        failed = run_nonoka(tmp_path, "run", "do the thing", env=env)
        assert failed.returncode != 0
        retried = run_nonoka(tmp_path, "run", "-c", "do the thing, please", env=env)
        assert retried.returncode == 0, retried.stderr
        sent = [m for m in server.requests[-1]["messages"] if m["role"] != "system"]
    assert sent == [{"role": "user", "content": "do the thing, please"}]

"""``sessions show --entries`` lists the conversation with the positions ``--at`` takes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.support.processes import model_env, run_nonoka


def test_positions_are_what_at_takes(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([text("one"), text("two")]) as server:
        env = {**os.environ, **model_env(server.base_url)}
        env.pop("NONOKA_DATABASE_URL", None)
        assert run_nonoka(tmp_path, "run", "first", env=env).returncode == 0
        assert run_nonoka(tmp_path, "run", "-c", "second", env=env).returncode == 0
    sid = json.loads(run_nonoka(tmp_path, "sessions", "list", "--json", env=env).stdout
                     )[0]["session_id"]
    shown = run_nonoka(tmp_path, "sessions", "show", sid, "--entries", env=env)
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if line.startswith("#")]
    assert [line.split()[0] for line in lines] == [f"#{n}" for n in range(1, len(lines) + 1)]
    assert [line.split()[1] for line in lines][-4:] == ["user", "assistant", "user",
                                                        "assistant"]
    listed = json.loads(run_nonoka(tmp_path, "sessions", "show", sid, "--entries", "--json",
                                   env=env).stdout)["entries"]
    third = next(e for e in listed if e["text"] == "second")
    forked = run_nonoka(tmp_path, "sessions", "fork", sid, "--at", str(third["position"]),
                        env=env)
    assert forked.returncode == 0, forked.stderr
    branch = forked.stdout.split()[-1]
    kept = json.loads(run_nonoka(tmp_path, "sessions", "show", branch, "--entries", "--json",
                                 env=env).stdout)["entries"]
    assert kept[-1]["text"] == "second" and len(kept) == third["position"]

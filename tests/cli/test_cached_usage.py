"""``sessions show --json`` reports a session's cached and reasoning tokens, and a cost
that counts cached input at the model's cache-read rate (the catalog's price)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from nonoka.llm.catalog import known_model
from nonoka.testing.server import Reply, ScriptedOpenAIServer
from tests.support.processes import model_env, run_nonoka


def test_show_reports_cache_reads_and_their_price(tmp_path: Path) -> None:
    known = known_model("openai:gpt-4o")
    assert known is not None and known.prices.cache_read is not None
    reply = Reply(text="ok", input_tokens=100_000, output_tokens=1_000, cached_tokens=90_000,
                  reasoning_tokens=200)
    with ScriptedOpenAIServer([reply]) as server:
        env = {**os.environ, **model_env(server.base_url)}
        env.pop("NONOKA_MODEL")
        env.pop("NONOKA_DATABASE_URL", None)
        ran = run_nonoka(tmp_path, "run", "--model", "openai:gpt-4o", "hi", env=env)
    assert ran.returncode == 0, ran.stderr
    shown = run_nonoka(tmp_path, "sessions", "show", "--json",
                       json.loads(run_nonoka(tmp_path, "sessions", "list", "--json",
                                             env=env).stdout)[0]["session_id"], env=env)
    assert shown.returncode == 0, shown.stderr
    usage = json.loads(shown.stdout)["usage"]
    assert (usage["cache_read_tokens"], usage["reasoning_tokens"]) == (90_000, 200)
    p = known.prices
    assert p.cache_read is not None
    at_cache_rate = (10_000 * p.input + 90_000 * p.cache_read + 1_000 * p.output) / 1e6
    assert usage["cost_usd"] == at_cache_rate
    assert usage["cost_usd"] < (100_000 * p.input + 1_000 * p.output) / 1e6

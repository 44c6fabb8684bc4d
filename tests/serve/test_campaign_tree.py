"""Campaign: a random tree of responses, each continuing a random earlier one by
``previous_response_id``. Continuing from any node must send the model exactly that node's
root-to-node path: no sibling's words, nothing said after it."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.serve.harness import Served


def grow(served: Served, scripted: list[Any], server: ScriptedOpenAIServer, nodes: int,
         seed: int) -> None:
    """``nodes`` responses, each from a random earlier node (a few new roots, a few
    streamed); every model request checked against the path it continues."""
    rng = random.Random(seed)
    paths: dict[str, list[str]] = {}
    ids: list[str] = []
    leaks = []
    for n in range(nodes):
        parent = rng.choice(ids) if ids and rng.random() > 0.05 else None
        said = f"node {n} asks"
        scripted.append(lambda body: text(f"answer to {body['messages'][-1]['content']}"))
        body: dict[str, Any] = {"model": "m", "input": said}
        if parent is not None:
            body["previous_response_id"] = parent
        if rng.random() < 0.2:
            made = served.events(body)[-1]["response"]
        else:
            status, _, raw = served.request("POST", "/v1/responses", body)
            assert status == 200, raw
            made = json.loads(raw)
        assert made["status"] == "completed", made
        sent = [m["content"] for m in server.requests[-1]["messages"]]
        expected = [*(paths[parent] if parent else []), said]
        if sent != expected:
            leaks.append((n, parent, sent, expected))
        paths[made["id"]] = [*expected, f"answer to {said}"]
        ids.append(made["id"])
    assert leaks == [], f"{len(leaks)} of {nodes} requests sent another path: {leaks[:3]}"
    assert len(server.requests) == nodes and len(set(ids)) == nodes


def test_a_random_tree_of_200_responses_sends_only_each_path(
        served: Served, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    grow(served, scripted, server, 200, seed=20261206)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_more_random_trees(served: Served, scripted: list[Any],
                           server: ScriptedOpenAIServer, seed: int) -> None:
    grow(served, scripted, server, 200, seed=seed)

"""The request's ``text`` (``format`` and ``verbosity``) as the response gives it back,
held to the OpenResponses spec, and ``verbosity`` as an ``openai-responses:`` upstream
is given it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openai import OpenAI

from nonoka.testing import text
from nonoka.testing.server import ResponsesReply, ScriptedResponsesServer
from tests.serve.harness import Served, ServeProcess, valid_events, valid_response

LOW = {"format": {"type": "text"}, "verbosity": "low"}


def test_a_verbosity_alone_is_echoed_with_the_text_format(
        served: Served, scripted: list[Any]) -> None:
    scripted.extend([text("Short."), text("Short again.")])
    status, _, raw = served.request("POST", "/v1/responses", {
        "model": "m", "input": "Be brief.", "text": {"verbosity": "low"}})
    assert status == 200, raw
    made = valid_response(json.loads(raw))
    assert made["text"] == LOW
    events = valid_events(served.events({"model": "m", "input": "Again.",
                                         "text": {"verbosity": "low"}}))
    assert events[0]["response"]["text"] == events[-1]["response"]["text"] == LOW
    status, _, raw = served.request("GET", f"/v1/responses/{made['id']}")
    assert status == 200 and valid_response(json.loads(raw))["text"] == LOW


def test_text_that_is_not_an_object_is_a_clear_400(served: Served) -> None:
    status, _, raw = served.request("POST", "/v1/responses", {
        "model": "m", "input": "hi", "text": "low"})
    error = json.loads(raw)["error"]
    assert (status, error["param"]) == (400, "text") and "must be an object" in \
        error["message"]


def test_a_responses_upstream_is_given_the_verbosity(project: Path) -> None:
    with ScriptedResponsesServer([ResponsesReply(output=("Short.",))]) as upstream:
        process = ServeProcess(project, "openai-responses:scripted-model", {
            "OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": "sk-up",
            "NONOKA_DATABASE_URL": ""})
        try:
            with OpenAI(base_url=process.url, api_key="k", max_retries=0) as client:
                made = client.responses.create(model="m", input="Be brief.",
                                               text={"verbosity": "low"})
        finally:
            errors = process.stop()
        assert not upstream.failures, upstream.failures
    assert "Traceback" not in errors, errors
    assert made.text is not None and made.text.model_dump(exclude_none=True) == LOW
    assert upstream.requests[0]["text"]["verbosity"] == "low"

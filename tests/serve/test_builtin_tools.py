"""OpenAI's built-in client tools (``shell``, ``local_shell``, ``apply_patch``) on
``POST /v1/responses``: the official ``openai`` client against real ``nonoka serve``
processes in front of the scripted Responses API endpoint (which holds the call items it
streams to the ``openai`` SDK's output item types). The tool goes to the upstream as
given, its call comes back whole, the client's output item goes back to the upstream in
its own form (each item it is sent held to the SDK's input item types), after a restart
too; another model answers the tool with a clear 400."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError, OpenAI
from openai.types.responses import ResponseInputItemParam, ResponseItem
from pydantic import TypeAdapter

from nonoka.testing.server import (
    HostedItem,
    ResponsesReply,
    ScriptedOpenAIServer,
    ScriptedResponsesServer,
)
from tests.serve.harness import ServeProcess, openai_upstream, sse
from tests.serve.test_hosted_tools import valid

MODEL = "openai-responses:scripted-model"
SHELL_CALL = {"type": "shell_call", "id": "sh_1", "call_id": "call_sh", "status": "completed",
              "action": {"commands": ["cat hello.txt"], "timeout_ms": 5000,
                         "max_output_length": 4096}}
SHELL_OUTPUT = {"type": "shell_call_output", "call_id": "call_sh", "max_output_length": 4096,
                "output": [{"stdout": "hello\n", "stderr": "",
                            "outcome": {"type": "exit", "exit_code": 0}}]}
PATCH_CALL = {"type": "apply_patch_call", "id": "apc_1", "call_id": "call_patch",
              "status": "completed",
              "operation": {"type": "create_file", "path": "hello.txt", "diff": "+hello\n"}}
PATCH_OUTPUT = {"type": "apply_patch_call_output", "call_id": "call_patch",
                "status": "completed", "output": "Created hello.txt"}
LOCAL_CALL = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_local",
              "status": "completed",
              "action": {"type": "exec", "command": ["ls"], "env": {}}}
LOCAL_OUTPUT = {"type": "local_shell_call_output", "id": "call_local",
                "output": json.dumps({"stdout": "hello.txt\n", "exit_code": 0})}
INPUT_ITEM: TypeAdapter[ResponseInputItemParam] = TypeAdapter(ResponseInputItemParam)
LISTED: TypeAdapter[ResponseItem] = TypeAdapter(ResponseItem)


def started(project: Path, base_url: str, model: str = MODEL) -> ServeProcess:
    return ServeProcess(project, model, openai_upstream(base_url))


def stopped(process: ServeProcess) -> None:
    process.stop_clean()


def client_of(process: ServeProcess) -> OpenAI:
    return OpenAI(base_url=process.url, api_key="client-key", max_retries=0)


def sent_items(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The items the upstream was sent, each an input item of the SDK's types."""
    for item in request["input"]:
        INPUT_ITEM.validate_python(item)
    return list(request["input"])


def test_a_shell_call_is_the_clients_and_its_output_goes_back_after_a_restart(
        project: Path) -> None:
    with ScriptedResponsesServer([ResponsesReply(output=(HostedItem(SHELL_CALL),)),
                                  ResponsesReply(output=("It says hello.",))],
                                 strict=["openai_reasoning"]) as upstream:
        first = started(project, upstream.base_url)
        try:
            with client_of(first) as client:
                paused = client.responses.create(model="m", input="What is in hello.txt?",
                                                 tools=[{"type": "shell"}])
        finally:
            stopped(first)
        [made] = [i.model_dump(exclude_none=True) for i in paused.output]
        assert {k: v for k, v in made.items() if k != "id"} == \
            {k: v for k, v in SHELL_CALL.items() if k != "id"}
        second = started(project, upstream.base_url)
        try:
            with client_of(second) as client:
                done = client.responses.create(
                    model="m", previous_response_id=paused.id, tools=[{"type": "shell"}],
                    input=[SHELL_OUTPUT])  # type: ignore[list-item]
                listed = client.responses.input_items.list(done.id).data
        finally:
            stopped(second)
        assert not upstream.failures, upstream.failures
    assert done.output_text == "It says hello."
    assert upstream.requests[0]["tools"] == [{"type": "shell"}]
    assert sent_items(upstream.requests[1])[1:] == [SHELL_CALL, SHELL_OUTPUT]
    [output] = [i.model_dump(exclude_none=True) for i in listed]
    LISTED.validate_python(output)
    assert {k: v for k, v in output.items() if k != "id"} == {**SHELL_OUTPUT,
                                                              "status": "completed"}


def test_apply_patch_and_local_shell_calls_stream_and_go_back_from_the_clients_history(
        project: Path) -> None:
    replies = [ResponsesReply(output=(HostedItem(PATCH_CALL), HostedItem(LOCAL_CALL))),
               ResponsesReply(output=("Created and listed.",))]
    tools = [{"type": "apply_patch"}, {"type": "local_shell"}]
    with ScriptedResponsesServer(replies, strict=["openai_reasoning"]) as upstream:
        process = started(project, upstream.base_url)
        try:
            asked = [{"type": "message", "role": "user", "content": "Create hello.txt"}]
            events = valid(sse(process.port, "/v1/responses", {
                "model": "m", "input": asked, "tools": tools, "stream": True,
                "store": False}))
            made = events[-1]["response"]["output"]
            assert [i["type"] for i in made] == ["apply_patch_call", "local_shell_call"]
            with client_of(process) as client:  # a client that keeps its own history
                done = client.responses.create(
                    model="m", store=False, tools=tools,  # type: ignore[arg-type]
                    input=[*asked, *made, PATCH_OUTPUT, LOCAL_OUTPUT])  # type: ignore[list-item]
        finally:
            stopped(process)
        assert not upstream.failures, upstream.failures
    assert done.output_text == "Created and listed."
    assert upstream.requests[0]["tools"] == tools
    back = sent_items(upstream.requests[1])[1:]
    assert [i["type"] for i in back] == ["apply_patch_call", "local_shell_call",
                                         "apply_patch_call_output", "local_shell_call_output"]
    assert back[0]["operation"] == PATCH_CALL["operation"]
    assert back[1]["action"] == LOCAL_CALL["action"]
    assert back[2:] == [PATCH_OUTPUT, LOCAL_OUTPUT]


@pytest.mark.parametrize("kind", ["shell", "local_shell", "apply_patch"])
def test_a_built_in_tool_in_front_of_another_model_is_a_clear_400(
        project: Path, kind: str) -> None:
    with ScriptedOpenAIServer([]) as chat:
        process = started(project, chat.base_url, "openai:scripted-model")
        try:
            with client_of(process) as client, pytest.raises(BadRequestError) as raised:
                client.responses.create(model="m", input="hi",
                                        tools=[{"type": kind}])  # type: ignore[list-item,misc]
        finally:
            stopped(process)
        assert chat.requests == []
    error = json.loads(raised.value.response.text)["error"]
    assert error["param"] == "tools[0].type" and f"built-in {kind} tool" in \
        error["message"], error

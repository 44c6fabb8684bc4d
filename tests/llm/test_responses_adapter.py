"""OpenAIResponsesModel against ScriptedResponsesServer over real HTTP: streaming text and
reasoning, output items kept and sent back in order, the request's shape, usage and
cost, retries, failures in and before the stream, and key hygiene."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest

from nonoka.errors import ConfigurationError, ModelError
from nonoka.llm import AdoptsInflight, resolve_model
from nonoka.llm.base import CallOptions, ChatModel, ModelResponse, TakesCallOptions, ToolSpec
from nonoka.llm.responses import OpenAIResponsesModel, input_items
from nonoka.state.entries import EntryMessages, MemoryEntry
from nonoka.state.messages import FilePart, Message, TextPart, ToolCall
from nonoka.testing import call, text
from nonoka.testing.server import (
    DropConnection,
    HostedItem,
    HttpError,
    ReasoningItem,
    Reply,
    ResponseFailed,
    ResponsesReply,
    ScriptedResponsesServer,
    insufficient_quota,
    rate_limited,
)

HI = [Message(role="user", content="hi")]
SECRET = "sk-test-very-secret-key-0123456789"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(32))).decode()
PDF = base64.b64encode(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\n").decode()
LOOKUP = ToolSpec("lookup", "Look up the weather.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def model_for(server: ScriptedResponsesServer, **options: Any) -> OpenAIResponsesModel:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("api_key", "sk-test")
    return OpenAIResponsesModel("gpt-test", base_url=server.base_url, **options)


def answered(response: ModelResponse) -> Message:
    """The assistant message a session stores for ``response``."""
    return MemoryEntry.assistant(response.text, response.tool_calls,
                                 reasoning=response.reasoning,
                                 provider_metadata=response.provider_metadata).to_message()


# streaming and assembly ---------------------------------------------------------------------


async def test_text_and_reasoning_stream_to_their_sinks() -> None:
    reply = ResponsesReply(output=(ReasoningItem(("First I think.", "Then I answer.")),
                                   "The quick brown fox jumps over the lazy dog."))
    with ScriptedResponsesServer([reply], chunk_size=5) as server:
        texts: list[str] = []
        thoughts: list[str] = []
        response = await model_for(server).complete_with(
            HI, on_text=texts.append, on_reasoning=thoughts.append)
        server.assert_done()
    assert len(texts) > 3
    assert "".join(texts) == response.text == "The quick brown fox jumps over the lazy dog."
    assert "".join(thoughts) == "First I think.\n\nThen I answer."
    [reasoning] = response.reasoning
    assert reasoning.text == "First I think.\n\nThen I answer."
    item = (reasoning.provider_metadata or {})["openai_responses"]
    assert item["type"] == "reasoning" and item["id"].startswith("rs_")
    assert item["encrypted_content"].startswith("gAAAAA")
    assert (response.finish_reason, response.model) == ("stop", "gpt-test")


async def test_a_hosted_items_events_reach_on_item_in_order_with_the_text() -> None:
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "kyoto weather"}}
    reply = ResponsesReply(output=("Let me look.", HostedItem(search), "Sunny."))
    with ScriptedResponsesServer([reply], chunk_size=100) as server:
        seen: list[str] = []
        response = await model_for(server).complete_with(
            HI, on_text=lambda t: seen.append(f"text {t}"),
            on_item=lambda e: seen.append(f"{e['type']} {e['output_index']}"))
        server.assert_done()
    assert seen == ["text Let me look.", "response.output_item.added 1",
                    "response.web_search_call.in_progress 1",
                    "response.web_search_call.searching 1",
                    "response.web_search_call.completed 1", "response.output_item.done 1",
                    "text \n\n", "text Sunny."]
    layout = (response.provider_metadata or {})["openai_responses"]["items"]
    assert [e["type"] for e in layout] == ["message", "web_search_call", "message"]
    assert layout[1]["item"] == search


async def test_function_calls_keep_their_item_ids_and_the_answer_its_item_order() -> None:
    oslo = ToolCall(id="call_o", name="lookup", arguments='{"city": "Oslo"}')
    rome = ToolCall(id="call_r", name="lookup", arguments='{"city": "Rome"}')
    reply = ResponsesReply(output=(ReasoningItem(("Oslo first.",)), oslo,
                                   ReasoningItem(("Now Rome.",)), "Checking both.", rome))
    with ScriptedResponsesServer([reply, "Cold and warm."]) as server:
        model = model_for(server)
        first = await model.complete(HI, [LOOKUP])
        history = [*HI, answered(first),
                   Message(role="tool", content="cold", tool_call_id="call_o"),
                   Message(role="tool", content="warm", tool_call_id="call_r")]
        second = await model.complete(history, [LOOKUP])
        server.assert_done()
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_o", "lookup", '{"city": "Oslo"}'), ("call_r", "lookup", '{"city": "Rome"}')]
    assert all((c.provider_metadata or {})["openai_responses"]["id"].startswith("fc_")
               for c in first.tool_calls)
    assert first.finish_reason == "tool_calls" and first.text == "Checking both."
    assert second.text == "Cold and warm."
    produced = [i["type"] for i in server.requests[0]["input"]]
    assert produced == ["message"]
    sent = server.requests[1]["input"]
    assert [i["type"] for i in sent] == ["message", "reasoning", "function_call", "reasoning",
                                         "message", "function_call", "function_call_output",
                                         "function_call_output"]
    reasoning = [r.provider_metadata["openai_responses"] for r in first.reasoning
                 if r.provider_metadata]
    assert [sent[1], sent[3]] == reasoning  # unchanged, in place
    assert sent[2] == {"type": "function_call", "call_id": "call_o", "name": "lookup",
                       "arguments": '{"city": "Oslo"}',
                       "id": (first.tool_calls[0].provider_metadata or {})[
                           "openai_responses"]["id"]}
    assert sent[4]["content"] == [{"type": "output_text", "text": "Checking both.",
                                   "annotations": []}]
    assert sent[6:] == [{"type": "function_call_output", "call_id": "call_o", "output": "cold"},
                        {"type": "function_call_output", "call_id": "call_r", "output": "warm"}]


async def test_two_message_items_are_one_text_and_go_back_as_two() -> None:
    reply = ResponsesReply(output=("Let me think aloud.", "Done: 42."))
    with ScriptedResponsesServer([reply, "ok"]) as server:
        model = model_for(server)
        texts: list[str] = []
        first = await model.complete(HI, on_text=texts.append)
        await model.complete([*HI, answered(first), Message(role="user", content="and?")])
    assert first.text == "".join(texts) == "Let me think aloud.\n\nDone: 42."
    sent = server.requests[1]["input"][1:3]
    assert [m["content"][0]["text"] for m in sent] == ["Let me think aloud.", "Done: 42."]


def test_a_stored_entry_encodes_to_the_same_bytes_every_time() -> None:
    layout = {"openai_responses": {"items": [
        {"type": "reasoning"}, {"type": "message", "id": "msg_1", "phase": "commentary"},
        {"type": "function_call"}]}}
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [],
                 "encrypted_content": "gAAAAAB-opaque"}
    entries = [
        MemoryEntry.make("system", "Be brief."),
        MemoryEntry.make("user", "hi"),
        MemoryEntry.make("assistant", "Looking.", provider_metadata=layout,
                         reasoning=[{"text": "", "provider_metadata": {
                             "openai_responses": reasoning}}],
                         tool_calls=[{"id": "c1", "name": "f", "arguments": "{}",
                                      "provider_metadata": {"openai_responses": {
                                          "id": "fc_1"}}}]),
        MemoryEntry.make("tool", "done", tool_call_id="c1"),
    ]
    with ScriptedResponsesServer([]) as server:
        model = model_for(server)
        bodies = {model.body(EntryMessages(entries), [LOOKUP]) for _ in range(3)}
        decoded = [json.loads(e.model_dump_json()) for e in entries]
        copies = [MemoryEntry.model_validate(d) for d in decoded]  # as a reload gives them
        bodies.add(model.body(EntryMessages(copies), [LOOKUP]))
        bodies.add(model.body([e.to_message() for e in entries], [LOOKUP]))
    assert len(bodies) == 1
    sent = json.loads(bodies.pop())["input"]
    assert sent[0] == {"type": "message", "role": "system",
                       "content": [{"type": "input_text", "text": "Be brief."}]}
    assert sent[2] == reasoning
    assert sent[3] == {"type": "message", "role": "assistant", "id": "msg_1",
                       "status": "completed", "phase": "commentary",
                       "content": [{"type": "output_text", "text": "Looking.",
                                    "annotations": []}]}


def test_an_answer_from_elsewhere_goes_as_plain_items() -> None:
    """Reasoning another provider gave cannot go to OpenAI; the text and calls can."""
    foreign = MemoryEntry.make("assistant", "I'll look.", reasoning=[
        {"text": "DeepSeek thinks", "provider_metadata": {
            "openai_compatible": {"field": "reasoning_content", "send_back": True}}}],
        tool_calls=[{"id": "c9", "name": "f", "arguments": "{}"}])
    assert input_items(foreign.role, foreign.content, foreign.metadata) == [
        {"type": "message", "role": "assistant", "content": "I'll look."},
        {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"}]
    with pytest.raises(ConfigurationError, match="tool_call_id"):
        input_items("tool", "orphan", {})


# files -----------------------------------------------------------------------------------------


async def test_images_and_pdfs_in_a_prompt_and_from_a_tool() -> None:
    prompt = Message(role="user", content="Compare.", parts=[
        TextPart(text="Compare."), FilePart(media_type="image/png", data=PNG),
        FilePart(media_type="image/jpeg", url="https://example.com/cat.jpg"),
        FilePart(media_type="application/pdf", data=PDF, filename="paper.pdf"),
        FilePart(media_type="application/pdf", url="https://example.com/a.pdf"),
        FilePart(media_type="text/plain", data=base64.b64encode(b"notes").decode(),
                 filename="n.txt")])
    result = Message(role="tool", tool_call_id="c1", content="shot.png", parts=[
        TextPart(text="shot.png"), FilePart(media_type="image/png", data=PNG)])
    calling = Message(role="assistant", tool_calls=[ToolCall(id="c1", name="shot")])
    with ScriptedResponsesServer(["ok"]) as server:
        await model_for(server).complete([prompt, calling, result])
    user, _, output = server.requests[0]["input"]
    assert user["content"] == [
        {"type": "input_text", "text": "Compare."},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"},
        {"type": "input_file", "filename": "paper.pdf",
         "file_data": f"data:application/pdf;base64,{PDF}"},
        {"type": "input_file", "file_url": "https://example.com/a.pdf"},
        {"type": "input_text", "text": "[file n.txt (text/plain)]\nnotes"}]
    assert output == {"type": "function_call_output", "call_id": "c1", "output": [
        {"type": "input_text", "text": "shot.png"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"}]}


# the request ----------------------------------------------------------------------------------


async def test_the_request_is_stateless_and_maps_the_call_options() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    options = CallOptions(
        max_tokens=64, temperature=0.2, top_p=0.9, stop=["END"], seed=7,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        reasoning_effort="low",
        response_format={"type": "json_schema",
                         "json_schema": {"name": "out", "schema": schema, "strict": True}},
        extra={"parallel_tool_calls": False, "store": True, "model": "other", "tools": []})
    with ScriptedResponsesServer(["ok", "ok"]) as server:
        model = model_for(server)
        await model.complete_with(HI, [LOOKUP], options=options)
        await model.complete(HI)
    body, plain = server.requests
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    assert body["model"] == "gpt-test" and body["stream"] is True
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["store"] is True  # extra replaces a default...
    assert body["tools"] == [{"type": "function", "name": "lookup",
                              "description": "Look up the weather.",
                              "parameters": LOOKUP.parameters, "strict": False}]  # ...not these
    assert (body["max_output_tokens"], body["temperature"], body["top_p"]) == (64, 0.2, 0.9)
    assert body["tool_choice"] == {"type": "function", "name": "lookup"}
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["text"] == {"format": {"type": "json_schema", "name": "out", "schema": schema,
                                       "strict": True}}
    assert body["parallel_tool_calls"] is False
    assert "stop" not in body and "seed" not in body and "max_tokens" not in body
    assert plain == {"model": "gpt-test", "input": plain["input"], "stream": True,
                     "store": False, "include": ["reasoning.encrypted_content"]}


def test_a_reasoning_model_asks_for_summaries_and_others_send_no_reasoning() -> None:
    from nonoka.llm.catalog import known_model

    reasoner = known_model("openai-responses:gpt-5")
    plain = known_model("openai-responses:gpt-4o")
    assert reasoner is not None and plain is not None
    bodies = [json.loads(OpenAIResponsesModel("m", base_url="http://127.0.0.1:9/v1",
                                              known=known).body(HI))
              for known in (reasoner, plain)]
    assert bodies[0]["reasoning"] == {"summary": "auto"}
    assert "reasoning" not in bodies[1]
    options = CallOptions(response_format={"type": "json_object"}, tool_choice="required",
                          extra={"reasoning": {"effort": "high", "summary": "detailed"}})
    body = json.loads(OpenAIResponsesModel("m", base_url="http://127.0.0.1:9/v1",
                                           known=reasoner).body(HI, options=options))
    assert body["reasoning"] == {"effort": "high", "summary": "detailed"}
    assert (body["text"], body["tool_choice"]) == ({"format": {"type": "json_object"}},
                                                   "required")


# usage, cost, the catalog ----------------------------------------------------------------------


async def test_cached_and_reasoning_tokens_and_the_catalogs_price() -> None:
    from nonoka.llm.catalog import cost, known_model

    known = known_model("openai-responses:gpt-5")
    assert known is not None and known.prices == known_model("openai:gpt-5").prices  # type: ignore[union-attr]
    reply = ResponsesReply(output=("ok",), input_tokens=10_000, output_tokens=300,
                           cached_tokens=8_000, reasoning_tokens=200)
    with ScriptedResponsesServer([reply]) as server:
        response = await model_for(server, known=known).complete(HI)
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens) == (10_000, 300)
    assert (usage.cache_read_tokens, usage.reasoning_tokens, usage.cache_write_tokens) \
        == (8_000, 200, 0)
    assert usage.cost_usd == pytest.approx(cost(known, input_tokens=10_000, output_tokens=300,
                                                cached_tokens=8_000))


def test_resolve_model_knows_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1?api-version=1")
    model = resolve_model("openai-responses:gpt-5")
    assert isinstance(model, OpenAIResponsesModel)
    assert model.name == "openai-responses:gpt-5" and model.model == "gpt-5"
    assert model.endpoint == "http://127.0.0.1:9/v1/responses"
    assert isinstance(model, ChatModel) and isinstance(model, TakesCallOptions)
    assert not isinstance(model, AdoptsInflight)  # no early dispatch for this adapter
    assert SECRET not in repr(model)
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        resolve_model("openai-responses:gpt-5")


def test_the_catalog_follows_project_overrides_for_the_alias() -> None:
    from nonoka.llm.catalog import models_from_config

    catalog = models_from_config({"models": {
        "openai:gpt-4o": {"input": 9.0},
        "openai-responses:gpt-4.1": {"output": 1.0},
        "openai:mine": {"context_tokens": 1000, "max_output_tokens": 10, "input": 1.0,
                        "output": 2.0}}})
    assert catalog["openai-responses:gpt-4o"].prices.input == 9.0
    assert catalog["openai-responses:gpt-4o"].id == "openai-responses:gpt-4o"
    assert catalog["openai-responses:gpt-4.1"].prices.output == 1.0
    assert catalog["openai:gpt-4.1"].prices.output == 8.0
    assert catalog["openai-responses:gpt-4.1"].prices.input == 2.0
    assert catalog["openai-responses:mine"].context_tokens == 1000
    assert "openai-responses:openai/gpt-4o" not in catalog


# retries and failures -------------------------------------------------------------------------


async def test_rate_limits_and_dropped_streams_are_retried_before_any_text() -> None:
    with ScriptedResponsesServer([rate_limited(0.01), DropConnection(), HttpError(503),
                                  "after three"]) as server:
        response = await model_for(server).complete(HI, on_text=lambda _: None)
        server.assert_done()
    assert response.text == "after three"
    assert len(server.requests) == 4


async def test_a_stream_cut_after_text_is_not_retried() -> None:
    with ScriptedResponsesServer([DropConnection("partial answ"), "never"]) as server:
        seen: list[str] = []
        with pytest.raises(ModelError) as raised:
            await model_for(server).complete(HI, on_text=seen.append)
    assert "".join(seen) == "partial answ"
    assert "ended before the answer was complete" in str(raised.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("as_error_event", [False, True])
async def test_a_failure_in_the_stream_is_a_model_error(as_error_event: bool) -> None:
    failed = ResponseFailed(code="invalid_prompt", message="Your prompt was flagged.",
                            as_error_event=as_error_event)
    with ScriptedResponsesServer([failed]) as server, pytest.raises(ModelError) as raised:
        await model_for(server).complete(HI)
    error = raised.value
    assert "Your prompt was flagged. (invalid_prompt)" in str(error)
    assert error.retryable is False and error.status is None
    body = json.loads(error.body or "{}")
    assert body["type"] == ("error" if as_error_event else "response.failed")
    assert len(server.requests) == 1


async def test_a_server_error_in_the_stream_is_retried() -> None:
    with ScriptedResponsesServer([ResponseFailed(), "recovered"]) as server:
        response = await model_for(server).complete(HI)
        server.assert_done()
    assert response.text == "recovered"


async def test_an_incomplete_response_stops_with_length() -> None:
    cut = ResponsesReply(output=("half of it",), incomplete="max_output_tokens")
    filtered = ResponsesReply(output=("",), incomplete="content_filter")
    with ScriptedResponsesServer([cut, filtered, Reply(text="x", finish_reason="length")]) \
            as server:
        model = model_for(server)
        assert (await model.complete(HI)).finish_reason == "length"
        assert (await model.complete(HI)).finish_reason == "content_filter"
        assert (await model.complete(HI)).finish_reason == "length"


async def test_http_errors_keep_the_providers_body_and_never_show_the_key() -> None:
    leaky = HttpError(401, {"error": {"message": f"Incorrect API key provided: {SECRET}.",
                                      "type": "invalid_request_error", "param": None,
                                      "code": "invalid_api_key"}})
    with ScriptedResponsesServer([leaky, insufficient_quota()]) as server:
        model = model_for(server, api_key=SECRET)
        with pytest.raises(ModelError) as first:
            await model.complete(HI)
        with pytest.raises(ModelError) as second:
            await model.complete(HI)
        url = f"{server.base_url}/responses"
    assert first.value.status == 401 and SECRET not in str(first.value)
    assert SECRET not in (first.value.body or "") and "***" in (first.value.body or "")
    assert first.value.endpoint == url
    assert second.value.status == 429 and second.value.retryable is False
    assert json.loads(second.value.body or "{}")["error"]["code"] == "insufficient_quota"
    assert len(server.requests) == 2  # a spent quota is not retried


async def test_the_worker_thread_is_named_and_gone_after_the_call() -> None:
    with ScriptedResponsesServer(["ok"]) as server:
        await model_for(server).complete(HI)
    workers = [t for t in threading.enumerate() if t.name == "nonoka-responses-http"]
    for worker in workers:
        worker.join(timeout=5)
    assert not any(t.is_alive() for t in workers)


async def test_chat_steps_and_a_plain_reply_with_reasoning_work_as_answers() -> None:
    with ScriptedResponsesServer([text("plain"), call("lookup", {"city": "Oslo"}, id="c1"),
                                  Reply(text="t", reasoning="r")]) as server:
        model = model_for(server)
        assert (await model.complete(HI)).text == "plain"
        assert (await model.complete(HI)).tool_calls[0].id == "c1"
        reasoned = await model.complete(HI)
    assert [r.text for r in reasoned.reasoning] == ["r"]

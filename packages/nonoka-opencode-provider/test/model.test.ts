import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, test } from "node:test";

import type { LanguageModelV3Prompt, SharedV3ProviderMetadata } from "@ai-sdk/provider";
import { APICallError } from "@ai-sdk/provider";
import { BridgeError, createNonoka, NonokaError, ProviderCallError, providerCallError, readSessionId, idFilePath, toProtocolMessages, writeSessionId } from "nonoka-opencode-provider";

import { assistantText, chatCall, collect, compactionCall, fakeProvider, ofType, sentFrames, tempDir, titleCall, user } from "./helpers.js";

let tmp: { dir: string; done: () => void };
beforeEach(() => {
  tmp = tempDir();
});
afterEach(() => tmp.done());

describe("a chat step", () => {
  test("streams text, usage and a v3 finish reason, and sends a new-conversation request", async () => {
    const model = fakeProvider("text", tmp.dir).languageModel("default");
    assert.equal(model.specificationVersion, "v3");
    const { stream } = await model.doStream(chatCall([user("Say hi")]));
    const parts = await collect(stream);
    assert.deepEqual(
      parts.map((p) => p.type),
      ["stream-start", "response-metadata", "text-start", "text-delta", "text-delta", "text-end", "finish"],
    );
    assert.equal(ofType(parts, "text-delta").map((p) => p.delta).join(""), "Hello");
    const finish = ofType(parts, "finish")[0];
    assert.deepEqual(finish?.finishReason, { unified: "stop", raw: "stop" });
    assert.equal(finish?.usage.inputTokens.total, 12);
    assert.equal(finish?.usage.outputTokens.total, 7);
    assert.equal(finish?.providerMetadata?.["nonoka"]?.["costUsd"], 0.001);

    const [request] = sentFrames(tmp.dir);
    assert.equal(request?.["type"], "chat");
    // The call's options (max_tokens, tool_choice) need a bridge with capability parts.
    assert.deepEqual(request?.["protocol"], { version: "1", required_capabilities: ["parts"], features: ["reasoning", "host_retries"] });
    // Streamed, and no spec says the model is not Anthropic's: its tools stream unbuffered.
    assert.deepEqual(request?.["options"], { max_tokens: 32000, tool_choice: "auto", eager_input_streaming: ["write"] });
    assert.equal(request?.["purpose"], "chat");
    assert.equal(request?.["new_session"], true);
    assert.equal(request?.["session_id"], undefined);
    assert.equal(request?.["conversation_key"], "71d5b298ee9f050ce4ae9a5ec072511edf42011b2b0ea56c0afda41980fd4194");
    assert.equal(request?.["cwd"], tmp.dir);
    assert.equal(request?.["model"], undefined);
    assert.deepEqual((request?.["tools"] as Array<{ name: string }>).map((t) => t.name), ["write"]);
    // The id the bridge reported is held and persisted for the next process.
    assert.match(readSessionId(idFilePath(tmp.dir)) ?? "", /^fake-chat-/);
  });

  test("a continuation sends the held session id; the model id and options shape the request", async () => {
    writeSessionId(idFilePath(tmp.dir), "sess-from-file");
    const provider = fakeProvider("text", tmp.dir, { model: "openai:gpt-4o-mini", limits: { max_model_turns: 3 } });
    await collect((await provider("default").doStream(chatCall([user("Say hi"), assistantText("Hello"), user("again")]))).stream);
    await collect((await provider.languageModel("openai:other").doStream(chatCall([user("Say hi"), assistantText("Hello"), user("more")]))).stream);
    const [first, second] = sentFrames(tmp.dir);
    assert.equal(first?.["new_session"], false);
    assert.equal(first?.["session_id"], "sess-from-file");
    assert.equal(first?.["model"], "openai:gpt-4o-mini");
    assert.deepEqual(first?.["limits"], { max_model_turns: 3 });
    assert.equal(second?.["model"], "openai:other");
    assert.equal(readSessionId(idFilePath(tmp.dir)), "sess-from-file");
  });

  test("a host tool call ends the step with tool-calls, for the host to run", async () => {
    const { stream } = await fakeProvider("tool", tmp.dir).languageModel("default").doStream(chatCall([user("write a.txt")]));
    const parts = await collect(stream);
    assert.deepEqual(
      parts.map((p) => p.type),
      ["stream-start", "response-metadata", "text-start", "text-delta", "text-end", "tool-input-start", "tool-input-delta", "tool-input-end", "tool-call", "finish"],
    );
    assert.deepEqual(ofType(parts, "tool-call")[0], {
      type: "tool-call",
      toolCallId: "call_9",
      toolName: "write",
      input: '{"filePath":"a.txt","content":"x"}',
    });
    assert.deepEqual(ofType(parts, "finish")[0]?.finishReason, { unified: "tool-calls", raw: "tool_calls" });
  });

  test("tools nonoka ran itself are reported as provider-executed, with their results", async () => {
    const parts = await collect((await fakeProvider("nonoka-tool", tmp.dir).languageModel().doStream(chatCall([user("time?")]))).stream);
    const call = ofType(parts, "tool-call")[0];
    assert.equal(call?.providerExecuted, true);
    assert.equal(call?.input, "{}");
    assert.equal(ofType(parts, "tool-result")[0]?.result, "12:00");
    const finish = ofType(parts, "finish")[0];
    assert.equal(finish?.usage.inputTokens.total, 24, "the request total from finish, not a sum");
    assert.equal((finish?.providerMetadata?.["nonoka"]?.["calls"] as unknown[]).length, 2);
  });

  test("a limit ends with length; unknown events and other requests' events are skipped", async () => {
    const limit = await collect((await fakeProvider("limit", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    assert.deepEqual(ofType(limit, "finish")[0]?.finishReason, { unified: "length", raw: "limit" });

    const parts = await collect((await fakeProvider("warning-unknown-other", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    assert.equal(ofType(parts, "text-delta").map((p) => p.delta).join(""), "mine");
    const meta = ofType(parts, "finish")[0]?.providerMetadata?.["nonoka"];
    assert.deepEqual(meta?.["warnings"], [{ code: "session_id_missing_starting_fresh", message: "started fresh" }]);
  });

  test("an answer the model cut or filtered ends as it would from the endpoint directly", async () => {
    const model = fakeProvider("model-length", tmp.dir).languageModel();
    const cut = await collect((await model.doStream(chatCall([user("a story")]))).stream);
    assert.deepEqual(ofType(cut, "finish")[0]?.finishReason, { unified: "length", raw: "length" });
    assert.equal(ofType(cut, "finish")[0]?.providerMetadata?.["nonoka"]?.["modelFinish"], "length");
    const filtered = fakeProvider("model-length", tmp.dir, { env: { FAKE_MODEL_FINISH: "content_filter" } }).languageModel();
    const result = await filtered.doGenerate(chatCall([user("a story")]));
    assert.deepEqual(result.finishReason, { unified: "content-filter", raw: "content_filter" });
    const stopped = fakeProvider("model-length", tmp.dir, { env: { FAKE_MODEL_FINISH: "stop" } }).languageModel();
    assert.deepEqual((await stopped.doGenerate(chatCall([user("a story")]))).finishReason, { unified: "stop", raw: "stop" });
  });

  test("CRLF lines, U+2028 in text and a last line without newline are read", async () => {
    const parts = await collect((await fakeProvider("crlf-no-final-newline", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    assert.equal(ofType(parts, "text-delta")[0]?.delta, "a\u2028b");
    assert.deepEqual(ofType(parts, "finish")[0]?.finishReason, { unified: "stop", raw: "stop" });
  });

  test("doGenerate gathers the same call", async () => {
    const result = await fakeProvider("tool", tmp.dir).languageModel().doGenerate(chatCall([user("write")]));
    assert.deepEqual(result.content.map((c) => c.type), ["text", "tool-call"]);
    assert.deepEqual(result.content[0], { type: "text", text: "Writing it." });
    assert.equal(result.finishReason.unified, "tool-calls");
  });

  test("the model's spec decides what only Anthropic takes: topK and the tools' eager streaming", async () => {
    const provider = fakeProvider("text", tmp.dir);
    await collect((await provider.languageModel("anthropic:claude-sonnet-4-5").doStream(chatCall([user("a")], { topK: 5 }))).stream);
    const openai = await provider.languageModel("openai:gpt-4o").doStream(chatCall([user("b")], { topK: 5 }));
    const parts = await collect(openai.stream);
    await provider.languageModel("anthropic:claude-sonnet-4-5").doGenerate(chatCall([user("c")], { topK: 5 }));
    const [claude, other, generated] = sentFrames(tmp.dir);
    assert.deepEqual(claude?.["options"], { max_tokens: 32000, tool_choice: "auto", top_k: 5, eager_input_streaming: ["write"] });
    assert.deepEqual(other?.["options"], { max_tokens: 32000, tool_choice: "auto" });
    assert.deepEqual(ofType(parts, "stream-start")[0]?.warnings, [{ type: "unsupported", feature: "topK" }]);
    // Not streamed: as the AI SDK's Anthropic provider, no tool streams unless it says so.
    assert.deepEqual(generated?.["options"], { max_tokens: 32000, tool_choice: "auto", top_k: 5 });
  });
});

describe("lossless both ways", () => {
  test("a plain request asks for nothing new; the reasoning feature is always asked for", async () => {
    await collect((await fakeProvider("text", tmp.dir).languageModel().doStream({ prompt: [user("hi")] })).stream);
    const [request] = sentFrames(tmp.dir);
    assert.deepEqual(request?.["protocol"], { version: "1", required_capabilities: [], features: ["reasoning", "host_retries"] });
    assert.equal(request?.["options"], undefined);
  });

  test("the host's headers go to the bridge without credentials; a subagent names its parent", async () => {
    const headers = {
      "X-Session-Id": "ses_child", "x-session-affinity": "ses_child", "x-parent-session-id": "ses_parent",
      "User-Agent": "opencode/1.18.33", "anthropic-beta": "interleaved-thinking-2025-05-14",
      Authorization: "Bearer host-secret", "x-api-key": "host-secret", "x-empty": undefined,
    };
    await collect((await fakeProvider("text", tmp.dir).languageModel().doStream({ ...chatCall([user("hi")]), headers })).stream);
    const [request] = sentFrames(tmp.dir);
    assert.deepEqual(request?.["headers"], {
      "x-session-id": "ses_child", "x-session-affinity": "ses_child", "x-parent-session-id": "ses_parent",
      "user-agent": "opencode/1.18.33", "anthropic-beta": "interleaved-thinking-2025-05-14",
    });
    assert.equal(request?.["host_session_id"], "ses_child");
    assert.equal(request?.["host_parent_session_id"], "ses_parent");
  });

  test("reasoning streams, ends with its metadata; a call carries its own; usage splits cache and reasoning", async () => {
    const parts = await collect((await fakeProvider("reasoning", tmp.dir).languageModel().doStream(chatCall([user("read a.txt")]))).stream);
    assert.deepEqual(
      parts.map((p) => p.type),
      [
        "stream-start", "response-metadata",
        "reasoning-start", "reasoning-delta", "reasoning-delta",
        "text-start", "text-delta",
        "reasoning-end", "text-end",
        "tool-input-start", "tool-input-delta", "tool-input-end", "tool-call",
        "finish",
      ],
    );
    assert.equal(ofType(parts, "reasoning-delta").map((p) => p.delta).join(""), "Let me think.");
    const message = { openai_compatible: { extra_content: { tag: "m1" } } };
    assert.deepEqual(ofType(parts, "reasoning-end")[0]?.providerMetadata, {
      nonoka: { kind: "reasoning", provider_metadata: { openai_compatible: { field: "reasoning_content", send_back: true } }, message_provider_metadata: message },
    });
    assert.deepEqual(ofType(parts, "text-end")[0]?.providerMetadata, { nonoka: { message_provider_metadata: message } });
    const call = ofType(parts, "tool-call")[0];
    assert.deepEqual(call?.providerMetadata, {
      nonoka: { provider_metadata: { openai_compatible: { extra_content: { google: { thought_signature: "c2ln" } } } }, message_provider_metadata: message },
    });
    const usage = ofType(parts, "finish")[0]?.usage;
    assert.deepEqual(usage?.inputTokens, { total: 1200, noCache: 200, cacheRead: 1000, cacheWrite: undefined });
    assert.deepEqual(usage?.outputTokens, { total: 9, text: 6, reasoning: 3 });

    // OpenCode stores each part's providerMetadata and sends it back as providerOptions:
    // the next request carries exactly what the bridge reported.
    const stored = (metadata: SharedV3ProviderMetadata | undefined): SharedV3ProviderMetadata => {
      assert.ok(metadata !== undefined);
      return metadata;
    };
    const next: LanguageModelV3Prompt = [
      user("read a.txt"),
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "Let me think.", providerOptions: stored(ofType(parts, "reasoning-end")[0]?.providerMetadata) },
          { type: "text", text: "Reading it.", providerOptions: stored(ofType(parts, "text-end")[0]?.providerMetadata) },
          { type: "tool-call", toolCallId: "call_s", toolName: "read", input: { filePath: "a.txt" }, providerOptions: stored(call?.providerMetadata) },
        ],
      },
    ];
    assert.deepEqual(toProtocolMessages(next)[1], {
      role: "assistant",
      content: "Reading it.",
      tool_calls: [
        { id: "call_s", name: "read", arguments: '{"filePath":"a.txt"}', provider_metadata: { openai_compatible: { extra_content: { google: { thought_signature: "c2ln" } } } } },
      ],
      reasoning: [{ text: "Let me think.", provider_metadata: { openai_compatible: { field: "reasoning_content", send_back: true } } }],
      provider_metadata: message,
    });
  });

  test("reasoning the bridge did not stream arrives whole with its metadata", async () => {
    const parts = await collect((await fakeProvider("opaque-reasoning", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    assert.deepEqual(
      parts.filter((p) => p.type.startsWith("reasoning")).map((p) => [p.type, "providerMetadata" in p ? p.providerMetadata : undefined]),
      [
        ["reasoning-start", { nonoka: { kind: "reasoning", provider_metadata: { openai_compatible: { encrypted: "xyz" } } } }],
        ["reasoning-end", { nonoka: { kind: "reasoning", provider_metadata: { openai_compatible: { encrypted: "xyz" } } } }],
      ],
    );
    const usage = ofType(parts, "finish")[0]?.usage;
    assert.deepEqual(usage?.inputTokens, { total: 12, noCache: 12, cacheRead: 0, cacheWrite: undefined }, "the finish total, no cache reported");
  });

  test("doGenerate gathers reasoning with its metadata", async () => {
    const result = await fakeProvider("reasoning", tmp.dir).languageModel().doGenerate(chatCall([user("read a.txt")]));
    assert.deepEqual(result.content.map((c) => c.type), ["reasoning", "text", "tool-call"]);
    assert.equal(result.content[0]?.type === "reasoning" ? result.content[0].text : "", "Let me think.");
    assert.equal((result.content[0]?.providerMetadata?.["nonoka"] as Record<string, unknown>)?.["kind"], "reasoning");
  });
});

describe("the provider's own failures", () => {
  const providerError = async (env: Record<string, string>): Promise<unknown> => {
    const provider = fakeProvider("provider-error", tmp.dir, { env: { FAKE_BRIDGE_LOG: `${tmp.dir}/requests.jsonl`, ...env } });
    const parts = await collect((await provider.languageModel().doStream(chatCall([user("go")]))).stream);
    assert.deepEqual(ofType(parts, "finish")[0]?.finishReason, { unified: "error", raw: "error" });
    return ofType(parts, "error")[0]?.error;
  };

  test("are the AI SDK's APICallError, as the provider gave them: a context overflow", async () => {
    const error = await providerError({});
    assert.ok(APICallError.isInstance(error), "OpenCode checks APICallError.isInstance");
    assert.ok(error instanceof ProviderCallError);
    assert.equal(error.name, "AI_APICallError");
    assert.equal(error.message, "This model's maximum context length is 128000 tokens.");
    assert.equal(error.statusCode, 400);
    assert.equal(JSON.parse(error.responseBody ?? "")["error"]["code"], "context_length_exceeded");
    assert.equal(error.isRetryable, false);
    assert.equal(error.responseHeaders, undefined);
    assert.equal(error.nonokaCode, "model_error");
  });

  test("a rate limit keeps its retry-after; a spent quota is not retryable", async () => {
    const limited = await providerError({ FAKE_ERROR_STATUS: "429", FAKE_ERROR_CODE: "rate_limit_exceeded", FAKE_ERROR_MESSAGE: "Rate limit reached", FAKE_RETRY_AFTER: "2.5", FAKE_RETRYABLE: "1" });
    assert.ok(APICallError.isInstance(limited));
    assert.deepEqual([limited.statusCode, limited.isRetryable, limited.responseHeaders], [429, true, { "retry-after": "2.5" }]);
    const quota = await providerError({ FAKE_ERROR_STATUS: "429", FAKE_ERROR_CODE: "insufficient_quota", FAKE_ERROR_MESSAGE: "You exceeded your current quota" });
    assert.ok(APICallError.isInstance(quota));
    assert.deepEqual([quota.statusCode, quota.isRetryable, quota.message], [429, false, "You exceeded your current quota"]);
  });

  test("a body the openai-compatible provider cannot read leaves the status text as the message", () => {
    const gemini = JSON.stringify([{ error: { code: 400, message: "Corrupted thought signature.", status: "INVALID_ARGUMENT" } }]);
    const error = providerCallError("model_error", "model endpoint failed HTTP 400", { status: 400, body: gemini, retry_after: null, retryable: false });
    assert.ok(APICallError.isInstance(error));
    assert.deepEqual([error.message, error.responseBody, error.isRetryable], ["Bad Request", gemini, false]);
    const plain = providerCallError("model_error", "model endpoint failed HTTP 502", { status: 502, body: "<html>bad gateway</html>", retryable: true });
    assert.deepEqual([plain.message, plain.isRetryable], ["Bad Gateway", true]);
  });
});

describe("title requests", () => {
  test("run in their own session and never overwrite the chat id", async () => {
    const provider = fakeProvider("text", tmp.dir, { env: { FAKE_BRIDGE_LOG: `${tmp.dir}/requests.jsonl`, FAKE_SESSION_ID: "" } });
    await collect((await provider.languageModel().doStream(chatCall([user("write a file")]))).stream);
    const chatId = readSessionId(idFilePath(tmp.dir));
    assert.match(chatId ?? "", /^fake-chat-/);
    await collect((await provider.languageModel().doStream(titleCall("write a file"))).stream);
    const [, title] = sentFrames(tmp.dir);
    assert.equal(title?.["purpose"], "title");
    assert.equal(title?.["new_session"], true);
    assert.equal(title?.["conversation_key"], undefined);
    assert.equal(readSessionId(idFilePath(tmp.dir)), chatId);
    assert.equal(provider.sessions().sessionId, chatId);
    assert.match(provider.sessions().titleSessionId ?? "", /^fake-title-/);
  });
});

describe("compaction requests", () => {
  test("name the chat they summarise and never overwrite the chat id", async () => {
    const provider = fakeProvider("text", tmp.dir, { env: { FAKE_BRIDGE_LOG: `${tmp.dir}/requests.jsonl`, FAKE_SESSION_ID: "" } });
    await collect((await provider.languageModel().doStream(chatCall([user("write a file")]))).stream);
    const chatId = readSessionId(idFilePath(tmp.dir));
    assert.match(chatId ?? "", /^fake-chat-/);
    const parts = await collect((await provider.languageModel().doStream(compactionCall("user: write a file"))).stream);
    assert.equal(ofType(parts, "text-delta").map((p) => p.delta).join(""), "Hello");
    const [chat, compaction] = sentFrames(tmp.dir);
    assert.equal(compaction?.["purpose"], "compaction");
    assert.equal(compaction?.["new_session"], false, "a lone user message must not read as a new conversation");
    assert.equal(compaction?.["session_id"], chatId);
    assert.equal(compaction?.["conversation_key"], chat?.["conversation_key"], "the chat's key, not the summary prompt's");
    assert.equal(readSessionId(idFilePath(tmp.dir)), chatId);
    assert.equal(provider.sessions().sessionId, chatId);
    // The next chat turn (history now starting from the summary) still names the chat session.
    await collect((await provider.languageModel().doStream(chatCall([user("What did we do so far?"), assistantText("summary"), user("go on")]))).stream);
    assert.equal(sentFrames(tmp.dir)[2]?.["session_id"], chatId);
  });

  test("a compaction report from the bridge changes nothing held, even another session id", async () => {
    writeSessionId(idFilePath(tmp.dir), "sess-chat");
    const provider = fakeProvider("text", tmp.dir, { env: { FAKE_BRIDGE_LOG: `${tmp.dir}/requests.jsonl`, FAKE_FORCE_SESSION_ID: "sess-summary" } });
    await collect((await provider.languageModel().doStream(compactionCall("x"))).stream);
    assert.equal(sentFrames(tmp.dir)[0]?.["session_id"], "sess-chat");
    assert.equal(readSessionId(idFilePath(tmp.dir)), "sess-chat");
    assert.equal(provider.sessions().sessionId, "sess-chat");
  });
});

describe("what the person sees", () => {
  test("a turn stopped by a limit is an error naming the limit and how to raise it", async () => {
    const parts = await collect((await fakeProvider("limit", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    const error = ofType(parts, "error")[0]?.error as NonokaError;
    assert.ok(error instanceof NonokaError);
    assert.equal(error.code, "limit_reached");
    assert.match(error.message, /max_model_turns/);
    assert.match(error.message, /provider\.nonoka\.options\.limits/);
    assert.match(error.message, /whole nonoka session/);
    assert.deepEqual(error.details, { limit: "max_model_turns" });
    // Not a message OpenCode's retry reads as "try again" (it would rerun the turn).
    assert.doesNotMatch(error.message, /rate limit|try again|overloaded|unavailable|exhausted/i);
    await assert.rejects(async () => fakeProvider("limit", tmp.dir).languageModel().doGenerate(chatCall([user("go")])), /limit_reached/);
  });

  test("bridge warnings reach the person as a reasoning block, never as answer text", async () => {
    const parts = await collect((await fakeProvider("warning-unknown-other", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    const notes = ofType(parts, "reasoning-delta").map((p) => p.delta);
    assert.deepEqual(notes, ["nonoka: session_id_missing_starting_fresh: started fresh"]);
    assert.equal(ofType(parts, "text-delta").map((p) => p.delta).join(""), "mine");
    const kinds = parts.map((p) => p.type);
    assert.ok(kinds.indexOf("reasoning-end") < kinds.indexOf("text-start"));
  });

  test("a branch reported by the bridge is adopted as the chat session, and said", async () => {
    writeSessionId(idFilePath(tmp.dir), "sess-parent");
    const provider = fakeProvider("branch", tmp.dir);
    const parts = await collect((await provider.languageModel().doStream(chatCall([user("a"), assistantText("b"), user("c")]))).stream);
    assert.equal(sentFrames(tmp.dir)[0]?.["session_id"], "sess-parent");
    assert.match(readSessionId(idFilePath(tmp.dir)) ?? "", /^fake-branch-/);
    assert.equal(provider.sessions().sessionId, readSessionId(idFilePath(tmp.dir)));
    assert.match(ofType(parts, "reasoning-delta")[0]?.delta ?? "", /session_branched: the history diverged at entry 2/);
  });

  test("the stored entry count a turn ended with goes back with the next request", async () => {
    writeSessionId(idFilePath(tmp.dir), "sess-rev");
    const turn = [user("a"), assistantText("b"), user("c")];
    const model = fakeProvider("text", tmp.dir).languageModel();
    try {
      process.env["FAKE_REVISION"] = "6";
      await collect((await model.doStream(chatCall(turn))).stream);
      process.env["FAKE_REVISION"] = "4"; // a lower report never lowers what was seen
      await collect((await model.doStream(chatCall(turn))).stream);
      await collect((await model.doStream(chatCall(turn))).stream);
    } finally {
      delete process.env["FAKE_REVISION"];
    }
    const sent = sentFrames(tmp.dir).map((f) => f["revision"]);
    assert.deepEqual(sent, [undefined, 6, 6]);
    // Another conversation's request carries no revision of this one.
    await collect((await model.doStream(chatCall([user("new")]))).stream);
    assert.equal(sentFrames(tmp.dir).at(-1)?.["revision"], undefined);
  });
});

describe("failures reach the user", () => {
  test("a bridge error becomes an error part with its code and message", async () => {
    const parts = await collect((await fakeProvider("error", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    const error = ofType(parts, "error")[0]?.error;
    assert.ok(error instanceof NonokaError);
    assert.equal(error.code, "model_error");
    assert.equal(error.retryable, true);
    assert.equal(error.message, "nonoka model_error: the model endpoint answered 503");
    assert.deepEqual(ofType(parts, "finish")[0]?.finishReason, { unified: "error", raw: "error" });
  });

  test("a bridge that dies names the command, its exit code and the tail of its stderr", async () => {
    const parts = await collect((await fakeProvider("die", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    const error = ofType(parts, "error")[0]?.error;
    assert.ok(error instanceof BridgeError);
    assert.match(error.message, /closed its output before finishing the request/);
    assert.match(error.message, /fake-bridge\.mjs die/);
    assert.match(error.message, /exit code 3/);
    assert.match(error.message, /RuntimeError: the fake bridge fell over/);
    assert.equal(error.exitCode, 3);
    assert.equal(ofType(parts, "finish")[0]?.finishReason.unified, "error");
  });

  test("a bridge that cannot start says which command failed", async () => {
    const provider = createNonoka({ command: ["/nonexistent/nonoka", "bridge"], cwd: tmp.dir });
    const parts = await collect((await provider.languageModel().doStream(chatCall([user("go")]))).stream);
    const error = ofType(parts, "error")[0]?.error;
    assert.ok(error instanceof BridgeError);
    assert.match(error.message, /could not start the bridge: .*ENOENT/);
    assert.match(error.message, /`\/nonexistent\/nonoka bridge`/);
  });

  test("a line that is not a protocol event stops the bridge with a readable error", async () => {
    const parts = await collect((await fakeProvider("garbage", tmp.dir).languageModel().doStream(chatCall([user("go")]))).stream);
    const error = ofType(parts, "error")[0]?.error;
    assert.ok(error instanceof BridgeError);
    assert.match(error.message, /not a protocol event \(invalid_json/);
    assert.match(error.message, /this is not json/);
  });

  test("a bridge that runs past the timeout is stopped", async () => {
    const started = Date.now();
    const provider = fakeProvider("ignore-cancel", tmp.dir, { timeoutMs: 300 });
    const parts = await collect((await provider.languageModel().doStream(chatCall([user("go")]))).stream);
    const error = ofType(parts, "error")[0]?.error;
    assert.ok(error instanceof BridgeError);
    assert.match(error.message, /did not finish the request within 0.3 s/);
    assert.ok(Date.now() - started < 5000);
  });

  test("bad provider options are refused up front", () => {
    assert.throws(() => createNonoka({ command: [] }), /command/);
    assert.throws(() => createNonoka({ timeoutMs: -1 }), /timeoutMs/);
    assert.throws(() => createNonoka().embeddingModel("x"), /no embedding models/);
  });
});

describe("aborting", () => {
  test("sends cancel, lets the bridge finish, and ends the stream with the abort reason", async () => {
    const abort = new AbortController();
    const { stream } = await fakeProvider("hang", tmp.dir).languageModel().doStream(chatCall([user("go")], { abortSignal: abort.signal }));
    const reader = stream.getReader();
    const seen: string[] = [];
    for (;;) {
      const { value } = await reader.read();
      seen.push(value?.type ?? "end");
      if (value?.type === "text-delta") break;
    }
    abort.abort();
    await assert.rejects(async () => {
      for (;;) if ((await reader.read()).done) return;
    }, { name: "AbortError" });
    const frames = sentFrames(tmp.dir);
    assert.deepEqual(frames.map((f) => f["type"]), ["chat", "cancel"]);
    assert.equal(frames[1]?.["request_id"], frames[0]?.["request_id"]);
    // The session the bridge reported before the cancel is still adopted.
    assert.match(readSessionId(idFilePath(tmp.dir)) ?? "", /^fake-chat-/);
  });

  test("escalates to SIGTERM and SIGKILL when the bridge ignores the cancel", async () => {
    const abort = new AbortController();
    const started = Date.now();
    const { stream } = await fakeProvider("ignore-sigterm", tmp.dir, { cancelGraceMs: 200 })
      .languageModel()
      .doStream(chatCall([user("go")], { abortSignal: abort.signal }));
    const reader = stream.getReader();
    while ((await reader.read()).value?.type !== "text-delta") {
      // wait until the bridge is running the request
    }
    abort.abort();
    await assert.rejects(async () => {
      for (;;) if ((await reader.read()).done) return;
    });
    assert.ok(Date.now() - started < 5000, "the bridge was killed within the grace periods");
  });

  test("cancelling the reader stops the bridge too", async () => {
    const { stream } = await fakeProvider("hang", tmp.dir).languageModel().doStream(chatCall([user("go")]));
    const reader = stream.getReader();
    while ((await reader.read()).value?.type !== "text-delta") {
      // running
    }
    await reader.cancel();
    assert.deepEqual(sentFrames(tmp.dir).map((f) => f["type"]), ["chat", "cancel"]);
  });

  test("an already aborted call starts no bridge", async () => {
    const abort = new AbortController();
    abort.abort();
    await assert.rejects(async () => fakeProvider("text", tmp.dir).languageModel().doStream(chatCall([user("go")], { abortSignal: abort.signal })));
    assert.deepEqual(sentFrames(tmp.dir), []);
  });
});

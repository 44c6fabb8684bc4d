import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  detectPurpose,
  hostSessionId,
  needsParts,
  toCallOptions,
  toHostTools,
  toolOutputParts,
  toolOutputText,
  toProtocolMessages,
} from "nonoka-opencode-provider";

import { chatCall, compactionCall, titleCall, user } from "./helpers.js";

const PNG = new Uint8Array([0x89, 0x50, 0x4e, 0x47]);
const SEND_BACK = { openai_compatible: { field: "reasoning_content", send_back: true } };
const SIGNED = { openai_compatible: { extra_content: { google: { thought_signature: "c2ln" } } } };

describe("toProtocolMessages", () => {
  test("maps OpenCode's history after a tool call, as 1.18.33 sends it", () => {
    const messages = toProtocolMessages([
      { role: "system", content: "You are opencode" },
      user('"Create hello.txt please"'),
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "thoughts of another model" },
          { type: "text", text: "Writing." },
          { type: "tool-call", toolCallId: "call_2", toolName: "write", input: { filePath: "/p/hello.txt", content: "hi\n" } },
        ],
      },
      { role: "tool", content: [{ type: "tool-result", toolCallId: "call_2", toolName: "write", output: { type: "text", value: "Wrote file successfully." } }] },
      { role: "assistant", content: [{ type: "text", text: "Done" }] },
      user("next"),
    ]);
    assert.deepEqual(messages, [
      { role: "system", content: "You are opencode" },
      { role: "user", content: '"Create hello.txt please"' },
      {
        role: "assistant",
        content: "Writing.",
        tool_calls: [{ id: "call_2", name: "write", arguments: '{"filePath":"/p/hello.txt","content":"hi\\n"}' }],
        reasoning: [{ text: "thoughts of another model" }],
      },
      { role: "tool", content: "Wrote file successfully.", tool_call_id: "call_2" },
      { role: "assistant", content: "Done" },
      { role: "user", content: "next" },
    ]);
  });

  test("keeps a user message's texts and files as parts: images, PDFs, text files, URLs", () => {
    const [message] = toProtocolMessages([
      {
        role: "user",
        content: [
          { type: "text", text: "look" },
          { type: "file", mediaType: "image/png", filename: "p.png", data: PNG },
          { type: "file", mediaType: "application/pdf", filename: "d.pdf", data: "JVBERi0=" },
          { type: "file", mediaType: "text/plain", filename: "a.txt", data: Buffer.from("file body").toString("base64") },
          { type: "file", mediaType: "image/*", data: new URL("data:image/jpeg;base64,/9j/") },
          { type: "file", mediaType: "image/webp", data: new URL("https://example.com/x.webp") },
          { type: "text", text: "at these" },
        ],
      },
    ]);
    assert.deepEqual(message, {
      role: "user",
      content: "look\nat these",
      parts: [
        { type: "text", text: "look" },
        { type: "file", media_type: "image/png", data: "iVBORw==", filename: "p.png" },
        { type: "file", media_type: "application/pdf", data: "JVBERi0=", filename: "d.pdf" },
        { type: "file", media_type: "text/plain", data: "ZmlsZSBib2R5", filename: "a.txt" },
        { type: "file", media_type: "image/jpeg", data: "/9j/" },
        { type: "file", media_type: "image/webp", url: "https://example.com/x.webp" },
        { type: "text", text: "at these" },
      ],
    });
    // Several texts are several parts; one text is a plain message, as always.
    assert.deepEqual(toProtocolMessages([{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }])[0], {
      role: "user",
      content: "a\nb",
      parts: [
        { type: "text", text: "a" },
        { type: "text", text: "b" },
      ],
    });
    assert.deepEqual(toProtocolMessages([user("one")])[0], { role: "user", content: "one" });
  });

  test("carries the reasoning and call metadata the provider attached, and leaves nonoka's notes out", () => {
    const [message] = toProtocolMessages([
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "nonoka: session_branched: the history diverged", providerOptions: { nonoka: { kind: "notice" } } },
          { type: "reasoning", text: "nonoka: session_id_missing_starting_fresh: a note whose metadata the host dropped" },
          { type: "reasoning", text: "Let me think.", providerOptions: { nonoka: { kind: "reasoning", provider_metadata: SEND_BACK } } },
          { type: "reasoning", text: "", providerOptions: { nonoka: { kind: "reasoning", provider_metadata: { openai_compatible: { encrypted: "e" } } } } },
          { type: "text", text: "Reading.", providerOptions: { nonoka: { message_provider_metadata: { openai_compatible: { tag: "m1" } } } } },
          { type: "tool-call", toolCallId: "call_s", toolName: "read", input: { filePath: "a.txt" }, providerOptions: { nonoka: { provider_metadata: SIGNED } } },
          { type: "tool-call", toolCallId: "n1", toolName: "clock", input: {}, providerExecuted: true },
          { type: "tool-result", toolCallId: "n1", toolName: "clock", output: { type: "text", value: "noon" } },
        ],
      },
    ]);
    assert.deepEqual(message, {
      role: "assistant",
      content: "Reading.",
      tool_calls: [{ id: "call_s", name: "read", arguments: '{"filePath":"a.txt"}', provider_metadata: SIGNED }],
      reasoning: [
        { text: "Let me think.", provider_metadata: SEND_BACK },
        { text: "", provider_metadata: { openai_compatible: { encrypted: "e" } } },
      ],
      provider_metadata: { openai_compatible: { tag: "m1" } },
    });
  });

  test("a tool's files go with its result as parts; the openai-compatible fields OpenCode sets are kept", () => {
    const messages = toProtocolMessages([
      { role: "system", content: "sys", providerOptions: { openaiCompatible: { cache_control: { type: "ephemeral" } } } },
      {
        role: "user",
        content: [{ type: "text", text: "hi", providerOptions: { openaiCompatible: { cache_control: { type: "ephemeral" } } } }],
      },
      {
        role: "tool",
        content: [
          {
            type: "tool-result",
            toolCallId: "call_r",
            toolName: "read",
            output: { type: "content", value: [{ type: "text", text: "Image read successfully" }, { type: "image-data", data: "iVBORw==", mediaType: "image/png" }] },
          },
        ],
      },
    ]);
    const ephemeral = { openai_compatible: { cache_control: { type: "ephemeral" } } };
    assert.deepEqual(messages, [
      { role: "system", content: "sys", provider_metadata: ephemeral },
      { role: "user", content: "hi", provider_metadata: ephemeral },
      {
        role: "tool",
        tool_call_id: "call_r",
        content: "Image read successfully",
        parts: [
          { type: "text", text: "Image read successfully" },
          { type: "file", media_type: "image/png", data: "iVBORw==" },
        ],
      },
    ]);
  });

  test("turns every tool output kind into text the way the openai-compatible provider does", () => {
    assert.equal(toolOutputText({ type: "text", value: "t" }), "t");
    assert.equal(toolOutputText({ type: "error-text", value: "boom" }), "boom");
    assert.equal(toolOutputText({ type: "json", value: { a: [1] } }), '{"a":[1]}');
    assert.equal(toolOutputText({ type: "error-json", value: null }), "null");
    assert.equal(toolOutputText({ type: "execution-denied", reason: "user said no" }), "user said no");
    assert.equal(toolOutputText({ type: "execution-denied" }), "Tool call execution denied.");
    assert.deepEqual(
      toolOutputParts({ type: "content", value: [{ type: "text", text: "a" }, { type: "file-data", data: "JVBERi0=", mediaType: "application/pdf", filename: "d.pdf" }] }),
      [
        { type: "text", text: "a" },
        { type: "file", media_type: "application/pdf", data: "JVBERi0=", filename: "d.pdf" },
      ],
    );
  });
});

describe("toCallOptions", () => {
  test("maps the call options as the openai-compatible provider puts them in a body", () => {
    const { options, warnings } = toCallOptions({
      ...chatCall([user("x")]),
      temperature: 0.25,
      topP: 0.75,
      topK: 40,
      stopSequences: ["END"],
      seed: 7,
      frequencyPenalty: 0.1,
      presencePenalty: 0.2,
      responseFormat: { type: "json", schema: { type: "object" }, name: "answer" },
      toolChoice: { type: "tool", toolName: "write" },
      providerOptions: { nonoka: { reasoningEffort: "high", textVerbosity: "low", purpose: "chat", custom_flag: "on" } },
    }, "nonoka", { model: "openai:my-model", streamed: true });
    assert.deepEqual(options, {
      max_tokens: 32000,
      temperature: 0.25,
      top_p: 0.75,
      stop: ["END"],
      seed: 7,
      response_format: { type: "json_schema", json_schema: { schema: { type: "object" }, strict: true, name: "answer" } },
      tool_choice: { type: "function", function: { name: "write" } },
      reasoning_effort: "high",
      extra: { frequency_penalty: 0.1, presence_penalty: 0.2, verbosity: "low", custom_flag: "on" },
    });
    assert.deepEqual(warnings, [{ type: "unsupported", feature: "topK" }]);
  });

  test("an anthropic: model gets top_k and, streamed, every tool's eager_input_streaming, as @ai-sdk/anthropic sends them", () => {
    const call = chatCall([user("x")], { topK: 40 });
    const claude = { model: "anthropic:claude-sonnet-4-5", streamed: true };
    assert.deepEqual(toCallOptions(call, "nonoka", claude), {
      options: { max_tokens: 32000, tool_choice: "auto", top_k: 40, eager_input_streaming: ["write"] },
      warnings: [],
    });
    // No spec: the bridge's configuration decides, and an adapter without them leaves them out.
    assert.deepEqual(toCallOptions(call, "nonoka", { streamed: true }).options?.eager_input_streaming, ["write"]);
    assert.equal(toCallOptions(call, "nonoka", { streamed: true }).options?.top_k, 40);
    // Not streamed (doGenerate): no tool streams unless it says so itself, as there.
    assert.equal(toCallOptions(call, "nonoka", { ...claude, streamed: false }).options?.eager_input_streaming, undefined);
  });

  test("eager_input_streaming: a model's toolStreaming: false, a tool's own option, a model that is not Claude", () => {
    const read = { type: "function" as const, name: "read", inputSchema: { type: "object" } };
    const own = { ...read, name: "edit", providerOptions: { anthropic: { eagerInputStreaming: true } } };
    const off = { ...read, name: "grep", providerOptions: { anthropic: { eagerInputStreaming: false } } };
    const tools = [read, own, off];
    const claude = { model: "anthropic:claude-sonnet-4-5", streamed: true };
    assert.deepEqual(toCallOptions(chatCall([user("x")], { tools }), "nonoka", claude).options?.eager_input_streaming, ["read", "edit"]);
    // toolStreaming is the provider's own setting: it never reaches the body.
    const quiet = toCallOptions(chatCall([user("x")], { tools, providerOptions: { nonoka: { toolStreaming: false } } }), "nonoka", claude).options;
    assert.deepEqual(quiet?.eager_input_streaming, ["edit"]);
    assert.equal(quiet?.extra, undefined);
    // OpenCode turns tool streaming off for a model over Anthropic's API whose id names no Claude.
    const minimax = { model: "anthropic:MiniMax-M2.5", streamed: true };
    assert.deepEqual(toCallOptions(chatCall([user("x")], { tools }), "nonoka", minimax).options?.eager_input_streaming, ["edit"]);
  });

  test("any other model: topK is dropped with a warning and no tool setting is sent, as the openai-compatible provider does", () => {
    const { options, warnings } = toCallOptions(chatCall([user("x")], { topK: 40 }), "nonoka", { model: "openai:gpt-4o", streamed: true });
    assert.deepEqual(options, { max_tokens: 32000, tool_choice: "auto" });
    assert.deepEqual(warnings, [{ type: "unsupported", feature: "topK" }]);
    // Not an integer: Anthropic takes none, so it is dropped with the same warning.
    const half = toCallOptions(chatCall([user("x")], { topK: 2.5 }), "nonoka", { model: "anthropic:claude-sonnet-4-5" });
    assert.equal(half.options?.top_k, undefined);
    assert.deepEqual(half.warnings, [{ type: "unsupported", feature: "topK" }]);
  });

  test("no tools, no tool_choice; a JSON answer without a schema; nothing set, no options", () => {
    const call = { prompt: [user("x")], toolChoice: { type: "auto" as const }, responseFormat: { type: "json" as const } };
    assert.deepEqual(toCallOptions(call).options, { response_format: { type: "json_object" } });
    assert.deepEqual(toCallOptions({ prompt: [user("x")] }), { options: undefined, warnings: [] });
    // A provider registered under another name reads its own options too.
    assert.deepEqual(toCallOptions({ prompt: [user("x")], providerOptions: { mine: { reasoningEffort: "low" } } }, "mine").options, { reasoning_effort: "low" });
  });

  test("a request needs capability parts only when it carries something new", () => {
    assert.equal(needsParts(toProtocolMessages([user("hi")]), undefined), false);
    assert.equal(needsParts(toProtocolMessages([user("hi")]), { max_tokens: 5 }), true);
    assert.equal(needsParts(toProtocolMessages([{ role: "user", content: [{ type: "file", mediaType: "image/png", data: PNG }] }]), undefined), true);
  });
});

test("toHostTools keeps function tools and warns about provider tools", () => {
  const { tools, warnings } = toHostTools([
    { type: "function", name: "read", inputSchema: { type: "object" } },
    { type: "provider", id: "openai.web_search", name: "web_search", args: {} },
  ]);
  assert.deepEqual(tools, [{ name: "read", description: "", parameters: { type: "object" } }]);
  assert.equal(warnings.length, 1);
});

describe("detectPurpose", () => {
  test("recognises OpenCode's title request and its chat request", () => {
    assert.equal(detectPurpose(titleCall('"Create hello.txt please"')), "title");
    assert.equal(detectPurpose(chatCall([user("Generate a title for this conversation: no, a chat with tools")])), "chat");
  });

  test("a tool-less call without the title prompt is chat; an explicit purpose wins", () => {
    assert.equal(detectPurpose({ prompt: [user("hello")] }), "chat");
    assert.equal(detectPurpose({ prompt: [user("hello")], providerOptions: { nonoka: { purpose: "title" } } }), "title");
    assert.equal(detectPurpose({ ...titleCall("x"), providerOptions: { mine: { purpose: "chat" } } }, "mine"), "chat");
  });

  test("recognises OpenCode's compaction request (/compact and auto-compaction)", () => {
    assert.equal(detectPurpose(compactionCall("user: CREATE-FILE notes.txt\nassistant: done")), "compaction");
    // Its user text alone is enough (a host that changes the system prompt), but never with tools.
    const userOnly = compactionCall("x");
    assert.equal(detectPurpose({ ...userOnly, prompt: userOnly.prompt.slice(1) }), "compaction");
    assert.equal(detectPurpose(chatCall([user("Here is the conversation so far: a chat with tools")])), "chat");
    assert.equal(detectPurpose({ prompt: [user("hello")], providerOptions: { nonoka: { purpose: "compaction" } } }), "compaction");
  });
});

describe("hostSessionId", () => {
  test("reads OpenCode's session id from the provider options, then the header", () => {
    const withKey = chatCall([user("hi")], { providerOptions: { nonoka: { promptCacheKey: "ses_abc" } } });
    assert.equal(hostSessionId(withKey), "ses_abc");
    const named = chatCall([user("hi")], { providerOptions: { mine: { promptCacheKey: "ses_x" } } });
    assert.equal(hostSessionId(named, "mine"), "ses_x");
    const header = chatCall([user("hi")], { headers: { "X-Session-Id": "ses_h" } });
    assert.equal(hostSessionId(header), "ses_h");
    assert.equal(hostSessionId(chatCall([user("hi")])), undefined);
  });

  test("is never forwarded to the model as a body field", () => {
    const call = chatCall([user("hi")], { providerOptions: { nonoka: { promptCacheKey: "ses_abc" } } });
    assert.equal(toCallOptions(call).options?.extra?.["promptCacheKey"], undefined);
  });
});

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { detectPurpose, toHostTools, toolOutputText, toProtocolMessages } from "nonoka-opencode-provider";

import { chatCall, compactionCall, titleCall, user } from "./helpers.js";

describe("toProtocolMessages", () => {
  test("maps OpenCode's history after a tool call, as 1.18.33 sends it", () => {
    const messages = toProtocolMessages([
      { role: "system", content: "You are opencode" },
      user('"Create hello.txt please"'),
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "hidden thoughts" },
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
      },
      { role: "tool", content: "Wrote file successfully.", tool_call_id: "call_2" },
      { role: "assistant", content: "Done" },
      { role: "user", content: "next" },
    ]);
  });

  test("joins user text parts, names files, and drops provider-executed calls", () => {
    const messages = toProtocolMessages([
      {
        role: "user",
        content: [
          { type: "text", text: "look" },
          { type: "text", text: "at this" },
          { type: "file", mediaType: "text/plain", filename: "a.txt", data: Buffer.from("file body").toString("base64") },
          { type: "file", mediaType: "image/png", filename: "p.png", data: new Uint8Array([1, 2]) },
        ],
      },
      {
        role: "assistant",
        content: [
          { type: "tool-call", toolCallId: "n1", toolName: "clock", input: {}, providerExecuted: true },
          { type: "tool-result", toolCallId: "n1", toolName: "clock", output: { type: "text", value: "noon" } },
          { type: "text", text: "It is noon." },
        ],
      },
    ]);
    assert.equal(messages[0]?.content, "look\nat this\n[file a.txt (text/plain)]\nfile body\n[file p.png (image/png) omitted: nonoka passes text only]");
    assert.deepEqual(messages[1], { role: "assistant", content: "It is noon." });
  });

  test("turns every tool output kind into text", () => {
    assert.equal(toolOutputText({ type: "text", value: "t" }), "t");
    assert.equal(toolOutputText({ type: "error-text", value: "boom" }), "boom");
    assert.equal(toolOutputText({ type: "json", value: { a: [1] } }), '{"a":[1]}');
    assert.equal(toolOutputText({ type: "error-json", value: null }), "null");
    assert.equal(toolOutputText({ type: "execution-denied", reason: "user said no" }), "Tool execution denied: user said no");
    assert.equal(toolOutputText({ type: "execution-denied" }), "Tool execution denied.");
    assert.equal(
      toolOutputText({ type: "content", value: [{ type: "text", text: "a" }, { type: "image-data", data: "", mediaType: "image/png" }] }),
      "a\n[image-data omitted: nonoka passes text only]",
    );
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

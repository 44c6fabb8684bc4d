import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, test } from "node:test";

import { conversationKey, decodeEvent, encodeRequest, EventDecodeError, isContinuation, type ProtocolMessage } from "nonoka-opencode-provider";

import { HAVE_PYTHON, PYTHON } from "./helpers.js";

const u = (content: string): ProtocolMessage => ({ role: "user", content });

describe("conversationKey", () => {
  test("is the SHA-256 hex of the first user message, exactly as sent", () => {
    // The value docs/protocol.md shows for "Say hi".
    assert.equal(
      conversationKey([{ role: "system", content: "sys" }, u("Say hi"), u("later")]),
      "71d5b298ee9f050ce4ae9a5ec072511edf42011b2b0ea56c0afda41980fd4194",
    );
    assert.notEqual(conversationKey([u("Say hi ")]), conversationKey([u("Say hi")]));
  });

  test("is absent without a user message or for blank text", () => {
    assert.equal(conversationKey([{ role: "system", content: "x" }]), undefined);
    assert.equal(conversationKey([u("")]), undefined);
    assert.equal(conversationKey([u(" \n\t\u3000\x1f")]), undefined);
    assert.equal(conversationKey([u(""), u("second")]), undefined);
  });

  test("matches the Python twin byte for byte", { skip: HAVE_PYTHON ? false : `no venv Python at ${PYTHON}` }, () => {
    const texts = ["hello", "héllo wörld ✓ 日本語 🎉", '"Create hello.txt please"', "a\u2028b\r\n", "lone \ud800 surrogate", "\ufeffbom", "\x1c\x1d"];
    const script =
      "import json,sys\nfrom nonoka.protocol.frames import conversation_key\n" +
      "texts=json.loads(sys.stdin.read())\nprint(json.dumps([conversation_key([{'role':'user','content':t}]) for t in texts]))";
    const out = execFileSync(PYTHON, ["-c", script], { input: JSON.stringify(texts), encoding: "utf8" });
    const expected = JSON.parse(out) as Array<string | null>;
    assert.deepEqual(
      texts.map((t) => conversationKey([u(t)]) ?? null),
      expected,
    );
  });
});

test("isContinuation looks for an assistant or tool message", () => {
  assert.equal(isContinuation([u("a"), u("b")]), false);
  assert.equal(isContinuation([u("a"), { role: "assistant", content: "" }]), true);
  assert.equal(isContinuation([{ role: "tool", content: "r", tool_call_id: "c" }]), true);
});

test("encodeRequest writes one line, escaping the characters line splitters break on", () => {
  const line = encodeRequest({ type: "cancel", request_id: "a\u2028b\u2029c\u0085d\ne" });
  assert.equal(line.endsWith("\n"), true);
  assert.equal(line.slice(0, -1).includes("\n"), false);
  assert.match(line, /\\u2028/);
  assert.match(line, /\\u2029/);
  assert.match(line, /\\u0085/);
  assert.deepEqual(JSON.parse(line), { type: "cancel", request_id: "a\u2028b\u2029c\u0085d\ne" });
});

describe("decodeEvent", () => {
  test("reads known events and ignores unknown fields", () => {
    const event = decodeEvent('{"type":"text_delta","request_id":"r","text":"hi","extra":1}');
    assert.equal(event.type, "text_delta");
  });

  test("tells unknown event types apart from broken lines", () => {
    const code = (line: string): string => {
      try {
        decodeEvent(line);
      } catch (error) {
        assert.ok(error instanceof EventDecodeError);
        return error.code;
      }
      return "ok";
    };
    assert.equal(code('{"type":"from_the_future"}'), "unknown_event_type");
    assert.equal(code("not json"), "invalid_json");
    assert.equal(code("[1]"), "invalid_event");
    assert.equal(code('{"type":"session_init","session_id":5,"recovered":false}'), "invalid_event");
    assert.equal(code('{"type":"finish","finish_reason":"stop"}'), "invalid_event");
    assert.equal(code('\ufeff{"type":"text_delta","text":""}'), "ok");
  });
});

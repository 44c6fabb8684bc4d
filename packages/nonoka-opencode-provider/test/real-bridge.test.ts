// The provider against the real `nonoka bridge` (the project's venv Python) and a scripted
// OpenAI-compatible server: one process per call, the session carried across providers (as
// across `opencode run` processes) by the id file, and recovered by conversation key without it.
import type { LanguageModelV3Prompt } from "@ai-sdk/provider";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { createNonoka, idFilePath, readSessionId } from "nonoka-opencode-provider";

import { chatCall, collect, HAVE_PYTHON, ofType, PYTHON, tempDir, user } from "./helpers.js";

const skip = HAVE_PYTHON ? false : `no venv Python at ${PYTHON}; run pip install -e . first`;
let tmp: { dir: string; done: () => void };
let server: ChildProcess | undefined;
let baseUrl = "";

before(async () => {
  if (skip) return;
  tmp = tempDir("nonoka-real-bridge-");
  const script = [
    { tool_calls: [{ id: "call_w", name: "write", arguments: { filePath: "a.txt", content: "x" } }] },
    { text: "I wrote a.txt." },
    { text: "Still here." },
  ];
  writeFileSync(path.join(tmp.dir, "script.json"), JSON.stringify(script));
  const portFile = path.join(tmp.dir, "port");
  server = spawn(
    PYTHON,
    ["-m", "nonoka.testing.server", "--script", "script.json", "--port-file", portFile, "--log", "server.jsonl"],
    { cwd: tmp.dir, stdio: ["ignore", "ignore", "inherit"] },
  );
  for (let i = 0; i < 200 && !existsSync(portFile); i++) await sleep(50);
  baseUrl = `http://127.0.0.1:${readFileSync(portFile, "utf8").trim()}/v1`;
});

after(() => {
  server?.kill("SIGTERM");
  tmp?.done();
});

function provider(): ReturnType<typeof createNonoka> {
  return createNonoka({
    command: [PYTHON, "-m", "nonoka", "bridge"],
    cwd: path.join(tmp.dir),
    env: { NONOKA_MODEL: "openai:test-model", OPENAI_API_KEY: "sk-test", OPENAI_BASE_URL: baseUrl, NONOKA_DATABASE_URL: "" },
  });
}

test("a tool round trip, a restored session and a recovered one", { skip, timeout: 120_000 }, async () => {
  const first: LanguageModelV3Prompt = [user("please write a.txt")];
  const one = await collect((await provider().languageModel().doStream(chatCall(first))).stream);
  const call = ofType(one, "tool-call")[0];
  assert.equal(call?.toolName, "write");
  assert.deepEqual(JSON.parse(call?.input ?? ""), { filePath: "a.txt", content: "x" });
  assert.equal(ofType(one, "finish")[0]?.finishReason.unified, "tool-calls");
  const sessionId = readSessionId(idFilePath(tmp.dir));
  assert.ok(sessionId);

  // The host ran the tool; a new provider (a new host process) sends the result.
  const second: LanguageModelV3Prompt = [
    ...first,
    { role: "assistant", content: [{ type: "tool-call", toolCallId: "call_w", toolName: "write", input: { filePath: "a.txt", content: "x" } }] },
    { role: "tool", content: [{ type: "tool-result", toolCallId: "call_w", toolName: "write", output: { type: "text", value: "Wrote file successfully." } }] },
  ];
  const two = await collect((await provider().languageModel().doStream(chatCall(second))).stream);
  assert.equal(ofType(two, "text-delta").map((p) => p.delta).join(""), "I wrote a.txt.");
  const meta2 = ofType(two, "finish")[0]?.providerMetadata?.["nonoka"];
  assert.equal(meta2?.["sessionId"], sessionId);
  assert.equal(meta2?.["recovered"], false);

  // The id file is lost: the bridge finds the session by conversation key.
  rmSync(idFilePath(tmp.dir));
  const third: LanguageModelV3Prompt = [...second, { role: "assistant", content: [{ type: "text", text: "I wrote a.txt." }] }, user("still there?")];
  const three = await collect((await provider().languageModel().doStream(chatCall(third))).stream);
  assert.equal(ofType(three, "text-delta").map((p) => p.delta).join(""), "Still here.");
  const meta3 = ofType(three, "finish")[0]?.providerMetadata?.["nonoka"];
  assert.equal(meta3?.["sessionId"], sessionId);
  assert.equal(meta3?.["recovered"], true);
  assert.equal(meta3?.["recoveryReason"], "session_id_missing");
  assert.equal(readSessionId(idFilePath(tmp.dir)), sessionId);
});

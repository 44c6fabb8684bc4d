// Warm bridges with the real `nonoka bridge` (the project's venv Python) and a scripted
// OpenAI-compatible server: one process serves the steps of a host session; killing it
// between steps loses nothing, and the next step starts a new one in the same session.
import type { LanguageModelV3CallOptions, LanguageModelV3Prompt } from "@ai-sdk/provider";
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";

import { createNonoka } from "nonoka-opencode-provider";

import { chatCall, collect, HAVE_PYTHON, ofType, PYTHON, tempDir, user } from "./helpers.js";

const skip = HAVE_PYTHON ? false : `no venv Python at ${PYTHON}; run pip install -e . first`;
let tmp: { dir: string; done: () => void };
let server: ChildProcess | undefined;
let baseUrl = "";

before(async () => {
  if (skip) return;
  tmp = tempDir("nonoka-real-warm-");
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

const env = (): Record<string, string> => ({
  NONOKA_MODEL: "openai:test-model",
  OPENAI_API_KEY: "sk-test",
  OPENAI_BASE_URL: baseUrl,
  NONOKA_DATABASE_URL: "",
});

function call(prompt: LanguageModelV3Prompt): LanguageModelV3CallOptions {
  return chatCall(prompt, { providerOptions: { nonoka: { promptCacheKey: "ses_warm" } } });
}

/** `promise`, with the event loop held open (an idle warm bridge does not hold it). */
async function held<T>(promise: Promise<T>): Promise<T> {
  const keep = setInterval(() => {}, 1000);
  try {
    return await promise;
  } finally {
    clearInterval(keep);
  }
}

test("one warm bridge serves a host session's steps; a SIGKILL between steps loses nothing", { skip, timeout: 120_000 }, async () => {
  const provider = createNonoka({ command: [PYTHON, "-m", "nonoka", "bridge"], cwd: tmp.dir, env: env() });
  try {
    const first: LanguageModelV3Prompt = [user("please write a.txt")];
    const one = await collect((await provider.languageModel().doStream(call(first))).stream);
    assert.equal(ofType(one, "tool-call")[0]?.toolName, "write");
    const sessionId = ofType(one, "finish")[0]?.providerMetadata?.["nonoka"]?.["sessionId"];
    const [warm] = provider.bridges?.pids() ?? [];
    assert.ok(warm !== undefined);

    const second: LanguageModelV3Prompt = [
      ...first,
      { role: "assistant", content: [{ type: "tool-call", toolCallId: "call_w", toolName: "write", input: { filePath: "a.txt", content: "x" } }] },
      { role: "tool", content: [{ type: "tool-result", toolCallId: "call_w", toolName: "write", output: { type: "text", value: "Wrote file successfully." } }] },
    ];
    const two = await collect((await provider.languageModel().doStream(call(second))).stream);
    assert.equal(ofType(two, "text-delta").map((p) => p.delta).join(""), "I wrote a.txt.");
    assert.deepEqual(provider.bridges?.pids(), [warm], "the same process served the second step");

    // Killed while it waits (it may still be writing what comes after `finish`).
    const retired = once(provider.bridges!.events, "retired");
    process.kill(warm, "SIGKILL");
    assert.deepEqual(await held(retired), [warm, "exited"]);

    const third: LanguageModelV3Prompt = [...second, { role: "assistant", content: [{ type: "text", text: "I wrote a.txt." }] }, user("still there?")];
    const three = await collect((await provider.languageModel().doStream(call(third))).stream);
    assert.equal(ofType(three, "text-delta").map((p) => p.delta).join(""), "Still here.");
    const meta = ofType(three, "finish")[0]?.providerMetadata?.["nonoka"];
    assert.equal(meta?.["sessionId"], sessionId);
    assert.equal(meta?.["recovered"], false);
    const [fresh] = provider.bridges?.pids() ?? [];
    assert.ok(fresh !== undefined && fresh !== warm);

    // Every entry is stored, and the timeline names the two processes that served the steps.
    const { stdout } = await promisify(execFile)(
      PYTHON,
      ["-m", "nonoka", "sessions", "show", String(sessionId), "--json", "--entries", "--limit", "500"],
      { cwd: tmp.dir, env: { ...process.env, ...env() } },
    );
    const shown = JSON.parse(stdout) as { entries: Array<{ role: string }>; events: Array<{ kind: string; data: { process?: string } }> };
    assert.deepEqual(
      shown.entries.map((e) => e.role).filter((role) => role !== "system"),
      ["user", "assistant", "tool", "assistant", "user", "assistant"],
    );
    const processes = new Set(shown.events.filter((e) => e.kind === "request").map((e) => e.data.process?.split(":")[1]));
    assert.deepEqual([...processes].sort(), [String(warm), String(fresh)].sort());
  } finally {
    await provider.bridges?.close();
  }
});

// Warm bridges: the bridge that served a step waits for the next step of the same host
// session, and anything that ends it (a kill, a crash, the idle timeout) loses nothing.
import type { LanguageModelV3CallOptions } from "@ai-sdk/provider";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import * as path from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";

import type { NonokaProvider } from "nonoka-opencode-provider";

import { chatCall, collect, FAKE_BRIDGE, fakeProvider, ofType, PACKAGE_DIR, sentFrames, served, servedBy, tempDir, user } from "./helpers.js";

let tmp: { dir: string; done: () => void };
const providers: NonokaProvider[] = [];
beforeEach(() => {
  tmp = tempDir();
});
afterEach(async () => {
  await Promise.all(providers.splice(0).map((p) => p.bridges?.close()));
  tmp.done();
});

function provider(mode: string, extra: Parameters<typeof fakeProvider>[2] = {}): NonokaProvider {
  const made = fakeProvider(mode, tmp.dir, extra);
  providers.push(made);
  return made;
}

/** OpenCode's chat call in its session `host` (it names its session in the provider options). */
function step(host: string, text: string): LanguageModelV3CallOptions {
  return chatCall([user(text)], { providerOptions: { nonoka: { promptCacheKey: host } } });
}

async function answer(p: NonokaProvider, call: LanguageModelV3CallOptions): Promise<string> {
  const parts = await collect((await p.languageModel().doStream(call)).stream);
  const error = ofType(parts, "error")[0];
  assert.equal(error, undefined, String(error?.error));
  return ofType(parts, "text-delta").map((part) => part.delta).join("");
}

/**
 * `promise`, with the event loop held open until it settles: a warm bridge does not hold it
 * (a host that is done may exit while one waits), so a test waiting only on one would end.
 */
async function held<T>(promise: Promise<T>): Promise<T> {
  const keep = setInterval(() => {}, 1000);
  try {
    return await promise;
  } finally {
    clearInterval(keep);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("warm bridges", () => {
  test("the bridge that served a step serves the next step of the same host session", async () => {
    const p = provider("text");
    assert.equal(await answer(p, step("ses_a", "one")), "Hello");
    const [warm] = p.bridges?.pids() ?? [];
    assert.ok(warm !== undefined && alive(warm), "the bridge waits for the next step");
    assert.equal(await answer(p, step("ses_a", "two")), "Hello");
    assert.equal(await answer(p, step("ses_a", "three")), "Hello");
    assert.deepEqual(servedBy(tmp.dir), [warm, warm, warm]);
    assert.deepEqual(p.bridges?.pids(), [warm]);
    // Each step is its own request on the same stdin.
    const ids = sentFrames(tmp.dir).map((f) => f["request_id"]);
    assert.equal(new Set(ids).size, 3);
  });

  test("a warm bridge killed while it waits: the next step starts a new one and succeeds", async () => {
    const p = provider("text");
    await answer(p, step("ses_a", "one"));
    const [warm] = p.bridges?.pids() ?? [];
    assert.ok(warm !== undefined);
    const retired = once(p.bridges!.events, "retired");
    process.kill(warm, "SIGKILL");
    assert.deepEqual(await held(retired), [warm, "exited"]);
    assert.deepEqual(p.bridges?.pids(), []);
    assert.equal(await answer(p, step("ses_a", "two")), "Hello");
    const served = servedBy(tmp.dir);
    assert.equal(served.length, 2);
    assert.notEqual(served[1], warm);
  });

  test("a warm bridge that ends before acknowledging the step: the step goes to a new bridge", async () => {
    // The fake bridge in mode `once` exits on its second request without a word, as a warm
    // bridge killed just as the step was written to it would.
    const p = provider("once");
    await answer(p, step("ses_a", "one"));
    const [warm] = p.bridges?.pids() ?? [];
    assert.equal(await answer(p, step("ses_a", "two")), "Hello");
    const served = servedBy(tmp.dir);
    assert.equal(served.length, 2);
    assert.equal(served[0], warm);
    assert.notEqual(served[1], warm);
    // The same request went to both: the dead bridge read it, the new one answered it.
    const chats = sentFrames(tmp.dir).filter((f) => f["type"] === "chat");
    assert.equal(chats.length, 3);
    assert.equal(chats[1]?.["request_id"], chats[2]?.["request_id"]);
  });

  test("a warm bridge exits after the idle timeout", async () => {
    const p = provider("text", { warmIdleMs: 50 });
    const exited = once(p.bridges!.events, "exit");
    await answer(p, step("ses_a", "one"));
    const [warm] = servedBy(tmp.dir);
    assert.deepEqual(await held(exited), [warm]);
    assert.equal(alive(warm!), false);
    assert.deepEqual(p.bridges?.pids(), []);
  });

  test("with warm off, every step starts its own bridge, which exits when the step ends", async () => {
    const p = provider("text", { warm: false });
    assert.equal(p.bridges, undefined);
    await answer(p, step("ses_a", "one"));
    await answer(p, step("ses_a", "two"));
    const served = servedBy(tmp.dir);
    assert.equal(served.length, 2);
    assert.notEqual(served[0], served[1]);
    assert.equal(served.some(alive), false);
  });

  test("host sessions keep their own bridges; steps at the same time get a bridge each", async () => {
    const p = provider("text");
    await Promise.all([answer(p, step("ses_a", "a1")), answer(p, step("ses_b", "b1"))]);
    const first = servedBy(tmp.dir);
    assert.equal(new Set(first).size, 2);
    assert.equal(p.bridges?.pids().length, 2);
    const byText = (text: string): number | undefined => {
      const id = sentFrames(tmp.dir).find((f) => JSON.stringify(f["messages"]).includes(text))?.["request_id"];
      return served(tmp.dir).find(([, request]) => request === id)?.[0];
    };
    const a = byText("a1");
    const b = byText("b1");
    assert.ok(a !== undefined && b !== undefined && a !== b);
    await answer(p, step("ses_b", "b2"));
    await answer(p, step("ses_a", "a2"));
    assert.equal(byText("b2"), b);
    assert.equal(byText("a2"), a);
  });

  test("a cancelled step's bridge is not kept", async () => {
    const p = provider("hang");
    const abort = new AbortController();
    const { stream } = await p.languageModel().doStream({ ...step("ses_a", "go"), abortSignal: abort.signal });
    const reader = stream.getReader();
    while ((await reader.read()).value?.type !== "text-delta") {
      // running
    }
    abort.abort();
    await assert.rejects(async () => {
      for (;;) if ((await reader.read()).done) return;
    });
    assert.deepEqual(p.bridges?.pids(), []);
    assert.equal(servedBy(tmp.dir).some(alive), false);
  });

  test("a host with a warm bridge waiting exits on its own, and the bridge with it", async () => {
    // A separate node process: one step, then nothing keeps it alive (no close call).
    const script = [
      `import { createNonoka } from ${JSON.stringify(pathToFileURL(path.join(PACKAGE_DIR, "dist", "index.js")).href)};`,
      `const p = createNonoka({ command: [process.execPath, ${JSON.stringify(FAKE_BRIDGE)}, "text"], cwd: ${JSON.stringify(tmp.dir)},`,
      `  env: { FAKE_BRIDGE_PIDS: ${JSON.stringify(path.join(tmp.dir, "pids.txt"))} } });`,
      `const { stream } = await p.languageModel().doStream({ prompt: [{ role: "user", content: [{ type: "text", text: "hi" }] }] });`,
      `for (const reader = stream.getReader(); !(await reader.read()).done;) {}`,
      `process.stdout.write(String(p.bridges.pids()[0]));`,
    ].join("\n");
    const host = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    host.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    const [code] = (await held(once(host, "exit"))) as [number | null];
    assert.equal(code, 0);
    const warm = Number(out);
    assert.ok(warm > 0, out);
    assert.deepEqual(servedBy(tmp.dir), [warm]);
    // The bridge reads end of input when the host is gone (it is not our child: watch its pid).
    await held((async () => {
      while (alive(warm)) await sleep(20);
    })());
  });
});

// Shared test helpers. Tests import the package by its own name, so they run against the
// compiled `dist/` exactly as OpenCode loads it.
import type { LanguageModelV3CallOptions, LanguageModelV3Prompt, LanguageModelV3StreamPart } from "@ai-sdk/provider";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

import { createNonoka, type NonokaProvider, type NonokaProviderSettings } from "nonoka-opencode-provider";

/** The package folder (tests run from build-test/test/). */
export const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
export const FAKE_BRIDGE = path.join(PACKAGE_DIR, "test", "fixtures", "fake-bridge.mjs");
/** The project's venv Python, for the tests that run the real bridge. */
export const PYTHON = process.env["NONOKA_PYTHON"] ?? path.resolve(PACKAGE_DIR, "..", "..", ".venv", "bin", "python");
export const HAVE_PYTHON = existsSync(PYTHON);

/** A fresh directory that is removed when `done` is called. */
export function tempDir(prefix = "nonoka-provider-"): { dir: string; done: () => void } {
  const dir = realpathSync(mkdtempSync(path.join(tmpdir(), prefix)));
  return { dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A provider whose bridge is the fake one in `mode`, logging what it reads to `<cwd>/requests.jsonl`. */
export function fakeProvider(mode: string, cwd: string, extra: NonokaProviderSettings = {}): NonokaProvider {
  return createNonoka({
    command: [process.execPath, FAKE_BRIDGE, mode],
    cwd,
    cancelGraceMs: 300,
    env: { FAKE_BRIDGE_LOG: path.join(cwd, "requests.jsonl"), FAKE_BRIDGE_PIDS: path.join(cwd, "pids.txt") },
    ...extra,
  });
}

/** The pid of the fake bridge process that took each request, in order. */
export function servedBy(cwd: string): number[] {
  return served(cwd).map(([pid]) => pid);
}

/** Which fake bridge process took each request: [pid, request_id], in order. */
export function served(cwd: string): Array<[number, string]> {
  const file = path.join(cwd, "pids.txt");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const [pid, id] = line.split(" ");
      return [Number(pid), id ?? ""];
    });
}

/** Every line the fake bridge read, parsed. */
export function sentFrames(cwd: string): Array<Record<string, unknown>> {
  const file = path.join(cwd, "requests.jsonl");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

export async function collect(stream: ReadableStream<LanguageModelV3StreamPart>): Promise<LanguageModelV3StreamPart[]> {
  const parts: LanguageModelV3StreamPart[] = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return parts;
    parts.push(value);
  }
}

export function user(text: string): LanguageModelV3Prompt[number] {
  return { role: "user", content: [{ type: "text", text }] };
}

export function assistantText(text: string): LanguageModelV3Prompt[number] {
  return { role: "assistant", content: [{ type: "text", text }] };
}

/** OpenCode's chat call: its system prompt, the history, and (some of) its tools. */
export function chatCall(prompt: LanguageModelV3Prompt, extra: Partial<LanguageModelV3CallOptions> = {}): LanguageModelV3CallOptions {
  return {
    prompt: [{ role: "system", content: "You are opencode, an interactive CLI tool." }, ...prompt],
    tools: [
      {
        type: "function",
        name: "write",
        description: "Write a file",
        inputSchema: { type: "object", properties: { filePath: { type: "string" }, content: { type: "string" } } },
      },
    ],
    toolChoice: { type: "auto" },
    maxOutputTokens: 32000,
    ...extra,
  };
}

/** OpenCode's title call, exactly as 1.18.33 sends it (system prompt abridged). */
export function titleCall(userText: string): LanguageModelV3CallOptions {
  return {
    prompt: [
      { role: "system", content: "You are a title generator. You output ONLY a thread title. Nothing else.\n\n<task>..." },
      user("Generate a title for this conversation:\n"),
      user(userText),
    ],
    maxOutputTokens: 32000,
  };
}

/** OpenCode's compaction call (/compact, or automatic near the context limit), as 1.18.33 sends it (abridged). */
export function compactionCall(conversation: string): LanguageModelV3CallOptions {
  return {
    prompt: [
      {
        role: "system",
        content: "You are a context summarization agent. You are given a conversation between a user and an agent. Your goal is to produce a structured summary...",
      },
      user(`Here is the conversation so far:\n<conversation>\n${conversation}\n</conversation>\nCreate a new anchored summary from the conversation history in the <conversation> tags above so another coding agent can continue the work.`),
    ],
    maxOutputTokens: 32000,
  };
}

export function ofType<T extends LanguageModelV3StreamPart["type"]>(
  parts: LanguageModelV3StreamPart[],
  type: T,
): Array<Extract<LanguageModelV3StreamPart, { type: T }>> {
  return parts.filter((p): p is Extract<LanguageModelV3StreamPart, { type: T }> => p.type === type);
}

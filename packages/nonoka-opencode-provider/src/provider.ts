/**
 * `createNonoka`: the AI SDK provider (spec v3) that OpenCode loads.
 *
 * OpenCode imports the package named by `"npm": "file:/abs/path"` in `opencode.json`, calls
 * the export whose name starts with `create` with `{name, ...options, headers}`, then
 * `languageModel(id)`. Keep `createNonoka` the module's only `create…` export.
 */

import type { EmbeddingModelV3, ImageModelV3, LanguageModelV3, ProviderV3 } from "@ai-sdk/provider";
import * as path from "node:path";

import { DEFAULT_MAX_FRAME_BYTES, type RequestLimits } from "./protocol.js";
import { NonokaLanguageModel, type ModelConfig } from "./model.js";
import { BridgePool } from "./pool.js";
import { SessionTracker } from "./session.js";

/** Options: in OpenCode, the `options` object of the provider block in `opencode.json`. */
export interface NonokaProviderSettings {
  /** The provider id the host knows it by (OpenCode passes it); default `nonoka`. */
  name?: string;
  /**
   * How to run the bridge: an argv array (no shell), or a string split on whitespace.
   * Default `["nonoka", "bridge"]`; `nonoka opencode init` writes the current Python's, e.g.
   * `["/project/.venv/bin/python", "-m", "nonoka", "bridge"]`.
   */
  command?: string | string[];
  /** The workspace (its `.nonoka/` holds the database and the id file); default: the host's cwd. */
  cwd?: string;
  /** The nonoka model spec for model id `default`, e.g. `openai:gpt-4o-mini`; default: nonoka's configuration. */
  model?: string;
  /** Variables added to the inherited environment of each bridge. */
  env?: Record<string, string>;
  /** Runtime limits sent with every request. */
  limits?: RequestLimits;
  /** Bound on one call, in milliseconds; 0 for none. Default 600000. */
  timeoutMs?: number;
  /** How long a stopping bridge gets at each step (cancel line, SIGTERM) before the next. Default 5000. */
  cancelGraceMs?: number;
  /** Capabilities the bridge must have, or it refuses the request. */
  requiredCapabilities?: string[];
  maxFrameBytes?: number;
  /**
   * Keep a step's bridge running for the next step of the same host session (default
   * `true`); `false` starts a fresh bridge for every step.
   */
  warm?: boolean;
  /** How long a warm bridge waits for the next step before it exits, in milliseconds. Default 120000. */
  warmIdleMs?: number;
  /** Log what the provider does (warnings, recoveries) to stderr; or a function that takes each line. */
  debug?: boolean | ((message: string) => void);
  /** Anything else the host passes (OpenCode adds `headers`, `fetch`...) is ignored. */
  [other: string]: unknown;
}

export interface NonokaProvider extends ProviderV3 {
  (modelId?: string): LanguageModelV3;
  languageModel(modelId?: string): LanguageModelV3;
  /** The tracker of a workspace: which chat session the next call continues. */
  sessions(cwd?: string): SessionTracker;
  /** The warm bridges waiting for a step (`undefined` with the option `warm: false`). */
  readonly bridges: BridgePool | undefined;
}

export const DEFAULT_COMMAND: readonly string[] = ["nonoka", "bridge"];
export const DEFAULT_TIMEOUT_MS = 600_000;
export const DEFAULT_CANCEL_GRACE_MS = 5_000;
export const DEFAULT_WARM_IDLE_MS = 120_000;
/** Most warm bridges one provider keeps waiting at once (one per host session). */
export const MAX_WARM_BRIDGES = 4;

/** The model ids that mean "whatever the provider options (or nonoka's configuration) say". */
const DEFAULT_MODEL_IDS = new Set(["", "default", "nonoka"]);

export function createNonoka(settings: NonokaProviderSettings = {}): NonokaProvider {
  const providerName = typeof settings.name === "string" && settings.name !== "" ? settings.name : "nonoka";
  const command = parseCommand(settings.command);
  const log = makeLogger(settings.debug);
  const trackers = new Map<string, SessionTracker>();
  const tracker = (cwd: string): SessionTracker => {
    let found = trackers.get(cwd);
    if (found === undefined) {
      found = new SessionTracker(cwd, log);
      trackers.set(cwd, found);
    }
    return found;
  };
  if (settings.warm !== undefined && typeof settings.warm !== "boolean") {
    throw new Error(`nonoka provider option "warm" must be true or false, got ${JSON.stringify(settings.warm)}`);
  }
  const idleMs = nonNegative(settings.warmIdleMs, DEFAULT_WARM_IDLE_MS, "warmIdleMs");
  const pool = settings.warm === false || idleMs === 0 ? undefined : new BridgePool(idleMs, MAX_WARM_BRIDGES, log);
  const cwd = (): string => path.resolve(typeof settings.cwd === "string" && settings.cwd !== "" ? settings.cwd : process.cwd());
  const base: Omit<ModelConfig, "model"> = {
    providerName,
    command,
    cwd,
    env: stringRecord(settings.env, "env"),
    limits: settings.limits,
    timeoutMs: nonNegative(settings.timeoutMs, DEFAULT_TIMEOUT_MS, "timeoutMs"),
    cancelGraceMs: nonNegative(settings.cancelGraceMs, DEFAULT_CANCEL_GRACE_MS, "cancelGraceMs"),
    requiredCapabilities: Array.isArray(settings.requiredCapabilities) ? settings.requiredCapabilities.map(String) : [],
    maxFrameBytes: nonNegative(settings.maxFrameBytes, DEFAULT_MAX_FRAME_BYTES, "maxFrameBytes") || DEFAULT_MAX_FRAME_BYTES,
    log,
    tracker,
    pool,
  };

  const languageModel = (modelId = "default"): LanguageModelV3 => {
    // `default` runs the configured model; any other id is itself a nonoka model spec.
    const model = DEFAULT_MODEL_IDS.has(modelId) ? (typeof settings.model === "string" && settings.model !== "" ? settings.model : undefined) : modelId;
    return new NonokaLanguageModel(modelId, { ...base, model });
  };
  const noSuchModel = (kind: string, modelId: string): never => {
    const error = new Error(`nonoka has no ${kind} models (asked for ${JSON.stringify(modelId)})`);
    error.name = "AI_NoSuchModelError";
    throw error;
  };
  const provider = ((modelId?: string) => languageModel(modelId)) as NonokaProvider;
  Object.assign(provider, {
    specificationVersion: "v3" as const,
    languageModel,
    embeddingModel: (modelId: string): EmbeddingModelV3 => noSuchModel("embedding", modelId),
    imageModel: (modelId: string): ImageModelV3 => noSuchModel("image", modelId),
    sessions: (dir?: string) => tracker(dir === undefined ? cwd() : path.resolve(dir)),
    bridges: pool,
  });
  return provider;
}

function parseCommand(value: unknown): string[] {
  if (value === undefined || value === null || value === "") return [...DEFAULT_COMMAND];
  const argv = typeof value === "string" ? value.trim().split(/\s+/) : value;
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string") || argv[0] === "") {
    throw new Error(`nonoka provider option "command" must be a non-empty array of strings (or a string), got ${JSON.stringify(value)}`);
  }
  return argv as string[];
}

function stringRecord(value: unknown, name: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new Error(`nonoka provider option "${name}" must be an object of strings`);
  }
  return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, String(v)]));
}

function nonNegative(value: unknown, fallback: number, name: string): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new Error(`nonoka provider option "${name}" must be a number >= 0, got ${JSON.stringify(value)}`);
  }
  return value;
}

function makeLogger(debug: NonokaProviderSettings["debug"]): (message: string) => void {
  if (typeof debug === "function") return debug;
  // Off by default: the host's terminal UI owns stderr. NONOKA_PROVIDER_DEBUG=1 turns it on.
  if (debug === true || process.env["NONOKA_PROVIDER_DEBUG"] === "1") {
    return (message) => process.stderr.write(`[nonoka provider] ${message}\n`);
  }
  return () => {};
}

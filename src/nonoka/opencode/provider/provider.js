/**
 * `createNonoka`: the AI SDK provider (spec v3) that OpenCode loads.
 *
 * OpenCode imports the package named by `"npm": "file:/abs/path"` in `opencode.json`, calls
 * the export whose name starts with `create` with `{name, ...options, headers}`, then
 * `languageModel(id)`. Keep `createNonoka` the module's only `create…` export.
 */
import * as path from "node:path";
import { DEFAULT_MAX_FRAME_BYTES } from "./protocol.js";
import { NonokaLanguageModel } from "./model.js";
import { BridgePool } from "./pool.js";
import { SessionTracker } from "./session.js";
export const DEFAULT_COMMAND = ["nonoka", "bridge"];
export const DEFAULT_TIMEOUT_MS = 600_000;
export const DEFAULT_CANCEL_GRACE_MS = 5_000;
export const DEFAULT_WARM_IDLE_MS = 120_000;
/** Most warm bridges one provider keeps waiting at once (one per host session). */
export const MAX_WARM_BRIDGES = 4;
/** The model ids that mean "whatever the provider options (or nonoka's configuration) say". */
const DEFAULT_MODEL_IDS = new Set(["", "default", "nonoka"]);
export function createNonoka(settings = {}) {
    const providerName = typeof settings.name === "string" && settings.name !== "" ? settings.name : "nonoka";
    const command = parseCommand(settings.command);
    const log = makeLogger(settings.debug);
    const trackers = new Map();
    const tracker = (cwd) => {
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
    const cwd = () => path.resolve(typeof settings.cwd === "string" && settings.cwd !== "" ? settings.cwd : process.cwd());
    const base = {
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
    const languageModel = (modelId = "default") => {
        // `default` runs the configured model; any other id is itself a nonoka model spec.
        const model = DEFAULT_MODEL_IDS.has(modelId) ? (typeof settings.model === "string" && settings.model !== "" ? settings.model : undefined) : modelId;
        return new NonokaLanguageModel(modelId, { ...base, model });
    };
    const noSuchModel = (kind, modelId) => {
        const error = new Error(`nonoka has no ${kind} models (asked for ${JSON.stringify(modelId)})`);
        error.name = "AI_NoSuchModelError";
        throw error;
    };
    const provider = ((modelId) => languageModel(modelId));
    Object.assign(provider, {
        specificationVersion: "v3",
        languageModel,
        embeddingModel: (modelId) => noSuchModel("embedding", modelId),
        imageModel: (modelId) => noSuchModel("image", modelId),
        sessions: (dir) => tracker(dir === undefined ? cwd() : path.resolve(dir)),
        bridges: pool,
    });
    return provider;
}
function parseCommand(value) {
    if (value === undefined || value === null || value === "")
        return [...DEFAULT_COMMAND];
    const argv = typeof value === "string" ? value.trim().split(/\s+/) : value;
    if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string") || argv[0] === "") {
        throw new Error(`nonoka provider option "command" must be a non-empty array of strings (or a string), got ${JSON.stringify(value)}`);
    }
    return argv;
}
function stringRecord(value, name) {
    if (value === undefined || value === null)
        return {};
    if (typeof value !== "object" || Array.isArray(value)) {
        throw new Error(`nonoka provider option "${name}" must be an object of strings`);
    }
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, String(v)]));
}
function nonNegative(value, fallback, name) {
    if (value === undefined || value === null)
        return fallback;
    if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
        throw new Error(`nonoka provider option "${name}" must be a number >= 0, got ${JSON.stringify(value)}`);
    }
    return value;
}
function makeLogger(debug) {
    if (typeof debug === "function")
        return debug;
    // Off by default: the host's terminal UI owns stderr. NONOKA_PROVIDER_DEBUG=1 turns it on.
    if (debug === true || process.env["NONOKA_PROVIDER_DEBUG"] === "1") {
        return (message) => process.stderr.write(`[nonoka provider] ${message}\n`);
    }
    return () => { };
}

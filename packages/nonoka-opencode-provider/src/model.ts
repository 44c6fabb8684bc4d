/**
 * The language model: one `nonoka bridge` request per call, its events as AI SDK v3 stream parts.
 *
 * The host (OpenCode) calls `doStream` once per model step with the full history. The request
 * is shaped by the session tracker (`SessionTracker`), written to a bridge (a warm one from an
 * earlier step of the same host session, `BridgePool`, or a fresh one), and the bridge's
 * events are mapped as they arrive: text deltas to text parts, reasoning to reasoning parts
 * (ended with the provider's metadata from `assistant_metadata`, so the host stores it and
 * sends it back), host tool calls to `tool-call` parts with their provider metadata and
 * `finishReason.unified = "tool-calls"` (the host runs the tool and calls again), usage (cache
 * and reasoning tokens included) and the finish reason to the `finish` part, bridge errors to
 * an `error` part the host shows: the provider's own failure as an `APICallError`.
 */

import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
  SharedV3ProviderMetadata,
  SharedV3Warning,
} from "@ai-sdk/provider";
import { randomBytes } from "node:crypto";

import { BridgeError, BridgeProcess } from "./bridge.js";
import { bridgeGroup, type BridgePool } from "./pool.js";
import { isProviderFailure, providerCallError, ProviderCallError } from "./errors.js";
import type { Logger } from "./idfile.js";
import {
  detectPurpose,
  hostHeaders,
  hostParentSessionId,
  hostSessionId,
  needsParts,
  NOTICE_PREFIX,
  partMetadata,
  toCallOptions,
  toHostTools,
  toProtocolMessages,
  type NonokaPartMetadata,
} from "./prompt.js";
import {
  decodeEvent,
  encodeRequest,
  EventDecodeError,
  PROTOCOL_VERSION,
  type AssistantMetadata,
  type BridgeEvent,
  type ChatRequest,
  type ErrorEvent,
  type FinishEvent,
  type FinishReason,
  type Purpose,
  type RequestLimits,
  type UsageTotals,
  type WarningEvent,
} from "./protocol.js";
import type { SessionTracker } from "./session.js";

/** The chat request this provider sends: the protocol's, with the fields it always sets. */
type OutgoingRequest = ChatRequest & { request_id: string; purpose: Purpose; cwd: string; conversation_key?: string };

/** What a model needs from its provider; resolved once by `createNonoka`. */
export interface ModelConfig {
  providerName: string;
  command: string[];
  cwd: () => string;
  /** The nonoka model spec sent in requests (`undefined`: the bridge's configuration decides). */
  model: string | undefined;
  env: Record<string, string>;
  limits: RequestLimits | undefined;
  /** Per call; 0 means no bound. */
  timeoutMs: number;
  cancelGraceMs: number;
  requiredCapabilities: string[];
  maxFrameBytes: number;
  log: Logger;
  tracker: (cwd: string) => SessionTracker;
  /** Where finished bridges wait for the next step (`undefined`: one process per step). */
  pool: BridgePool | undefined;
}

/** An `error` event from the bridge, as the host sees it: code and message together. */
export class NonokaError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  readonly details: Record<string, unknown>;
  constructor(code: string, message: string, retryable = false, details: Record<string, unknown> = {}) {
    super(`nonoka ${code}: ${message}`);
    this.name = "NonokaError";
    this.code = code;
    this.retryable = retryable;
    this.details = details;
  }
}

/** The limit a turn stopped at, as the error the host shows, with how to go on. */
export function limitError(termination: { reason: string; detail?: string; limit?: string | null } | undefined): NonokaError {
  const limit = termination?.limit ?? undefined;
  const detail = termination?.detail || "the session reached one of its limits";
  const raise =
    limit !== undefined && limit !== "deadline_at"
      ? `raise "${limit}" under provider.nonoka.options.limits in opencode.json`
      : "raise the limit under provider.nonoka.options.limits in opencode.json";
  return new NonokaError(
    "limit_reached",
    `the turn stopped: ${detail}. Limits count across the whole nonoka session, not per message; ` +
      `${raise} and send your next message: the same session goes on with what it has spent so far.`,
    false,
    limit !== undefined ? { limit } : {},
  );
}

/** The protocol's finish reasons in the v3 shape (a v2-style string makes OpenCode loop). */
export function mapFinishReason(reason: FinishReason | string, modelFinish?: string | null): LanguageModelV3FinishReason {
  // An answer the model itself cut (its output limit) or filtered ends as it would talking
  // to the endpoint directly, not as a plain stop.
  if (reason === "stop" && modelFinish === "length") return { unified: "length", raw: modelFinish };
  if (reason === "stop" && modelFinish === "content_filter") return { unified: "content-filter", raw: modelFinish };
  switch (reason) {
    case "stop":
      return { unified: "stop", raw: reason };
    case "tool_calls":
      return { unified: "tool-calls", raw: reason };
    case "limit":
      return { unified: "length", raw: reason };
    case "error":
      return { unified: "error", raw: reason };
    default: // "cancelled", and anything a newer bridge adds
      return { unified: "other", raw: reason };
  }
}

/**
 * A request's token counts in the v3 usage shape, split as the AI SDK's OpenAI-compatible
 * provider splits a call's: cache reads (and writes) are part of the input, reasoning part of
 * the output; a count the bridge did not report is 0 (a cache write: unset), as there.
 */
export function mapUsage(totals: UsageTotals): LanguageModelV3Usage {
  const raw: Record<string, number> = { input_tokens: totals.input_tokens, output_tokens: totals.output_tokens };
  if (typeof totals.cost_usd === "number") raw["cost_usd"] = totals.cost_usd;
  const cacheRead = totals.cache_read_tokens ?? 0;
  const cacheWrite = totals.cache_write_tokens ?? undefined;
  const reasoning = totals.reasoning_tokens ?? 0;
  if (cacheRead > 0) raw["cache_read_tokens"] = cacheRead;
  if (cacheWrite !== undefined) raw["cache_write_tokens"] = cacheWrite;
  if (reasoning > 0) raw["reasoning_tokens"] = reasoning;
  return {
    inputTokens: { total: totals.input_tokens, noCache: totals.input_tokens - cacheRead - (cacheWrite ?? 0), cacheRead, cacheWrite },
    outputTokens: { total: totals.output_tokens, text: totals.output_tokens - reasoning, reasoning },
    raw,
  };
}

/** The bridge's failure as the error the host sees: the provider's own, when it answered. */
export function bridgeFailure(event: ErrorEvent): NonokaError | ProviderCallError {
  const provider = event.details?.["provider"];
  if (event.code === "model_error" && isProviderFailure(provider)) {
    return providerCallError(event.code, event.message, provider);
  }
  return new NonokaError(event.code, event.message, event.retryable === true, event.details ?? {});
}

export class NonokaLanguageModel implements LanguageModelV3 {
  readonly specificationVersion = "v3";
  readonly provider: string;
  readonly modelId: string;
  readonly supportedUrls: Record<string, RegExp[]> = {};
  private readonly config: ModelConfig;

  constructor(modelId: string, config: ModelConfig) {
    this.modelId = modelId;
    this.provider = config.providerName;
    this.config = config;
  }

  async doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    const call = this.prepare(options, true);
    return { stream: call.stream, request: { body: { request_id: call.request.request_id, purpose: call.request.purpose } } };
  }

  /** The same call, gathered: hosts that do not stream get the whole result at once. */
  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const call = this.prepare(options, false);
    const content: LanguageModelV3Content[] = [];
    const texts = new Map<string, { type: "text"; text: string }>();
    const thoughts = new Map<string, { type: "reasoning"; text: string; providerMetadata?: SharedV3ProviderMetadata }>();
    let warnings: SharedV3Warning[] = [];
    let finish: Extract<LanguageModelV3StreamPart, { type: "finish" }> | undefined;
    const reader = call.stream.getReader();
    for (;;) {
      const { done, value: part } = await reader.read();
      if (done) break;
      switch (part.type) {
        case "stream-start":
          warnings = part.warnings;
          break;
        case "text-start": {
          const text = { type: "text" as const, text: "" };
          texts.set(part.id, text);
          content.push(text);
          break;
        }
        case "text-delta": {
          const text = texts.get(part.id);
          if (text !== undefined) text.text += part.delta;
          break;
        }
        case "reasoning-start": {
          const thought: { type: "reasoning"; text: string; providerMetadata?: SharedV3ProviderMetadata } = { type: "reasoning", text: "" };
          if (part.providerMetadata !== undefined) thought.providerMetadata = part.providerMetadata;
          thoughts.set(part.id, thought);
          content.push(thought);
          break;
        }
        case "reasoning-delta": {
          const thought = thoughts.get(part.id);
          if (thought !== undefined) thought.text += part.delta;
          break;
        }
        case "reasoning-end": {
          const thought = thoughts.get(part.id);
          if (thought !== undefined && part.providerMetadata !== undefined) thought.providerMetadata = part.providerMetadata;
          break;
        }
        case "tool-call":
        case "tool-result":
          content.push(part);
          break;
        case "error":
          await reader.cancel();
          throw part.error;
        case "finish":
          finish = part;
          break;
        default:
          break;
      }
    }
    if (finish === undefined) {
      throw new Error("the nonoka bridge stream ended without a finish");
    }
    const result: LanguageModelV3GenerateResult = { content, finishReason: finish.finishReason, usage: finish.usage, warnings };
    if (finish.providerMetadata !== undefined) result.providerMetadata = finish.providerMetadata;
    return result;
  }

  private prepare(options: LanguageModelV3CallOptions, streamed: boolean): BridgeCall {
    const config = this.config;
    options.abortSignal?.throwIfAborted();
    const purpose = detectPurpose(options, config.providerName);
    const messages = toProtocolMessages(options.prompt);
    if (messages.length === 0) {
      throw new Error("nonoka needs at least one message in the prompt");
    }
    const { tools, warnings: toolWarnings } = toHostTools(options.tools);
    const { options: callOptions, warnings: optionWarnings } = toCallOptions(options, config.providerName, { model: config.model, streamed });
    const warnings = [...toolWarnings, ...optionWarnings];
    const cwd = config.cwd();
    const tracker = config.tracker(cwd);
    const hint = tracker.prepare(messages, purpose);
    // A bridge without `parts` would drop files, reasoning, metadata and options: make it refuse.
    const required = [...config.requiredCapabilities];
    if (needsParts(messages, callOptions) && !required.includes("parts")) required.push("parts");
    const request: OutgoingRequest = {
      type: "chat",
      // host_retries: OpenCode retries a failed call itself; the bridge must not multiply it.
      protocol: { version: PROTOCOL_VERSION, required_capabilities: required, features: ["reasoning", "host_retries"] },
      request_id: `req-${randomBytes(8).toString("hex")}`,
      purpose,
      messages,
      tools,
      new_session: hint.newSession,
      cwd,
    };
    if (hint.sessionId !== undefined) request.session_id = hint.sessionId;
    const revision = tracker.revisionOf(hint.sessionId);
    if (revision !== undefined) request.revision = revision;
    if (hint.conversationKey !== undefined) request.conversation_key = hint.conversationKey;
    const host = purpose === "chat" ? hostSessionId(options, config.providerName) : undefined;
    if (host !== undefined) request.host_session_id = host;
    const parent = purpose === "chat" ? hostParentSessionId(options) : undefined;
    if (parent !== undefined) request.host_parent_session_id = parent;
    const headers = hostHeaders(options);
    if (headers !== undefined) request.headers = headers;
    if (config.model !== undefined) request.model = config.model;
    if (config.limits !== undefined) request.limits = config.limits;
    if (callOptions !== undefined) request.options = callOptions;
    // Steps of one host session go to the bridge that served the last one, when it waits.
    const affinity = host ?? hostSessionId(options, config.providerName) ?? "";
    return new BridgeCall(config, request, tracker, warnings, this.modelId, options.abortSignal, affinity);
  }
}

/** One request in flight: its process, what it produced so far, and how it is ending. */
class BridgeCall {
  readonly request: OutgoingRequest;
  readonly stream: ReadableStream<LanguageModelV3StreamPart>;
  private readonly config: ModelConfig;
  private readonly tracker: SessionTracker;
  private readonly warnings: SharedV3Warning[];
  private readonly modelId: string;
  private readonly signal: AbortSignal | undefined;
  private controller!: ReadableStreamDefaultController<LanguageModelV3StreamPart>;
  private process: BridgeProcess | undefined;
  private closed = false;
  private finished = false;
  private cancelRequested = false;
  private cancelSent = false;
  /** The bridge was a warm one from the pool (until the request goes to a fresh one). */
  private reused = false;
  /** The bridge acknowledged this request (before that, a dead warm bridge is replaced). */
  private acknowledged = false;
  private timedOut = false;
  /** The bridge went back to the pool after `finish`: not this call's to stop any more. */
  private kept = false;
  private deadline: number | undefined;
  private openText: string | undefined;
  private textCount = 0;
  /** The reasoning part the model is streaming, ended when its metadata arrives. */
  private openReasoning: string | undefined;
  /**
   * What the provider attached to the message of the model call that just ended
   * (`assistant_metadata`); each call's `usage` comes first and clears it, and its tool
   * calls follow it.
   */
  private messageMetadata: Record<string, unknown> | undefined;
  private readonly callUsage: UsageTotals[] = [];
  private readonly bridgeWarnings: WarningEvent[] = [];
  private readonly errors: ErrorEvent[] = [];
  private session: { id: string; recovered: boolean; reason: string | null } | undefined;
  private readonly onAbort = (): void => void this.escalate();

  constructor(
    config: ModelConfig,
    request: OutgoingRequest,
    tracker: SessionTracker,
    warnings: SharedV3Warning[],
    modelId: string,
    signal: AbortSignal | undefined,
    private readonly affinity = "",
  ) {
    this.config = config;
    this.request = request;
    this.tracker = tracker;
    this.warnings = warnings;
    this.modelId = modelId;
    this.signal = signal;
    this.stream = new ReadableStream<LanguageModelV3StreamPart>({
      start: (controller) => {
        this.controller = controller;
        this.emit({ type: "stream-start", warnings: this.warnings });
        void this.run();
      },
      cancel: async () => {
        // The reader gave up (the host stopped listening): stop the request, reap the bridge.
        this.closed = true;
        await this.escalate();
      },
    });
  }

  private emit(part: LanguageModelV3StreamPart): void {
    if (!this.closed) this.controller.enqueue(part);
  }

  private async run(): Promise<void> {
    const config = this.config;
    const group = bridgeGroup(config.command, config.env, this.request.cwd);
    const warm = config.pool?.take(group, this.affinity);
    let bridge = warm ?? this.spawn();
    this.reused = warm !== undefined;
    this.process = bridge;
    if (warm !== undefined) {
      warm.discardPending();
      this.config.log(`request ${this.request.request_id} goes to the warm bridge (pid ${warm.pid ?? "?"})`);
    }
    if (config.timeoutMs > 0) this.deadline = Date.now() + config.timeoutMs;
    this.signal?.addEventListener("abort", this.onAbort, { once: true });
    try {
      if (!bridge.write(encodeRequest(this.request)) && this.mayRespawn()) bridge = this.respawn(bridge);
      while (!this.finished) {
        let line: string | null;
        try {
          line = await this.nextLine(bridge);
        } catch (error) {
          if (!this.mayRespawn()) throw error;
          bridge = this.respawn(bridge);
          continue;
        }
        if (line === null) {
          if (this.mayRespawn()) {
            bridge = this.respawn(bridge);
            continue;
          }
          await this.endedEarly(bridge);
          return;
        }
        await this.accept(bridge, line);
      }
      await this.release(bridge, group);
    } catch (error) {
      const failure = error instanceof BridgeError || error instanceof NonokaError ? error : new BridgeError(String(error), { command: config.command });
      this.config.log(failure.message);
      this.closeText();
      this.closeReasoning();
      this.emit({ type: "error", error: failure });
      this.emitFinish("error", undefined);
    } finally {
      this.signal?.removeEventListener("abort", this.onAbort);
      const last = this.process;
      if (!this.kept && last !== undefined && last.running) await last.stop(Math.min(config.cancelGraceMs, 1000), true);
      this.close();
    }
  }

  private spawn(): BridgeProcess {
    const config = this.config;
    const env: NodeJS.ProcessEnv = { ...process.env, ...config.env };
    return BridgeProcess.spawn(config.command, { env, cwd: this.request.cwd, maxFrameBytes: config.maxFrameBytes });
  }

  /**
   * Whether the request may go to a fresh bridge: the warm one it went to ended (killed or
   * crashed while it waited) before acknowledging it, so that one started nothing of it.
   */
  private mayRespawn(): boolean {
    return this.reused && !this.acknowledged && !this.cancelRequested && !this.timedOut && !this.closed;
  }

  private respawn(dead: BridgeProcess): BridgeProcess {
    this.config.log(
      `the warm bridge (pid ${dead.pid ?? "?"}) ended before taking request ${this.request.request_id} ` +
        `(${dead.describeExit()}); starting a new one`,
    );
    if (dead.running) dead.signal("SIGKILL");
    this.reused = false;
    const fresh = this.spawn();
    this.process = fresh;
    fresh.write(encodeRequest(this.request));
    return fresh;
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.cancelRequested && this.signal?.aborted === true) {
      // Aborted by the host: end the way a fetch-based provider does, with the abort reason.
      this.controller.error(this.signal.reason);
    } else {
      this.controller.close();
    }
  }

  private async nextLine(bridge: BridgeProcess): Promise<string | null> {
    const grace = this.config.cancelGraceMs;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      if (this.deadline !== undefined) timer = setTimeout(() => resolve("timeout"), Math.max(0, this.deadline - Date.now()));
    });
    let got: string | null | "timeout";
    try {
      got = await Promise.race([bridge.nextLine(), timeout]);
    } catch (error) {
      throw await bridge.failure((error as Error).message, Math.min(grace, 1000));
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
    if (got === "timeout") {
      this.timedOut = true;
      throw await bridge.failure(
        `the bridge did not finish the request within ${this.config.timeoutMs / 1000} s and was stopped ` +
          "(raise the provider option timeoutMs if turns legitimately take longer)",
        grace,
        true,
      );
    }
    return got;
  }

  /** Fold one line into the stream; lines of unknown type or another request are skipped. */
  private async accept(bridge: BridgeProcess, line: string): Promise<void> {
    let event: BridgeEvent;
    try {
      event = decodeEvent(line);
    } catch (error) {
      const decode = error as EventDecodeError;
      if (decode.code === "unknown_event_type") {
        this.config.log(`skipping an event of unknown type: ${decode.message}`);
        return;
      }
      const shown = line.length > 200 ? `${line.slice(0, 200)}...` : line;
      throw await bridge.failure(
        `the bridge wrote a line that is not a protocol event (${decode.code}: ${decode.message}): ${JSON.stringify(shown)}`,
        Math.min(this.config.cancelGraceMs, 1000),
      );
    }
    if (event.request_id != null && event.request_id !== this.request.request_id) {
      this.config.log(`skipping an event for request ${event.request_id} while running ${this.request.request_id}`);
      return;
    }
    switch (event.type) {
      case "protocol_ack":
        this.acknowledged = true;
        this.emit({ type: "response-metadata", id: this.request.request_id, modelId: this.request.model ?? this.modelId, timestamp: new Date() });
        break;
      case "session_init": {
        this.session = { id: event.session_id, recovered: event.recovered, reason: event.recovery_reason ?? null };
        this.tracker.adopt(this.request.purpose, this.request.conversation_key, event);
        break;
      }
      case "warning":
        this.bridgeWarnings.push(event);
        this.config.log(`bridge warning ${event.code}: ${event.message}`);
        this.notice(`${event.code}: ${event.message}`);
        break;
      case "reasoning_delta":
        if (event.text === "") break;
        this.closeText();
        if (this.openReasoning === undefined) {
          this.openReasoning = `reasoning-${++this.textCount}`;
          this.emit({ type: "reasoning-start", id: this.openReasoning });
        }
        this.emit({ type: "reasoning-delta", id: this.openReasoning, delta: event.text });
        break;
      case "assistant_metadata":
        this.settleCall(event);
        break;
      case "text_delta":
        if (event.text === "") break;
        if (this.openText === undefined) {
          this.openText = `text-${++this.textCount}`;
          this.emit({ type: "text-start", id: this.openText });
        }
        this.emit({ type: "text-delta", id: this.openText, delta: event.text });
        break;
      case "tool_call": {
        this.closeText();
        this.closeReasoning();
        const input = event.arguments.trim() === "" ? "{}" : event.arguments;
        const own: NonokaPartMetadata = {};
        if (event.provider_metadata != null) own.provider_metadata = event.provider_metadata;
        if (this.messageMetadata !== undefined) own.message_provider_metadata = this.messageMetadata;
        const metadata = Object.keys(own).length > 0 ? { providerMetadata: partMetadata(own) } : {};
        if (event.executed_by === "nonoka") {
          // nonoka runs it itself; the host must not, and the session keeps the result.
          this.emit({ type: "tool-call", toolCallId: event.tool_call_id, toolName: event.tool_name, input, providerExecuted: true, dynamic: true, ...metadata });
          break;
        }
        this.emit({ type: "tool-input-start", id: event.tool_call_id, toolName: event.tool_name });
        this.emit({ type: "tool-input-delta", id: event.tool_call_id, delta: input });
        this.emit({ type: "tool-input-end", id: event.tool_call_id });
        this.emit({ type: "tool-call", toolCallId: event.tool_call_id, toolName: event.tool_name, input, ...metadata });
        break;
      }
      case "tool_result":
        this.closeText();
        this.emit({
          type: "tool-result",
          toolCallId: event.tool_call_id,
          toolName: event.tool_name,
          result: event.content,
          isError: event.is_error === true,
          dynamic: true,
        });
        break;
      case "usage":
        this.messageMetadata = undefined; // a model call ended; its metadata follows
        this.callUsage.push({
          input_tokens: event.input_tokens,
          output_tokens: event.output_tokens,
          cost_usd: event.cost_usd ?? null,
          cache_read_tokens: event.cache_read_tokens ?? null,
          cache_write_tokens: event.cache_write_tokens ?? null,
          reasoning_tokens: event.reasoning_tokens ?? null,
        });
        break;
      case "error":
        this.errors.push(event);
        this.config.log(`bridge error ${event.code}: ${event.message}`);
        break;
      case "finish":
        this.onFinish(event);
        break;
    }
  }

  private onFinish(event: FinishEvent): void {
    this.finished = true;
    this.tracker.noteRevision(this.session?.id, event.revision);
    this.closeText();
    this.closeReasoning();
    if (event.finish_reason === "limit") {
      // An empty answer that ends "length" looks like success to the host: say which limit.
      this.emit({ type: "error", error: limitError(event.termination ?? undefined) });
    }
    if (event.finish_reason === "error") {
      const first = this.errors[0];
      this.emit({
        type: "error",
        error:
          first !== undefined
            ? bridgeFailure(first)
            : new NonokaError("internal_error", "the bridge finished the request with an error but did not say which"),
      });
    }
    this.emitFinish(event.finish_reason, event.usage, event.termination?.reason, event.model_finish);
  }

  private emitFinish(reason: FinishReason, totals: UsageTotals | undefined, termination?: string, modelFinish?: string | null): void {
    const usage = totals ?? this.summedUsage();
    const metadata: SharedV3ProviderMetadata = {
      nonoka: {
        requestId: this.request.request_id,
        purpose: this.request.purpose,
        sessionId: this.session?.id ?? null,
        recovered: this.session?.recovered ?? false,
        recoveryReason: this.session?.reason ?? null,
        finishReason: reason,
        modelFinish: modelFinish ?? null,
        termination: termination ?? null,
        costUsd: typeof usage.cost_usd === "number" ? usage.cost_usd : null,
        calls: this.callUsage.map((u) => ({
          inputTokens: u.input_tokens,
          outputTokens: u.output_tokens,
          costUsd: u.cost_usd ?? null,
          cacheReadTokens: u.cache_read_tokens ?? null,
          cacheWriteTokens: u.cache_write_tokens ?? null,
          reasoningTokens: u.reasoning_tokens ?? null,
        })),
        warnings: this.bridgeWarnings.map((w) => ({ code: w.code, message: w.message })),
        errors: this.errors.map((e) => ({ code: e.code, message: e.message, retryable: e.retryable === true })),
      },
    };
    this.emit({ type: "finish", finishReason: mapFinishReason(reason, modelFinish), usage: mapUsage(usage), providerMetadata: metadata });
  }

  private summedUsage(): UsageTotals {
    let cost: number | null = null;
    const totals = { input_tokens: 0, output_tokens: 0 };
    const optional = { cache_read_tokens: null as number | null, cache_write_tokens: null as number | null, reasoning_tokens: null as number | null };
    for (const u of this.callUsage) {
      totals.input_tokens += u.input_tokens;
      totals.output_tokens += u.output_tokens;
      if (typeof u.cost_usd === "number") cost = (cost ?? 0) + u.cost_usd;
      for (const name of ["cache_read_tokens", "cache_write_tokens", "reasoning_tokens"] as const) {
        const value = u[name];
        if (typeof value === "number") optional[name] = (optional[name] ?? 0) + value;
      }
    }
    return { ...totals, cost_usd: cost, ...optional };
  }

  /**
   * Tell the person something about the session (a branch, a recovery, a store that went back in time).
   *
   * OpenCode turns the AI SDK's warnings off and keeps the provider's stderr to itself, so the
   * notice goes out as a reasoning block: OpenCode shows it with the answer (the TUI's
   * thinking blocks, `opencode run --thinking`) and stores it with the message, and it never
   * enters the conversation (the history this provider sends leaves reasoning out).
   */
  private notice(text: string): void {
    if (this.request.purpose !== "chat") return;
    this.closeText();
    const id = `nonoka-notice-${++this.textCount}`;
    const providerMetadata = partMetadata({ kind: "notice" });
    this.emit({ type: "reasoning-start", id, providerMetadata });
    this.emit({ type: "reasoning-delta", id, delta: `${NOTICE_PREFIX}${text}` });
    this.emit({ type: "reasoning-end", id, providerMetadata });
  }

  /**
   * After a model call (`assistant_metadata`): end its reasoning with the provider's metadata
   * for each part, so the host stores and resends it; reasoning the bridge did not stream (an
   * opaque form) is added here. What the provider attached to the message itself goes on
   * every part of the answer (the host keeps metadata per part, not per message).
   */
  private settleCall(event: AssistantMetadata): void {
    const message = event.provider_metadata ?? undefined;
    this.messageMetadata = message;
    event.reasoning.forEach((part, index) => {
      const own: NonokaPartMetadata = { kind: "reasoning" };
      if (part.provider_metadata != null) own.provider_metadata = part.provider_metadata;
      if (message !== undefined) own.message_provider_metadata = message;
      const providerMetadata = partMetadata(own);
      if (index === 0 && this.openReasoning !== undefined) {
        this.emit({ type: "reasoning-end", id: this.openReasoning, providerMetadata });
        this.openReasoning = undefined;
        return;
      }
      const id = `reasoning-${++this.textCount}`;
      this.emit({ type: "reasoning-start", id, providerMetadata });
      if (part.text !== "") this.emit({ type: "reasoning-delta", id, delta: part.text });
      this.emit({ type: "reasoning-end", id, providerMetadata });
    });
    this.closeReasoning();
    this.closeText();
  }

  /** End the open text part, with the message's provider metadata when there is any. */
  private closeText(): void {
    if (this.openText !== undefined) {
      const message = this.messageMetadata;
      this.emit(
        message !== undefined
          ? { type: "text-end", id: this.openText, providerMetadata: partMetadata({ message_provider_metadata: message }) }
          : { type: "text-end", id: this.openText },
      );
      this.openText = undefined;
    }
  }

  /** End the open reasoning part (its metadata never came: the call failed or was cut short). */
  private closeReasoning(): void {
    if (this.openReasoning !== undefined) {
      this.emit({ type: "reasoning-end", id: this.openReasoning, providerMetadata: partMetadata({ kind: "reasoning" }) });
      this.openReasoning = undefined;
    }
  }

  /** Output ended before `finish`: expected after a cancel, a failure otherwise. */
  private async endedEarly(bridge: BridgeProcess): Promise<void> {
    if (this.cancelRequested) {
      await bridge.stop(this.config.cancelGraceMs);
      this.config.log(`the bridge for request ${this.request.request_id} ended without a finish event after being cancelled (${bridge.describeExit()})`);
      this.closeText();
      this.closeReasoning();
      this.emitFinish("cancelled", undefined);
      return;
    }
    throw await bridge.failure("the bridge closed its output before finishing the request", this.config.cancelGraceMs);
  }

  /**
   * After `finish`: keep the bridge warm for the next step (the host has its answer now; the
   * bridge's work after `finish` overlaps with the host's), or, with warm bridges off or
   * after a cancel, let it exit.
   */
  private async release(bridge: BridgeProcess, group: string): Promise<void> {
    const pool = this.config.pool;
    if (pool !== undefined && !this.cancelRequested && bridge.running) {
      this.kept = true;
      pool.give(group, this.affinity, bridge);
      return;
    }
    await this.windDown(bridge);
  }

  /** End input and let the bridge exit on its own (firmly, if it lingers). */
  private async windDown(bridge: BridgeProcess): Promise<void> {
    bridge.closeStdin();
    if (!(await bridge.wait(this.config.cancelGraceMs))) {
      this.config.log(`the bridge was still running ${this.config.cancelGraceMs} ms after finishing; stopping it`);
      await bridge.stop(this.config.cancelGraceMs, true);
    }
    if (bridge.exitCode !== 0) {
      this.config.log(`the bridge exited with ${bridge.describeExit()} after finishing the request`);
    }
  }

  /** Stop a running request: `cancel` line, then SIGTERM, then SIGKILL, a grace period apart. */
  private async escalate(): Promise<void> {
    const bridge = this.process;
    if (bridge === undefined || this.finished || !bridge.running) return;
    this.cancelRequested = true;
    if (!this.cancelSent) {
      this.cancelSent = true;
      bridge.write(encodeRequest({ type: "cancel", request_id: this.request.request_id }));
    }
    const grace = this.config.cancelGraceMs;
    if (await bridge.wait(grace)) return;
    bridge.signal("SIGTERM");
    if (await bridge.wait(grace)) return;
    bridge.signal("SIGKILL");
    await bridge.wait();
  }
}

/**
 * The bridge protocol, version "1", as the provider side uses it (docs/protocol.md).
 *
 * The types are generated from the protocol's JSON Schema into protocol.gen.ts (run
 * `python -m nonoka.protocol.generate`); this file holds only what the provider does with
 * them: read events, write requests, and compute the conversation identity.
 */

import { createHash } from "node:crypto";

import type {
  ErrorCode,
  Event,
  Finish,
  HostToolSpec,
  Message,
  ProtocolAck,
  Request,
  SessionInit,
  TextDelta,
  ToolCall,
} from "./protocol.gen.js";

export * from "./protocol.gen.js";

// The names this package has always exported for the generated types.
export type ProtocolMessage = Message;
export type ProtocolToolCall = ToolCall;
export type Role = Message["role"];
export type HostTool = HostToolSpec;
export type BridgeEvent = Event;
export type ProtocolAckEvent = ProtocolAck;
export type SessionInitEvent = SessionInit;
export type TextDeltaEvent = TextDelta;
export type FinishEvent = Finish;

type JsonKind = "string" | "boolean" | "number" | "object";
/** For each event type, some of its (generated) fields with their JSON types. */
type FieldChecks = {
  [K in BridgeEvent["type"]]: Partial<Record<keyof Extract<BridgeEvent, { type: K }>, JsonKind>>;
};

/** The fields the provider relies on, with their JSON type; checked on every line read. */
const REQUIRED: FieldChecks = {
  protocol_ack: { version: "string" },
  session_init: { session_id: "string", recovered: "boolean" },
  warning: { code: "string", message: "string" },
  text_delta: { text: "string" },
  tool_call: { tool_call_id: "string", tool_name: "string", arguments: "string" },
  tool_result: { tool_call_id: "string", tool_name: "string", content: "string" },
  usage: { input_tokens: "number", output_tokens: "number" },
  error: { code: "string", message: "string" },
  finish: { finish_reason: "string", usage: "object" },
  reasoning_delta: { text: "string" },
  assistant_metadata: { reasoning: "object" },
};

/** Why a line from the bridge could not be used. `unknown_event_type` lines are skipped. */
export class EventDecodeError extends Error {
  readonly code: Extract<ErrorCode, "unknown_event_type" | "invalid_event" | "invalid_json">;
  constructor(code: EventDecodeError["code"], message: string) {
    super(message);
    this.name = "EventDecodeError";
    this.code = code;
  }
}

/**
 * Parse one line (without its terminator) into an event.
 *
 * Only what the provider relies on is checked; unknown fields are ignored, as the
 * protocol asks, so a newer bridge may add optional ones.
 */
export function decodeEvent(line: string): BridgeEvent {
  let value: unknown;
  try {
    value = JSON.parse(line.charCodeAt(0) === 0xfeff ? line.slice(1) : line);
  } catch (error) {
    throw new EventDecodeError("invalid_json", `not JSON (${(error as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new EventDecodeError("invalid_event", "the line is JSON but not an object");
  }
  const event = value as Record<string, unknown>;
  const kind = event["type"];
  if (typeof kind !== "string" || !Object.hasOwn(REQUIRED, kind)) {
    throw new EventDecodeError("unknown_event_type", `unknown event type ${JSON.stringify(kind)}`);
  }
  for (const [field, expected] of Object.entries(REQUIRED[kind as BridgeEvent["type"]])) {
    const got = event[field];
    if (typeof got !== expected || got === null) {
      throw new EventDecodeError(
        "invalid_event",
        `a ${kind} event needs ${field} (a ${expected}), got ${got === undefined ? "nothing" : typeof got}`,
      );
    }
  }
  return event as unknown as BridgeEvent;
}

/**
 * One request as a frame: compact JSON plus `\n`.
 *
 * U+2028/U+2029/U+0085 are escaped (JSON.stringify leaves them raw) so no line splitter
 * can cut the frame in two; JSON.stringify already escapes unpaired surrogates.
 */
export function encodeRequest(request: Request): string {
  return JSON.stringify(request).replace(/[\u2028\u2029\u0085]/g, (c) =>
    `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  ) + "\n";
}

/** The characters Python's `str.strip()` removes, so a blank text means the same on both sides. */
const PY_BLANK = /^[\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;

/**
 * SHA-256 (lower-case hex) of the first user message's text, exactly as sent.
 *
 * The host resends the whole history every call, so this fingerprint is stable for a
 * conversation and needs no storage. `undefined` when there is no user message or its text
 * is blank: such a key would match every conversation that starts the same empty way.
 * Node encodes unpaired surrogates as U+FFFD, as the Python twin does.
 */
export function conversationKey(messages: readonly ProtocolMessage[]): string | undefined {
  const text = messages.find((m) => m.role === "user")?.content ?? "";
  if (PY_BLANK.test(text)) {
    return undefined;
  }
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** A history that already holds a reply (assistant or tool message) continues a conversation. */
export function isContinuation(messages: readonly ProtocolMessage[]): boolean {
  return messages.some((m) => m.role === "assistant" || m.role === "tool");
}

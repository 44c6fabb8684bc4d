// Generated from src/nonoka/protocol/schema.json by `python -m nonoka.protocol.generate`:
// do not edit. The bridge protocol's types (docs/protocol.md); the behaviour that uses
// them is in protocol.ts.

/** The protocol version these types describe. */
export const PROTOCOL_VERSION = "1";

/** One frame (line) may be this long, terminator not counted: the bridge's default. */
export const DEFAULT_MAX_FRAME_BYTES = 16777216;

/** Deepest nesting of arrays and objects a bridge accepts. */
export const MAX_NESTING = 100;

/** After a model call: its reasoning as stored, with the provider's metadata for each part, and what the provider attached to the answer (feature `reasoning`). The host keeps them with the message and sends them back in its history. */
export interface AssistantMetadata {
  type: "assistant_metadata";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  reasoning: ReasoningPartOutput[];
  provider_metadata?: Record<string, unknown> | null;
}

/** How the host wants this step's model call made; each field that is set is forwarded to a provider that takes it (`extra`: provider-specific body fields, by their wire names, added as they are). */
export interface CallOptionsSpec {
  max_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  stop?: string[] | null;
  seed?: number | null;
  response_format?: Record<string, unknown> | null;
  tool_choice?: string | Record<string, unknown> | null;
  reasoning_effort?: string | null;
  /** Sample from the top K tokens only: sent where the API takes it (Anthropic's Messages API, `top_k`); an adapter whose API has no such field leaves it out. */
  top_k?: number | null;
  /** Names of the request's tools whose arguments the model streams without buffering them for validation (Anthropic's per-tool `eager_input_streaming: true`); an adapter whose API has no such setting leaves it out. */
  eager_input_streaming?: string[] | null;
  extra?: Record<string, unknown>;
}

/** Stop the running request; the bridge saves the session and finishes 'cancelled'. */
export interface CancelRequest {
  type: "cancel";
  request_id?: string | null;
}

/** Something a bridge supports; `protocol.required_capabilities` may demand it. */
export type Capability =
  | "session_init"
  | "host_tools"
  | "title_sessions"
  | "conversation_key_recovery"
  | "cancel"
  | "usage"
  | "parts";

/** Run one turn: the full history the host holds, plus where and how to run it. */
export interface ChatRequest {
  type: "chat";
  /** Required on the wire (the frame check enforces it); defaulted for convenience. */
  protocol: ProtocolSpec;
  /** Echoed on every event of this request (at most 256 characters). */
  request_id?: string | null;
  /** Title requests run in their own session. */
  purpose?: Purpose;
  /** The full history the host holds, oldest first. */
  messages: Message[];
  /** Host-executed tools. */
  tools?: HostToolSpec[];
  /** The session to continue; `""` counts as none. */
  session_id?: string | null;
  /** Force a new session. */
  new_session?: boolean;
  /** SHA-256 hex of the first user message's text; `""` counts as none. */
  conversation_key?: string | null;
  /** The host's own id of this conversation (an OpenCode session's id): every host conversation keeps its own line of nonoka sessions, whatever their content; `""` counts as none. */
  host_session_id?: string | null;
  /** The host's id of the conversation that started this one (an OpenCode subagent's parent session, its `x-parent-session-id`): a new session records it, and lists show the session under its parent's line; `""` counts as none. */
  host_parent_session_id?: string | null;
  /** The request headers the host gave its provider for this step; the adapters forward the ones `nonoka.llm.host_headers` allows to the model endpoint (never credentials). */
  headers?: Record<string, string> | null;
  /** The workspace (the project database lives in `<cwd>/.nonoka/`); default: the bridge's working directory. */
  cwd?: string | null;
  /** A model spec such as `openai:gpt-4o-mini`; default: from configuration. */
  model?: string | null;
  limits?: RequestLimits | null;
  /** This step's call options (capability `parts`). */
  options?: CallOptionsSpec | null;
  /** The most conversation entries the provider saw stored for `session_id` (from `finish`); a store holding fewer went back in time and the bridge warns (`store_regressed`). */
  revision?: number | null;
}

/** The `code` of an `error` event, or of a `ProtocolError`. */
export type ErrorCode =
  /** the line is longer than the frame limit */
  | "frame_too_large"
  /** the line is not valid UTF-8 */
  | "invalid_utf8"
  /** the line is not one complete JSON value (often: a truncated line) */
  | "invalid_json"
  /** the line is JSON but not an object */
  | "not_an_object"
  /** `type` is missing or names no request type */
  | "unknown_request_type"
  /** fields are missing or have the wrong type; details list them */
  | "invalid_request"
  /** `protocol.version` is not one this bridge speaks */
  | "unsupported_protocol_version"
  /** `protocol.required_capabilities` names something unsupported */
  | "missing_capability"
  /** (provider side) an event `type` this provider does not know */
  | "unknown_event_type"
  /** (provider side) an event's fields are missing or mistyped */
  | "invalid_event"
  /** another live process is running this session */
  | "session_busy"
  /** another writer saved the session first */
  | "session_conflict"
  /** the stored session cannot be decoded */
  | "session_corrupt"
  /** the project database failed; nothing stored was changed */
  | "store_error"
  /** `cwd` does not exist or `.nonoka/` cannot be created in it */
  | "invalid_cwd"
  /** no model was given and none is configured, or it is unknown */
  | "model_not_configured"
  /** the model endpoint failed; `retryable` says whether to try again */
  | "model_error"
  /** a tool nonoka runs itself could not be found, validated or run */
  | "tool_error"
  /** a `tool` message answers no call the session waits for */
  | "tool_result_mismatch"
  /** the request was stopped by cancel, SIGTERM or SIGINT */
  | "cancelled"
  /** a bug in nonoka; the message and stderr say more */
  | "internal_error";

/** Something failed; a `finish` follows. */
export interface ErrorEvent {
  type: "error";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  /** An `ErrorCode`; a newer bridge may send others. */
  code: string;
  /** For a person: what went wrong and what to do. */
  message: string;
  retryable: boolean;
  /** Machine-readable specifics (never the offending input itself). */
  details: Record<string, unknown>;
}

/** A line from the bridge to a provider. */
export type Event =
  | ProtocolAck
  | SessionInit
  | WarningEvent
  | TextDelta
  | ToolCallEvent
  | ToolResultEvent
  | UsageEvent
  | ErrorEvent
  | Finish
  | ReasoningDeltaEvent
  | AssistantMetadata;

/** The `type` of an event (bridge → provider). */
export type EventType =
  | "protocol_ack"
  | "session_init"
  | "warning"
  | "text_delta"
  | "tool_call"
  | "tool_result"
  | "usage"
  | "error"
  | "finish"
  | "reasoning_delta"
  | "assistant_metadata";

/** Who runs a tool the model called: the host (the session pauses) or nonoka. */
export type ExecutedBy =
  | "host"
  | "nonoka";

/** A file in a message: an image, a PDF, a text file. Its bytes are inline (`data`, base64) or at a `url`; stored sessions keep inline bytes once, by digest, whatever the number of entries and branches holding them. */
export interface FilePart {
  type?: "file";
  /** `image/png`, `application/pdf`, `text/plain`... */
  media_type: string;
  /** The bytes, base64-encoded. */
  data?: string | null;
  url?: string | null;
  filename?: string | null;
  provider_metadata?: Record<string, unknown> | null;
}

/** Last event of a request. `tool_calls` means: paused, waiting for host results. */
export interface Finish {
  type: "finish";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  finish_reason: FinishReason;
  /** This request's total. */
  usage: UsageTotals;
  termination?: FinishTermination | null;
  /** Why the model stopped the request's last answer, in Chat Completions' names: `length` (cut at its output limit), `content_filter`, `stop`, `tool_calls` (another provider's reason is kept as sent). Absent when no model answered in this request (a stored answer sent again) — and from older bridges. */
  model_finish?: string | null;
  /** Conversation entries stored for the session when the request ended; a provider sends the highest it saw back as the next request's `revision`. */
  revision?: number | null;
}

/** Why a request ended; `tool_calls` means paused, waiting for host tool results. */
export type FinishReason =
  | "stop"
  | "tool_calls"
  | "cancelled"
  | "error"
  | "limit";

/** Why the run stopped, when the runtime recorded a reason (e.g. which limit). */
export interface FinishTermination {
  reason: string;
  detail: string;
  limit?: string | null;
}

/** A tool the host runs; the model sees it, the bridge pauses when it is called. */
export interface HostToolSpec {
  /** Unique among the request's tools. */
  name: string;
  description?: string;
  /** JSON Schema of the arguments. */
  parameters?: Record<string, unknown>;
}

/** A chat message in the OpenAI-style shape every front end speaks. */
export interface Message {
  role: "system" | "user" | "assistant" | "tool";
  /** The message's text (with `parts`: their text, joined by newlines). */
  content?: string;
  tool_calls?: ToolCall[] | null;
  tool_call_id?: string | null;
  /** The content in order, when it is more than one text: several texts, files. */
  parts?: (TextPart | FilePart)[] | null;
  /** An assistant message's reasoning, in the order it came. */
  reasoning?: ReasoningPartInput[] | null;
  provider_metadata?: Record<string, unknown> | null;
}

/** First event of every usable request: which version and capabilities apply. */
export interface ProtocolAck {
  type: "protocol_ack";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  version: string;
  /** Everything this bridge supports. */
  capabilities: string[];
  /** nonoka's version. */
  server_version: string;
}

/** The contract a request is written against. */
export interface ProtocolSpec {
  /** Checked before any other field: another version is `unsupported_protocol_version`. */
  version: "1";
  /** Capabilities the provider cannot work without (`missing_capability` if absent). */
  required_capabilities?: string[];
  /** What the provider can receive besides protocol 1's events: `reasoning` (`reasoning_delta` and `assistant_metadata`). A bridge sends nothing a request did not ask for, so an older provider keeps working. `host_retries`: the host retries a failed model call itself (OpenCode does), so the bridge makes each model call once and passes a retryable failure, with its `retry_after`, straight back. */
  features?: string[] | null;
}

/** What a chat request is for; title and compaction requests run in their own session. */
export type Purpose =
  | "chat"
  | "title"
  | "compaction";

/** A piece of streamed reasoning (feature `reasoning`). */
export interface ReasoningDeltaEvent {
  type: "reasoning_delta";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  text: string;
}

/** What a model thought before it answered, as it streamed it: the text (empty when the provider gives only an opaque form) and the provider's metadata that must come back with it (a signature, an encrypted form, the field it arrived in). */
export interface ReasoningPartInput {
  text?: string;
  provider_metadata?: Record<string, unknown> | null;
}

/** What a model thought before it answered, as it streamed it: the text (empty when the provider gives only an opaque form) and the provider's metadata that must come back with it (a signature, an encrypted form, the field it arrived in). */
export interface ReasoningPartOutput {
  text: string;
  provider_metadata?: Record<string, unknown> | null;
}

/** Why `session_init` reports a session other than the one the request named. */
export type RecoveryReason =
  | "session_id_missing"
  | "session_not_found"
  | "session_mismatch";

/** A line from a provider to the bridge. */
export type Request =
  | ChatRequest
  | CancelRequest;

/** Per-request budget overrides; a limit left out (or null) keeps the configured value. */
export interface RequestLimits {
  max_model_turns?: number | null;
  max_tool_calls?: number | null;
  wall_timeout_seconds?: number | null;
  max_total_tokens?: number | null;
  max_cost_usd?: number | null;
}

/** The `type` of a request (provider → bridge). */
export type RequestType =
  | "chat"
  | "cancel";

/** The session this request runs in; a chat provider persists the id. */
export interface SessionInit {
  type: "session_init";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  session_id: string;
  /** The session is not the one the request named (or it named none). */
  recovered: boolean;
  recovery_reason?: RecoveryReason | null;
  /** Set when the turn runs in a branch made for it: the session it branched from. */
  forked_from?: string | null;
  /** With `forked_from`: how many of the parent's entries the branch shares. */
  fork_point?: number | null;
}

/** A piece of streamed assistant text. */
export interface TextDelta {
  type: "text_delta";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  text: string;
}

/** A piece of a message's text. */
export interface TextPart {
  type?: "text";
  text: string;
  provider_metadata?: Record<string, unknown> | null;
}

/** One call the model asked for. `arguments` is the JSON text the model wrote; `provider_metadata` what the provider sent with the call and wants back. */
export interface ToolCall {
  id: string;
  name: string;
  arguments?: string;
  provider_metadata?: Record<string, unknown> | null;
}

/** The model called a tool; `executed_by` says who runs it. */
export interface ToolCallEvent {
  type: "tool_call";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  tool_call_id: string;
  tool_name: string;
  /** The JSON text the model wrote, passed through as is (it may even be invalid). */
  arguments: string;
  executed_by: ExecutedBy;
  /** What the provider sent with the call (a thought signature): the host sends it back with the call (capability `parts`). */
  provider_metadata?: Record<string, unknown> | null;
}

/** A tool nonoka ran itself finished (host tools report through the host). */
export interface ToolResultEvent {
  type: "tool_result";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  tool_call_id: string;
  tool_name: string;
  content: string;
  is_error: boolean;
}

/** Counts of one model call — not cumulative; `finish.usage` has the total. */
export interface UsageEvent {
  type: "usage";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  input_tokens: number;
  output_tokens: number;
  cost_usd?: number | null;
  /** Of `input_tokens`, those read from the provider's prompt cache (when any). */
  cache_read_tokens?: number | null;
  /** Of `input_tokens`, those written to the provider's prompt cache (when any). */
  cache_write_tokens?: number | null;
  /** Of `output_tokens`, those the model spent reasoning (when any). */
  reasoning_tokens?: number | null;
}

/** What a whole request used, across its model calls. */
export interface UsageTotals {
  input_tokens: number;
  output_tokens: number;
  cost_usd?: number | null;
  cache_read_tokens?: number | null;
  cache_write_tokens?: number | null;
  reasoning_tokens?: number | null;
}

/** The `code` of a `warning` event: something the host should know. */
export type WarningCode =
  /** the requested session_id is not in this project's database and no session matched conversation_key; a new session was started (seeded with the history) */
  | "session_not_found_starting_new"
  /** the history is a continuation but no session_id was sent and none matched conversation_key; a new session was started (seeded with the history); details list the most recently active sessions */
  | "session_id_missing_starting_fresh"
  /** the sent session_id belongs to a different conversation (its stored history does not match the request's) and no session matched conversation_key; a new session was started (seeded with the history) */
  | "session_mismatch_starting_new"
  /** conversation_key is not 64 lower-case hex digits (the SHA-256 of the first user message), so it was ignored: this request cannot be recovered by key; fix the provider */
  | "conversation_key_ignored"
  /** the database holds fewer entries of this session than the provider saw at the end of an earlier turn: it went back in time (restored from a backup or a snapshot?); the turn goes on from what is stored */
  | "store_regressed"
  /** the history agrees with a stored conversation only up to a point (an undo, a fork, an edited earlier message, or turns the host never saw), so the turn continues in a branch that shares the stored entries before that point; details name forked_from, fork_point and why */
  | "session_branched";

/** Something the host should know that did not stop the request. */
export interface WarningEvent {
  type: "warning";
  /** Echoed from the request, so a provider can match events to requests. */
  request_id?: string | null;
  /** A `WarningCode`; a newer bridge may send others. */
  code: string;
  message: string;
  details: Record<string, unknown>;
}

/**
 * nonoka's AI SDK provider for OpenCode: each model step runs in a `nonoka bridge` (a warm one
 * kept from the host session's last step, or a fresh one).
 *
 * OpenCode calls the first export whose name starts with `create`, so `createNonoka` must
 * stay the only one. The rest is exported for tests and scripts.
 */
export { createNonoka, DEFAULT_CANCEL_GRACE_MS, DEFAULT_COMMAND, DEFAULT_TIMEOUT_MS, DEFAULT_WARM_IDLE_MS, MAX_WARM_BRIDGES } from "./provider.js";
export { bridgeFailure, mapFinishReason, mapUsage, NonokaError, NonokaLanguageModel } from "./model.js";
export { ProviderCallError, providerCallError } from "./errors.js";
export { BridgeError, commandText, STDERR_TAIL_BYTES } from "./bridge.js";
export { BridgePool } from "./pool.js";
export { SessionTracker } from "./session.js";
export { detectPurpose, filePart, hostSessionId, needsParts, NONOKA_METADATA, nonokaMetadata, NOTICE_PREFIX, partMetadata, toCallOptions, toHostTools, toolOutputParts, toolOutputText, toProtocolMessages, } from "./prompt.js";
export { clearSessionId, ID_FILE_NAME, idFilePath, isPlausibleSessionId, readSessionId, STATE_DIR_NAME, writeSessionId, } from "./idfile.js";
export { conversationKey, decodeEvent, DEFAULT_MAX_FRAME_BYTES, encodeRequest, EventDecodeError, isContinuation, PROTOCOL_VERSION, } from "./protocol.js";

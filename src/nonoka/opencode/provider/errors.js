/**
 * A failed model call, as the AI SDK's `APICallError` (from `@ai-sdk/provider`).
 *
 * When the bridge's `error` event carries `details.provider` (the provider's own answer:
 * `{status, body, retry_after, retryable}`), the host must see the error it would have seen
 * talking to the provider directly, so its own rules apply: OpenCode compacts on a context
 * overflow (it reads the body's `error.code` and the message), waits `retry-after` before
 * retrying a rate limit, and does not retry what is marked not retryable.
 *
 * The provider ships without dependencies (OpenCode installs it offline), so the class is
 * not imported: this one carries the same markers (`Symbol.for("vercel.ai.error")` and
 * `Symbol.for("vercel.ai.error.AI_APICallError")`) and fields, which is exactly what
 * `APICallError.isInstance` checks (the package's tests check it against the real class).
 */
import { STATUS_CODES } from "node:http";
const AI_SDK_ERROR = Symbol.for("vercel.ai.error");
const API_CALL_ERROR = Symbol.for("vercel.ai.error.AI_APICallError");
export class ProviderCallError extends Error {
    [AI_SDK_ERROR] = true;
    [API_CALL_ERROR] = true;
    url;
    requestBodyValues;
    statusCode;
    responseHeaders;
    responseBody;
    isRetryable;
    data;
    /** The bridge's own code and message (`model_error: model endpoint ... failed ...`). */
    nonokaCode;
    nonokaMessage;
    constructor(options) {
        super(options.message, options.cause === undefined ? undefined : { cause: options.cause });
        this.name = "AI_APICallError";
        this.url = options.url ?? "";
        this.requestBodyValues = options.requestBodyValues ?? {};
        this.statusCode = options.statusCode;
        this.responseHeaders = options.responseHeaders;
        this.responseBody = options.responseBody;
        this.isRetryable = options.isRetryable;
        this.data = options.data;
        this.nonokaCode = options.nonokaCode;
        this.nonokaMessage = options.nonokaMessage;
    }
}
/**
 * The provider's failure as an `APICallError`: status, body and `retry-after` as the provider
 * sent them, retryable as nonoka judged it; the message is the provider's own (`error.message`
 * of its body, as the AI SDK's OpenAI-compatible provider reads it), else the status text.
 */
export function providerCallError(code, message, failure) {
    const status = typeof failure.status === "number" ? failure.status : undefined;
    const body = typeof failure.body === "string" ? failure.body : undefined;
    const headers = {};
    if (typeof failure.retry_after === "number" && Number.isFinite(failure.retry_after)) {
        headers["retry-after"] = String(failure.retry_after);
    }
    const data = parseBody(body);
    const said = errorMessage(data);
    return new ProviderCallError({
        message: said ?? (status !== undefined ? STATUS_CODES[status] ?? message : message),
        statusCode: status,
        responseHeaders: Object.keys(headers).length > 0 ? headers : undefined,
        responseBody: body,
        isRetryable: failure.retryable === true,
        data,
        nonokaCode: code,
        nonokaMessage: message,
    });
}
/** Whether `details.provider` of an error event is the provider's own answer. */
export function isProviderFailure(value) {
    return typeof value === "object" && value !== null && !Array.isArray(value);
}
function parseBody(body) {
    if (body === undefined)
        return undefined;
    try {
        return JSON.parse(body);
    }
    catch {
        return undefined;
    }
}
/**
 * `error.message` of an OpenAI-style body (`{"error": {"message": ...}}`), the only shape the
 * AI SDK's OpenAI-compatible provider reads; any other body (Gemini's list) leaves it to the
 * status text, as there.
 */
function errorMessage(data) {
    if (typeof data !== "object" || data === null || Array.isArray(data))
        return undefined;
    const error = data["error"];
    if (typeof error !== "object" || error === null)
        return undefined;
    const message = error["message"];
    return typeof message === "string" ? message : undefined;
}

/**
 * From the AI SDK's call options to the protocol's request fields, losslessly.
 *
 * The host (OpenCode) owns its tools: it runs them and sends their results back in the next
 * call's history, which arrives here as `tool` messages answering the assistant's
 * `tool_call_id`s. Calls nonoka ran itself (provider-executed) are left out of the history:
 * the session already holds their results.
 *
 * Everything the prompt carries reaches the bridge (capability `parts`): files (images, PDFs,
 * text files) as `parts`, a user message of several texts as its parts, the model's reasoning
 * with the provider metadata this provider attached to it when it streamed it (key `nonoka`,
 * `NONOKA_METADATA`), a tool call's provider metadata (a Gemini thought signature), and the
 * call options (`toCallOptions`). A message or part the host marked for an OpenAI-compatible
 * endpoint (`providerOptions.openaiCompatible`: fields the AI SDK's openai-compatible provider
 * adds to the wire message) is carried as `provider_metadata.openai_compatible`, which the
 * bridge adds to the wire message the same way.
 */
/** The providerMetadata / providerOptions key of what this provider attaches to parts. */
export const NONOKA_METADATA = "nonoka";
/** The host's key for fields an OpenAI-compatible endpoint adds to a wire message. */
const HOST_OPENAI_COMPATIBLE = "openaiCompatible";
/** The protocol's key for the same (`nonoka.llm.wire.OPENAI_COMPATIBLE`). */
const OPENAI_COMPATIBLE = "openai_compatible";
/** A note from nonoka shown as a reasoning block begins with this. */
export const NOTICE_PREFIX = "nonoka: ";
/** The protocol's history for an AI SDK prompt, oldest first. */
export function toProtocolMessages(prompt) {
    const messages = [];
    for (const message of prompt) {
        switch (message.role) {
            case "system": {
                const out = { role: "system", content: message.content };
                withHostFields(out, message.providerOptions);
                messages.push(out);
                break;
            }
            case "user": {
                const parts = message.content.map((part) => part.type === "text" ? textPart(part.text, part.providerOptions) : filePart(part));
                messages.push(withParts({ role: "user" }, parts, message.providerOptions));
                break;
            }
            case "assistant":
                messages.push(assistantMessage(message.content, message.providerOptions));
                break;
            case "tool":
                for (const part of message.content) {
                    if (part.type !== "tool-result")
                        continue; // approval responses: the host's business
                    const out = withParts({ role: "tool", tool_call_id: part.toolCallId }, toolOutputParts(part.output), message.providerOptions);
                    withHostFields(out, part.providerOptions);
                    messages.push(out);
                }
                break;
        }
    }
    return messages;
}
function assistantMessage(content, options) {
    let text = "";
    const calls = [];
    const reasoning = [];
    let metadata;
    for (const part of content) {
        const mine = nonokaMetadata(part.providerOptions);
        if (metadata === undefined && mine?.message_provider_metadata !== undefined)
            metadata = mine.message_provider_metadata;
        switch (part.type) {
            case "text":
                text += part.text;
                break;
            case "reasoning": {
                if (mine?.kind === "notice")
                    break; // nonoka's note to the person, never the model's
                if (mine === undefined && part.text.startsWith(NOTICE_PREFIX))
                    break; // one whose metadata the host dropped
                const item = { text: part.text };
                if (mine?.provider_metadata !== undefined)
                    item.provider_metadata = mine.provider_metadata;
                reasoning.push(item);
                break;
            }
            case "tool-call": {
                if (part.providerExecuted === true)
                    break; // nonoka ran it: the session holds its result
                const call = { id: part.toolCallId, name: part.toolName, arguments: jsonText(part.input) };
                if (mine?.provider_metadata !== undefined)
                    call.provider_metadata = mine.provider_metadata;
                calls.push(call);
                break;
            }
            case "file":
                text += describeFile(part);
                break;
            default:
                break; // provider-executed results: the session holds them
        }
    }
    const out = { role: "assistant", content: text };
    if (calls.length > 0)
        out.tool_calls = calls;
    if (reasoning.length > 0)
        out.reasoning = reasoning;
    if (metadata !== undefined)
        out.provider_metadata = { ...metadata };
    withHostFields(out, options);
    return out;
}
/**
 * A message with `parts`: its text is the text parts joined by newlines; one plain text
 * part stays a plain message (`content` only), exactly as a text-only history always was.
 */
function withParts(message, parts, options) {
    const texts = parts.filter((p) => p.type === "text");
    message.content = texts.map((p) => p.text).join("\n");
    withHostFields(message, options);
    const only = parts.length === 1 ? texts[0] : undefined;
    if (only !== undefined) {
        // One text: a plain message; fields the host set on that part go on the message, where
        // the openai-compatible provider puts them for a one-text message.
        const host = only.provider_metadata?.[OPENAI_COMPATIBLE];
        if (isObject(host))
            withHostFields(message, { [HOST_OPENAI_COMPATIBLE]: host });
    }
    else if (parts.length > 0) {
        message.parts = parts;
    }
    return message;
}
function textPart(text, options) {
    const part = { type: "text", text };
    const host = hostFields(options);
    if (host !== undefined)
        part.provider_metadata = { [OPENAI_COMPATIBLE]: host };
    return part;
}
/** A file as the protocol carries it: its bytes in base64, or the URL the host gave. */
export function filePart(part) {
    const out = { type: "file", media_type: part.mediaType };
    const data = part.data;
    if (data instanceof URL) {
        const inline = dataUrl(data.href);
        if (inline !== undefined) {
            out.data = inline.data;
            if (part.mediaType === "" || part.mediaType.endsWith("/*"))
                out.media_type = inline.mediaType;
        }
        else {
            out.url = data.href;
        }
    }
    else {
        out.data = typeof data === "string" ? data : Buffer.from(data).toString("base64");
    }
    if (part.filename !== undefined)
        out.filename = part.filename;
    const host = hostFields(part.providerOptions);
    if (host !== undefined)
        out.provider_metadata = { [OPENAI_COMPATIBLE]: host };
    return out;
}
function dataUrl(href) {
    const match = /^data:([^;,]*)(;[^,]*)?,(.*)$/s.exec(href);
    if (match === null)
        return undefined;
    const [, mediaType = "", params = "", body = ""] = match;
    const data = params.split(";").includes("base64") ? body : Buffer.from(decodeURIComponent(body), "utf8").toString("base64");
    return { mediaType, data };
}
/** The parts of a tool's output: its text, and the files (images...) it returned. */
export function toolOutputParts(output) {
    if (output.type !== "content")
        return [{ type: "text", text: toolOutputText(output) }];
    const parts = [];
    for (const item of output.value) {
        switch (item.type) {
            case "text":
                parts.push({ type: "text", text: item.text });
                break;
            case "file-data":
                parts.push(filePart({ mediaType: item.mediaType, data: item.data, filename: item.filename }));
                break;
            case "image-data":
                parts.push(filePart({ mediaType: item.mediaType, data: item.data }));
                break;
            case "file-url":
                parts.push(filePart({ mediaType: item.mediaType ?? "application/octet-stream", data: new URL(item.url) }));
                break;
            case "image-url":
                parts.push(filePart({ mediaType: "image/*", data: new URL(item.url) }));
                break;
            default: {
                // `media` (the AI SDK 5 name of file-data), file ids, custom parts: what can be carried is
                const loose = item;
                if (typeof loose.data === "string" && typeof loose.mediaType === "string") {
                    parts.push(filePart({ mediaType: loose.mediaType, data: loose.data }));
                }
                else {
                    parts.push({ type: "text", text: JSON.stringify(item) });
                }
            }
        }
    }
    return parts;
}
/** Host tools for the request, and warnings for those the bridge cannot offer. */
export function toHostTools(tools) {
    const out = [];
    const warnings = [];
    for (const tool of tools ?? []) {
        if (tool.type === "function") {
            out.push({ name: tool.name, description: tool.description ?? "", parameters: tool.inputSchema });
        }
        else {
            warnings.push({ type: "unsupported", feature: `provider tool ${tool.id}`, details: "nonoka offers function tools only" });
        }
    }
    return { tools: out, warnings };
}
/** Keys of `providerOptions.nonoka` with a meaning of their own (not body fields). */
const PROVIDER_ONLY_OPTIONS = new Set(["purpose", "promptCacheKey", "toolStreaming"]);
/**
 * Whether the model may be Anthropic's Messages API: its spec says `anthropic:`, or no spec
 * is given (the bridge's configuration decides, and an adapter without the setting leaves
 * it out).
 */
function mayBeAnthropic(model) {
    return model === undefined || model.startsWith("anthropic:");
}
/**
 * The tools whose arguments Anthropic streams unbuffered (`eager_input_streaming`), as the
 * AI SDK's Anthropic provider decides it: a tool's own
 * `providerOptions.anthropic.eagerInputStreaming`, else, in a streamed call, every tool
 * unless the model's options say `toolStreaming: false`. OpenCode says so itself for a model
 * over that provider whose id does not name Claude (MiniMax, Kimi): a spec without
 * "claude" gets the same.
 */
function eagerTools(options, mine, context) {
    if (!mayBeAnthropic(context.model))
        return [];
    const claude = context.model === undefined || context.model.toLowerCase().includes("claude");
    const byDefault = context.streamed === true && claude && mine["toolStreaming"] !== false;
    const out = [];
    for (const tool of options.tools ?? []) {
        if (tool.type !== "function")
            continue;
        const own = tool.providerOptions?.["anthropic"]?.["eagerInputStreaming"];
        if (typeof own === "boolean" ? own : byDefault)
            out.push(tool.name);
    }
    return out;
}
/**
 * The host's own id of the conversation: OpenCode puts its session id in the provider's
 * options as `promptCacheKey` when the provider is configured with `setCacheKey: true`
 * (`nonoka opencode init` writes it), and sends it as the `x-session-id` header.
 */
export function hostSessionId(options, providerName = NONOKA_METADATA) {
    for (const name of new Set([providerName, NONOKA_METADATA])) {
        const key = options.providerOptions?.[name]?.["promptCacheKey"];
        if (typeof key === "string" && key.trim() !== "")
            return key.trim().slice(0, 256);
    }
    for (const [name, value] of Object.entries(options.headers ?? {})) {
        if (name.toLowerCase() === "x-session-id" && typeof value === "string" && value.trim() !== "") {
            return value.trim().slice(0, 256);
        }
    }
    return undefined;
}
/** Header names that carry credentials: never sent to the bridge, whatever the host set. */
const CREDENTIAL_HEADERS = new Set(["authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "x-goog-api-key"]);
/**
 * The request headers the host gave this call (AI SDK `headers`: OpenCode's `x-session-id`,
 * `x-session-affinity`, `x-parent-session-id` of a subagent, its `User-Agent`, a model's
 * configured headers such as `anthropic-beta`), as the protocol's `headers`, without
 * credentials. The bridge forwards the ones its allow-list names to the model endpoint.
 */
export function hostHeaders(options) {
    const out = {};
    for (const [name, value] of Object.entries(options.headers ?? {})) {
        if (typeof value !== "string" || CREDENTIAL_HEADERS.has(name.toLowerCase()))
            continue;
        out[name.toLowerCase()] = value;
    }
    return Object.keys(out).length > 0 ? out : undefined;
}
/** A subagent's parent: the host session named by `x-parent-session-id`. */
export function hostParentSessionId(options) {
    for (const [name, value] of Object.entries(options.headers ?? {})) {
        if (name.toLowerCase() === "x-parent-session-id" && typeof value === "string" && value.trim() !== "") {
            return value.trim().slice(0, 256);
        }
    }
    return undefined;
}
/**
 * The call options as the protocol's `options`, the way the AI SDK's openai-compatible
 * provider puts them in a request body: `maxOutputTokens` → `max_tokens`, `temperature`,
 * `topP` → `top_p`, `stopSequences` → `stop`, `seed`, `responseFormat` → `response_format`,
 * `toolChoice` → `tool_choice` (only with tools), penalties → `extra`; the provider options
 * under this provider's name (`providerOptions.nonoka`, where OpenCode puts a model's
 * `options`): `reasoningEffort` → `reasoning_effort`, `textVerbosity` → `verbosity`, and
 * every other field into `extra` by its own name, as that provider adds them to the body.
 * What only Anthropic's Messages API takes goes in fields of its own, which the bridge's
 * other adapters leave out: `topK` → `top_k` (for an `anthropic:` model, or when the bridge's
 * configuration decides; for any other model it has no Chat Completions field and is dropped
 * with a warning, as there), and the tools whose input streams unbuffered
 * (`eager_input_streaming`, `eagerTools`).
 */
export function toCallOptions(options, providerName = NONOKA_METADATA, context = {}) {
    const out = {};
    const extra = {};
    const warnings = [];
    if (options.maxOutputTokens !== undefined)
        out.max_tokens = options.maxOutputTokens;
    if (options.temperature !== undefined)
        out.temperature = options.temperature;
    if (options.topP !== undefined)
        out.top_p = options.topP;
    if (options.topK !== undefined) {
        if (mayBeAnthropic(context.model) && Number.isInteger(options.topK) && options.topK >= 0)
            out.top_k = options.topK;
        else
            warnings.push({ type: "unsupported", feature: "topK" });
    }
    if (options.frequencyPenalty !== undefined)
        extra["frequency_penalty"] = options.frequencyPenalty;
    if (options.presencePenalty !== undefined)
        extra["presence_penalty"] = options.presencePenalty;
    if (options.stopSequences !== undefined)
        out.stop = [...options.stopSequences];
    if (options.seed !== undefined)
        out.seed = options.seed;
    const mine = {};
    for (const name of new Set([NONOKA_METADATA, providerName]))
        Object.assign(mine, options.providerOptions?.[name] ?? {});
    if (options.responseFormat?.type === "json") {
        const format = options.responseFormat;
        out.response_format =
            format.schema !== undefined
                ? {
                    type: "json_schema",
                    json_schema: {
                        schema: format.schema,
                        strict: mine["strictJsonSchema"] !== false,
                        name: format.name ?? "response",
                        ...(format.description !== undefined ? { description: format.description } : {}),
                    },
                }
                : { type: "json_object" };
    }
    const choice = options.toolChoice;
    if (choice !== undefined && (options.tools ?? []).length > 0) {
        out.tool_choice = choice.type === "tool" ? { type: "function", function: { name: choice.toolName } } : choice.type;
    }
    for (const [key, value] of Object.entries(mine)) {
        if (value === undefined || PROVIDER_ONLY_OPTIONS.has(key))
            continue;
        if (key === "reasoningEffort" && typeof value === "string")
            out.reasoning_effort = value;
        else if (key === "textVerbosity")
            extra["verbosity"] = value;
        else if (key === "strictJsonSchema")
            continue; // shapes response_format above
        else
            extra[key] = value;
    }
    const eager = eagerTools(options, mine, context);
    if (eager.length > 0)
        out.eager_input_streaming = eager;
    if (Object.keys(extra).length > 0)
        out.extra = extra;
    return { options: Object.keys(out).length > 0 ? out : undefined, warnings };
}
/** Whether a request carries anything only a bridge with capability `parts` understands. */
export function needsParts(messages, options) {
    if (options !== undefined)
        return true;
    return messages.some((m) => (m.parts ?? null) !== null ||
        (m.reasoning ?? null) !== null ||
        (m.provider_metadata ?? null) !== null ||
        (m.tool_calls ?? []).some((c) => (c.provider_metadata ?? null) !== null));
}
/** The `nonoka` metadata the host sent back with a part, when there is any. */
export function nonokaMetadata(options) {
    const value = options?.[NONOKA_METADATA];
    if (value === undefined || value === null || typeof value !== "object")
        return undefined;
    const out = {};
    const kind = value["kind"];
    if (kind === "reasoning" || kind === "notice")
        out.kind = kind;
    const own = value["provider_metadata"];
    if (isObject(own))
        out.provider_metadata = own;
    const message = value["message_provider_metadata"];
    if (isObject(message))
        out.message_provider_metadata = message;
    return out;
}
/** `NonokaPartMetadata` as the providerMetadata of a streamed part. */
export function partMetadata(metadata) {
    const value = {};
    if (metadata.kind !== undefined)
        value["kind"] = metadata.kind;
    if (metadata.provider_metadata !== undefined)
        value["provider_metadata"] = metadata.provider_metadata;
    if (metadata.message_provider_metadata !== undefined)
        value["message_provider_metadata"] = metadata.message_provider_metadata;
    return { [NONOKA_METADATA]: value };
}
/** `providerOptions.openaiCompatible` of a message or part: fields for the wire message. */
function hostFields(options) {
    const fields = options?.[HOST_OPENAI_COMPATIBLE];
    return isObject(fields) && Object.keys(fields).length > 0 ? { ...fields } : undefined;
}
/** Add a message's `providerOptions.openaiCompatible` to its protocol `provider_metadata`. */
function withHostFields(message, options) {
    const host = hostFields(options);
    if (host === undefined)
        return;
    const current = message.provider_metadata ?? {};
    const mine = current[OPENAI_COMPATIBLE];
    message.provider_metadata = { ...current, [OPENAI_COMPATIBLE]: { ...(isObject(mine) ? mine : {}), ...host } };
}
function isObject(value) {
    return typeof value === "object" && value !== null && !Array.isArray(value);
}
const TITLE_SYSTEM = /\btitle generator\b/i;
const TITLE_USER = /^\s*generate a (?:short |brief )?title for (?:this|the following) conversation/i;
const COMPACTION_SYSTEM = /\bcontext summarization agent\b/i;
const COMPACTION_USER = /^\s*here is the conversation so far:/i;
/**
 * Whether a call is a chat step, the host's thread-title request, or its compaction request.
 *
 * OpenCode asks for a title with a call that offers no tools, whose system prompt begins
 * "You are a title generator" and whose user message starts "Generate a title for this
 * conversation:". It compacts (`/compact`, or automatically near the context limit) with a
 * call that offers no tools, whose system prompt begins "You are a context summarization
 * agent" and whose one user message starts "Here is the conversation so far:". A call with
 * tools is always chat. `providerOptions.nonoka.purpose` (or the provider's own name)
 * overrides the guess.
 */
export function detectPurpose(options, providerName = "nonoka") {
    for (const name of new Set([providerName, "nonoka"])) {
        const explicit = options.providerOptions?.[name]?.["purpose"];
        if (explicit === "chat" || explicit === "title" || explicit === "compaction")
            return explicit;
    }
    if ((options.tools ?? []).length > 0)
        return "chat";
    for (const message of options.prompt) {
        if (message.role === "system" && TITLE_SYSTEM.test(message.content))
            return "title";
        if (message.role === "system" && COMPACTION_SYSTEM.test(message.content))
            return "compaction";
        if (message.role === "user") {
            for (const part of message.content) {
                if (part.type !== "text")
                    continue;
                if (TITLE_USER.test(part.text))
                    return "title";
                if (COMPACTION_USER.test(part.text))
                    return "compaction";
            }
        }
    }
    return "chat";
}
/** The JSON text of a tool call's input (the prompt holds it parsed). */
function jsonText(input) {
    if (input === undefined)
        return "{}";
    return JSON.stringify(input);
}
/**
 * A tool result's text, as the AI SDK's openai-compatible provider writes it into a `tool`
 * message (a `content` output's files go in `parts`: `toolOutputParts`).
 */
export function toolOutputText(output) {
    switch (output.type) {
        case "text":
        case "error-text":
            return output.value;
        case "json":
        case "error-json":
            return JSON.stringify(output.value);
        case "execution-denied":
            return output.reason ?? "Tool call execution denied.";
        case "content":
            return output.value
                .filter((item) => item.type === "text")
                .map((item) => item.text)
                .join("\n");
    }
}
/** A file in an assistant message (the model generated it): named in the text. */
function describeFile(part) {
    const name = part.filename ?? "attachment";
    const where = part.data instanceof URL ? ` at ${part.data.href}` : "";
    return `[file ${name} (${part.mediaType})${where}]`;
}

/**
 * From the AI SDK's call options to the protocol's request fields.
 *
 * The host (OpenCode) owns its tools: it runs them and sends their results back in the next
 * call's history, which arrives here as `tool` messages answering the assistant's
 * `tool_call_id`s. Calls nonoka ran itself (provider-executed) are left out of the history:
 * the session already holds their results.
 */

import type {
  LanguageModelV3CallOptions,
  LanguageModelV3FilePart,
  LanguageModelV3Prompt,
  LanguageModelV3ToolResultOutput,
  SharedV3Warning,
} from "@ai-sdk/provider";

import type { HostTool, ProtocolMessage, ProtocolToolCall, Purpose } from "./protocol.js";

/** The protocol's history for an AI SDK prompt, oldest first. */
export function toProtocolMessages(prompt: LanguageModelV3Prompt): ProtocolMessage[] {
  const messages: ProtocolMessage[] = [];
  for (const message of prompt) {
    switch (message.role) {
      case "system":
        messages.push({ role: "system", content: message.content });
        break;
      case "user": {
        const texts = message.content.map((part) => (part.type === "text" ? part.text : describeFile(part)));
        messages.push({ role: "user", content: texts.join("\n") });
        break;
      }
      case "assistant": {
        let text = "";
        const calls: ProtocolToolCall[] = [];
        for (const part of message.content) {
          if (part.type === "text") {
            text += part.text;
          } else if (part.type === "tool-call" && part.providerExecuted !== true) {
            calls.push({ id: part.toolCallId, name: part.toolName, arguments: jsonText(part.input) });
          } else if (part.type === "file") {
            text += describeFile(part);
          }
          // reasoning, provider-executed calls and their results: nothing the session lacks
        }
        const out: ProtocolMessage = { role: "assistant", content: text };
        if (calls.length > 0) out.tool_calls = calls;
        messages.push(out);
        break;
      }
      case "tool":
        for (const part of message.content) {
          if (part.type === "tool-result") {
            messages.push({ role: "tool", content: toolOutputText(part.output), tool_call_id: part.toolCallId });
          }
        }
        break;
    }
  }
  return messages;
}

/** Host tools for the request, and warnings for those the bridge cannot offer. */
export function toHostTools(tools: LanguageModelV3CallOptions["tools"]): { tools: HostTool[]; warnings: SharedV3Warning[] } {
  const out: HostTool[] = [];
  const warnings: SharedV3Warning[] = [];
  for (const tool of tools ?? []) {
    if (tool.type === "function") {
      out.push({ name: tool.name, description: tool.description ?? "", parameters: tool.inputSchema as Record<string, unknown> });
    } else {
      warnings.push({ type: "unsupported", feature: `provider tool ${tool.id}`, details: "nonoka offers function tools only" });
    }
  }
  return { tools: out, warnings };
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
export function detectPurpose(options: LanguageModelV3CallOptions, providerName = "nonoka"): Purpose {
  for (const name of new Set([providerName, "nonoka"])) {
    const explicit = options.providerOptions?.[name]?.["purpose"];
    if (explicit === "chat" || explicit === "title" || explicit === "compaction") return explicit;
  }
  if ((options.tools ?? []).length > 0) return "chat";
  for (const message of options.prompt) {
    if (message.role === "system" && TITLE_SYSTEM.test(message.content)) return "title";
    if (message.role === "system" && COMPACTION_SYSTEM.test(message.content)) return "compaction";
    if (message.role === "user") {
      for (const part of message.content) {
        if (part.type !== "text") continue;
        if (TITLE_USER.test(part.text)) return "title";
        if (COMPACTION_USER.test(part.text)) return "compaction";
      }
    }
  }
  return "chat";
}

/** The JSON text of a tool call's input (the prompt holds it parsed). */
function jsonText(input: unknown): string {
  if (input === undefined) return "{}";
  return JSON.stringify(input);
}

/** A tool result as the text the model reads. */
export function toolOutputText(output: LanguageModelV3ToolResultOutput): string {
  switch (output.type) {
    case "text":
    case "error-text":
      return output.value;
    case "json":
    case "error-json":
      return JSON.stringify(output.value);
    case "execution-denied":
      return output.reason ? `Tool execution denied: ${output.reason}` : "Tool execution denied.";
    case "content":
      return output.value
        .map((item) => (item.type === "text" ? item.text : `[${item.type} omitted: nonoka passes text only]`))
        .join("\n");
  }
}

/** Text files are inlined; anything else is named, since the protocol carries text only. */
function describeFile(part: LanguageModelV3FilePart): string {
  const name = part.filename ?? "attachment";
  if (part.mediaType.startsWith("text/") && !(part.data instanceof URL)) {
    const text = typeof part.data === "string" ? Buffer.from(part.data, "base64").toString("utf8") : Buffer.from(part.data).toString("utf8");
    return `[file ${name} (${part.mediaType})]\n${text}`;
  }
  const where = part.data instanceof URL ? ` at ${part.data.href}` : "";
  return `[file ${name} (${part.mediaType})${where} omitted: nonoka passes text only]`;
}

// The AI SDK's own tool loop against nonoka serve: `read_note` runs in this process,
// generateText or streamText sends its results back, at most four steps.
//
//   node loop.mjs '{"baseURL": "http://127.0.0.1:8378/v1", "apiKey": "k",
//                   "provider": "responses" | "chat" | "compatible",
//                   "call": "generate" | "stream", "store": true | false | null,
//                   "question": "..."}'
//
// Prints one JSON line: the answer, each step's tool calls, results, reasoning and
// finish reason, and the response ids the provider reported.
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";

const options = JSON.parse(process.argv[2]);

function model() {
  const { baseURL, apiKey } = options;
  if (options.provider === "compatible") {
    return createOpenAICompatible({ name: "nonoka", baseURL, apiKey })("nonoka-serve");
  }
  const openai = createOpenAI({ baseURL, apiKey });
  return options.provider === "chat" ? openai.chat("gpt-4o-mini") : openai("gpt-4o-mini");
}

const readNote = tool({
  description: "Read a note.",
  inputSchema: jsonSchema({
    type: "object",
    properties: { name: { type: "string" } },
    required: ["name"],
    additionalProperties: false,
  }),
  execute: async ({ name }) => `note ${name}: ${name.toUpperCase()}-CONTENT`,
});

const settings = {
  model: model(),
  tools: { read_note: readNote },
  stopWhen: stepCountIs(4),
  maxRetries: 0,
  prompt: options.question,
  ...(options.store === null || options.store === undefined
    ? {}
    : { providerOptions: { openai: { store: options.store } } }),
};

async function run() {
  if (options.call === "stream") {
    const streamed = streamText({ ...settings, onError: ({ error }) => { throw error; } });
    const parts = [];
    for await (const part of streamed.fullStream) {
      if (part.type === "error") throw part.error;
      parts.push(part.type);
    }
    return { text: await streamed.text, steps: await streamed.steps, parts };
  }
  const result = await generateText(settings);
  return { text: result.text, steps: result.steps, parts: [] };
}

try {
  const { text, steps, parts } = await run();
  const report = {
    text,
    parts,
    steps: steps.map((step) => ({
      finishReason: step.finishReason,
      text: step.text,
      reasoning: step.reasoningText ?? "",
      toolCalls: step.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
      toolResults: step.toolResults.map((r) => ({ id: r.toolCallId, output: r.output })),
      responseId: step.providerMetadata?.openai?.responseId ?? step.response?.id ?? null,
    })),
  };
  process.stdout.write(JSON.stringify(report) + "\n");
} catch (error) {
  process.stderr.write(`loop.mjs: ${error?.stack ?? error}\n`);
  if (error?.responseBody) process.stderr.write(`response body: ${error.responseBody}\n`);
  if (error?.requestBodyValues) {
    process.stderr.write(`request: ${JSON.stringify(error.requestBodyValues)}\n`);
  }
  process.exit(1);
}

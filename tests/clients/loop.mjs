// The AI SDK's own tool loop against nonoka serve: `read_note` runs in this process,
// generateText or streamText sends its results back, at most four steps.
//
//   node loop.mjs '{"baseURL": "http://127.0.0.1:8378/v1", "apiKey": "k",
//                   "provider": "responses" | "chat" | "compatible",
//                   "call": "generate" | "stream", "store": true | false | null,
//                   "question": "...", "turns": 1, "conversation": false,
//                   "system": "..." (optional)}'
//
// With "turns" above 1 the question is asked again after each answer, continuing the
// last answer's response by the provider's previousResponseId (the Responses API's
// way to go on with a conversation). Prints one JSON line: each turn's answer, its
// steps' tool calls, results, reasoning and finish reason, and their response ids.
// With "conversation" a conversation is made first (POST /conversations) and every turn
// runs in it (the provider's conversation option) instead.
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

async function newConversation() {
  const made = await fetch(`${options.baseURL}/conversations`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${options.apiKey}` },
    body: "{}",
  });
  if (!made.ok) throw new Error(`POST /conversations: ${made.status} ${await made.text()}`);
  return (await made.json()).id;
}

const conversation = options.conversation ? await newConversation() : null;

function settings(previousResponseId) {
  const openai = {
    ...(options.store === null || options.store === undefined ? {} : { store: options.store }),
    ...(previousResponseId && !conversation ? { previousResponseId } : {}),
    ...(conversation ? { conversation } : {}),
  };
  return {
    model: model(),
    tools: { read_note: readNote },
    stopWhen: stepCountIs(4),
    maxRetries: 0,
    prompt: options.question,
    ...(options.system ? { system: options.system } : {}),
    ...(Object.keys(openai).length ? { providerOptions: { openai } } : {}),
  };
}

async function run(previousResponseId) {
  const asked = settings(previousResponseId);
  if (options.call === "stream") {
    const streamed = streamText({ ...asked, onError: ({ error }) => { throw error; } });
    const parts = [];
    for await (const part of streamed.fullStream) {
      if (part.type === "error") throw part.error;
      parts.push(part.type);
    }
    return { text: await streamed.text, steps: await streamed.steps, parts };
  }
  const result = await generateText(asked);
  return { text: result.text, steps: result.steps, parts: [] };
}

function reported({ text, steps, parts }) {
  return {
    text,
    parts,
    steps: steps.map((step) => ({
      finishReason: step.finishReason,
      text: step.text,
      reasoning: step.reasoningText ?? "",
      toolCalls: step.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
      toolResults: step.toolResults.map((r) => ({ id: r.toolCallId, output: r.output })),
      responseId: step.providerMetadata?.openai?.responseId ?? null,
    })),
  };
}

try {
  const turns = [];
  let previous = null;
  for (let n = 0; n < (options.turns ?? 1); n++) {
    const turn = reported(await run(previous));
    turns.push(turn);
    previous = turn.steps.at(-1).responseId;
  }
  process.stdout.write(JSON.stringify({ turns }) + "\n");
} catch (error) {
  process.stderr.write(`loop.mjs: ${error?.stack ?? error}\n`);
  if (error?.responseBody) process.stderr.write(`response body: ${error.responseBody}\n`);
  if (error?.requestBodyValues) {
    process.stderr.write(`request: ${JSON.stringify(error.requestBodyValues)}\n`);
  }
  process.exit(1);
}

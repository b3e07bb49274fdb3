// The Vercel AI SDK (`ai` with `@ai-sdk/openai`) as its users write it, against Tracon's /v1
// endpoints through both of its OpenAI models: Chat Completions (`provider.chat`) and the
// Responses API (`provider.responses`, what `provider(name)` is). For each: a tool it runs
// itself over several steps, whole and streamed, and a zod-typed object.
//
// Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL (…/v1), OPENAI_API_KEY and three
// agents that take a caller's tools and output format (see frameworks.mjs):
// TRACON_WEATHER_AGENT calls get_weather({"city":"Izmir"}), then answers "It is sunny in
// Izmir."; TRACON_JSON_AGENT answers {"city":"Izmir","celsius":24}. Exits non-zero on any
// mismatch.
import assert from "node:assert/strict";
import { createOpenAI } from "@ai-sdk/openai";
import { Output, generateObject, generateText, isStepCount, streamText, tool } from "ai";
import { z } from "zod";

const provider = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const weather = process.env.TRACON_WEATHER_AGENT;
const asJson = process.env.TRACON_JSON_AGENT;
const ANSWER = "It is sunny in Izmir.";
const PROMPT = "What is the weather in Izmir?";

/** get_weather as an AI SDK tool that the SDK runs itself; `ran` records each city asked. */
function weatherTool(ran) {
  return tool({
    description: "The weather in a city.",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      ran.push(city);
      return "sunny";
    },
  });
}

/** The first step called get_weather and got its result; the second answered. */
function assertToolSteps(steps, label) {
  assert.equal(steps.length, 2, `${label}: ${JSON.stringify(steps.map((s) => s.content))}`);
  const [called, answered] = steps;
  assert.equal(called.finishReason, "tool-calls", label);
  assert.deepEqual(
    called.toolCalls.map((c) => [c.toolName, c.input]),
    [["get_weather", { city: "Izmir" }]],
    label,
  );
  assert.deepEqual(
    called.toolResults.map((r) => [r.toolName, r.toolCallId, r.output]),
    [["get_weather", called.toolCalls[0].toolCallId, "sunny"]],
    label,
  );
  assert.equal(answered.finishReason, "stop", label);
  assert.equal(answered.text, ANSWER, label);
  assert.deepEqual(answered.toolCalls, [], label);
}

const Weather = z.object({ city: z.string(), celsius: z.number() });

for (const [label, model, jsonModel] of [
  ["chat", provider.chat(weather), provider.chat(asJson)],
  ["responses", provider(weather), provider(asJson)],
]) {
  // 1. generateText runs the tool between two model calls and ends on the answer.
  const ran = [];
  const generated = await generateText({
    model,
    prompt: PROMPT,
    tools: { get_weather: weatherTool(ran) },
    stopWhen: isStepCount(5),
    maxRetries: 0,
  });
  assert.equal(generated.text, ANSWER, label);
  assert.equal(generated.finishReason, "stop", label);
  assert.deepEqual(ran, ["Izmir"], label);
  assertToolSteps(generated.steps, `${label} generateText`);
  // The messages it would send on: the call, the tool's result, and the answer.
  assert.deepEqual(
    generated.responseMessages.map((m) => [m.role, m.content.map((p) => p.type)]),
    [
      ["assistant", ["tool-call"]],
      ["tool", ["tool-result"]],
      ["assistant", ["text"]],
    ],
    `${label}: ${JSON.stringify(generated.responseMessages)}`,
  );

  // 2. streamText: the same steps, the answer streamed.
  const streamedRan = [];
  const errors = [];
  const streamed = streamText({
    model,
    prompt: PROMPT,
    tools: { get_weather: weatherTool(streamedRan) },
    stopWhen: isStepCount(5),
    maxRetries: 0,
    onError: ({ error }) => errors.push(error),
  });
  let text = "";
  for await (const delta of streamed.textStream) text += delta;
  assert.deepEqual(errors, [], label);
  assert.equal(text, ANSWER, label);
  assert.equal(await streamed.text, ANSWER, label);
  assert.deepEqual(streamedRan, ["Izmir"], label);
  assertToolSteps(await streamed.steps, `${label} streamText`);

  // 3. A zod-typed object, through generateObject and through generateText's output.
  const { object } = await generateObject({ model: jsonModel, schema: Weather, prompt: PROMPT, maxRetries: 0 });
  assert.deepEqual(object, { city: "Izmir", celsius: 24 }, label);
  const { output } = await generateText({
    model: jsonModel,
    output: Output.object({ schema: Weather, name: "weather" }),
    prompt: PROMPT,
    maxRetries: 0,
  });
  assert.deepEqual(output, { city: "Izmir", celsius: 24 }, label);
}

console.log("sdk frameworks: ok");

// A caller's own tools, tool_choice, structured output and the newer routes through the
// official OpenAI Node SDK, as its users write them (see frameworks.py for the Python SDK).
//
// Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL (…/v1), OPENAI_API_KEY and three
// agents that take a caller's tools and output format: TRACON_WEATHER_AGENT (its model calls
// get_weather({"city":"Izmir"}), then, once the conversation holds an assistant message,
// answers "It is sunny in Izmir."), TRACON_PLAIN_AGENT (answers "No tools needed.") and
// TRACON_JSON_AGENT (answers {"city":"Izmir","celsius":24}). Exits non-zero on any mismatch.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { zodFunction, zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";

const client = new OpenAI({ maxRetries: 0 }); // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
const weather = process.env.TRACON_WEATHER_AGENT;
const plain = process.env.TRACON_PLAIN_AGENT;
const asJson = process.env.TRACON_JSON_AGENT;

const PARAMETERS = {
  type: "object",
  properties: { city: { type: "string" } },
  required: ["city"],
  additionalProperties: false,
};
const TOOL = {
  type: "function",
  function: { name: "get_weather", description: "The weather in a city.", parameters: PARAMETERS },
};
const ASK = [{ role: "user", content: "What is the weather in Izmir?" }];
const ANSWER = "It is sunny in Izmir.";

/** The one get_weather call of a completion that stopped for it. */
function weatherCall(completion) {
  const choice = completion.choices[0];
  assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(completion));
  assert.equal(choice.message.tool_calls.length, 1, JSON.stringify(choice.message));
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Izmir" });
  assert.ok(call.id, JSON.stringify(call));
  return call;
}

// 1. The caller's tool comes back as a tool call; the caller runs it and the turn goes on.
const first = await client.chat.completions.create({ model: weather, messages: ASK, tools: [TOOL] });
const call = weatherCall(first);
const answered = [
  ...ASK,
  first.choices[0].message,
  { role: "tool", tool_call_id: call.id, content: "sunny, 24 C" },
];
const second = await client.chat.completions.create({ model: weather, messages: answered, tools: [TOOL] });
assert.equal(second.choices[0].finish_reason, "stop", JSON.stringify(second));
assert.equal(second.choices[0].message.content, ANSWER);
assert.ok(!second.choices[0].message.tool_calls?.length, JSON.stringify(second));

// 2. Streamed: the stream helper assembles the tool_calls deltas into the same call …
const stream = client.chat.completions.stream({ model: weather, messages: ASK, tools: [TOOL] });
const argumentDeltas = [];
stream.on("tool_calls.function.arguments.delta", (e) => argumentDeltas.push(e.arguments_delta));
const rawToolDeltas = [];
for await (const chunk of stream) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) rawToolDeltas.push(d);
}
const streamedFinal = await stream.finalChatCompletion();
const streamedCall = weatherCall(streamedFinal);
assert.equal(rawToolDeltas[0].index, 0, JSON.stringify(rawToolDeltas));
assert.equal(rawToolDeltas[0].function.name, "get_weather", JSON.stringify(rawToolDeltas));
assert.deepEqual(JSON.parse(argumentDeltas.join("")), { city: "Izmir" });

// … which the caller answers, and the final text streams back.
const answerStream = client.chat.completions.stream({
  model: weather,
  tools: [TOOL],
  messages: [
    ...ASK,
    streamedFinal.choices[0].message,
    { role: "tool", tool_call_id: streamedCall.id, content: "sunny, 24 C" },
  ],
});
let streamedText = "";
answerStream.on("content.delta", (e) => (streamedText += e.delta));
const streamedAnswer = await answerStream.finalChatCompletion();
assert.equal(streamedText, ANSWER);
assert.equal(streamedAnswer.choices[0].message.content, ANSWER);
assert.equal(streamedAnswer.choices[0].finish_reason, "stop");

// runTools, streamed: the SDK runs the zod-typed tool itself and asks again with its result.
const ran = [];
const runner = client.chat.completions.runTools({
  model: weather,
  messages: ASK,
  stream: true,
  tools: [
    zodFunction({
      name: "get_weather",
      description: "The weather in a city.",
      parameters: z.object({ city: z.string() }),
      function: ({ city }) => {
        ran.push(city);
        return "sunny, 24 C";
      },
    }),
  ],
});
assert.equal(await runner.finalContent(), ANSWER);
assert.deepEqual(ran, ["Izmir"]);
assert.deepEqual(
  runner.messages.map((m) => m.role),
  ["user", "assistant", "tool", "assistant"],
);

// 3. tool_choice: none answers in text; required and a named function call the tool.
const none = await client.chat.completions.create({ model: plain, messages: ASK, tools: [TOOL], tool_choice: "none" });
assert.equal(none.choices[0].message.content, "No tools needed.", JSON.stringify(none));
assert.equal(none.choices[0].finish_reason, "stop");
assert.ok(!none.choices[0].message.tool_calls?.length, JSON.stringify(none));
for (const toolChoice of ["required", { type: "function", function: { name: "get_weather" } }]) {
  const forced = await client.chat.completions.create({
    model: weather,
    messages: ASK,
    tools: [TOOL],
    tool_choice: toolChoice,
    parallel_tool_calls: false,
  });
  weatherCall(forced);
}

// 4. .parse() with a zod schema: the caller's response format, checked by the server.
const Weather = z.object({ city: z.string(), celsius: z.number().int() });
const parsed = await client.chat.completions.parse({
  model: asJson,
  messages: ASK,
  response_format: zodResponseFormat(Weather, "weather"),
});
assert.deepEqual(parsed.choices[0].message.parsed, { city: "Izmir", celsius: 24 });
// The same through the Responses API's text.format.
const parsedResponse = await client.responses.parse({
  model: asJson,
  input: "What is the weather in Izmir?",
  text: { format: zodTextFormat(Weather, "weather") },
});
assert.deepEqual(parsedResponse.output_parsed, { city: "Izmir", celsius: 24 });
assert.equal(parsedResponse.text.format.name, "weather", JSON.stringify(parsedResponse.text));

// 5. models.retrieve: an agent by name; an unknown one is the SDK's NotFoundError.
const model = await client.models.retrieve(weather);
assert.equal(model.id, weather);
assert.equal(model.object, "model");
await assert.rejects(
  client.models.retrieve("no-such-agent"),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found",
);

// 6. Responses: a function tool round trip, the input items, and deleting the response.
const RESPONSES_TOOL = {
  type: "function",
  name: "get_weather",
  description: "The weather in a city.",
  parameters: PARAMETERS,
  strict: true,
};
const asked = await client.responses.create({ model: weather, input: "Weather in Izmir?", tools: [RESPONSES_TOOL] });
assert.equal(asked.status, "completed", JSON.stringify(asked));
const calls = asked.output.filter((item) => item.type === "function_call");
assert.equal(calls.length, 1, JSON.stringify(asked.output));
assert.equal(calls[0].name, "get_weather");
assert.deepEqual(JSON.parse(calls[0].arguments), { city: "Izmir" });
assert.ok(calls[0].call_id, JSON.stringify(calls[0]));
assert.equal(asked.tools[0].name, "get_weather", JSON.stringify(asked.tools));

const done = await client.responses.create({
  model: weather,
  previous_response_id: asked.id,
  tools: [RESPONSES_TOOL],
  input: [{ type: "function_call_output", call_id: calls[0].call_id, output: "sunny, 24 C" }],
});
assert.equal(done.output_text, ANSWER, JSON.stringify(done.output));
assert.equal(done.previous_response_id, asked.id);

// Streamed, the call arrives as a function_call item whose arguments stream as deltas.
const streamedAsk = client.responses.stream({ model: weather, input: "Weather in Izmir?", tools: [RESPONSES_TOOL] });
let argumentsStreamed = "";
streamedAsk.on("response.function_call_arguments.delta", (e) => (argumentsStreamed += e.delta));
const streamedAsked = await streamedAsk.finalResponse();
const streamedCalls = streamedAsked.output.filter((item) => item.type === "function_call");
assert.deepEqual(
  streamedCalls.map((c) => [c.name, JSON.parse(c.arguments)]),
  [["get_weather", { city: "Izmir" }]],
  JSON.stringify(streamedAsked.output),
);
assert.deepEqual(JSON.parse(argumentsStreamed), { city: "Izmir" });

const items = [];
for await (const item of client.responses.inputItems.list(asked.id)) items.push(item);
assert.ok(
  items.some(
    (i) => i.type === "message" && i.role === "user" && i.content.some((c) => c.text === "Weather in Izmir?"),
  ),
  JSON.stringify(items),
);
// The answered response's input holds the tool's answer, as a function_call_output item.
const doneItems = [];
for await (const item of client.responses.inputItems.list(done.id, { order: "asc" })) doneItems.push(item);
assert.ok(
  doneItems.some((i) => i.type === "function_call_output" && i.call_id === calls[0].call_id),
  JSON.stringify(doneItems),
);

await client.responses.delete(asked.id);
await assert.rejects(
  client.responses.retrieve(asked.id),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
);
await assert.rejects(client.responses.inputItems.list(asked.id), (e) => e instanceof OpenAI.NotFoundError);
await assert.rejects(client.responses.delete(asked.id), (e) => e instanceof OpenAI.NotFoundError);

console.log("sdk frameworks: ok");

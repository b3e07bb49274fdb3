// The official OpenAI Node SDK against Tracon's /v1 endpoints.
//
// Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL (…/v1), OPENAI_API_KEY (a Tracon API
// key scoped RunsWrite) and TRACON_AGENT. Exits non-zero on any mismatch.
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI(); // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
const agent = process.env.TRACON_AGENT;

const completion = await client.chat.completions.create({
  model: agent,
  messages: [{ role: "user", content: "Where is order 4182?" }],
});
assert.equal(completion.object, "chat.completion");
assert.equal(completion.choices[0].message.content, "Order 4182 ships tomorrow.");
assert.equal(completion.choices[0].finish_reason, "stop");
assert.equal(completion.usage.total_tokens, 16);

const stream = await client.chat.completions.create({
  model: agent,
  messages: [{ role: "user", content: "And order 77?" }],
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let usage = null;
for await (const chunk of stream) {
  if (chunk.choices.length) text += chunk.choices[0].delta.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(text, "Order 4182 ships tomorrow.");
assert.equal(usage.total_tokens, 16);

const models = [];
for await (const m of client.models.list()) models.push(m.id);
assert.ok(models.includes(agent), models.join(","));

await assert.rejects(
  client.chat.completions.create({ model: "no-such-agent", messages: [{ role: "user", content: "hi" }] }),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
);
const bad = new OpenAI({ apiKey: "trk_000000000000_not-a-real-key" });
await assert.rejects(
  bad.chat.completions.create({ model: agent, messages: [{ role: "user", content: "hi" }] }),
  (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
);
console.log("node sdk: ok");

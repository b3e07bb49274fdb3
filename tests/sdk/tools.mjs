// Client-side tools and a conflict through the official OpenAI Node SDK (see tools.py).
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI(); // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
const agent = process.env.TRACON_TOOL_AGENT;

const messages = [{ role: "user", content: "What time is it where I am?" }];
const first = await client.chat.completions.create({ model: agent, messages });
const choice = first.choices[0];
assert.equal(choice.finish_reason, "tool_calls");
assert.equal(choice.message.tool_calls.length, 1);
const call = choice.message.tool_calls[0];
assert.equal(call.function.name, "get_local_time");
assert.deepEqual(JSON.parse(call.function.arguments), {});

messages.push(choice.message);
messages.push({ role: "tool", tool_call_id: call.id, content: "node-clock 10:42" });
const second = await client.chat.completions.create({ model: agent, messages });
assert.equal(second.choices[0].finish_reason, "stop");
assert.equal(second.choices[0].message.content, "Thanks, noted the time.");

const stream = await client.chat.completions.create({ model: agent, messages: messages.slice(0, 1), stream: true });
const names = [];
let finish = null;
for await (const chunk of stream) {
  for (const c of chunk.choices[0]?.delta?.tool_calls ?? []) names.push(c.function.name);
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
assert.deepEqual(names, ["get_local_time"]);
assert.equal(finish, "tool_calls");

await assert.rejects(
  client.chat.completions.create({
    model: process.env.TRACON_APPROVAL_AGENT,
    messages: [{ role: "user", content: "Cancel order 4182" }],
  }),
  (e) => e instanceof OpenAI.ConflictError && e.status === 409 && e.error?.type === "approval_required",
);

console.log("node sdk tools: ok");

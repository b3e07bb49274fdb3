// The official OpenAI Node SDK against Tracon's /v1/responses and /v1/conversations.
//
// Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL (…/v1), OPENAI_API_KEY (a Tracon API
// key scoped RunsWrite) and TRACON_AGENT; the one argument is a conversation of another
// tenant. The mock model answers by how many assistant messages it was sent ("First answer."
// with none, "Second answer." with one, "Third answer." with two), so an answer shows how much
// of the conversation the model saw. Exits non-zero on any mismatch.
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI(); // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
const agent = process.env.TRACON_AGENT;
const otherTenantsConversation = process.argv[2];

// Three turns chained with previous_response_id: whole, streamed, and through the stream helper.
const first = await client.responses.create({ model: agent, input: "My order is 4182.", instructions: "Answer briefly." });
assert.equal(first.object, "response");
assert.equal(first.status, "completed");
assert.ok(first.id.startsWith("resp_"), first.id);
assert.equal(first.output_text, "First answer.");
assert.equal(first.usage.total_tokens, 16);

const stream = await client.responses.create({
  model: agent,
  input: "When does it ship?",
  previous_response_id: first.id,
  stream: true,
});
const kinds = [];
let text = "";
let second = null;
for await (const event of stream) {
  kinds.push(event.type);
  if (event.type === "response.output_text.delta") text += event.delta;
  if (event.type === "response.completed") second = event.response;
}
assert.deepEqual(kinds.slice(0, 4), [
  "response.created",
  "response.in_progress",
  "response.output_item.added",
  "response.content_part.added",
]);
assert.deepEqual(kinds.slice(-4), [
  "response.output_text.done",
  "response.content_part.done",
  "response.output_item.done",
  "response.completed",
]);
assert.equal(text, "Second answer.");
assert.equal(second.previous_response_id, first.id);

const helper = client.responses.stream({ model: agent, input: "Thanks!", previous_response_id: second.id });
let streamed = "";
helper.on("response.output_text.delta", (e) => (streamed += e.delta));
const third = await helper.finalResponse();
assert.equal(streamed, "Third answer.");
assert.equal(third.output_text, "Third answer.");

const again = await client.responses.retrieve(third.id);
assert.equal(again.id, third.id);
assert.equal(again.output_text, "Third answer.");

// Conversations: a reservation, then its items grow with each response.
const conversation = await client.conversations.create({
  items: [{ type: "message", role: "user", content: "Hello" }],
});
assert.equal(conversation.object, "conversation");
assert.ok(conversation.id.startsWith("conv_"), conversation.id);
assert.equal((await client.conversations.retrieve(conversation.id)).id, conversation.id);
const answer = await client.responses.create({ model: agent, input: "Where is order 4182?", conversation: conversation.id });
assert.equal(answer.output_text, "First answer.");
assert.equal(answer.conversation.id, conversation.id);

const items = [];
for await (const item of client.conversations.items.list(conversation.id, { order: "asc", limit: 2 })) items.push(item);
assert.deepEqual(
  items.map((i) => [i.type, i.role, i.content[0].type, i.content[0].text]),
  [
    ["message", "user", "input_text", "Hello"],
    ["message", "user", "input_text", "Where is order 4182?"],
    ["message", "assistant", "output_text", "First answer."],
  ],
);

const deleted = await client.conversations.delete(conversation.id);
assert.deepEqual([deleted.id, deleted.object, deleted.deleted], [conversation.id, "conversation.deleted", true]);
await assert.rejects(
  client.conversations.retrieve(conversation.id),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
);

// Another tenant's conversation is not found, whichever way it is reached.
for (const reach of [
  () => client.conversations.retrieve(otherTenantsConversation),
  () => client.responses.create({ model: agent, input: "hi", conversation: otherTenantsConversation }),
]) {
  await assert.rejects(reach(), (e) => e instanceof OpenAI.NotFoundError && e.code === "conversation_not_found");
}
await assert.rejects(
  client.responses.create({ model: agent, input: "hi", previous_response_id: "resp_00000000000000000000000000000000" }),
  (e) => e instanceof OpenAI.NotFoundError && e.code === "previous_response_not_found",
);
console.log("node responses sdk: ok");

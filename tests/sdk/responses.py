"""The official OpenAI Python SDK against Tracon's /v1/responses and /v1/conversations.

Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL (…/v1), OPENAI_API_KEY (a Tracon API
key scoped RunsWrite) and TRACON_AGENT; the one argument is a conversation of another
tenant. The mock model answers by how many assistant messages it was sent ("First answer."
with none, "Second answer." with one, "Third answer." with two), so an answer shows how much
of the conversation the model saw. Exits non-zero (an AssertionError) on any mismatch.
"""

import os
import sys

import openai

client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
agent = os.environ["TRACON_AGENT"]
other_tenants_conversation = sys.argv[1]

# Three turns chained with previous_response_id: whole, streamed, and through the stream helper.
first = client.responses.create(model=agent, input="My order is 4182.", instructions="Answer briefly.")
assert first.object == "response" and first.status == "completed", first
assert first.id.startswith("resp_"), first.id
assert first.output_text == "First answer.", first.output_text
assert first.output[0].type == "message" and first.output[0].role == "assistant", first.output
assert first.usage.total_tokens == 16 and first.usage.input_tokens == 11, first.usage
assert first.instructions == "Answer briefly." and first.store is True, first

stream = client.responses.create(
    model=agent, input="When does it ship?", previous_response_id=first.id, stream=True
)
kinds, text, second = [], "", None
for event in stream:
    kinds.append(event.type)
    if event.type == "response.output_text.delta":
        text += event.delta
    if event.type == "response.completed":
        second = event.response
assert kinds[:4] == [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
], kinds
assert kinds[-4:] == [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
], kinds
assert text == "Second answer.", text
assert second is not None and second.output_text == "Second answer.", second
assert second.previous_response_id == first.id, second

with client.responses.stream(model=agent, input="Thanks!", previous_response_id=second.id) as helper:
    streamed = "".join(e.delta for e in helper if e.type == "response.output_text.delta")
    third = helper.get_final_response()
assert streamed == "Third answer." and third.output_text == "Third answer.", (streamed, third)

# Stored responses read back.
again = client.responses.retrieve(third.id)
assert again.id == third.id and again.output_text == "Third answer.", again
assert again.usage.total_tokens == 16, again.usage

# store=False keeps nothing to continue from.
unsaved = client.responses.create(model=agent, input="Off the record.", store=False)
assert unsaved.output_text == "First answer.", unsaved
try:
    client.responses.retrieve(unsaved.id)
    raise AssertionError("an unstored response was found")
except openai.NotFoundError as e:
    assert e.status_code == 404 and e.body["code"] == "response_not_found", e.body
try:
    client.responses.create(model=agent, input="Hm?", previous_response_id=unsaved.id)
    raise AssertionError("an unstored response was continued")
except openai.NotFoundError as e:
    assert e.body["code"] == "previous_response_not_found", e.body

# Conversations: a reservation, then its items grow with each response.
conversation = client.conversations.create(items=[{"type": "message", "role": "user", "content": "Hello"}])
assert conversation.object == "conversation" and conversation.id.startswith("conv_"), conversation
assert client.conversations.retrieve(conversation.id).id == conversation.id
answer = client.responses.create(model=agent, input="Where is order 4182?", conversation=conversation.id)
assert answer.output_text == "First answer.", answer.output_text
assert answer.conversation is not None and answer.conversation.id == conversation.id, answer
followup = client.responses.create(model=agent, input="And then?", conversation={"id": conversation.id})
assert followup.output_text == "Second answer.", followup.output_text

items = list(client.conversations.items.list(conversation.id, order="asc"))
assert [(i.type, i.role) for i in items] == [
    ("message", "user"),
    ("message", "user"),
    ("message", "assistant"),
    ("message", "user"),
    ("message", "assistant"),
], items
assert [i.content[0].text for i in items] == [
    "Hello",
    "Where is order 4182?",
    "First answer.",
    "And then?",
    "Second answer.",
], items
assert items[0].content[0].type == "input_text" and items[2].content[0].type == "output_text", items
# Newest first by default, two to a page: the SDK pages through them all.
paged = list(client.conversations.items.list(conversation.id, limit=2))
assert [i.id for i in paged] == [i.id for i in reversed(items)], paged

deleted = client.conversations.delete(conversation.id)
assert deleted.deleted is True and deleted.object == "conversation.deleted" and deleted.id == conversation.id
try:
    client.conversations.retrieve(conversation.id)
    raise AssertionError("a deleted conversation was found")
except openai.NotFoundError as e:
    assert e.status_code == 404, e

# Another tenant's conversation is not found, whichever way it is reached.
for reach in (
    lambda: client.conversations.retrieve(other_tenants_conversation),
    lambda: client.conversations.items.list(other_tenants_conversation),
    lambda: client.responses.create(model=agent, input="hi", conversation=other_tenants_conversation),
):
    try:
        reach()
        raise AssertionError("another tenant's conversation was reached")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.body["code"] == "conversation_not_found", e.body

# Refusals arrive as the SDK's typed errors.
try:
    client.responses.create(model=agent, input="hi", tools=[{"type": "function", "name": "x", "parameters": {}}])
    raise AssertionError("caller-declared tools were accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "tools", e.body

print("python responses sdk: ok")

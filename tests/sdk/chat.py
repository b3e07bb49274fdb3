"""The official OpenAI Python SDK against Tracon's /v1 endpoints.

Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL (…/v1), OPENAI_API_KEY (a Tracon API
key scoped RunsWrite) and TRACON_AGENT. Exits non-zero (an AssertionError) on any mismatch.
"""

import os

import openai

client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
agent = os.environ["TRACON_AGENT"]

# Not streamed.
completion = client.chat.completions.create(
    model=agent,
    messages=[
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Where is order 4182?"},
    ],
)
assert completion.object == "chat.completion", completion
assert completion.choices[0].message.content == "Order 4182 ships tomorrow.", completion
assert completion.choices[0].finish_reason == "stop", completion
assert completion.usage.total_tokens == 16, completion.usage
assert completion.id.startswith("chatcmpl-"), completion.id

# Streamed, with usage.
stream = client.chat.completions.create(
    model=agent,
    messages=[{"role": "user", "content": "And order 77?"}],
    stream=True,
    stream_options={"include_usage": True},
)
text, finish, usage = "", None, None
for chunk in stream:
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage:
        usage = chunk.usage
assert text == "Order 4182 ships tomorrow.", text
assert finish == "stop", finish
assert usage is not None and usage.total_tokens == 16, usage

# The agents are the models.
assert agent in [m.id for m in client.models.list()]

# Errors surface as the SDK's typed errors.
try:
    client.chat.completions.create(model="no-such-agent", messages=[{"role": "user", "content": "hi"}])
    raise AssertionError("an unknown agent was answered")
except openai.NotFoundError as e:
    assert e.status_code == 404 and e.body["type"] == "agent_not_found", e.body

try:
    client.chat.completions.create(model=agent, messages=[{"role": "user", "content": "hi"}], n=2)
    raise AssertionError("n=2 was answered")
except openai.BadRequestError as e:
    assert e.body["param"] == "n", e.body

bad = openai.OpenAI(api_key="trk_000000000000_not-a-real-key")
try:
    bad.chat.completions.create(model=agent, messages=[{"role": "user", "content": "hi"}])
    raise AssertionError("a bad key was accepted")
except openai.AuthenticationError as e:
    assert e.status_code == 401

print("python sdk: ok")

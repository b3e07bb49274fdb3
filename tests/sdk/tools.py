"""Client-side tools and a conflict through the official OpenAI Python SDK.

Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL, OPENAI_API_KEY, TRACON_TOOL_AGENT (an
agent whose model calls the client-side tool get_local_time) and TRACON_APPROVAL_AGENT (an
agent whose model calls a tool that needs a person's approval).
"""

import json
import os

import openai

client = openai.OpenAI()
agent = os.environ["TRACON_TOOL_AGENT"]

# The model calls the client-side tool: the SDK gets tool_calls and finish_reason tool_calls.
messages = [{"role": "user", "content": "What time is it where I am?"}]
first = client.chat.completions.create(model=agent, messages=messages)
choice = first.choices[0]
assert choice.finish_reason == "tool_calls", first
calls = choice.message.tool_calls
assert calls is not None and len(calls) == 1, choice.message
assert calls[0].function.name == "get_local_time", calls[0]
assert json.loads(calls[0].function.arguments) == {}, calls[0]

# The caller runs it and sends the answer back as a tool message: the turn goes on.
messages.append(choice.message.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": "python-clock 10:42"})
second = client.chat.completions.create(model=agent, messages=messages)
assert second.choices[0].finish_reason == "stop", second
assert second.choices[0].message.content == "Thanks, noted the time.", second

# Streamed: the call arrives as a tool_calls delta.
stream = client.chat.completions.create(model=agent, messages=messages[:1], stream=True)
names, finish = [], None
for chunk in stream:
    if chunk.choices:
        for call in chunk.choices[0].delta.tool_calls or []:
            names.append(call.function.name)
        finish = chunk.choices[0].finish_reason or finish
assert names == ["get_local_time"] and finish == "tool_calls", (names, finish)

# Responses: the call is a function_call output item; its output chains to that response.
asked = client.responses.create(model=agent, input="What time is it where I am?")
calls = [item for item in asked.output if item.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_local_time", asked.output
answered = client.responses.create(
    model=agent,
    previous_response_id=asked.id,
    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "python-responses 10:43"}],
)
assert answered.output_text == "Thanks, noted the time.", answered

# A run that stops for a person's approval is a 409: the SDK's ConflictError.
try:
    client.chat.completions.create(
        model=os.environ["TRACON_APPROVAL_AGENT"], messages=[{"role": "user", "content": "Cancel order 4182"}]
    )
    raise AssertionError("a run waiting for approval was answered")
except openai.ConflictError as e:
    assert e.status_code == 409 and e.body["type"] == "approval_required", e.body

print("python sdk tools: ok")

"""A caller's own tools, tool_choice, structured output and the newer routes through the
official OpenAI Python SDK, as framework users write them.

Run by tests/tests/openai_sdk.rs with OPENAI_BASE_URL, OPENAI_API_KEY and three agents that
take a caller's tools and output format: TRACON_WEATHER_AGENT (its model calls get_weather,
then answers "It is sunny in Izmir."), TRACON_PLAIN_AGENT (answers "No tools needed.") and
TRACON_JSON_AGENT (answers {"city": "Izmir", "celsius": 24}).
"""

import json
import os

import openai
import pydantic

client = openai.OpenAI()
weather = os.environ["TRACON_WEATHER_AGENT"]
plain = os.environ["TRACON_PLAIN_AGENT"]
as_json = os.environ["TRACON_JSON_AGENT"]

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Izmir?"}]

# The caller's tool comes back as a tool call; the caller runs it and the turn goes on.
first = client.chat.completions.create(model=weather, messages=ASK, tools=[TOOL])
choice = first.choices[0]
assert choice.finish_reason == "tool_calls", first
call = choice.message.tool_calls[0]
assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Izmir"}, call
messages = ASK + [
    choice.message.model_dump(exclude_none=True),
    {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"},
]
second = client.chat.completions.create(model=weather, messages=messages, tools=[TOOL])
assert second.choices[0].message.content == "It is sunny in Izmir.", second

# Streamed: the call arrives as tool_calls deltas the SDK's stream helper assembles.
with client.chat.completions.stream(model=weather, messages=ASK, tools=[TOOL]) as stream:
    final = stream.get_final_completion()
assert final.choices[0].finish_reason == "tool_calls", final
streamed_call = final.choices[0].message.tool_calls[0]
assert streamed_call.function.name == "get_weather", streamed_call
answered = ASK + [
    final.choices[0].message.model_dump(exclude_none=True, exclude={"parsed"}),
    {"role": "tool", "tool_call_id": streamed_call.id, "content": "sunny, 24 C"},
]
text = "".join(
    chunk.choices[0].delta.content or ""
    for chunk in client.chat.completions.create(model=weather, messages=answered, tools=[TOOL], stream=True)
    if chunk.choices
)
assert text == "It is sunny in Izmir.", text

# tool_choice: none answers in text; required and a named function call the tool.
none = client.chat.completions.create(model=plain, messages=ASK, tools=[TOOL], tool_choice="none")
assert none.choices[0].message.content == "No tools needed." and not none.choices[0].message.tool_calls, none
for choice_given in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
    forced = client.chat.completions.create(
        model=weather, messages=ASK, tools=[TOOL], tool_choice=choice_given, parallel_tool_calls=False
    )
    assert forced.choices[0].message.tool_calls[0].function.name == "get_weather", forced


# .parse() with a Pydantic model: the caller's response format, checked by the server.
class Weather(pydantic.BaseModel):
    city: str
    celsius: int


parsed = client.chat.completions.parse(model=as_json, messages=ASK, response_format=Weather)
assert parsed.choices[0].message.parsed == Weather(city="Izmir", celsius=24), parsed

# models.retrieve: an agent by name; an unknown one is the SDK's NotFoundError.
assert client.models.retrieve(weather).id == weather
try:
    client.models.retrieve("no-such-agent")
    raise AssertionError("an unknown model was found")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body

# Responses: a function tool round trip, the input items, and deleting the response.
RESPONSES_TOOL = {"type": "function", "name": "get_weather", **{k: v for k, v in TOOL["function"].items() if k != "name"}}
asked = client.responses.create(model=weather, input="What is the weather in Izmir?", tools=[RESPONSES_TOOL])
calls = [item for item in asked.output if item.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", asked
done = client.responses.create(
    model=weather,
    previous_response_id=asked.id,
    tools=[RESPONSES_TOOL],
    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}],
)
assert done.output_text == "It is sunny in Izmir.", done
items = client.responses.input_items.list(asked.id)
assert any(getattr(i, "role", None) == "user" for i in items.data), items
client.responses.delete(asked.id)
try:
    client.responses.retrieve(asked.id)
    raise AssertionError("a deleted response was found")
except openai.NotFoundError:
    pass

print("sdk frameworks: ok")

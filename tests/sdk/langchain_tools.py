"""LangChain's ChatOpenAI as its users write it: bind_tools with a tool round trip, and
with_structured_output with a Pydantic model. Same environment as frameworks.py."""

import os

import pydantic
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

base_url = os.environ["OPENAI_BASE_URL"]
api_key = os.environ["OPENAI_API_KEY"]


def model(agent: str) -> ChatOpenAI:
    return ChatOpenAI(model=agent, base_url=base_url, api_key=api_key, max_retries=0)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny, 24 C"


# bind_tools: the model's call comes back as tool_calls; the tool's answer continues the turn.
llm = model(os.environ["TRACON_WEATHER_AGENT"]).bind_tools([get_weather])
messages = [HumanMessage("What is the weather in Izmir?")]
ai = llm.invoke(messages)
assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather", ai
assert ai.tool_calls[0]["args"] == {"city": "Izmir"}, ai.tool_calls
messages += [ai, ToolMessage(get_weather.invoke(ai.tool_calls[0]["args"]), tool_call_id=ai.tool_calls[0]["id"])]
final = llm.invoke(messages)
assert final.content == "It is sunny in Izmir.", final

# Streamed, the call chunks add up to the same call.
streamed = None
for chunk in llm.stream([HumanMessage("What is the weather in Izmir?")]):
    streamed = chunk if streamed is None else streamed + chunk
assert streamed.tool_calls and streamed.tool_calls[0]["name"] == "get_weather", streamed


# with_structured_output: the caller's schema, the server's check.
class Weather(pydantic.BaseModel):
    """The weather in a city."""

    city: str
    celsius: int


structured = model(os.environ["TRACON_JSON_AGENT"]).with_structured_output(Weather)
assert structured.invoke("What is the weather in Izmir?") == Weather(city="Izmir", celsius=24)

print("sdk frameworks: ok")

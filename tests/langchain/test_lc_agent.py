"""A real LangChain agent loop over the default model in process: `langchain.agents.create_agent`
with one tool and a structured output (issue 17). The model calls the tool, the tool runs, and the
answer after its result is the schema's JSON (native structured output: our response_format with
tools under tool_choice auto is "calls or the formatted answer"); `avoid_repeated_calls` steers the
135M model off calling the answered tool again, which it otherwise does with the same arguments
until the recursion limit (measured: 6 calls of get_weather("Seoul") by a limit of 12)."""

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ProviderStrategy
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from integrations.langchain import ChatSLLM

pytestmark = pytest.mark.default_model

ENGINE = {"num_kv_blocks": 1024, "num_threads": 1}  # one thread: see test_lc_standard.py


class Weather(BaseModel):
    """The weather report for the user."""

    city: str = Field(description="The city")
    temperature: int = Field(description="Degrees celsius")


def test_agent_calls_its_tool_and_returns_the_structured_output():
    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return f"It is 21 degrees celsius in {city}."

    llm = ChatSLLM(temperature=0, max_tokens=64, engine_config=ENGINE, avoid_repeated_calls=True)
    agent = create_agent(llm, tools=[get_weather], response_format=ProviderStrategy(Weather))
    # A loop that does not end raises GraphRecursionError at this limit.
    result = agent.invoke({"messages": [("user", "What's the weather in Seoul?")]}, {"recursion_limit": 8})

    assert ran and all(isinstance(city, str) and city for city in ran)  # the tool ran, with valid args
    assert len(ran) == len(set(ran))  # no call repeated with the same arguments
    calls = [c for m in result["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [c["name"] for c in calls] == ["get_weather"] * len(ran)
    assert any(isinstance(m, ToolMessage) and m.name == "get_weather" for m in result["messages"])
    report = result["structured_response"]
    assert isinstance(report, Weather)
    Weather.model_validate(report.model_dump())

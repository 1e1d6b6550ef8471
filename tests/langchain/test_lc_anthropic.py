"""LangChain's `ChatAnthropic` (langchain-anthropic) against our `/v1/messages` on the default model, with a real
server on a loopback port: `base_url` and `api_key` as a user sets them, a `claude-*` name reaching the served
model through an alias. Plain invoke, streaming (the chunks add up to the invoked answer) and `bind_tools` (a
tool call whose args match the schema, then the tool's result sent back as a ToolMessage)."""

import jsonschema
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

KEY = "sk-langchain-anthropic"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 21 C in {city}."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("lc-anthropic"), api_keys=[KEY], model_alias=["claude-*=" + MODEL]) as s:
        yield s
        s.assert_no_leak()


def chat(server, **kwargs) -> ChatAnthropic:
    # The Anthropic client appends /v1/messages to base_url, as it does for api.anthropic.com.
    return ChatAnthropic(base_url=server.url, api_key=KEY, model="claude-sllm-test", temperature=0,
                         max_retries=0, **kwargs)


def test_invoke_and_stream_agree(server):
    llm = chat(server, max_tokens=12)
    messages = [SystemMessage("You are terse."), HumanMessage("Name a colour.")]
    answer = llm.invoke(messages)
    assert isinstance(answer, AIMessage) and isinstance(answer.content, str) and answer.content
    assert answer.response_metadata["model"] == "claude-sllm-test"  # the name asked for, as Anthropic echoes it
    assert answer.response_metadata["stop_reason"] in ("end_turn", "max_tokens")
    assert 0 < answer.usage_metadata["output_tokens"] <= 12 and answer.usage_metadata["input_tokens"] > 0

    chunks = list(llm.stream(messages))
    assert len(chunks) > 1 and all(isinstance(c, AIMessageChunk) for c in chunks)
    total = chunks[0]
    for c in chunks[1:]:
        total += c
    assert total.text == answer.text  # greedy: the stream is the same answer, piece by piece
    assert total.usage_metadata["output_tokens"] == answer.usage_metadata["output_tokens"]


def test_bind_tools_calls_the_tool_and_reads_its_result(server):
    llm = chat(server, max_tokens=48).bind_tools([get_weather], tool_choice="get_weather")
    ask = HumanMessage("What's the weather in Seoul?")
    called = llm.invoke([ask])
    (call,) = called.tool_calls
    assert call["name"] == "get_weather" and call["id"]
    jsonschema.validate(call["args"], WEATHER)
    assert called.response_metadata["stop_reason"] == "tool_use"

    streamed = None
    for chunk in llm.stream([ask]):
        streamed = chunk if streamed is None else streamed + chunk
    (streamed_call,) = streamed.tool_calls  # input_json_delta pieces assembled by langchain-anthropic
    assert streamed_call["name"] == "get_weather" and streamed_call["args"] == call["args"]

    result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
    after = chat(server, max_tokens=16).bind_tools([get_weather]).invoke([ask, called, result])
    assert after.content and after.response_metadata["stop_reason"] in ("end_turn", "max_tokens", "tool_use")

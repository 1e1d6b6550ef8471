"""ChatSLLM beyond the standard suites: one shared engine, tool calls on invoke and stream,
structured output in its three methods, usage, stop sequences, and aborting abandoned streams."""

import asyncio
import json

import jsonschema
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from integrations.langchain import ChatSLLM
from integrations.langchain.engines import shared_engine

pytestmark = pytest.mark.default_model

ENGINE = {"num_kv_blocks": 1024, "num_threads": 1}  # one thread: see test_lc_standard.py


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"21 degrees {unit} in {city}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Person(BaseModel):
    """A person mentioned in the text."""

    name: str = Field(description="The person's name")
    age: int = Field(description="Age in years")


def chat(**kw) -> ChatSLLM:
    return ChatSLLM(**{"temperature": 0, "max_tokens": 64, "engine_config": ENGINE, **kw})


def test_one_engine_for_all_instances():
    a, b = chat(temperature=0.3, max_tokens=2), chat(max_tokens=3)
    a.invoke("hi")
    b.invoke("hi")
    assert shared_engine("default", ENGINE) is shared_engine("default", dict(ENGINE))


def test_invoke_usage_and_metadata():
    msg = chat(max_tokens=12).invoke([SystemMessage("You are terse."), HumanMessage("Say hello.")])
    assert isinstance(msg, AIMessage) and msg.content
    u = msg.usage_metadata
    assert u["input_tokens"] > 5 and 0 < u["output_tokens"] <= 12
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    assert msg.response_metadata["model_name"] == "SmolLM2-135M-Instruct"
    assert msg.response_metadata["finish_reason"] in ("stop", "length")


def test_stop_sequences_and_max_tokens():
    model = chat(max_tokens=40)
    free = model.invoke("Count from 1 to 10, separated by commas.").content
    assert "," in free
    cut = model.invoke("Count from 1 to 10, separated by commas.", stop=[","])
    assert "," not in cut.content and cut.response_metadata["finish_reason"] == "stop"
    assert chat(max_tokens=3).invoke("Tell me a story.").usage_metadata["output_tokens"] == 3


def test_tool_calls_on_invoke():
    """Forced calls are covered by the standard suite; here auto, and the call's shape."""
    model = chat().bind_tools([get_weather, add])
    auto = model.invoke("What's the weather in Seoul?")
    assert "<tool_call" not in auto.content and (auto.content or auto.tool_calls)
    msg = chat().bind_tools([get_weather, add], tool_choice="get_weather").invoke("What's the weather in Seoul?")
    assert len(msg.tool_calls) == 1 and not msg.invalid_tool_calls
    call = msg.tool_calls[0]
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    jsonschema.validate(call["args"], get_weather.tool_call_schema.model_json_schema())
    assert msg.response_metadata["finish_reason"] == "tool_calls"


def test_tool_call_streams_in_chunks_with_usage_last():
    chunks = list(chat().bind_tools([add], tool_choice="add").stream("What is 2 + 3?"))
    assert chunks[-1].chunk_position == "last" and chunks[-1].usage_metadata
    assert all(c.usage_metadata is None for c in chunks[:-1])
    assert all(c.content == "" for c in chunks)
    full = chunks[0]
    for c in chunks[1:]:
        full += c
    assert len(full.tool_calls) == 1 and full.tool_calls[0]["name"] == "add"
    assert set(full.tool_calls[0]["args"]) == {"a", "b"}
    # A call is held back until its arguments parse, then sent whole: a stream never carries a call
    # that a cut would leave as broken JSON.
    args = [c.tool_call_chunks[0]["args"] for c in chunks if c.tool_call_chunks and c.tool_call_chunks[0]["args"]]
    assert len(args) == 1 and set(json.loads(args[0])) == {"a", "b"}


def test_parallel_calls_are_opt_in():
    model = chat(max_tokens=96)
    one = model.bind_tools([add], tool_choice="any").invoke("Add 1 and 2, and also 3 and 4.")
    assert len(one.tool_calls) == 1


def test_agent_round_trip():
    """Call, tool result, answer: the history with tool_calls and a ToolMessage renders and runs."""
    model = chat().bind_tools([add])
    question = HumanMessage("What is 2 + 3? Use the add tool.")
    call = chat().bind_tools([add], tool_choice="add").invoke([question])
    result = add.invoke(call.tool_calls[0])  # invoked with a ToolCall, a tool returns a ToolMessage
    assert isinstance(result, ToolMessage) and result.tool_call_id == call.tool_calls[0]["id"]
    answer = model.invoke([question, call, result])
    assert isinstance(answer, AIMessage) and (answer.content or answer.tool_calls)


def test_structured_output_by_function_calling():
    """The standard suite runs the default (json_schema) and json_mode; this is the third method."""
    model = chat(max_tokens=96).with_structured_output(Person, method="function_calling")
    out = model.invoke("Alice is 31 years old. Extract the person.")
    assert isinstance(out, Person) and isinstance(out.age, int)


def test_structured_output_include_raw_and_dict_schema():
    schema = Person.model_json_schema()
    out = chat(max_tokens=96).with_structured_output(schema, include_raw=True).invoke("Bob is 40.")
    assert out["parsing_error"] is None and isinstance(out["raw"], AIMessage)
    jsonschema.validate(out["parsed"], schema)
    assert json.loads(out["raw"].content) == out["parsed"]


async def test_async_invoke_stream_and_concurrency():
    model = chat(max_tokens=16)
    msgs = await asyncio.gather(*(model.ainvoke(f"Say the number {i}.") for i in range(4)))
    assert all(isinstance(m, AIMessage) and m.usage_metadata["output_tokens"] > 0 for m in msgs)
    # A budget that fits a whole call: a call cut by max_tokens is never returned.
    chunks = [c async for c in chat(max_tokens=64).bind_tools([add], tool_choice="any").astream("2+2?")]
    assert chunks[-1].chunk_position == "last"
    full = chunks[0]
    for c in chunks[1:]:
        full += c
    assert full.tool_calls and full.tool_calls[0]["name"] == "add"


def test_abandoned_stream_is_aborted():
    model = chat(max_tokens=200)
    engine = shared_engine("default", ENGINE)
    stream = model.stream("Write a long story about a dragon.")
    next(stream)
    stream.close()  # the consumer walks away: the request must not keep decoding
    for _ in range(200):
        if not engine.engine.has_unfinished_requests():
            break
        asyncio.run(asyncio.sleep(0.01))
    assert not engine.engine.has_unfinished_requests()
    engine.engine.block_manager.check_no_leak()


def test_bad_tool_schema_is_a_value_error():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "objectx"}}}
    with pytest.raises(ValueError, match="parameters"):
        chat().bind_tools([bad]).invoke("hi")


@pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "stream"])
def test_a_repeated_call_stops_the_engine_there(streaming):
    """With parallel calls on, the default model writes the call, then the same call again until
    max_tokens: the repeat ends the answer and its engine sequence there (fewer output tokens than the
    budget), with every KV block back in the pool."""
    model = chat(streaming=streaming, max_tokens=128).bind_tools([get_weather], tool_choice="any",
                                                                 parallel_tool_calls=True)
    msg = model.invoke("What's the weather in Seoul?")
    assert len(msg.tool_calls) == 1 and msg.response_metadata["finish_reason"] == "tool_calls"
    assert msg.usage_metadata["output_tokens"] < 80, msg.usage_metadata  # not the 128 it would run on to
    engine = shared_engine("default", ENGINE)
    for _ in range(200):  # the stop is a command the step thread takes between two steps
        if not engine.engine.has_unfinished_requests():
            break
        asyncio.run(asyncio.sleep(0.01))
    engine.engine.block_manager.check_no_leak()

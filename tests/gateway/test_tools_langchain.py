"""LangChain's ChatOpenAI against our server, as n8n's AI Agent drives it: tools bound, a tool call,
the tool's answer sent back as a ToolMessage, a final answer; over Chat Completions and over the
Responses API (n8n's default). And `with_structured_output`, by JSON schema and by function calling.

The first turn forces a call (`tool_choice="required"`), or leaves it to the model (`auto`, where the
server's tool-call bias makes the 135M model call; engine/guided.py); the later turn is `auto`."""

import json

import httpx
import jsonschema
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("tools-langchain")) as s:
        yield s
        s.assert_no_leak()


def _llm(server, responses: bool = False, max_tokens: int = 48) -> ChatOpenAI:
    return ChatOpenAI(base_url=server.base_url, api_key="EMPTY", model=MODEL, max_tokens=max_tokens, temperature=0,
                      use_responses_api=responses, max_retries=0, http_async_client=httpx.AsyncClient())


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"It is sunny and 21 degrees in {city}."


@pytest.mark.parametrize("choice", ["required", "auto"])
@pytest.mark.parametrize("responses", [False, True], ids=["chat", "responses"])
def test_agent_loop_tool_call_then_final_answer(server, responses, choice):
    llm = _llm(server, responses)
    question = HumanMessage("What is the weather in Paris?")
    call_msg = llm.bind_tools([get_weather], tool_choice=choice, parallel_tool_calls=False).invoke([question])
    assert isinstance(call_msg, AIMessage) and not call_msg.invalid_tool_calls
    (call,) = call_msg.tool_calls
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    jsonschema.validate(call["args"], get_weather.args_schema.model_json_schema())
    result = get_weather.invoke(call)
    assert isinstance(result, ToolMessage) and result.tool_call_id == call["id"]
    final = _llm(server, responses, max_tokens=16).bind_tools([get_weather]).invoke([question, call_msg, result])
    assert isinstance(final, AIMessage)
    assert final.text.strip() or final.tool_calls  # the model's next step, whichever it takes
    assert "<tool_call>" not in final.text


class Person(BaseModel):
    name: str
    age: int


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output(server, method):
    structured = _llm(server, max_tokens=32).with_structured_output(Person, method=method)
    person = structured.invoke("Alice is 30 years old. Extract the person.")
    assert isinstance(person, Person) and person.name


def test_streamed_tool_call_chunks_add_up(server):
    llm = _llm(server).bind_tools([get_weather], tool_choice="required", parallel_tool_calls=False)
    chunks = list(llm.stream("What is the weather in Rome?"))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    (call,) = merged.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"], dict)
    assert json.loads(json.dumps(call["args"])) == call["args"]
    assert merged.response_metadata.get("finish_reason") == "tool_calls"

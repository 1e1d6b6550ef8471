"""Gemma 4's own tool calls (`<|tool_call>call:NAME{key:<|"|>text<|"|>}<tool_call|>`, its marks special tokens)
through the official openai client against a served tiny random Gemma 4 with Gemma 4's template: the calls come
out as OpenAI `tool_calls` whose arguments match the schema, streamed with one entry per index per chunk, the
same as the whole answer, and none of the marks reach content."""

import json

import jsonschema
import openai
import pytest

from engine.loader import resolve_model
from tests.engine.test_chat_formats import make_gemma4_chat_model
from tests.gateway.server import run_server

MODEL = "tiny-gemma4"
# Values a random model must finish (an enum, a boolean): budget-aware closing knows JSON only.
UNIT = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"}},
        "required": ["unit", "ok"]}
TOOLS = [{"type": "function", "function": {"name": "set_unit", "description": "Unit.", "parameters": UNIT}}]
ASK = [{"role": "user", "content": "Use celsius."}]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = make_gemma4_chat_model(tmp_path_factory.mktemp("g4") / MODEL, resolve_model("default"))
    with run_server(tmp_path_factory.mktemp("g4-db"), model=str(folder), num_kv_blocks=64) as s:
        yield openai.OpenAI(base_url=s.base_url, api_key="EMPTY", max_retries=0)
        s.assert_no_leak()


def test_gemma4_calls_whole_and_streamed(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=40, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and not c.message.content
    (call,) = c.message.tool_calls
    assert call.function.name == "set_unit"
    jsonschema.validate(json.loads(call.function.arguments), UNIT)

    stream = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                            parallel_tool_calls=False, max_tokens=40, temperature=0, stream=True)
    content, items, finish = [], [], None
    for chunk in stream:
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
            if choice.delta.tool_calls:
                assert len({t.index for t in choice.delta.tool_calls}) == len(choice.delta.tool_calls)
                items += choice.delta.tool_calls
    assert not "".join(content) and finish == "tool_calls"
    assert [(t.function.name, t.function.arguments) for t in items] == [("set_unit", call.function.arguments)]

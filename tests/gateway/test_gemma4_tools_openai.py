"""Gemma 4's own tool calls (`<|tool_call>call:NAME{key:<|"|>text<|"|>}<tool_call|>`, its marks special tokens)
through the official openai client against a served tiny random Gemma 4 with Gemma 4's template: the calls come
out as OpenAI `tool_calls` whose arguments match the schema, streamed with one entry per index per chunk, the
same as the whole answer, and none of the marks reach content. Served from the GGUF file llama.cpp's converter
writes of a Gemma 4 (its marks USER_DEFINED there), the calls are those of its HF folder."""

import json

import jsonschema
import openai
import pytest

from engine.loader import resolve_model
from tests.engine.gemma4_gguf import make_gemma4_pair
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


@pytest.fixture(scope="module")
def folder_and_file(tmp_path_factory):
    """One server with the tiny Gemma 4 twice: its HF folder and the GGUF file llama.cpp's converter makes of it."""
    folder, path = make_gemma4_pair(tmp_path_factory.mktemp("g4-pair"))
    models = [{"name": "g4-hf", "model": str(folder), "num_kv_blocks": 64},
              {"name": "g4-gguf", "model": str(path), "num_kv_blocks": 64}]
    with run_server(tmp_path_factory.mktemp("g4-pair-db"), models=models) as s:
        yield openai.OpenAI(base_url=s.base_url, api_key="EMPTY", max_retries=0)


def _calls(client, model: str, stream: bool) -> tuple[list[tuple[str, str]], str | None, str]:
    kwargs = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                  max_tokens=40, temperature=0)
    if not stream:
        c = client.chat.completions.create(**kwargs).choices[0]
        calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
        return calls, c.finish_reason, c.message.content or ""
    items, finish, content = [], None, ""
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            items += choice.delta.tool_calls or []
    return [(t.function.name, t.function.arguments) for t in items], finish, content


@pytest.mark.parametrize("stream", [False, True])
def test_gguf_file_calls_as_its_folder(folder_and_file, stream):
    from_file = _calls(folder_and_file, "g4-gguf", stream)
    assert from_file == _calls(folder_and_file, "g4-hf", stream)
    ((name, arguments),), finish, content = from_file
    assert name == "set_unit" and finish == "tool_calls" and not content
    jsonschema.validate(json.loads(arguments), UNIT)

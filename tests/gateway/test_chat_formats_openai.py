"""A reasoning model with its real chat template (Qwen3's, thinking opened by the generation prompt as in
its thinking releases) served on a loopback port and asked through the official openai client: tool
calls after the thinking parse and match their schema, streamed one entry per index per chunk; the
thinking is in `reasoning_content` (and `reasoning`), never in `content`; `enable_thinking: false`
turns it off; /v1/responses returns a reasoning item before the function call; an unknown
`reasoning_effort` is a 400 in OpenAI's shape."""

import json
from pathlib import Path

import jsonschema
import openai
import pytest

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
QWEN3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
QWEN3_THINKING = QWEN3.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}}]
ASK = [{"role": "user", "content": "What's the weather in Seoul?"}]
MODEL = "tiny-qwen3"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = make_tiny_llama(tmp_path_factory.mktemp("fmt") / MODEL, resolve_model("default"), seed=3)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": QWEN3_THINKING}))
    with run_server(tmp_path_factory.mktemp("fmt-db"), model=str(folder), num_kv_blocks=64,
                    max_thinking_tokens=5) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def test_a_call_after_thinking(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=48, temperature=0)
    c = r.choices[0]
    # A random model writes long strings: the budget closes the arguments and may cut the end tag after
    # them (a `length` finish), but the call itself is whole.
    assert c.finish_reason in ("tool_calls", "length") and not c.message.content
    (call,) = c.message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    extra = c.message.model_extra
    assert extra["reasoning_content"] and extra["reasoning"] == extra["reasoning_content"]
    assert "<think>" not in extra["reasoning_content"] and "</think>" not in extra["reasoning_content"]

    stream = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                            max_tokens=48, temperature=0, stream=True)
    reasoning, content, items = [], [], []
    for chunk in stream:
        for choice in chunk.choices:
            d = choice.delta
            reasoning.append((d.model_extra or {}).get("reasoning_content") or "")
            content.append(d.content or "")
            if d.tool_calls:
                assert len({t.index for t in d.tool_calls}) == len(d.tool_calls)  # one entry per index
                items += d.tool_calls
    assert "".join(reasoning) == extra["reasoning_content"] and not "".join(content)
    assert [(t.function.name, t.function.arguments) for t in items] == [(call.function.name, call.function.arguments)]


def test_thinking_off_and_efforts(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=6, temperature=0,
                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    # The thinking template opens <think> whatever the flag; the stock Qwen3 template closes it empty
    # (tests/engine/test_chat_formats.py). Either way nothing of the thinking is content.
    assert "<think>" not in (r.choices[0].message.content or "")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, reasoning_effort="extreme")
    assert e.value.body["param"] == "reasoning_effort"


def test_responses_return_a_reasoning_item(client):
    r = client.responses.create(model=MODEL, input="What's the weather in Seoul?", max_output_tokens=48,
                                temperature=0, tool_choice="required",
                                tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER}])
    kinds = [item.type for item in r.output]
    assert kinds == ["reasoning", "function_call"]
    assert r.output[0].content[0].text
    jsonschema.validate(json.loads(r.output[1].arguments), WEATHER)

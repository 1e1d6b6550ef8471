"""Pythonic tool calls (vLLM's `pythonic` parser; Llama 3.2 with a pythonic template, Llama 4): a Python list
of keyword calls read with `ast`, never evaluated, comes out as OpenAI calls, streamed or whole; the grammar
writes that list, its values as Python literals, on a tiny random checkpoint."""

import ast
import json
import random
from pathlib import Path

import jsonschema
import pytest

from engine import LLM, SamplingParams
from engine.chat import ChatOptions, ChatRequest, chat_formats, collect, parse_answer, prepare_chat
from engine.chat.output import ChatOutputParser
from engine.chat.pythonic import parse_call_list
from engine.chat.tool_formats import TOOL_FORMATS
from tests.engine.conftest import make_tiny_llama

PYTHONIC = TOOL_FORMATS["pythonic"]
# Llama 3.2's template renders the tools (its own instructions ask for JSON; --tool-call-parser picks pythonic).
LLAMA32 = (Path(__file__).parent.parent / "data" / "templates" / "meta-llama-Llama-3.2-3B-Instruct.jinja").read_text()
# Bounded values: a random model writes strings until max_tokens, and budget-aware closing, which ends JSON
# arguments in time, knows no pythonic calls.
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Oslo", "Seoul"]},
                                             "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                             "metric": {"type": "boolean"}}, "required": ["city"]}
LOG = {"type": "object", "properties": {"loud": {"type": "boolean"},
                                        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                                        "extra": {"type": "null"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "log", "parameters": LOG}}]
SCHEMAS = {"get_weather": WEATHER, "log": LOG}


def _streamed(text: str, seed: int):
    parser, rng, events, at = ChatOutputParser(True, False, PYTHONIC), random.Random(seed), [], 0
    while at < len(text):
        step = rng.randint(1, 7)
        events += parser.feed(text[at: at + step], finished=at + step >= len(text))
        at += step
    return collect(events)


def _calls(text: str) -> tuple[str | None, list[tuple[str, dict]]]:
    content, calls, _ = parse_answer(text, PYTHONIC)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


def test_a_list_of_calls_whole_and_streamed():
    text = ('[get_weather(city="Oslo", days=-2), log(loud=True, tags=[\'a]\', "b\\"c"], extra={"k": None}), '
            'brave_search.call(query="x")]')
    want = [("get_weather", {"city": "Oslo", "days": -2}),
            ("log", {"loud": True, "tags": ["a]", 'b"c'], "extra": {"k": None}}),
            ("brave_search.call", {"query": "x"})]
    assert _calls(text) == (None, want)
    for seed in range(8):  # any chunking gives the same
        content, calls = _streamed("  " + text, seed)
        assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == want
    # JSON's spellings, which a model may write inside a dict, read as JSON.
    assert _calls('[log(extra={"on": true, "off": false, "v": null})]')[1] == [
        ("log", {"extra": {"on": True, "off": False, "v": None}})]


def test_what_is_no_call_stays_text_and_nothing_is_evaluated():
    for text in ("[1] see above", "a [link](x) and [b]", 'run [f(a=__import__("os").system("false"))]',
                 "[f(1, 2)]", "[f(**kw)]", "[]", "[f(a=b)]"):
        assert _calls(text) == (text, []), text
        assert _streamed(text, 0)[0] == text
    assert parse_call_list('[f(a=(lambda: 1)())]') is None


def test_cut_and_repeated_calls():
    # max_tokens cut the last call: the whole ones before it are given, the cut one never.
    assert _calls('Sure. [get_weather(city="Oslo"), log(tags=["a", "b')[1] == [("get_weather", {"city": "Oslo"})]
    assert _calls('[get_weather(city="Os') == (None, [])
    content, calls, repeated = parse_answer('[log(loud=True), log(loud=True), get_weather(city="x")] more', PYTHONIC)
    assert [c.name for c in calls] == ["log"] and repeated and content is None


def test_chosen_from_the_template_or_the_flag():
    class Tok:
        chat_template = ("{{ tools | tojson }} Respond in the format [func_name1(params_name1=params_value1, "
                         "params_name2=params_value2...), func_name2(params)]")

    assert chat_formats(Tok(), ChatOptions())[0].name == "pythonic"
    assert ChatOptions(tool_call_parser="pythonic").tool_call_parser == "pythonic"
    assert PYTHONIC.call_text("f", '{"a": true, "b": [1, null], "c": "x"}') == '[f(a=True, b=[1, None], c="x")]'


@pytest.fixture(scope="module")
def llm(tmp_path_factory, default_model_dir) -> LLM:
    folder = make_tiny_llama(tmp_path_factory.mktemp("pythonic"), default_model_dir)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": LLAMA32}))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    return LLM(model=str(folder), tool_call_parser="pythonic", num_kv_blocks=64)


@pytest.mark.parametrize(("choice", "parallel"), [
    ("required", True), ("required", False), ({"type": "function", "function": {"name": "log"}}, True)])
def test_the_grammar_writes_a_python_list_of_valid_calls(llm, choice, parallel):
    ask = [{"role": "user", "content": "Weather in Oslo?"}]
    prepared = prepare_chat(llm.engine.tokenizer, ChatRequest(ask, TOOLS, choice, parallel),
                            SamplingParams(temperature=0, max_tokens=64), llm.engine.chat_options)
    assert prepared.tool_format.name == "pythonic"
    (out,) = llm.generate([prepared.prompt], prepared.params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    text = out.outputs[0].text
    a = prepared.read(text)
    assert text.startswith("[") and a.content is None and a.tool_calls, text
    if out.outputs[0].finish_reason == "stop":  # the list closed: Python reads the whole text
        assert isinstance(ast.parse(text, mode="eval").body, ast.List)
    if not parallel or isinstance(choice, dict):
        assert len(a.tool_calls) == 1
    if isinstance(choice, dict):
        assert a.tool_calls[0].name == "log"
    for call in a.tool_calls:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])

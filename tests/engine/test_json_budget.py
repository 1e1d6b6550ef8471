"""Budget-aware closing (engine/json_budget.py) on crafted text: for every prefix of valid compact
JSON (and of tool calls), the closing it computes completes it into text the engine's own grammar
accepts and that validates against the schema; xgrammar is the oracle."""

import json

import jsonschema
import pytest
import xgrammar as xgr

from engine.chat.constraints import guided_for_tools
from engine.json_budget import CallsState, JsonState, Unclosable, minimal_value

PERSON = {"type": "object", "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "integer"},
                                                 "ok": {"type": "boolean"}},
                "required": ["street", "ok"]},
    "note": {"type": ["string", "null"]},
    "score": {"type": "number"},
}, "required": ["name", "unit", "tags", "address", "score"]}
NESTED = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "integer"}, "label": {"type": "string", "minLength": 2}}, "required": ["id", "label"]}},
        "meta": {"$ref": "#/$defs/meta"},
    },
    "required": ["items", "meta"],
    "$defs": {"meta": {"type": "object", "properties": {"v": {"const": "x1"}}, "required": ["v"]}},
}

CASES = [
    (PERSON, {"name": "Ann \"Q\" \\ Lee\u00e9\u4e2d", "age": 31, "unit": "fahrenheit", "tags": ["a", "b c"],
              "address": {"street": "Main", "zip": 12345, "ok": True}, "note": None, "score": -1.5e3}),
    (PERSON, {"name": "", "unit": "celsius", "tags": [""], "address": {"street": "", "ok": False}, "score": 0}),
    (NESTED, {"items": [{"id": 1, "label": "ab"}, {"id": -20, "label": "xyz"}], "meta": {"v": "x1"}}),
    ({"type": "object"}, {"a": [1, {"b": None, "c": "d"}], "e": True, "f": 2.5}),
]


def _accepts(schema: dict, text: str) -> bool:
    """Whether the engine's compact grammar for `schema` accepts the whole of `text`."""
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar), terminate_without_stop_token=True)
    return matcher.accept_string(text) and matcher.is_terminated()


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


@pytest.mark.parametrize(("schema", "doc"), CASES, ids=["full", "minimal", "nested-ref", "any-object"])
def test_every_prefix_closes_into_valid_json(schema, doc):
    text = _dumps(doc)
    assert _accepts(schema, text)  # the document is one the grammar writes
    data = text.encode()
    state = JsonState(schema)
    for k in range(len(data)):
        if k:
            state.feed(data[k - 1:k])
        if (data[k] & 0xC0) == 0x80:
            continue  # inside a multi-byte character: not a text boundary
        closing = state.closing()
        done = data[:k].decode() + closing
        jsonschema.validate(json.loads(done), schema)
        assert _accepts(schema, done), (data[:k].decode(), closing)
    state.feed(data[-1:])
    assert state.done and state.closing() == ""


def test_closing_is_short():
    state = JsonState(PERSON)
    state.feed(b'{"name": "Bo')
    assert state.closing() == '", "unit": "celsius", "tags": [""], "address": {"street": "", "ok": false}, "score": 0}'
    state.feed(b'", "unit": "fahr')
    assert state.closing().startswith('enheit", "tags"')
    keyed = JsonState(PERSON)
    keyed.feed(b'{"name": "", "a')  # only "age" may come here ("unit" is the next required key)
    assert keyed.closing().startswith('ge": 0, "unit": "celsius"')
    assert minimal_value({"type": "integer", "minimum": 5}, {}) == "5"
    assert minimal_value({"type": "array", "items": {"type": "boolean"}, "minItems": 2}, {}) == "[false, false]"
    assert minimal_value({"anyOf": [{"type": "string", "minLength": 9}, {"type": "null"}]}, {}) == "null"


def test_what_it_does_not_follow_is_left_to_the_grammar():
    with pytest.raises(Unclosable):
        minimal_value({"type": "string", "pattern": "^[a-z]+$"}, {})
    with pytest.raises(Unclosable):
        JsonState({"$ref": "https://example.com/schema"})
    broken = JsonState({"type": "object"})
    broken.feed(b"{]")
    with pytest.raises(Unclosable):
        broken.closing()


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]


def _calls_state(choice: str) -> CallsState:
    spec = guided_for_tools(TOOLS, choice).constraint.tool_calls
    return CallsState(list(spec.calls), spec.trigger, spec.at_least_one)


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_every_prefix_of_tool_calls_closes_into_calls(choice):
    from engine.chat.parser import parse_answer

    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Seoul", "unit": "celsius"}}\n</tool_call>'
    second = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 22}}\n</tool_call>'
    text = ("Let me check. " if choice == "auto" else "") + call + "\n" + second
    state = _calls_state(choice)
    assert state.closing() == ("" if choice == "auto" else
                               '<tool_call>\n{"name": "add", "arguments": {"a": 0, "b": 0}}\n</tool_call>')
    for k in range(1, len(text) + 1):
        state.feed(text[k - 1:k].encode())
        done = text[:k] + state.closing()
        content, calls, _ = parse_answer(done)
        for c in calls:
            assert isinstance(json.loads(c.arguments), dict)
        if "<tool_call>" in text[:k]:
            assert calls, done  # an opened call is completed, never dropped

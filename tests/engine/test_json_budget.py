"""Budget-aware closing (engine/json_budget.py) on crafted text: for every prefix of valid compact
JSON (and of tool calls), the closing it computes completes it into text the engine's own grammar
accepts and that validates against the schema; xgrammar is the oracle."""

import json

import jsonschema
import pytest
import xgrammar as xgr

from engine.chat.constraints import guided_for_tools
from engine.json_budget import BudgetCloser, CallsState, JsonState, Unclosable, minimal_value

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


# -- the end of a call list (issue 42) -------------------------------------------------------------
# One token per ASCII character and an end-of-sequence token, with the engine's own grammar as oracle.
EOS = 128
VOCAB = [bytes([i]) for i in range(128)] + [b""]


class _Steered:
    """A tool-call output written one character-token at a time through BudgetCloser.step, as the sampler does."""

    def __init__(self, choice: str, max_tokens: int):
        spec = guided_for_tools(TOOLS, choice).constraint
        info = xgr.TokenizerInfo([chr(i) for i in range(128)] + ["</s>"], stop_token_ids=[EOS])
        tag = json.dumps(spec.tag)
        self.matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info, cache_enabled=False).compile_structural_tag(tag))
        calls = spec.tool_calls
        self.closer = BudgetCloser(CallsState(list(calls.calls), calls.trigger, calls.at_least_one), EOS)
        self.max_tokens, self.out = max_tokens, []

    def accepts(self, tokens: list[int]) -> bool:
        taken = 0
        for t in tokens:
            if not self.matcher.accept_token(t):
                break
            taken += 1
        if taken:
            self.matcher.rollback(taken)
        return taken == len(tokens)

    def write(self, text: str) -> str:
        """Offers `text` character by character (then EOS); returns what was written in its place."""
        for token in [*text.encode(), EOS]:
            left = self.max_tokens - len(self.out)
            if left <= 0 or (self.out and self.out[-1] == EOS):
                break
            if self.closer.is_near(left):
                self.closer.catch_up(self.out, VOCAB)
                token = self.closer.step(token, left, VOCAB, lambda s: list(s.encode()), self.accepts)
            assert self.matcher.accept_token(token), (bytes(self.out), token)
            self.out.append(token)
        return bytes(t for t in self.out if t != EOS).decode()


SEOUL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Seoul", "unit": "celsius"}}\n</tool_call>'
OSLO = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 1234567890123456789, "b": 22}}\n</tool_call>'  # > Oslo's


ROOM = len("\n" + SEOUL) + 1  # after Seoul's call: another as long, and the EOS token
THIRD = 2 * len(OSLO) + 3  # after Oslo's (shorter): "\n", Oslo, "\n", another as long as Oslo's, EOS


@pytest.mark.parametrize("spare", [1, 10, ROOM - 1, ROOM, THIRD - 1, THIRD, THIRD + 40])
def test_a_call_list_ends_with_its_calls_not_a_cut(spare):
    """After a complete call, another is begun only when the tokens left hold it whole (as small as
    the valid form or the shortest call written, whichever is longer) with the end-of-sequence token;
    a later call begun is closed whole. Either way the answer ends with EOS: finish "tool_calls"."""
    from engine.chat.parser import parse_answer

    steered = _Steered("required", len(SEOUL) + spare)
    text = steered.write(SEOUL + "\n" + OSLO + "\n" + ADD)
    assert steered.out[-1] == EOS, text
    content, calls, _ = parse_answer(text)
    assert content is None and calls[0].arguments == '{"city": "Seoul", "unit": "celsius"}'
    if spare < ROOM:  # a call as long as the one written does not fit: the answer ends after it
        assert text.rstrip("\n") == SEOUL and len(calls) == 1
    elif spare < THIRD:  # the second is written whole, a third does not fit
        assert text.rstrip("\n") == SEOUL + "\n" + OSLO and len(calls) == 2
    else:  # the third is begun where a call as long as Oslo's fits; closed whole where it runs longer
        assert len(calls) == 3 and calls[2].name == "add" and text.endswith("</tool_call>")
        assert (calls[2].arguments == '{"a": 1234567890123456789, "b": 22}') == (spare > THIRD + len(ADD) - len(OSLO))
    for c in calls:
        jsonschema.validate(json.loads(c.arguments), TOOLS[c.name == "add"]["function"]["parameters"])


def test_the_next_call_is_the_smallest_valid_or_the_shortest_written():
    state = _calls_state("required")
    state.feed(SEOUL.encode())
    assert state.between_calls and state.ends_cleanly and state.needed() == ""
    smallest, written = state.next_calls()
    assert smallest == '\n<tool_call>\n{"name": "add", "arguments": {"a": 0, "b": 0}}\n</tool_call>'
    assert written == "\n" + SEOUL
    state.feed(b"\n<tool")  # begun: under required only a call may follow, closed whole with its end tag
    assert not state.between_calls
    assert state.needed() == '_call>\n{"name": "add", "arguments": {"a": 0, "b": 0}}\n</tool_call>'

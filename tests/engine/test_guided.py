"""Grammar-constrained decoding: outputs always parse, and free requests in the same batch are untouched."""

import json
import re

import jsonschema
import pytest

from engine import LLM, InvalidRequestError, SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def llm():
    return LLM(model="default", num_kv_blocks=256)


def chat(llm, text):
    return llm.apply_chat_template([{"role": "user", "content": text}])


def test_json_schema_and_free_requests_share_a_batch(llm):
    free_prompt = chat(llm, "Name a city.")
    greedy = SamplingParams(temperature=0, max_tokens=24)
    alone = llm.generate([free_prompt], greedy, use_tqdm=False)[0].outputs[0].token_ids
    guided = SamplingParams(temperature=0.8, seed=3, max_tokens=60, guided={"json_schema": SCHEMA})
    prompts = [chat(llm, f"Describe city number {i} as JSON.") for i in range(4)] + [free_prompt]
    outs = llm.generate(prompts, [guided] * 4 + [greedy], use_tqdm=False)
    for out in outs[:4]:
        o = out.outputs[0]
        assert o.finish_reason == "stop"
        jsonschema.validate(json.loads(o.text), SCHEMA)
    assert outs[4].outputs[0].token_ids == alone
    llm.engine.block_manager.check_no_leak()


def test_json_object_regex_and_grammar(llm):
    obj = llm.generate([chat(llm, "Say hi as JSON.")], SamplingParams(temperature=0, max_tokens=40, guided={"json_object": True}), use_tqdm=False)
    assert isinstance(json.loads(obj[0].outputs[0].text), dict)
    rx = llm.generate(["Is the sky blue?"], SamplingParams(temperature=0, max_tokens=20, guided={"regex": "(yes|no)[.!]"}), use_tqdm=False)
    assert re.fullmatch("(yes|no)[.!]", rx[0].outputs[0].text)
    ebnf = 'root ::= "SELECT " col " FROM users;"\ncol ::= "id" | "name"'
    g = llm.generate(["SQL:"], SamplingParams(temperature=0, max_tokens=20, guided={"grammar": ebnf}), use_tqdm=False)
    assert g[0].outputs[0].text in ("SELECT id FROM users;", "SELECT name FROM users;")


def test_structural_tag_free_text_then_constrained_call(llm):
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<tool_call>"],
            "tags": [{"begin": '<tool_call>\n{"name": "get_weather", "arguments": ',
                      "content": {"type": "json_schema", "json_schema": SCHEMA}, "end": "}\n</tool_call>"}],
            "at_least_one": True,
            "stop_after_first": True,
        },
    }
    out = llm.generate([chat(llm, "What's the weather in Seoul?")],
                       SamplingParams(temperature=0, max_tokens=80, guided={"structural_tag": tag}), use_tqdm=False)
    text = out[0].outputs[0].text
    m = re.search(r'<tool_call>\n(\{"name": "get_weather", "arguments": .*\})\n</tool_call>', text, re.S)
    assert m, text
    jsonschema.validate(json.loads(m.group(1))["arguments"], SCHEMA)


@pytest.mark.parametrize("guided", [{"json_schema": {"type": "objectx"}}, {"regex": "(unclosed"}, {"grammar": "root ::= "},
                                    {"json_schema": SCHEMA, "regex": "a"}])
def test_bad_constraints_are_invalid_requests(llm, guided):
    with pytest.raises(InvalidRequestError):
        llm.generate(["x"], SamplingParams(guided=guided), use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()

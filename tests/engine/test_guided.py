"""Grammar-constrained decoding: outputs always parse, free requests in the same batch are untouched,
the loop breaker completes JSON a looping model would cut off, and the trigger bias makes the 135M
model open tool calls under tool_choice auto."""

import copy
import json
import re
from dataclasses import replace

import jsonschema
import pytest
import torch

from engine import LLM, InvalidRequestError, SamplingParams
from engine.chat.constraints import guided_for_tools
from engine.chat.parser import parse_tool_calls
from engine.chat.template import render_chat
from engine.guided import DEFAULT_TRIGGER_BIAS, default_trigger_bias, loop_period
from engine.sequence import Sequence

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
    obj = llm.generate([chat(llm, "Say hi as JSON.")],
                       SamplingParams(temperature=0, max_tokens=40, guided={"json_object": True}), use_tqdm=False)
    assert isinstance(json.loads(obj[0].outputs[0].text), dict)
    rx = llm.generate(["Is the sky blue?"],
                      SamplingParams(temperature=0, max_tokens=20, guided={"regex": "(yes|no)[.!]"}), use_tqdm=False)
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


@pytest.mark.parametrize("guided", [{"json_schema": {"type": "objectx"}}, {"regex": "(unclosed"},
                                    {"grammar": "root ::= "},
                                    {"json_schema": SCHEMA, "regex": "a"}])
def test_bad_constraints_are_invalid_requests(llm, guided):
    with pytest.raises(InvalidRequestError):
        llm.generate(["x"], SamplingParams(guided=guided), use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()


# -- the loop breaker and the trigger bias (engine/guided.py) -------------------------------------

JOKE = {"type": "object", "properties": {"setup": {"type": "string"}, "punchline": {"type": "string"}},
        "required": ["setup", "punchline"]}


def test_loop_period():
    assert loop_period([9, 1, 2, 3, 1, 2, 3, 1, 2, 3], 3) == 3
    assert loop_period([1, 2, 3, 1, 2, 3, 1, 2], 3) == 0  # the third cycle is not complete
    assert loop_period([0] * 7, 3) == 0 and loop_period([0] * 8, 3) == 1  # short cycles need a longer span
    assert loop_period([1, 2] * 3, 3) == 0 and loop_period([1, 2] * 4, 3) == 2
    assert loop_period([4, 5, 6, 7] * 2, 2) == 4 and loop_period([4, 5, 6, 7] * 2, 3) == 0


def _allowed_after(llm, guided: dict, text: str) -> set[int]:
    """The tokens the engine's guided decoding allows after `text`, as the sampler would mask them."""
    gd = llm.engine.guided_decoding()
    tokens = llm.tokenizer.encode(text, add_special_tokens=False)
    params = SamplingParams(guided=guided)
    seq = Sequence("r", [0] + tokens, 1, params)
    seq.matcher = gd.matcher(params.guided)
    for t in tokens:
        assert seq.matcher.accept_token(t), text
    logits = torch.zeros(1, gd.vocab_size)
    gd.constrain(logits, [seq], [0])
    return set(torch.nonzero(logits[0] > float("-inf")).flatten().tolist())


def test_loop_breaker_closes_the_string_a_cycle_repeats_in(llm):
    looping = '{"setup": "Situ' + " sampu, sampu," * 4
    allowed = _allowed_after(llm, {"json_object": True, "any_whitespace": False}, looping)
    assert allowed and all('"' in llm.tokenizer.decode([t]) for t in allowed)
    assert len(_allowed_after(llm, {"json_object": True, "any_whitespace": False}, '{"setup": "Situ sampu,')) > 1000
    # A cycle of whole array elements ends the array where the cycle would end an element.
    elements = '{"items": ["milk' + '", "eggs' * 5
    allowed = _allowed_after(llm, {"json_object": True, "any_whitespace": False}, elements)
    assert allowed and all('"]' in llm.tokenizer.decode([t]) for t in allowed)
    assert len(_allowed_after(llm, {"json_object": True, "any_whitespace": False}, elements + '", "egg')) > 1000


def test_loop_breaker_leaves_free_text_and_other_grammars_alone(llm):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    free = _allowed_after(llm, guided_for_tools(tools, "auto"), "sorry," * 8)
    assert len(free) == llm.engine.guided_decoding().vocab_size
    # A regex has its own string syntax: the breaker does not guess where its strings end.
    regex = _allowed_after(llm, {"regex": '"[a-z ,]*"'}, '"' + " sampu," * 6)
    assert len(regex) > 100


def test_loop_breaker_completes_json_the_model_would_loop_in(llm):
    """SmolLM2-135M at temperature 0 repeats "sampu, " inside the joke's first string until max_tokens;
    with the loop breaker (on by default) the object completes and parses."""
    prompt = chat(llm, "Tell me a joke about cats.")
    params = SamplingParams(temperature=0, max_tokens=96, guided={"json_schema": JOKE, "any_whitespace": False})
    gd = llm.engine.guided_decoding()
    out = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop", out.text
    jsonschema.validate(json.loads(out.text), JOKE)
    assert "\n" not in out.text  # compact JSON
    repeats, gd.loop_repeats = gd.loop_repeats, 0
    try:
        off = llm.generate([prompt], replace(params, guided_budget_close=False), use_tqdm=False)[0].outputs[0]
        # Without the breaker, budget-aware closing still completes the object at the end of the budget.
        closed = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
    finally:
        gd.loop_repeats = repeats
    assert off.finish_reason == "length"
    assert len(closed.token_ids) == params.max_tokens, closed.text
    jsonschema.validate(json.loads(closed.text), JOKE)


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather at a location.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]


def test_trigger_bias_opens_a_call_and_leaves_the_answer_after_a_result_to_the_model(llm):
    gd = llm.engine.guided_decoding()
    assert gd.trigger_bias == DEFAULT_TRIGGER_BIAS  # SmolLM2's template does not render tools
    question = [{"role": "user", "content": "What is the weather in San Francisco, CA?"}]
    params = SamplingParams(temperature=0, max_tokens=40, guided=guided_for_tools(WEATHER, "auto", False))

    def reply(messages) -> str:
        prompt = render_chat(llm.tokenizer, messages, WEATHER, "auto")
        return llm.generate([prompt], params, use_tqdm=False)[0].outputs[0].text

    (call,) = parse_tool_calls(reply(question))[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"location": "San Francisco, CA"}
    history = question + [{"role": "assistant", "content": None, "tool_calls": [call.to_openai()]},
                          {"role": "tool", "tool_call_id": call.id, "content": "It's sunny."}]
    content, calls = parse_tool_calls(reply(history))
    assert content and not calls
    bias, gd.trigger_bias = gd.trigger_bias, 0.0
    try:
        assert not parse_tool_calls(reply(question))[1]  # unbiased, the 135M model answers in prose
    finally:
        gd.trigger_bias = bias


def test_trigger_bias_default_follows_the_chat_template(llm):
    tokenizer = copy.copy(llm.tokenizer)
    assert default_trigger_bias(tokenizer) == DEFAULT_TRIGGER_BIAS
    tokenizer.chat_template = ("{% for t in tools %}{{ t }}{% endfor %}"
                               "{% for m in messages %}{{ m.content }}{% endfor %}")
    assert default_trigger_bias(tokenizer) == 0.0

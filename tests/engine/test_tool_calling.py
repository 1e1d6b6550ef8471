"""Tool calling and structured output on the model side (engine/chat/): constrained
decoding makes every call parse and match its schema on the default 135M model, the streaming
parser agrees with the whole-text parser, and history round-trips through the chat template."""

import copy
import json
import os
import random
import time

import jsonschema
import pytest
import torch
from transformers import AutoTokenizer

from benchmarks.structured_output import TOOL_SCHEMAS, TOOLS
from engine import LLM, GuidedSpec, InvalidRequestError, SamplingParams
from engine.chat.constraints import guided_for_response_format, guided_for_tools, wants_json_note
from engine.chat.messages import JSON_REPLY_NOTE, with_system_note
from engine.chat.parser import (
    ContentDelta,
    ToolCallArguments,
    ToolCallParser,
    ToolCallStart,
    collect,
    parse_answer,
    parse_tool_calls,
)
from engine.chat.template import render_chat, template_supports_tools
from engine.guided_spec import JsonObject, JsonSchema

# The same four tools `sllm bench json` measures with.
SCHEMAS = TOOL_SCHEMAS

# (prompt, the tool it asks for): the named mode forces that tool.
ALL_PROMPTS = [
    ("What's the weather in Seoul right now?", "get_weather"),
    ("Add 17 and 25.", "add"),
    ("Find me wireless headphones that are in stock.", "search_products"),
    ("Send an email to alice@example.com saying the meeting moved to 3pm.", "send_email"),
    ("Is it raining in Paris? Answer in fahrenheit.", "get_weather"),
    ("What is 1234 plus 4321?", "add"),
    ("Search for running shoes, show at most 5 results.", "search_products"),
    ("Email bob@example.com and carol@example.com about the quarterly report.", "send_email"),
    ("Tell me the temperature in Tokyo in celsius.", "get_weather"),
    ("Compute the sum of -8 and 30.", "add"),
    ("I need a laptop stand.", "search_products"),
    ("Write to dave@example.com with subject 'Lunch' and body 'Pizza at noon?'", "send_email"),
    ("How hot is it in Cairo today?", "get_weather"),
    ("What's 99 + 1?", "add"),
    ("Look up organic coffee beans in the shop.", "search_products"),
    ("Tell eve@example.com by email that the server is down.", "send_email"),
    ("Weather forecast for New York, please.", "get_weather"),
    ("Please add 3 and 4 for me.", "add"),
    ("Search the catalog for a 27-inch monitor, 10 results.", "search_products"),
    ("Send a thank-you email to frank@example.com.", "send_email"),
]
# The prompts cycle through the four tools: the default run sweeps every mode over the first 8 (each tool
# asked for twice, on different wording); SLLM_SLOW=1 over all 20, as the measurements below want.
PROMPTS = ALL_PROMPTS if os.environ.get("SLLM_SLOW") else ALL_PROMPTS[:8]
# Forced calls get room for a rambling string argument to close (a call rarely needs more than 60
# tokens, and the batch ends with its slowest row); free text in auto mode is cut sooner.
MAX_TOKENS = 256
AUTO_MAX_TOKENS = 96


def slow(fn):
    """Measurements for the issue note, not guarantees: opt-in with SLLM_SLOW=1."""
    fn = pytest.mark.skipif(not os.environ.get("SLLM_SLOW"), reason="measurement: SLLM_SLOW=1")(fn)
    return pytest.mark.slow(fn)
NAMED = "named"  # in these tests: {"type": "function", "function": {"name": <the prompt's tool>}}


def _choice(mode: str, name: str):
    return {"type": "function", "function": {"name": name}} if mode == NAMED else mode


def _valid(call) -> bool:
    """A call is valid when its tool exists and its arguments parse and match that tool's schema."""
    if call.name not in SCHEMAS:
        return False
    try:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


@pytest.fixture(scope="module")
def llm():
    # One thread: on a shared 2-core runner two torch threads per process oversubscribe the cores
    # and a decode step gets ~10x slower; the setting is process-wide, so it is restored afterwards.
    threads = torch.get_num_threads()
    yield LLM(model="default", num_kv_blocks=1024, num_threads=1)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs(llm):
    """Every mode's prompts as one batch each, streamed step by step so the deltas are kept."""
    cache: dict[tuple[str, bool, bool], list[tuple[str, list[str], str]]] = {}

    def run(mode: str, guided: bool = True, parallel: bool = False):
        key = (mode, guided, parallel)
        if key not in cache:
            cache[key] = _generate(llm, mode, guided, parallel)
        return cache[key]

    return run


def _generate(llm, mode, guided, parallel):
    engine = llm.engine
    ids = []
    for i, (prompt, name) in enumerate(PROMPTS):
        choice = _choice(mode, name)
        text = render_chat(llm.tokenizer, [{"role": "user", "content": prompt}], TOOLS, choice)
        params = SamplingParams(temperature=0.7, seed=i, max_tokens=MAX_TOKENS if mode in ("required", NAMED)
                                else AUTO_MAX_TOKENS,
                                guided=guided_for_tools(TOOLS, choice, parallel) if guided else None)
        rid = f"{mode}-{guided}-{parallel}-{i}"
        engine.add_request(rid, text, params)
        ids.append(rid)
    deltas: dict[str, list[str]] = {rid: [] for rid in ids}
    final: dict[str, tuple[str, str]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            deltas[out.request_id].append(out.outputs[0].delta_text)
            if out.finished:
                final[out.request_id] = (out.outputs[0].text, out.outputs[0].finish_reason)
    return [(final[r][0], deltas[r], final[r][1]) for r in ids]


# -- constrained decoding on the default model ---------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "required", NAMED])
def test_constrained_calls_always_validate(runs, mode):
    """Every returned call is valid: one that max_tokens cuts off (auto mode's shorter budget) is
    not returned at all."""
    n_calls = 0
    for (prompt, name), (text, _, finish) in zip(PROMPTS, runs(mode), strict=True):
        content, calls = parse_tool_calls(text)
        assert "<tool_call" not in (content or "") and "</tool_call>" not in (content or "")
        if mode != "auto":
            assert len(calls) == 1 and finish == "stop" and content is None, (prompt, text)
        if mode == NAMED:
            assert calls[0].name == name
        for call in calls:
            assert _valid(call), (prompt, text)
            assert call.id.startswith("call_")
        n_calls += len(calls)
    print(f"\n{mode}: {n_calls} valid calls on {len(PROMPTS)} prompts")


@slow
def test_parallel_calls_are_valid_up_to_max_tokens(runs):
    """With parallel calls the 135M model tends to repeat calls until max_tokens: every returned call
    is valid (a cut one is not returned) and none repeats another (a repeat ends the answer)."""
    results = runs("required", parallel=True)
    for prompt, (text, _, _) in zip(PROMPTS, results, strict=True):
        content, calls = parse_tool_calls(text)
        assert calls and content is None, (prompt, text)
        assert all(_valid(c) for c in calls), (prompt, text)
        keys = [(c.name, json.loads(c.arguments)) for c in calls]
        assert all(k not in keys[:i] for i, k in enumerate(keys)), (prompt, text)
    counts = [len(parse_tool_calls(text)[1]) for text, _, _ in results]
    cut = sum(1 for _, _, finish in results if finish == "length")
    print(f"\nparallel required: calls per prompt {counts}, {cut}/{len(PROMPTS)} cut off by max_tokens")


def test_streaming_parser_matches_whole_text_parse(runs):
    """Fed the engine's own deltas, the streaming parser gives what parsing the final text gives."""
    for mode in ("auto", "required"):
        for text, deltas, _ in runs(mode):
            parser = ToolCallParser()
            events = [ev for d in deltas for ev in parser.feed(d)] + parser.finish()
            content, calls = collect(events)
            ref_content, ref_calls = parse_tool_calls(text)
            assert content == ref_content
            assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in ref_calls]
            assert [(c.name, c.arguments) for c in parser.tool_calls] == [(c.name, c.arguments) for c in calls]


def test_none_offers_no_tools(llm):
    prompt = render_chat(llm.tokenizer, [{"role": "user", "content": "Add 2 and 2."}], TOOLS, "none")
    assert "<tools>" not in prompt and "<tool_call>" not in prompt
    assert guided_for_tools(TOOLS, "none") is None
    assert guided_for_tools(None, "auto") is None and guided_for_tools([], None) is None


@slow
def test_validity_with_and_without_constraints(runs):
    """For the issue note: valid calls with constrained decoding off (the prompt alone) and on."""
    def rate(results):
        return sum(1 for text, _, _ in results if (c := parse_tool_calls(text)[1]) and all(map(_valid, c)))

    off, auto, required = rate(runs("auto", guided=False)), rate(runs("auto")), rate(runs("required"))
    n = len(PROMPTS)
    print(f"\nprompts with a valid call: constraints off {off}/{n}, on (auto) {auto}/{n}, on (required) {required}/{n}")
    assert required == len(PROMPTS)


def test_response_format_json_schema_on_the_model(llm):
    schema = {"type": "object", "properties": {"setup": {"type": "string"}, "punchline": {"type": "string"}},
              "required": ["setup", "punchline"]}
    guided = guided_for_response_format({"type": "json_schema", "json_schema": {"name": "joke", "schema": schema}})
    prompt = render_chat(llm.tokenizer, [{"role": "user", "content": "Tell me a joke about cats as JSON."}])
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=MAX_TOKENS, guided=guided),
                       use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop", out.text
    jsonschema.validate(json.loads(out.text), schema)


# -- the parser on crafted text ----------------------------------------------------------------------

CRAFTED = [
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Seoul <b>", '
    '"n": [1, {"a": "}\\"</tool_call>"}]}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>',
    "Hello <tool world, a < b and x <tool_call",
    '<tool_call>\n{"arguments": {"x": 1}, "name": "g"}\n</tool_call> tail text',
    '<tool_call>\n{"name": "g", "arguments": {"x": 1',
    '<tool_call>\n{"name": "g", "arguments": {"x": 1}\n</tool_call>after',
    "<tool_call>garbage</tool_call>ok",
    "  just text, 한국어도  \n",
    '<tool_call>\n{"name": "g", "parameters": {"q": "é"}}',
    '<tool_call>{"name":"g","arguments":  {"q":1}}</tool_call><tool_call>{"name": "h", "arguments": 5}</tool_call>',
]


@pytest.mark.parametrize("text", CRAFTED)
def test_streaming_parser_is_chunking_invariant(text):
    ref = parse_tool_calls(text)
    rng = random.Random(0)
    for trial in range(100):
        parser = ToolCallParser()
        events, i = [], 0
        while i < len(text):
            k = 1 if trial == 0 else rng.randint(1, 8)
            events += parser.feed(text[i:i + k])
            i += k
        events += parser.finish()
        content, calls = collect(events)
        assert content == ref[0]
        assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in ref[1]]
        assert "<tool_call" not in (content or "")
        starts = [e for e in events if isinstance(e, ToolCallStart)]
        assert [e.index for e in starts] == list(range(len(starts)))
        # A call's start event comes before any of its argument fragments.
        seen: set[int] = set()
        for e in events:
            if isinstance(e, ToolCallStart):
                seen.add(e.index)
            elif isinstance(e, ToolCallArguments):
                assert e.index in seen


def test_parse_results():
    content, calls = parse_tool_calls(CRAFTED[0])
    assert content == "Let me check."
    assert [c.name for c in calls] == ["get_weather", "add"]
    assert json.loads(calls[0].arguments) == {"city": "Seoul <b>", "n": [1, {"a": '}"</tool_call>'}]}
    assert calls[1].arguments == "{}"
    assert len({c.id for c in calls}) == 2
    assert parse_tool_calls(CRAFTED[1]) == ("Hello <tool world, a < b and x", [])
    assert parse_tool_calls(CRAFTED[2])[0] == "tail text"
    assert [(c.name, c.arguments) for c in parse_tool_calls(CRAFTED[2])[1]] == [("g", '{"x": 1}')]
    assert parse_tool_calls(CRAFTED[5]) == ("ok", [])  # a block that is no call is dropped, not leaked
    assert parse_tool_calls("no calls here") == ("no calls here", [])
    assert parse_tool_calls("") == (None, [])
    assert isinstance(ContentDelta("x"), ContentDelta)


CALL = '<tool_call>\n{"name": "g", "arguments": %s}\n</tool_call>'


def test_a_cut_call_is_never_returned():
    """A call cut off inside its arguments (max_tokens) is dropped, whole-text or streamed: no
    start or argument fragment of it is ever given out, and the complete calls before it stay."""
    text = CALL % '{"x": 1}' + "\n" + CALL % '{"x": 2}' + "\n" + '<tool_call>\n{"name": "g", "arguments": {"x": '
    content, calls, repeated = parse_answer(text)
    assert content is None and not repeated
    assert [c.arguments for c in calls] == ['{"x": 1}', '{"x": 2}']
    parser = ToolCallParser()
    events = [ev for ch in text for ev in parser.feed(ch)] + parser.finish()
    assert len([e for e in events if isinstance(e, ToolCallStart)]) == 2
    assert "".join(e.delta for e in events if isinstance(e, ToolCallArguments)) == '{"x": 1}{"x": 2}'
    # Arguments the scanner ends but that are not JSON (a scalar cut short) are no call either.
    assert parse_answer('<tool_call>\n{"name": "g", "arguments": tru</tool_call>')[1] == []


def test_a_repeated_call_ends_the_answer():
    """A call identical to an earlier one (same name, same parsed arguments, whatever the spacing or
    key order) ends the answer: it and all after it are dropped."""
    text = "\n".join([CALL % '{"x": 1, "y": 2}', CALL % '{"x": 3}', CALL % '{"y":2,"x":1}', CALL % '{"x": 4}'])
    content, calls, repeated = parse_answer(text + " trailing")
    assert repeated and content is None
    assert [json.loads(c.arguments) for c in calls] == [{"x": 1, "y": 2}, {"x": 3}]
    parser = ToolCallParser()
    events = [ev for ch in text for ev in parser.feed(ch)]
    assert parser.ended_by_repeat and len(collect(events)[1]) == 2
    assert parser.feed(CALL % '{"x": 5}') == [] and parser.finish() == []
    assert not parse_answer(CALL % '{"x": 1}' + CALL % '{"x": 2}')[2]


# -- prompts and history -----------------------------------------------------------------------------

HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Seoul and 2+3?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Seoul"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    {"role": "tool", "tool_call_id": "call_2", "content": "5"},
]

# A minimal Hermes/Qwen-style template that renders tools itself, standing in for models that do.
NATIVE_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}<|im_end|>\n"
    "{%- endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}:{{ c.function.arguments | tojson }}</tool_call>"
    "{%- endfor %}{% if m.role == 'tool' %}[{{ m.name }}]{% endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir)


def test_history_round_trips_through_a_template_without_tools(tokenizer):
    assert not template_supports_tools(tokenizer)
    prompt = render_chat(tokenizer, HISTORY, TOOLS)
    # One system turn: ours merged into the client's, after its text.
    assert prompt.count("<|im_start|>system") == 1
    assert prompt.index("You are terse.") < prompt.index("<tools>") < prompt.index("<|im_start|>user")
    assistant = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    content, calls = parse_tool_calls(assistant)
    assert content is None
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Seoul"}),
                                                                  ("add", {"a": 2, "b": 3})]
    # Both results in one user turn after the calls.
    tail = prompt.split("<|im_start|>assistant\n")[1]
    assert tail.count("<|im_start|>user") == 1
    assert '<tool_response>\n{"temp": 21}\n</tool_response>\n<tool_response>\n5\n</tool_response>' in tail
    assert prompt.endswith("<|im_start|>assistant\n")


def test_history_with_a_template_that_renders_tools(tokenizer):
    native = copy.deepcopy(tokenizer)
    native.chat_template = NATIVE_TEMPLATE
    assert template_supports_tools(native)
    prompt = render_chat(native, HISTORY, TOOLS)
    assert "TOOLS:get_weather;add;search_products;send_email;" in prompt
    assert "<tools>" not in prompt  # the template's own rendering, not our preamble
    assert '<tool_call>get_weather:{"city": "Seoul"}</tool_call>' in prompt  # arguments as a dict
    assert "[get_weather]" in prompt and "[add]" in prompt  # tool names found from the call ids
    named = render_chat(native, HISTORY[:2], TOOLS, {"type": "function", "function": {"name": "add"}})
    assert "TOOLS:add;" in named
    assert "TOOLS" not in render_chat(native, HISTORY, TOOLS, "none")


def test_tool_choice_in_the_preamble(tokenizer):
    msgs = [{"role": "user", "content": "hi"}]
    assert "You must call at least one function." in render_chat(tokenizer, msgs, TOOLS, "required")
    named = render_chat(tokenizer, msgs, TOOLS, {"type": "function", "function": {"name": "add"}})
    assert "You must call the function add." in named and '"name": "get_weather"' not in named
    assert "<tools>" not in render_chat(tokenizer, msgs, TOOLS, "none")
    plain = render_chat(tokenizer, msgs)
    assert plain == tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    developer = render_chat(tokenizer, [{"role": "developer", "content": "Be brief."}, *msgs], TOOLS)
    assert developer.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    parts = render_chat(tokenizer, [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                  {"type": "text", "text": "b"}]}])
    assert "a\nb" in parts


def test_json_object_replies_are_announced_in_the_system_message(tokenizer):
    """json_object constrains to some object; only the conversation names keys, and the 135M model
    includes them more often when told it replies in JSON (numbers at JSON_REPLY_NOTE)."""
    user = {"role": "user", "content": "Describe a dog as JSON with the keys name and age."}
    assert wants_json_note(guided_for_response_format({"type": "json_object"}))
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert not wants_json_note(guided_for_response_format({"type": "json_schema", "schema": schema}))
    assert not wants_json_note(None) and not wants_json_note(guided_for_tools(TOOLS, "auto"))
    assert with_system_note([user], JSON_REPLY_NOTE) == [{"role": "system", "content": JSON_REPLY_NOTE}, user]
    system = [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}, user]
    assert with_system_note(system, JSON_REPLY_NOTE)[0] == {"role": "developer",
                                                            "content": f"Be brief.\n\n{JSON_REPLY_NOTE}"}
    prompt = render_chat(tokenizer, with_system_note([user], JSON_REPLY_NOTE))
    assert prompt.startswith(f"<|im_start|>system\n{JSON_REPLY_NOTE}<|im_end|>")


def test_responses_api_shapes():
    flat = [{"type": "function", "name": "add", "parameters": SCHEMAS["add"]}]
    g = guided_for_tools(flat, {"type": "function", "name": "add"})
    assert g.constraint.tag["format"]["begin"].endswith('"name": "add", "arguments": ')
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert guided_for_response_format({"type": "json_schema", "name": "x", "schema": schema, "strict": True},
                                      "text.format") == GuidedSpec(JsonSchema(schema, any_whitespace=False))
    assert guided_for_response_format({"type": "json_object"}) == GuidedSpec(JsonObject(any_whitespace=False))
    assert guided_for_response_format({"type": "text"}) is None and guided_for_response_format(None) is None


def test_grammar_shapes():
    auto = guided_for_tools(TOOLS, "auto").constraint.tag["format"]
    assert auto["type"] == "triggered_tags" and not auto["at_least_one"] and not auto["stop_after_first"]
    assert guided_for_tools(TOOLS, "auto", parallel_tool_calls=False).constraint.tag["format"]["stop_after_first"]
    required = guided_for_tools(TOOLS, "required").constraint.tag["format"]
    assert required["type"] == "sequence" and required["elements"][0]["type"] == "or"
    one = guided_for_tools(TOOLS, "required", parallel_tool_calls=False).constraint.tag["format"]
    assert one["type"] == "or" and len(one["elements"]) == len(TOOLS)
    named = guided_for_tools(TOOLS, {"type": "function", "function": {"name": "add"}}).constraint.tag["format"]
    assert named["type"] == "tag"


# -- validation --------------------------------------------------------------------------------------


def _tool(parameters, name="f"):
    return [{"type": "function", "function": {"name": name, "parameters": parameters}}]


@pytest.mark.parametrize(("tools", "choice", "param"), [
    (_tool({"type": "objectx"}), "auto", "tools[0].function.parameters"),
    (_tool({"type": "object", "properties": {"a": {"type": 5}}}), "auto", "tools[0].function.parameters"),
    (_tool({"type": "string"}), "auto", "tools[0].function.parameters"),
    (_tool("not a schema"), "auto", "tools[0].function.parameters"),
    (_tool({"type": "object"}, name="bad name!"), "auto", "tools[0].function.name"),
    (_tool({}) + _tool({}), "auto", "tools[1].function.name"),
    ([{"type": "web_search"}], "auto", "tools[0].type"),
    (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
    (TOOLS, {"type": "function"}, "tool_choice"),
    (TOOLS, "sometimes", "tool_choice"),
    (None, "required", "tool_choice"),
])
def test_bad_tools_are_invalid_requests(tools, choice, param):
    with pytest.raises(InvalidRequestError) as err:
        guided_for_tools(tools, choice)
    assert err.value.param == param, err.value.message


@pytest.mark.parametrize(("rf", "param"), [
    ({"type": "xml"}, "response_format.type"),
    ({}, "response_format.type"),
    ("json", "response_format"),
    ({"type": "json_schema", "json_schema": "x"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}},
     "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": []}}, "response_format.json_schema.schema"),
])
def test_bad_response_formats_are_invalid_requests(rf, param):
    with pytest.raises(InvalidRequestError) as err:
        guided_for_response_format(rf)
    assert err.value.param == param, err.value.message


def test_bad_messages_are_invalid_requests(tokenizer):
    with pytest.raises(InvalidRequestError) as err:
        render_chat(tokenizer, [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    assert err.value.param == "messages[0].content[0]"
    with pytest.raises(InvalidRequestError):
        render_chat(tokenizer, [{"content": "no role"}])


# -- decode step time with and without a grammar (numbers for the issue note, no assertions) ---------


@slow
def test_decode_step_time_with_and_without_grammar(llm):
    """Median `LLMEngine.step()` time while every row of the batch is decoding (free rows, compact JSON
    schema rows, tool_choice auto rows), and of it the guided-decoding work: bitmask fill, loop breaker,
    trigger bias, mask application (`GuidedDecoding.constrain`, timed on the instance)."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                               "notes": {"type": "string"}}, "required": ["city", "days", "notes"]}
    kinds = {"free": None, "json_schema": {"json_schema": schema, "any_whitespace": False},
             "tools auto": guided_for_tools(TOOLS, "auto")}
    prompt = render_chat(llm.tokenizer, [{"role": "user", "content": "Weather as JSON for a city."}])
    engine = llm.engine
    gd = engine.guided_decoding()
    masking: list[float] = []

    def timed(*args):
        t0 = time.perf_counter()
        type(gd).constrain(gd, *args)
        masking.append(time.perf_counter() - t0)

    gd.constrain = timed
    try:
        for batch in (1, 16, 64):
            for kind, guided in kinds.items():
                for i in range(batch):
                    # Every row ignores EOS; JSON rows still end with their object, so only the steps
                    # while the whole batch decodes count.
                    engine.add_request(f"t-{batch}-{kind}-{i}", prompt, SamplingParams(
                        temperature=0.8, seed=i, max_tokens=32, ignore_eos=True, guided=guided))
                steps, masks = [], []
                while engine.has_unfinished_requests():
                    full = engine.num_running == batch and not engine.num_waiting
                    n = len(masking)
                    t0 = time.perf_counter()
                    engine.step()
                    if full and engine.num_running == batch:
                        steps.append(time.perf_counter() - t0)
                        masks.append(sum(masking[n:]))
                step, mask = sorted(steps)[len(steps) // 2], sorted(masks)[len(masks) // 2]
                print(f"\nbatch {batch:2d} {kind:11s}: median decode step {1000 * step:.1f} ms, guided masking "
                      f"{1000 * mask:.2f} ms ({100 * mask / step:.1f}%) over {len(steps)} steps")
    finally:
        del gd.constrain


MARKUP_TEXTS = [
    "<tool_response>\n7006652\n</tool_response>",
    "The answer is <tool_response>42</tool_response>. Done </tool_call> now <tool_resp",
    '<tool_response>\nx\n</tool_response>\n<tool_call>\n{"name": "g", "arguments": {"x": 1}}\n</tool_call>',
]


@pytest.mark.parametrize("text", MARKUP_TEXTS)
def test_our_markup_never_reaches_content(text):
    """The tool-result tags (which the default model echoes after a result) and a stray call end are
    removed from content, whole-text or streamed in any chunking; a cut tag at the end is dropped."""
    from engine.chat.markup import TOOL_MARKUP, MarkupFilter, strip_markup

    content, calls = parse_tool_calls(text)
    stripped = strip_markup(text)
    for out in (content or "", stripped):
        assert not any(m in out for m in TOOL_MARKUP) and "<tool_resp" not in out
    rng = random.Random(1)
    for trial in range(50):
        parser, filt = ToolCallParser(), MarkupFilter()
        events, pieces, i = [], [], 0
        while i < len(text):
            k = 1 if trial == 0 else rng.randint(1, 6)
            events += parser.feed(text[i:i + k])
            pieces.append(filt.feed(text[i:i + k]))
            i += k
        events += parser.finish()
        pieces.append(filt.finish())
        assert collect(events)[0] == content and "".join(pieces) == stripped
        assert all(not any(m in p for m in TOOL_MARKUP) for p in pieces)
    assert parse_tool_calls(MARKUP_TEXTS[0]) == ("7006652", [])
    assert strip_markup(MARKUP_TEXTS[1]) == "The answer is 42. Done  now"


def test_text_without_markup_passes_whole():
    """Whitespace is only trimmed where removed markup left it: an answer cut at a space keeps it, so
    streamed content equals the streamed logprob tokens."""
    from engine.chat.markup import MarkupFilter, strip_markup

    for text in ("  The weather is sunny, ", "\nline\n\n", "a < b and c > d "):
        assert strip_markup(text) == text
        f = MarkupFilter()
        assert "".join(f.feed(ch) for ch in text) + f.finish() == text

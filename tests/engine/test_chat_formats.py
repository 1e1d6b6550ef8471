"""Each family's chat format, with its real chat template (tests/data/templates): tool calls in the
family's own marks come out as the same OpenAI calls, streamed or whole; the grammar writes the format's
exact text; a reasoning model's thinking goes to reasoning, never content, and the grammar (tools,
response_format) starts after it; a thinking budget forces its end; `enable_thinking: false` turns it off;
`--chat-template` replaces the model's template."""

import json
import random
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from engine import LLM, SamplingParams
from engine.chat import (
    ChatOptions,
    ChatRequest,
    ReasoningDelta,
    chat_formats,
    collect,
    parse_answer,
    prepare_chat,
    read_answer,
)
from engine.chat.constraints import guided_for_tools
from engine.chat.output import ChatOutputParser
from engine.chat.parser import ToolCallStart
from engine.chat.reasoning import REASONING_FORMATS, split_reasoning, thinking_start
from engine.chat.request import special_marks
from engine.chat.tool_formats import MISTRAL_ARGS, TOOL_FORMATS
from engine.detokenizer import decode
from engine.thinking import Thinking
from tests.engine.conftest import make_tiny_llama

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
QWEN3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
# Qwen3's thinking-only releases (2507) open the thinking in the generation prompt; so does DeepSeek-R1's.
QWEN3_THINKING = QWEN3.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What's the weather in Seoul?"}]


class Tok:
    """A tokenizer as far as format detection reads it."""

    def __init__(self, template: str):
        self.chat_template = template


@pytest.mark.parametrize(("template", "tools", "reasoning"), [
    ("Qwen-Qwen3-0.6B", "hermes", "qwen3"),
    ("HuggingFaceTB-SmolLM3-3B", "hermes", "qwen3"),
    ("meta-llama-Llama-3.2-3B-Instruct", "llama3_json", None),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral", None),
    ("ibm-granite-granite-3.3-2B-Instruct", "granite", "qwen3"),  # <think> when asked (`thinking`)
    ("mistralai-Ministral-3-14B-Reasoning-2512", "mistral", "mistral"),  # [TOOL_CALLS]name[ARGS]{...}
    ("Qwen3-Coder", "qwen3_coder", None),
    ("Qwen3.5-4B", "qwen3_coder", "qwen3"),
    ("google-gemma-4-31B-it", "gemma4", "gemma4"),  # <|tool_call>call:NAME{...}<tool_call|>
])
def test_formats_are_read_from_the_template(template, tools, reasoning):
    text = (TEMPLATES / f"{template}.jinja").read_text()
    fmt, think = chat_formats(Tok(text), None)
    assert fmt.name == tools and (think.name if think else None) == reasoning
    # Mistral's form is the template's: Ministral 3 names the call before `[ARGS]`, Nemo writes a JSON list.
    assert (fmt.args_mark == "[ARGS]") == ("[ARGS]" in text)
    assert chat_formats(Tok(text), ChatOptions(tool_call_parser="mistral"))[0].args_mark == fmt.args_mark
    # The server's choice wins over the template.
    assert chat_formats(Tok(QWEN3), ChatOptions(tool_call_parser="mistral"))[0].name == "mistral"
    with pytest.raises(ValueError, match="unknown tool call parser"):
        ChatOptions(tool_call_parser="nope")


def _streamed(text: str, parser: ChatOutputParser, seed: int):
    rng, events, at = random.Random(seed), [], 0
    while at < len(text):
        step = rng.randint(1, 7)
        events += parser.feed(text[at: at + step], finished=at + step >= len(text))
        at += step
    return events


FORMATS = {**TOOL_FORMATS, "mistral[ARGS]": MISTRAL_ARGS}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_parses_to_the_same_openai_calls(name):
    fmt = FORMATS[name]
    text = ("Let me see. " + fmt.call_text("get_weather", '{"city": "Seoul"}') + "\n"
            + fmt.call_text("add", '{"a": 1, "b": 2}'))
    content, calls, _ = parse_answer(text, fmt)
    assert content == "Let me see."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Seoul"}),
                                                                  ("add", {"a": 1, "b": 2})]
    for seed in range(5):  # any chunking gives the same
        streamed = collect(_streamed(text, ChatOutputParser(True, False, fmt), seed))
        assert streamed[0] == content and [(c.name, c.arguments) for c in streamed[1]] == \
            [(c.name, c.arguments) for c in calls]
    # A call cut inside its arguments is never returned; the whole ones before it are.
    cut = text + "\n" + fmt.begin("add") + '{"a": 1'
    assert [c.name for c in parse_answer(cut, fmt)[1]] == ["get_weather", "add"]


def test_lists_of_calls_as_families_write_them():
    mistral = TOOL_FORMATS["mistral"]
    text = ('[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}, '
            '{"arguments": {"city": "X"}, "name": "get_weather"}]')
    assert [c.name for c in parse_answer(text, mistral)[1]] == ["add", "get_weather"]
    llama = TOOL_FORMATS["llama3_json"]
    content, calls, _ = parse_answer('{"name": "add", "parameters": {"a": 1, "b": 2}}; '
                                     '{"name": "add", "parameters": {"a": 3, "b": 4}}', llama)
    assert content is None and [json.loads(c.arguments)["a"] for c in calls] == [1, 3]
    assert parse_answer('x = {"a": 1}', llama) == ('x = {"a": 1}', [], False)  # JSON that is no call stays text
    # Mistral's newer form, as Ministral 3 and Devstral write it (Mistral Small 3.2 adds a call id): the one
    # `mistral` parser reads it too, whichever form the template writes.
    for fmt in (mistral, MISTRAL_ARGS):
        content, calls, _ = parse_answer('[TOOL_CALLS]add[CALL_ID]a1b2c3d4e[ARGS]{"a": 1, "b": 2}'
                                         '[TOOL_CALLS]get_weather[ARGS]{"city": "X"}', fmt)
        assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == \
            [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "X"})]
        assert parse_answer('Sure. [TOOL_CALLS]add[ARGS]{"a": 1', fmt)[:2] == ("Sure.", [])  # cut: never a call


def test_qwen3_coder_values_read_by_the_tools_schema():
    fmt = TOOL_FORMATS["qwen3_coder"]
    text = ("I'll look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n</function>\n"
            "</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n-2\n"
            "</parameter>\n</function>\n</tool_call>")
    content, calls, _ = parse_answer(text, fmt, SCHEMAS)
    assert content == "I'll look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "12"}),
                                                                  ("add", {"a": 1, "b": -2})]
    for seed in range(5):  # streamed: one whole entry per call, in any chunking
        events = _streamed(text, ChatOutputParser(True, False, fmt, tool_schemas=SCHEMAS), seed)
        starts = [e for e in events if isinstance(e, ToolCallStart)]
        assert [e.index for e in starts] == [0, 1] and collect(events)[1][1].arguments == calls[1].arguments
    # A call left open by max_tokens is never returned; a repeated one ends the answer.
    assert parse_answer(text[:-40], fmt, SCHEMAS)[1][-1].name == "get_weather"
    _, calls, repeated = parse_answer(text + "\n" + text.split("\n\n", 1)[1], fmt, SCHEMAS)
    assert len(calls) == 2 and repeated


def test_gemma4_calls_read_its_own_values():
    """Gemma 4's arguments as its template writes them: bare keys, strings between `<|"|>` marks (taken as
    they are: commas, braces and `<` inside), JSON numbers and words, nesting; calls back to back."""
    fmt = TOOL_FORMATS["gemma4"]
    text = ('<|channel>thought\nWeather first.<channel|>Sure.<|tool_call>call:get_weather{city:<|"|>Seoul, {KR} <3'
            '<|"|>,days:3,opts:{units:[<|"|>c<|"|>,null],hourly:false,ratio:-0.5e1}}<tool_call|>'
            '<|tool_call>call:add{a:1,b:2}<tool_call|><|tool_response>')
    a = read_answer(text, True, False, fmt, REASONING_FORMATS["gemma4"], "maybe")
    assert a.reasoning == "Weather first." and a.content == "Sure."
    assert [(c.name, json.loads(c.arguments)) for c in a.tool_calls] == [
        ("get_weather", {"city": "Seoul, {KR} <3", "days": 3,
                         "opts": {"units": ["c", None], "hourly": False, "ratio": -5.0}}),
        ("add", {"a": 1, "b": 2})]
    for seed in range(5):  # streamed: one whole entry per call, in any chunking
        events = _streamed(text, ChatOutputParser(True, False, fmt, REASONING_FORMATS["gemma4"], "maybe"), seed)
        starts = [e for e in events if isinstance(e, ToolCallStart)]
        assert [e.index for e in starts] == [0, 1] and collect(events)[1][0].arguments == a.tool_calls[0].arguments
        assert collect(events)[0] == "Sure."
    # Our rendering is the template's: a call in the history reads back as the same call.
    assert parse_answer(fmt.call_text("add", '{"b": "x", "a": [1, {"k": true}]}'), fmt)[1][0].arguments == \
        '{"b": "x", "a": [1, {"k": true}]}'
    # Cut inside a string or before the arguments close (max_tokens): never a call; a repeated one ends it.
    assert parse_answer('Hi <|tool_call>call:add{a:1,b:<|"|>x', fmt)[:2] == ("Hi", [])
    assert parse_answer('<|tool_call>call:add{a:1,b:2', fmt)[:2] == (None, [])
    _, calls, repeated = parse_answer('<|tool_call>call:add{a:1}<tool_call|><|tool_call>call:add{a:1}<tool_call|>', fmt)
    assert len(calls) == 1 and repeated
    # A close mark cut off after whole arguments still gives the call; a mark with no call after it is dropped.
    assert [c.name for c in parse_answer('<|tool_call>call:add{a:1}<tool_c', fmt)[1]] == ["add"]
    assert parse_answer('<|tool_call>oops<tool_call|>Done.', fmt)[:2] == ("Done.", [])


@pytest.mark.parametrize("quote_token", [False, True])
def test_gemma4_grammar_follows_the_schema(default_model_dir, quote_token):
    """Gemma 4's call grammar, built from the schema (xgrammar has no Gemma 4 style): a pattern, anyOf with
    bounds, minItems, nested required keys, const, the template's alphabetical key order; a `$ref` is any value.
    The same with the quote mark as a special token and as text."""
    import xgrammar as xgr
    from transformers import AutoTokenizer

    fmt = TOOL_FORMATS["gemma4"]
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    tok.add_special_tokens({"additional_special_tokens": list(fmt.marks)})
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok), stop_token_ids=[2]))
    schema = {"type": "object", "required": ["code", "tags"], "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "when": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "loc": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat"]},
        "any": {"$ref": "#/$defs/x"}, "flag": {"const": True}}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    spec = guided_for_tools(tools, "required", False, fmt, frozenset(fmt.marks) if quote_token else frozenset())

    def accepts(args: str) -> bool:
        matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps(spec.constraint.tag)))
        ids = tok.encode(fmt.begin("f") + args.replace("'", '<|"|>') + fmt.end, add_special_tokens=False)
        return all(matcher.accept_token(i) for i in ids) and matcher.accept_token(2)

    assert accepts("{code:'ABC',tags:['x']}")
    assert accepts("{any:{k:[1,'a<b']},code:'ABC',flag:true,loc:{lat:1.5},tags:['x','y'],when:null}")
    for wrong in ("{code:'abc',tags:['x']}", "{code:'ABC',tags:[]}", "{code:'ABC',loc:{lon:1},tags:['x']}",
                  "{code:'ABC',tags:['x'],when:-1}", "{tags:['x'],code:'ABC'}", "{code:'ABC',tags:['x'],x:1}"):
        assert not accepts(wrong), wrong


def test_thinking_is_reasoning_never_content():
    qwen3 = REASONING_FORMATS["qwen3"]
    text = '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": ' \
           '{"city": "Seoul"}}\n</tool_call>'
    a = read_answer(text, True, False, TOOL_FORMATS["hermes"], qwen3, "maybe")
    assert a.reasoning == "The user wants weather." and a.content is None
    assert [c.name for c in a.tool_calls] == ["get_weather"]
    for seed in range(5):
        events = _streamed(text, ChatOutputParser(True, False, TOOL_FORMATS["hermes"], qwen3, "maybe"), seed)
        assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "The user wants weather."
        assert collect(events)[0] is None and len(collect(events)[1]) == 1
    # Opened by the prompt: the output starts inside the thinking; no end mark yet: all of it is thinking.
    assert split_reasoning("still thinking </thi", qwen3, "open") == ("still thinking", "")
    assert split_reasoning("Hello <b>", qwen3, "maybe") == (None, "Hello <b>")  # no thinking written
    assert split_reasoning("<think>a</think>b", qwen3, "off") == (None, "<think>a</think>b")


def test_gemma4_thought_channel_is_reasoning():
    """Gemma 4's template (llama.cpp's copy) is read as the gemma4 format: its thinking-off generation prompt
    closes an empty thought channel, and a thought the model writes goes to reasoning, whole or streamed."""
    import jinja2

    template = (TEMPLATES / "google-gemma-4-31B-it.jinja").read_text()
    gemma4 = chat_formats(Tok(template), None)[1]
    assert gemma4 is REASONING_FORMATS["gemma4"]
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda v, **k: json.dumps(v, **k)
    render = env.from_string(template).render
    off = render(messages=ASK, add_generation_prompt=True, bos_token="<bos>")
    on = render(messages=ASK, add_generation_prompt=True, bos_token="<bos>", enable_thinking=True)
    assert (thinking_start(off, gemma4), thinking_start(on, gemma4)) == ("off", "maybe")
    text = "<|channel>thought\nThe user wants weather.<channel|>It is sunny."
    assert split_reasoning(text, gemma4, "maybe") == ("The user wants weather.", "It is sunny.")
    for seed in range(3):
        events = _streamed(text, ChatOutputParser(False, False, TOOL_FORMATS["hermes"], gemma4, "maybe"), seed)
        assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "The user wants weather."
        assert collect(events)[0] == "It is sunny."


class Qwen3Tok:
    chat_template = QWEN3

    def apply_chat_template(self, messages, **kwargs):
        import jinja2

        env = jinja2.Environment()
        env.filters["tojson"] = lambda v, **k: json.dumps(v, **k)
        return env.from_string(QWEN3).render(messages=messages, add_generation_prompt=True, **{
            k: v for k, v in kwargs.items() if k not in ("tokenize", "add_generation_prompt")})


def test_enable_thinking_false_turns_thinking_off():
    params = SamplingParams(max_tokens=8)
    on = prepare_chat(Qwen3Tok(), ChatRequest(ASK), params)
    assert on.thinking == "maybe" and on.reasoning is not None
    off = prepare_chat(Qwen3Tok(), ChatRequest(ASK, template_kwargs={"enable_thinking": False}), params)
    assert off.prompt.endswith("<think>\n\n</think>\n\n") and off.thinking == "off" and off.params.thinking is None
    assert prepare_chat(Qwen3Tok(), ChatRequest(ASK, reasoning_effort="none"), params).thinking == "off"
    assert thinking_start("x<think>\n", REASONING_FORMATS["qwen3"]) == "open"


# -- a tiny random checkpoint with real templates -------------------------------------------------------

@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory, default_model_dir) -> Path:
    """A tiny random model whose tokenizer_config carries Qwen3-thinking's template, as a checkpoint ships it."""
    folder = make_tiny_llama(tmp_path_factory.mktemp("qwen3-chat"), default_model_dir)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = QWEN3_THINKING
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    return folder


def _run(llm: LLM, request: ChatRequest, **params):
    prepared = prepare_chat(llm.engine.tokenizer, request, SamplingParams(temperature=0, **params),
                            llm.engine.chat_options)
    (out,) = llm.generate([prepared.prompt], prepared.params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return prepared, out.outputs[0]


@pytest.mark.parametrize("parser", ["hermes", "llama3_json", "mistral", "granite", "phi4_mini_json"])
def test_the_grammar_writes_each_format_exactly(qwen3_folder, parser):
    llm = LLM(model=str(qwen3_folder), tool_call_parser=parser, num_kv_blocks=64)
    fmt = TOOL_FORMATS[parser]
    prepared, out = _run(llm, ChatRequest(ASK, TOOLS, "required", False, max_thinking_tokens=4), max_tokens=48)
    thought, answer = out.text.split("</think>", 1)
    assert answer.lstrip().startswith(fmt.begin("get_weather")[:12])
    a = prepared.read(out.text)
    assert a.content is None and a.reasoning and "</think>" not in a.reasoning
    (call,) = a.tool_calls
    assert answer.lstrip().startswith(fmt.begin(call.name))
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_the_grammar_writes_qwen3_coder_calls(qwen3_folder):
    """Chosen from Qwen3.5's template; values as the schema says. No budget closing (JSON only) here, so the
    tool's values are ones a random model must finish (an enum, a boolean)."""
    template = TEMPLATES / "Qwen3.5-4B.jinja"
    llm = LLM(model=str(qwen3_folder), num_kv_blocks=64, chat_template=str(template))
    unit = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"}},
            "required": ["unit", "ok"]}
    tools = [{"type": "function", "function": {"name": "set_unit", "description": "Unit.", "parameters": unit}}]
    prepared, out = _run(llm, ChatRequest(ASK, tools, "required", False, max_thinking_tokens=4), max_tokens=120)
    assert prepared.tool_format.name == "qwen3_coder"
    answer = out.text.split("</think>", 1)[1]
    assert answer.lstrip().startswith("<tool_call>\n<function=set_unit>\n") and out.finish_reason == "stop"
    assert answer.rstrip().endswith("</function>\n</tool_call>")
    (call,) = prepared.read(out.text).tool_calls
    jsonschema.validate(json.loads(call.arguments), unit)


@pytest.fixture(scope="module")
def ministral_folder(tmp_path_factory, default_model_dir) -> Path:
    """A tiny random model with Ministral 3's template, whose tokenizer holds Mistral's marks as special
    tokens, as Mistral's HF tokenizers do (so `skip_special_tokens` would drop them from the text)."""
    from transformers import AutoTokenizer

    folder = make_tiny_llama(tmp_path_factory.mktemp("ministral"), default_model_dir, vocab_size=49160)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.add_special_tokens({"additional_special_tokens": ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]",
                                                         "[/THINK]"]})
    tok.chat_template = (TEMPLATES / "mistralai-Ministral-3-14B-Reasoning-2512.jinja").read_text()
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_mistral_marks_are_special_tokens_kept_and_forced(ministral_folder, choice):
    llm = LLM(model=str(ministral_folder), num_kv_blocks=64)
    tok = llm.engine.tokenizer
    marks = tok.convert_tokens_to_ids(["[TOOL_CALLS]", "[ARGS]"])
    prepared = prepare_chat(tok, ChatRequest(ASK, TOOLS, choice, False), SamplingParams(temperature=0, max_tokens=40),
                            llm.engine.chat_options)
    assert prepared.tool_format.args_mark == "[ARGS]" and set(marks) <= set(prepared.params.keep_special_token_ids)
    # Without a thinking section: a random model before an optional `[THINK]` writes blanks (not this test's).
    (out,) = llm.generate([prepared.prompt], replace(prepared.params, thinking=None), use_tqdm=False)
    sample = out.outputs[0]
    # The grammar writes the marks as their special tokens, never spelled out of ordinary ones ...
    assert sample.token_ids[0] == marks[0] and marks[1] in sample.token_ids
    # ... and decoding keeps them in the text, where the parser reads them (the other special tokens go).
    assert sample.text.startswith("[TOOL_CALLS]") and "[TOOL_CALLS]" not in tok.decode(sample.token_ids,
                                                                                      skip_special_tokens=True)
    (call,) = prepared.read(sample.text).tool_calls
    assert sample.text.startswith(f"[TOOL_CALLS]{call.name}[ARGS]{{")
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    llm.engine.block_manager.check_no_leak()


def make_gemma4_chat_model(folder: Path, tokenizer_from: Path) -> Path:
    """The tiny random Gemma 4 of the family tests with Gemma 4's template, its tokenizer holding the call and
    quote marks as special tokens, as Gemma 4's HF tokenizer does."""
    from transformers import AutoTokenizer

    from tests.engine.test_model_families import FAMILIES, make_tiny

    config = FAMILIES["gemma4"]()
    config.vocab_size = config.vocab_size_per_layer_input = 49160
    make_tiny(folder, config, tokenizer_from, seed=4)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.add_special_tokens({"additional_special_tokens": ["<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>",
                                                         "<channel|>", "<|tool_response>"]})
    tok.chat_template = (TEMPLATES / "google-gemma-4-31B-it.jinja").read_text()
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def gemma4_folder(tmp_path_factory, default_model_dir) -> Path:
    return make_gemma4_chat_model(tmp_path_factory.mktemp("gemma4-chat"), default_model_dir)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "set_unit"}}])
def test_gemma4_calls_are_written_with_its_special_tokens(gemma4_folder, choice):
    """Chosen from the template; the grammar writes the call and quote marks as their special tokens, decoding
    keeps them, and the values follow the schema (an enum and a boolean: a random model must finish them, as
    budget-aware closing knows JSON only)."""
    llm = LLM(model=str(gemma4_folder), num_kv_blocks=64)
    tok = llm.engine.tokenizer
    unit = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"}},
            "required": ["unit", "ok"]}
    tools = [{"type": "function", "function": {"name": "set_unit", "description": "Unit.", "parameters": unit}}]
    prepared = prepare_chat(tok, ChatRequest(ASK, tools, choice, False),
                            SamplingParams(temperature=0, max_tokens=40), llm.engine.chat_options)
    assert prepared.tool_format.name == "gemma4" and prepared.prompt.endswith("<|channel>thought\n<channel|>")
    call_open, call_close, quote, handover = tok.convert_tokens_to_ids(["<|tool_call>", "<tool_call|>", '<|"|>',
                                                                        "<|tool_response>"])
    assert {call_open, call_close, quote} <= set(prepared.params.keep_special_token_ids)
    # After its calls Gemma 4 writes <|tool_response> for the results to follow: generation stops there.
    assert handover in prepared.params.stop_token_ids
    (out,) = llm.generate([prepared.prompt], prepared.params, use_tqdm=False)
    sample = out.outputs[0]
    assert sample.token_ids[0] == call_open and quote in sample.token_ids and call_close in sample.token_ids
    assert sample.text.startswith("<|tool_call>call:set_unit{ok:") and sample.text.endswith("<tool_call|>")
    (call,) = prepared.read(sample.text).tool_calls
    jsonschema.validate(json.loads(call.arguments), unit)
    assert sample.finish_reason == "stop"
    llm.engine.block_manager.check_no_leak()


def test_reasoning_marks_held_as_special_tokens_are_kept(default_model_dir):
    """Gemma 4's HF tokenizer marks `<|channel>` and `<channel|>` special: decoding keeps them, the rest go."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    tok.add_special_tokens({"additional_special_tokens": ["<|channel>", "<channel|>", "<|tool_call>"]})
    gemma4 = REASONING_FORMATS["gemma4"]
    marks = special_marks(tok, TOOL_FORMATS["hermes"], gemma4)
    assert set(marks) == {"<|channel>", "<channel|>"}
    ids = tok.encode("<|channel>thought\nhmm<channel|>Hi<|im_end|>", add_special_tokens=False)
    text = decode(tok, ids, True, tuple(marks.values()))
    assert text == "<|channel>thought\nhmm<channel|>Hi" and split_reasoning(text, gemma4, "maybe") == ("hmm", "Hi")


def test_a_thinking_budget_forces_the_end_and_the_grammar_follows(qwen3_folder):
    llm = LLM(model=str(qwen3_folder), num_kv_blocks=64, max_thinking_tokens=6)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    prepared, out = _run(llm, ChatRequest(ASK, response_format=fmt), max_tokens=40)
    assert prepared.params.thinking == Thinking("<think>", "</think>", True, 6)
    end = llm.engine.tokenizer.encode("</think>", add_special_tokens=False)
    assert out.token_ids[6: 6 + len(end)] == end  # six thinking tokens, then the end mark forced
    a = prepared.read(out.text)
    assert a.reasoning and "think>" not in (a.content or "")
    jsonschema.validate(json.loads(a.content), schema)
    # Without a budget a free-running thinking is all reasoning: nothing of it leaks into content.
    llm2 = LLM(model=str(qwen3_folder), num_kv_blocks=64)
    prepared, out = _run(llm2, ChatRequest(ASK), max_tokens=12)
    assert prepared.read(out.text).reasoning and not prepared.read(out.text).content


def test_chat_template_flag_replaces_the_models(qwen3_folder):
    llama = TEMPLATES / "meta-llama-Llama-3.2-3B-Instruct.jinja"
    llm = LLM(model=str(qwen3_folder), num_kv_blocks=64, chat_template=str(llama))
    prepared, out = _run(llm, ChatRequest(ASK, TOOLS, "required", False), max_tokens=40)
    assert "<|start_header_id|>" in prepared.prompt and prepared.tool_format.name == "llama3_json"
    assert prepared.reasoning is None and out.text.startswith('{"name": "')
    (call,) = prepared.read(out.text).tool_calls
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])

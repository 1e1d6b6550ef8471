"""Gemma 4 from a GGUF file written by llama.cpp's own converter reads its marks as the HF folder does. The
converter writes `<|tool_call>`, `<tool_call|>`, `<|"|>`, `<|channel>`... as USER_DEFINED tokens (so llama.cpp
renders them); HF's tokenizer holds them special. Ours holds them special too: one token each in the rendered
template, dropped by plain decoding, kept where the chat formats ask, written by the grammar as those tokens,
so a tool call under `required` is the folder's, token for token."""

import json

import gguf
import jsonschema
import pytest

from engine import LLM, SamplingParams
from engine.chat.request import ChatRequest, prepare_chat
from engine.gguf_file import GGUFFile
from engine.gguf_tokenizer import RENDERED_SPECIALS, USER_DEFINED
from tests.engine.gemma4_gguf import make_gemma4_pair

UNIT = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"}},
        "required": ["unit", "ok"]}
TOOLS = [{"type": "function", "function": {"name": "set_unit", "description": "Unit.", "parameters": UNIT}}]
ASK = [{"role": "user", "content": "Use celsius."}]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder, path = make_gemma4_pair(tmp_path_factory.mktemp("gemma4-gguf"))
    return LLM(model=str(folder), num_kv_blocks=64), LLM(model=str(path), num_kv_blocks=64), path


def test_the_converters_user_defined_marks_are_special_tokens(pair):
    hf_llm, gguf_llm, path = pair
    f = GGUFFile(path)
    tokens, types = f.get("tokenizer.ggml.tokens"), [int(t) for t in f.get("tokenizer.ggml.token_type")]
    assert f.get("tokenizer.ggml.model") == "gemma4"
    assert {t for t, kind in zip(tokens, types, strict=True) if kind == USER_DEFINED} == RENDERED_SPECIALS["gemma4"]
    assert gguf.TokenType.USER_DEFINED == USER_DEFINED
    hf, ours = hf_llm.engine.tokenizer, gguf_llm.engine.tokenizer
    assert ({t.content: t.special for t in ours.added_tokens_decoder.values()}
            == {t.content: t.special for t in hf.added_tokens_decoder.values()})
    prompt = hf.apply_chat_template(ASK, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    call = '<|tool_call>call:set_unit{ok:true,unit:<|"|>celsius<|"|>}<tool_call|><|tool_response>'
    ids = hf.encode(prompt + call, add_special_tokens=False)
    assert ours.encode(prompt + call, add_special_tokens=False) == ids
    marks = ours.convert_tokens_to_ids(["<|tool_call>", '<|"|>', '<|"|>', "<tool_call|>", "<|tool_response>"])
    assert [i for i in ours.encode(call, add_special_tokens=False) if i in marks] == marks  # one token each
    for skip in (True, False):
        assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "set_unit"}}])
def test_a_call_from_the_file_is_the_folders(pair, choice):
    samples, prepared_params = [], []
    for llm in pair[:2]:
        prepared = prepare_chat(llm.engine.tokenizer, ChatRequest(ASK, TOOLS, choice, False),
                                SamplingParams(temperature=0, max_tokens=40), llm.engine.chat_options)
        assert prepared.tool_format.name == "gemma4"
        (out,) = llm.generate([prepared.prompt], prepared.params, use_tqdm=False)
        samples.append((out.outputs[0], prepared.read(out.outputs[0].text).tool_calls))
        prepared_params.append((prepared.params.keep_special_token_ids, prepared.params.stop_token_ids))
        llm.engine.block_manager.check_no_leak()
    (hf_sample, hf_calls), (sample, calls) = samples
    assert prepared_params[0] == prepared_params[1]
    quote = pair[1].engine.tokenizer.convert_tokens_to_ids('<|"|>')
    assert quote in prepared_params[1][0]  # kept in the decoded text, where the parser reads it
    assert sample.token_ids == hf_sample.token_ids and sample.text == hf_sample.text
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in hf_calls]
    (call,) = calls
    assert call.name == "set_unit" and sample.text.startswith("<|tool_call>call:set_unit{")
    jsonschema.validate(json.loads(call.arguments), UNIT)

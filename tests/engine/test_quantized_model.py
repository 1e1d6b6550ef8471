"""The default model served from its GGUF blocks (`quantization="gguf"`), and as weight-only int8
(`quantization="int8"`, its float weights requantized in groups of 32), against the same file
dequantized to fp32 (`quantization="none"`, the HF-exact reference): greedy tokens agree (rounding
differs, so a near-tie may flip and the two then diverge), on every CPU path."""

import shutil
from pathlib import Path

import pytest
from safetensors.torch import save_file

from engine import LLM, SamplingParams
from engine.int8_weights import quantize_state_dict
from engine.loader import load_state_dict, resolve_model
from kernels.quantized import QuantizedWeight, dequantize
from tests.cpu_paths import cpu_paths

pytestmark = pytest.mark.default_model

TOKENS = 32
QUESTIONS = [
    "How many customers live in Seoul?", "List the five most expensive products.",
    "What is the total revenue per city?", "Which orders were placed in March 2024?",
    "서울에 사는 고객은 몇 명인가요?", "가장 비싼 상품 다섯 개를 보여 주세요.",
    "Average order value per month?", "Customers with more than three orders?",
]
TEXTS = ["The capital of France is", "def fibonacci(n):", "서울은 대한민국의", "SELECT name FROM",
         "Once upon a time", "The three primary colors are", "import numpy as np\n", "1, 2, 3, 5, 8,"]


@pytest.fixture(scope="module")
def prompts():
    llm = LLM(model="default", quantization="none", num_kv_blocks=256)
    chat = [llm.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]
    ids = [llm.tokenizer.encode(t, add_special_tokens=False) for t in chat + TEXTS]
    return ids, _greedy(llm, ids)


def _greedy(llm, ids):
    params = SamplingParams(temperature=0, max_tokens=TOKENS, ignore_eos=True)
    outs = llm.generate(ids, params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return [o.outputs[0].token_ids for o in outs]


def _quantized_greedy(llm, ids):
    weights = llm.engine.runner.model.weights
    assert isinstance(weights["model.layers.0.qkv"], QuantizedWeight)
    assert isinstance(weights["lm_head"], QuantizedWeight)
    return _greedy(llm, ids)


def _agreement(got, reference, label: str) -> tuple[int, int]:
    same = sum(a == b for g, r in zip(got, reference, strict=True) for a, b in zip(g, r, strict=True))
    whole = sum(g == r for g, r in zip(got, reference, strict=True))
    first = [next((i for i, (a, b) in enumerate(zip(g, r, strict=True)) if a != b), None)
             for g, r in zip(got, reference, strict=True)]
    print(f"{label}: {same}/{len(got) * TOKENS} tokens agree, {whole}/{len(got)} answers whole; "
          f"first differing token per prompt: {first}")
    return same, whole


@pytest.mark.parametrize("cpu_path", cpu_paths(32, best_unless_slow=True), indirect=True)
def test_quantized_default_model_agrees_with_its_dequantized_reference(prompts, cpu_path):
    ids, reference = prompts
    got = _quantized_greedy(LLM(model="default", quantization="gguf", num_kv_blocks=256), ids)
    same, whole = _agreement(got, reference, f"gguf {cpu_path}")
    assert same >= 0.95 * len(ids) * TOKENS
    assert whole >= 12


def _int8_reference(folder: Path, dest: Path) -> Path:
    """The int8 mode's own float reference: the folder with each matrix replaced by its int8 groups
    dequantized, served as float (`quantization="none"`)."""
    state = quantize_state_dict(load_state_dict(folder))
    dest.mkdir()
    save_file({k: dequantize(v) if isinstance(v, QuantizedWeight) else v for k, v in state.items()},
              str(dest / "model.safetensors"))
    for f in folder.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy(f, dest / f.name)
    return dest


@pytest.fixture(scope="module")
def int8_reference(prompts, tmp_path_factory):
    folder = _int8_reference(resolve_model("default"), tmp_path_factory.mktemp("int8") / "ref")
    return _greedy(LLM(model=str(folder), quantization="none", num_kv_blocks=256), prompts[0])


@pytest.mark.parametrize("cpu_path", cpu_paths(32, best_unless_slow=True), indirect=True)
def test_int8_default_model_agrees_with_its_dequantized_reference(prompts, int8_reference, cpu_path):
    """Against the int8 weights dequantized to float (the oracle for quantized weights), and, for the
    record, against the model's plain float weights: those are its Q4_1 blocks dequantized, which int8
    groups round again (half a step is ~1/254 of a group's largest weight), so near-ties flip there."""
    ids, plain = prompts
    got = _quantized_greedy(LLM(model="default", quantization="int8", num_kv_blocks=256), ids)
    same, whole = _agreement(got, int8_reference, f"int8 {cpu_path}")
    assert same >= 0.95 * len(ids) * TOKENS
    assert whole >= 12
    _agreement(got, plain, f"int8 {cpu_path} against the plain float weights")  # the same tokens, not a rerun


def test_int8_serves_a_float_checkpoint(tiny_models, tmp_path):
    """A safetensors folder (a tiny random Llama) as int8: its matrices become Q8_0 groups and its greedy
    tokens are those of its dequantized reference."""
    folder = tiny_models["gqa"]
    ids = [[5, 17, 42, 99, 7], [1, 2, 3], [300, 12, 12, 8, 200, 4]]
    want = _greedy(LLM(model=str(_int8_reference(folder, tmp_path / "ref")), quantization="none",
                       num_kv_blocks=64), ids)
    llm = LLM(model=str(folder), quantization="int8", num_kv_blocks=64)
    assert isinstance(llm.engine.runner.model.weights["model.layers.0.gate_up"], QuantizedWeight)
    assert _greedy(llm, ids) == want


def test_quantization_gguf_needs_a_gguf_file(tiny_models):
    with pytest.raises(ValueError, match="needs a .gguf model"):
        LLM(model=str(tiny_models["gqa"]), quantization="gguf")

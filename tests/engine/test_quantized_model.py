"""The default model served from its GGUF blocks (`quantization="gguf"`) against the same file
dequantized to fp32 (`quantization="none"`, the HF-exact reference): greedy tokens agree (float
rounding differs, so a near-tie may flip and the two then diverge), on every CPU path."""

import pytest

from engine import LLM, SamplingParams
from kernels.quantized import QuantizedWeight
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


@pytest.mark.parametrize("cpu_path", cpu_paths(32), indirect=True)
def test_quantized_default_model_agrees_with_its_dequantized_reference(prompts, cpu_path):
    ids, reference = prompts
    llm = LLM(model="default", quantization="gguf", num_kv_blocks=256)
    assert isinstance(llm.engine.runner.model.weights["model.layers.0.qkv"], QuantizedWeight)
    got = _greedy(llm, ids)
    same = sum(a == b for g, r in zip(got, reference, strict=True) for a, b in zip(g, r, strict=True))
    whole = sum(g == r for g, r in zip(got, reference, strict=True))
    print(f"{cpu_path}: {same}/{len(ids) * TOKENS} tokens agree, {whole}/{len(ids)} answers whole")
    assert same >= 0.95 * len(ids) * TOKENS
    assert whole >= 12


def test_quantization_gguf_needs_a_gguf_file(tiny_models):
    with pytest.raises(ValueError, match="needs a .gguf model"):
        LLM(model=str(tiny_models["gqa"]), quantization="gguf")

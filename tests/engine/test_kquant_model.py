"""A tiny random Llama written as a GGUF file whose matrices are K-quant, Q5_0 and Q5_1 blocks
(gguf.GGUFWriter), served from those blocks (`quantization="gguf"`: the few-row kernels, the one-call
decode step, the quantized embedding and tied LM head, n-gram speculation) against the same file
dequantized to fp32 (`quantization="none"`): the same greedy tokens, on every CPU path."""

from pathlib import Path

import gguf
import numpy as np
import pytest
from transformers import LlamaConfig, PreTrainedTokenizerFast

from engine import LLM, SamplingParams
from kernels.cpu.build import cpu_kernels_available
from kernels.quantized import Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, QuantizedWeight
from tests.cpu_paths import cpu_paths
from tests.gguf_files import add_bpe_tokenizer, add_hyper_parameters
from tests.kernels.test_quantized import random_weight

pytestmark = pytest.mark.skipif(not cpu_kernels_available(), reason="the C++ CPU kernels did not build")

HIDDEN, INTERMEDIATE, VOCAB = 256, 512, 4096  # in_features whole 256-weight super-blocks
# Per layer: q/k/v, o, gate/up, down (q, k and v share a type so they stay one quantized matrix).
LAYER_TYPES = [(Q4_K, Q5_K, Q4_K, Q6_K), (Q5_0, Q5_1, Q6_K, Q4_K)]
EMBEDDING_TYPE = Q6_K  # also the tied LM head, as K-quant files often store it


def _write_gguf(path: Path, config: LlamaConfig, tokenizer_from: Path) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    add_hyper_parameters(writer, "llama", config.to_dict())
    add_bpe_tokenizer(writer, PreTrainedTokenizerFast.from_pretrained(str(tokenizer_from)), "smollm")
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = HIDDEN // heads

    def matrix(name: str, n: int, k: int, qtype: int, seed: int) -> None:
        w = random_weight(n, k, qtype, seed=seed)
        writer.add_tensor(name, w.data.numpy(), raw_shape=w.data.shape, raw_dtype=gguf.GGMLQuantizationType(qtype))

    matrix("token_embd.weight", VOCAB, HIDDEN, EMBEDDING_TYPE, seed=1)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    for i, (qkv, o, gate_up, down) in enumerate(LAYER_TYPES):
        seed = 100 * (i + 1)
        matrix(f"blk.{i}.attn_q.weight", heads * head_dim, HIDDEN, qkv, seed)
        matrix(f"blk.{i}.attn_k.weight", kv * head_dim, HIDDEN, qkv, seed + 1)
        matrix(f"blk.{i}.attn_v.weight", kv * head_dim, HIDDEN, qkv, seed + 2)
        matrix(f"blk.{i}.attn_output.weight", HIDDEN, heads * head_dim, o, seed + 3)
        matrix(f"blk.{i}.ffn_gate.weight", INTERMEDIATE, HIDDEN, gate_up, seed + 4)
        matrix(f"blk.{i}.ffn_up.weight", INTERMEDIATE, HIDDEN, gate_up, seed + 5)
        matrix(f"blk.{i}.ffn_down.weight", HIDDEN, INTERMEDIATE, down, seed + 6)
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{i}.{norm}.weight", np.ones(HIDDEN, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def kquant_gguf(tmp_path_factory, default_model_dir):
    """The .gguf file (with the default model's tokenizer); `quantization="none"` dequantizes its blocks in
    memory, the fp32 reference."""
    path = tmp_path_factory.mktemp("kquant") / "tiny-kquant.gguf"
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, architectures=["LlamaForCausalLM"],
    )
    _write_gguf(path, config, default_model_dir)
    return path


def _greedy(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return [o.outputs[0].token_ids for o in outs]


PROMPTS = [[5, 17, 42, 99, 7], [1, 2, 3], [300, 12, 12, 8, 200, 4, 300, 12, 12, 8], [3000, 4, 77]]


@pytest.fixture(scope="module")
def reference(kquant_gguf):
    return _greedy(LLM(model=str(kquant_gguf), quantization="none", num_kv_blocks=64), PROMPTS)


@pytest.mark.parametrize("cpu_path", cpu_paths(32), indirect=True)
def test_kquant_gguf_served_as_blocks_gives_its_reference_tokens(kquant_gguf, reference, cpu_path):
    llm = LLM(model=str(kquant_gguf), quantization="gguf", num_kv_blocks=64)
    model = llm.engine.runner.model
    types = {w.qtype for w in model.weights.values() if isinstance(w, QuantizedWeight)}
    assert types == {Q4_K, Q5_K, Q6_K, Q5_0, Q5_1}
    assert isinstance(model.weights["lm_head"], QuantizedWeight)
    assert model.decode_layers is not None  # batch <= 4: one C++ call per decode step
    assert _greedy(llm, PROMPTS) == reference
    assert _greedy(llm, PROMPTS[:1]) == reference[:1]  # batch 1 on its own


def test_kquant_gguf_verifies_speculation_with_its_blocks(kquant_gguf, reference):
    """n-gram drafts verified in one multi-row pass over the blocks keep the plain greedy tokens."""
    llm = LLM(model=str(kquant_gguf), quantization="gguf", num_kv_blocks=64,
              speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert _greedy(llm, PROMPTS) == reference
    assert llm.engine.spec_stats["proposed"] > 0

"""GGUF files served as they are (engine/loader.py `open_model`): a tiny random checkpoint of every family
we serve, written as llama.cpp's converter writes it (tests/gguf_files.py), gives HF transformers' greedy
tokens on the same weights as an F32 file (Llama 3's RoPE scaling arriving as a rope_freqs tensor, Phi-3's
LongRoPE as factor tensors, Gemma's norms as 1 + w, Q/K rows permuted, Gemma 4's per-layer sizes and its
proportional RoPE as rope_freqs); as Q8_0 blocks it agrees with the same file dequantized (the float reference);
and serving it writes nothing under the cache."""

from pathlib import Path

import gguf
import numpy as np
import pytest
import transformers

from engine import LLM, SamplingParams
from engine.gguf_file import GGUFFile
from engine.loader import cache_dir, open_model
from tests.engine.test_model_families import FAMILIES, TINY, Family, make_tiny, prompts_of
from tests.gguf_files import write_model_gguf

GGUF_FAMILIES = {
    **FAMILIES,
    "llama3": lambda: transformers.LlamaConfig(**{**TINY, "max_position_embeddings": 1024}, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}, rope_theta=500_000.0),
    "qwen2": lambda: transformers.Qwen2Config(**TINY),
}
GGUF_FAMILIES.pop("mistral_window")  # llama.cpp's llama architecture has no sliding window


def _gemma3():
    # A GGUF file has no query_pre_attn_scalar: llama.cpp scales by head_dim (by hidden / heads at 27B only).
    config = FAMILIES["gemma3"]()
    config.query_pre_attn_scalar = config.head_dim
    return config


GGUF_FAMILIES["gemma3"] = _gemma3
# Nor the NoPE layers: llama.cpp's SmolLM3 skips RoPE in every fourth layer, as SmolLM3's own config does.
GGUF_FAMILIES["smollm3"] = lambda: transformers.SmolLM3Config(**{**TINY, "num_hidden_layers": 4})


@pytest.fixture(scope="module", params=sorted(GGUF_FAMILIES))
def family_gguf(request, tmp_path_factory, default_model_dir) -> tuple[Family, Path]:
    name = request.param
    root = tmp_path_factory.mktemp(name)
    folder = make_tiny(root / "hf", GGUF_FAMILIES[name](), default_model_dir, seed=len(name) + 7)
    return Family(name, folder), write_model_gguf(folder, root / f"{name}.f32.gguf")


def _greedy(llm: LLM, prompts: list[list[int]], max_new: int = 10) -> list[list[int]]:
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_new, ignore_eos=True), use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return [o.outputs[0].token_ids for o in outs]


def test_f32_gguf_gives_hf_greedy_tokens(family_gguf):
    family, path = family_gguf
    models = cache_dir() / "models"
    before = sorted(models.iterdir()) if models.exists() else []
    llm = LLM(model=str(path), num_kv_blocks=128, block_size=8)
    assert llm.engine.model_config.architecture == family.model.config.architectures[0]
    prompts = prompts_of(4, seed=5, lo=3, hi=70)  # past Phi-3's original context and Gemma's window
    assert _greedy(llm, prompts) == family.hf(prompts)
    assert (sorted(models.iterdir()) if models.exists() else []) == before  # nothing converted or cached


def test_gguf_config_equals_the_folders(family_gguf):
    """The hyper-parameters read from the file's metadata are those of config.json, as our reader takes them
    (rope parameters aside: a GGUF file carries Llama 3's scaling as per-frequency factors)."""
    family, path = family_gguf
    ours = open_model(str(path)).config
    folder = open_model(str(family.folder)).config
    for field in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "vocab_size", "max_position_embeddings", "tie_word_embeddings",
                  # Gemma 4's (the defaults elsewhere)
                  "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "num_kv_shared_layers",
                  "hidden_size_per_layer_input"):
        assert getattr(ours, field) == getattr(folder, field), field
    if family.name == "gemma4":
        assert (ours.layer_types, ours.sliding_window) == (folder.layer_types, folder.sliding_window)
        assert ours.rope_parameters == folder.rope_parameters
    assert ours.rms_norm_eps == pytest.approx(folder.rms_norm_eps)


@pytest.mark.parametrize("name", ["llama3", "qwen3"])
def test_q8_0_blocks_agree_with_the_dequantized_file(name, tmp_path, default_model_dir):
    folder = make_tiny(tmp_path / "hf", GGUF_FAMILIES[name](), default_model_dir, seed=11)
    path = write_model_gguf(folder, tmp_path / "q8.gguf", qtype=gguf.GGMLQuantizationType.Q8_0)
    assert any(t.qtype == gguf.GGMLQuantizationType.Q8_0 for t in GGUFFile(path).tensors.values())
    prompts = prompts_of(6, seed=9, lo=3, hi=40)
    blocks = _greedy(LLM(model=str(path), quantization="gguf", num_kv_blocks=128), prompts, max_new=16)
    floats = _greedy(LLM(model=str(path), quantization="none", num_kv_blocks=128), prompts, max_new=16)
    same = sum(a == b for x, y in zip(blocks, floats, strict=True) for a, b in zip(x, y, strict=True))
    total = sum(len(x) for x in floats)
    print(f"{name} Q8_0 blocks against the dequantized file: {same}/{total} greedy tokens agree")
    assert same >= 0.95 * total


def test_unsupported_architecture_is_named(tmp_path):
    path = tmp_path / "bert.gguf"
    writer = gguf.GGUFWriter(str(path), "bert")
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="architecture 'bert' is not supported"):
        _ = open_model(str(path)).config

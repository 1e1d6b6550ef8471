"""Our config.json reader, RoPE frequencies and tokenizer loading agree with transformers, without
importing transformers' model code in the engine: a cached model loads in a fresh process without the
seconds of imports that AutoConfig and LlamaRotaryEmbedding cost."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    Gemma3TextConfig,
    Gemma4TextConfig,
    GraniteConfig,
    LlamaConfig,
    Ministral3Config,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
    Qwen3_5TextConfig,
    Qwen3Config,
    SmolLM3Config,
)
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

from engine.loader import load_model_config, load_tokenizer
from engine.model_config import ModelConfig
from engine.models import model_class
from engine.models.llama import rope_parameters, rotary_permutation
from engine.models.rope import SUPPORTED_ROPE_TYPES, rope_inv_freq

ROOT = Path(__file__).resolve().parents[2]
TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 128, "intermediate_size": 96}


def write_config(folder: Path, config: dict | LlamaConfig) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(config, dict):
        (folder / "config.json").write_text(json.dumps(config))
    else:
        config.save_pretrained(folder)
    return folder


def hf_value(hf, name: str):
    """What transformers' config (and the model built from it) means by each of our fields."""
    if getattr(hf, "model_type", None) == "gemma4_text":  # head_dim etc.: the base values, as ours are
        hf.allow_global_per_layer_attribute_access = True
    if name == "head_dim":  # Qwen2Config has no field; its model falls back as we do
        return getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    if name == "rope_parameters":
        hf.standardize_rope_params()
        rope = hf.rope_parameters
        if "full_attention" in rope:  # Gemma 3: one dict per layer type
            return {t: {k: v for k, v in r.items() if k != "type"} for t, r in rope.items()}
        return {k: v for k, v in rope.items() if k != "type"}  # legacy alias of rope_type
    if name == "hidden_act":  # Gemma's name for it
        return getattr(hf, "hidden_activation", None) or hf.hidden_act
    if name == "layer_types":  # Mistral and Phi-3 have none: one window for every layer, when set
        window = getattr(hf, "sliding_window", None)
        return getattr(hf, "layer_types", None) or [
            "sliding_attention" if window else "full_attention"] * hf.num_hidden_layers
    if name in ("global_head_dim", "num_global_key_value_heads"):  # Gemma 4: its full layers' overrides
        if getattr(hf, "model_type", None) != "gemma4_text":
            return None
        full = hf.per_layer_config[hf.layer_types.index("full_attention")]
        if name == "global_head_dim":
            return full.head_dim
        return full.num_key_value_heads if full.num_key_value_heads != hf.num_key_value_heads else None
    # Fields other families lack, as our defaults mean them (multipliers of 1, no Gemma 4 parts; HF's grouped
    # value heads, llama.cpp's tiling being a GGUF file's).
    defaults = {"embedding_multiplier": 1.0, "residual_multiplier": 1.0, "logits_scaling": 1.0,
                "attention_k_eq_v": False, "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0,
                "linear_value_heads_tiled": False}
    return getattr(hf, name, defaults.get(name))


CONFIGS = {
    "llama": LlamaConfig(**TINY, num_key_value_heads=2, tie_word_embeddings=True, rms_norm_eps=1e-5),
    "llama_head_dim": LlamaConfig(**TINY, head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
    "mistral": MistralConfig(**TINY, max_position_embeddings=4096, eos_token_id=[2, 3]),
    "qwen2": Qwen2Config(**TINY, num_key_value_heads=1),
    # Only the keys a model cannot do without: everything else takes the family's default.
    "llama_minimal": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4},
    "mistral_minimal": {"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4},
    "qwen2_minimal": {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4},
    "qwen2_head_dim": {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 32},
    "null_kv_heads": {"model_type": "qwen2", **TINY, "num_key_value_heads": None},
    "old_rope_scaling": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], **TINY, "rope_theta": 250000.0,
        "rope_scaling": {"type": "linear", "factor": 2.0},
    },
    "old_rope_theta_only": {"model_type": "qwen2", **TINY, "rope_theta": 1000000.0, "rope_scaling": None},
    "old_yarn": {
        "model_type": "qwen2", **TINY, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
    },
    "qwen3": Qwen3Config(**TINY, num_key_value_heads=2, head_dim=32),
    "qwen3_sliding": Qwen3Config(**TINY, use_sliding_window=True, sliding_window=8, max_window_layers=1),
    "qwen3_minimal": {"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4},
    "granite": GraniteConfig(**TINY, embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.015625,
                             logits_scaling=8.0),
    "granite_minimal": {"model_type": "granite", "hidden_size": 64, "num_attention_heads": 4},
    "phi3_longrope": Phi3Config(**TINY, max_position_embeddings=131072, original_max_position_embeddings=4096,
                                partial_rotary_factor=0.75, sliding_window=262144,
                                rope_scaling={"type": "longrope", "short_factor": [1.0] * 6, "long_factor": [2.0] * 6}),
    "phi3_minimal": {"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4},
    "smollm3": SmolLM3Config(**TINY),
    "smollm3_minimal": {"model_type": "smollm3", "hidden_size": 64, "num_attention_heads": 4},
    "gemma3": Gemma3TextConfig(**TINY, head_dim=32, layer_types=["sliding_attention", "full_attention"],
                               sliding_window=16),
    "gemma3_old_rope_keys": {
        "model_type": "gemma3_text", **TINY, "rope_theta": 5e5, "rope_local_base_freq": 1e4,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window_pattern": 2,
    },
    "gemma3_minimal": {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4},
    "ministral3": Ministral3Config(**TINY, num_key_value_heads=2, head_dim=16),
    "ministral3_minimal": {"model_type": "ministral3", "hidden_size": 64, "num_attention_heads": 4},
    "ministral3_window": {"model_type": "ministral3", **TINY, "sliding_window": 32, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 64,
        "llama_4_scaling_beta": 0.1}},
    "qwen3_5": Qwen3_5TextConfig(**{**TINY, "num_hidden_layers": 4}, num_key_value_heads=2, head_dim=16,
                                 linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8),
    "qwen3_5_minimal": {"model_type": "qwen3_5_text", "hidden_size": 64, "num_attention_heads": 4},
    "qwen3_5_interval": {"model_type": "qwen3_5_text", **TINY, "num_hidden_layers": 6, "full_attention_interval": 3,
                         "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.5,
                                             "mrope_section": [2, 1, 1], "mrope_interleaved": True}},
    "gemma4": Gemma4TextConfig(**TINY, num_key_value_heads=2, head_dim=16, global_head_dim=32, sliding_window=8,
                               layer_types=["sliding_attention", "full_attention"], hidden_size_per_layer_input=4,
                               vocab_size_per_layer_input=128, num_kv_shared_layers=0, final_logit_softcapping=30.0),
    "gemma4_keys_as_values": Gemma4TextConfig(
        **{**TINY, "num_hidden_layers": 4}, num_key_value_heads=2, attention_k_eq_v=True, global_head_dim=32,
        num_global_key_value_heads=1, num_kv_shared_layers=2, use_double_wide_mlp=True,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                            "rope_theta": 1e6, "factor": 2.0}}),
    # How the checkpoints state the global layers (global_head_dim, not per_layer_config); the last layer is
    # forced global, as transformers forces it.
    "gemma4_checkpoint_keys": {
        "model_type": "gemma4_text", **TINY, "num_hidden_layers": 3, "head_dim": 16, "global_head_dim": 64,
        "attention_k_eq_v": True, "num_global_key_value_heads": 2, "layer_types": ["sliding_attention"] * 3,
    },
    "gemma4_minimal": {"model_type": "gemma4_text", "hidden_size": 64, "num_attention_heads": 4},
    "old_llama3": {
        "model_type": "llama", **TINY, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    },
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_fields_equal_transformers(tmp_path, name):
    folder = write_config(tmp_path / name, CONFIGS[name])
    ours, hf = load_model_config(folder), AutoConfig.from_pretrained(folder)
    for field in dataclasses.fields(ModelConfig):
        assert getattr(ours, field.name) == hf_value(hf, field.name), field.name


def test_default_model_config_equals_transformers(default_model_dir):
    ours, hf = load_model_config(default_model_dir), AutoConfig.from_pretrained(default_model_dir)
    for field in dataclasses.fields(ModelConfig):
        assert getattr(ours, field.name) == hf_value(hf, field.name), field.name


def test_unknown_model_type_is_a_clear_error():
    with pytest.raises(ValueError, match="unsupported model_type 'gpt2'.*llama, mistral, qwen2, qwen3, granite"):
        ModelConfig.from_dict({"model_type": "gpt2", "hidden_size": 64, "num_attention_heads": 4})
    with pytest.raises(ValueError, match="unsupported model_type None"):
        ModelConfig.from_dict({"hidden_size": 64, "num_attention_heads": 4})
    # Without model_type the architecture names the family.
    assert ModelConfig.from_dict({"architectures": ["Qwen2ForCausalLM"], **TINY}).model_type == "qwen2"


def test_unknown_architecture_is_a_clear_error():
    config = ModelConfig.from_dict({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"], **TINY})
    with pytest.raises(ValueError, match="unsupported architecture LlamaForSequenceClassification"):
        model_class(config)


ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "default_int_theta": {"rope_type": "default", "rope_theta": 100000},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 1024},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 1024},
    "yarn_betas_no_truncate": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "beta_fast": 16.0,
                               "beta_slow": 2.0, "truncate": False, "original_max_position_embeddings": 1024},
    "yarn_mscale": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.5,
                    "original_max_position_embeddings": 1024},
    "yarn_attention_factor": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "attention_factor": 1.5,
                              "original_max_position_embeddings": 1024},
    "yarn_original_from_max_len": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0},
}


def assert_same_rope(ours: tuple[torch.Tensor, float], hf: LlamaRotaryEmbedding) -> None:
    inv_freq, scaling = ours
    assert inv_freq.dtype == torch.float32
    torch.testing.assert_close(inv_freq, hf.inv_freq, rtol=1e-6, atol=0)
    assert scaling == pytest.approx(float(hf.attention_scaling), rel=1e-6)


@pytest.mark.parametrize("name", sorted(ROPES))
@pytest.mark.parametrize("head_dim", [64, 128])
def test_rope_equals_transformers(tmp_path, name, head_dim):
    hf_config = LlamaConfig(**{**TINY, "hidden_size": 4 * head_dim}, max_position_embeddings=4096,
                            rope_parameters=dict(ROPES[name]))
    folder = write_config(tmp_path, hf_config)
    assert_same_rope(rope_parameters(load_model_config(folder)),
                     LlamaRotaryEmbedding(AutoConfig.from_pretrained(folder)))


@pytest.mark.parametrize("name", ["old_rope_scaling", "old_yarn", "old_llama3"])
def test_old_rope_scaling_layout_equals_transformers(tmp_path, name):
    folder = write_config(tmp_path, CONFIGS[name])
    assert_same_rope(rope_parameters(load_model_config(folder)),
                     LlamaRotaryEmbedding(AutoConfig.from_pretrained(folder)))


def test_partial_rotary_frequencies_equal_transformers(tmp_path):
    rope = {**ROPES["yarn"], "partial_rotary_factor": 0.5}
    folder = write_config(tmp_path, LlamaConfig(**TINY, max_position_embeddings=4096, rope_parameters=rope))
    ours = load_model_config(folder)
    hf = LlamaRotaryEmbedding(AutoConfig.from_pretrained(folder))
    assert_same_rope(rope_inv_freq(ours.rope_parameters, ours.head_dim, ours.max_position_embeddings), hf)
    assert_same_rope(rope_parameters(ours), hf)


@pytest.mark.parametrize("long_context", [False, True], ids=["short", "long"])
def test_longrope_equals_transformers(tmp_path, long_context):
    """Phi-3's LongRoPE with partial rotary: the short factors, and the long ones HF switches to past the
    original context (its rope module's long_inv_freq, computed on the first long forward pass)."""
    hf_config = Phi3Config(**TINY, max_position_embeddings=8192, original_max_position_embeddings=1024,
                           partial_rotary_factor=0.5,
                           rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.5, 2.0, 4.0],
                                         "long_factor": [2.0, 3.0, 5.0, 9.0]})
    folder = write_config(tmp_path, hf_config)
    hf = Phi3RotaryEmbedding(AutoConfig.from_pretrained(folder))
    if long_context:
        hf(torch.zeros(1), torch.tensor([[1024]]))  # one position past the original context
    assert_same_rope(rope_parameters(load_model_config(folder), long_context=long_context), hf)


def test_rotary_permutation_turns_a_partial_rotation_into_a_whole_head_one():
    """q and k reordered alike keep their dot products, and HF's rotation of the first `rot` dimensions
    becomes the kernels' whole-head rotate-half with angle 0 on the rest."""
    d, rot, pos = 16, 8, 5
    perm = rotary_permutation(d, rot)
    inv_freq = 1.0 / (100.0 ** (torch.arange(0, rot, 2).float() / rot))
    q = torch.randn(d)
    angle = pos * inv_freq
    cos, sin = torch.cat([angle.cos()] * 2), torch.cat([angle.sin()] * 2)
    half = rot // 2
    hf = torch.cat([q[:rot] * cos + torch.cat([-q[half:rot], q[:half]]) * sin, q[rot:]])
    padded = torch.cat([angle, torch.zeros((d - rot) // 2)])
    qp = q[perm]
    c, s = torch.cat([padded.cos()] * 2), torch.cat([padded.sin()] * 2)
    ours = qp * c + torch.cat([-qp[d // 2 :], qp[: d // 2]]) * s
    torch.testing.assert_close(ours, hf[perm])
    assert rotary_permutation(d, d) is None


def test_unsupported_rope_type_names_the_supported_ones():
    rope = {"rope_type": "mrope", "rope_theta": 10000.0}
    with pytest.raises(ValueError,
                       match="unsupported rope_type 'mrope'; supported: " + ", ".join(SUPPORTED_ROPE_TYPES)):
        rope_inv_freq(rope, 16, 4096)
    with pytest.raises(ValueError, match="needs 'factor'"):
        rope_inv_freq({"rope_type": "linear", "rope_theta": 10000.0}, 16, 4096)


CHAT = [
    {"role": "system", "content": "Answer in SQL."},
    {"role": "user", "content": "How many rows? 행은 몇 개?"},
    {"role": "assistant", "content": "SELECT count(*) FROM t;"},
    {"role": "user", "content": "And distinct ids?"},
]
TOOLS = [{"type": "function", "function": {"name": "run_sql", "description": "Runs a query",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def test_tokenizer_equals_auto_tokenizer(default_model_dir):
    ours, auto = load_tokenizer(default_model_dir), AutoTokenizer.from_pretrained(default_model_dir)
    assert type(ours) is type(auto)
    for kwargs in ({}, {"add_generation_prompt": True}, {"add_generation_prompt": True, "tools": TOOLS}):
        ours_text = ours.apply_chat_template(CHAT, tokenize=False, **kwargs)
        assert ours_text == auto.apply_chat_template(CHAT, tokenize=False, **kwargs)
        assert ours.apply_chat_template(CHAT, **kwargs) == auto.apply_chat_template(CHAT, **kwargs)
    for attr in ("chat_template", "eos_token", "eos_token_id", "bos_token", "bos_token_id", "pad_token", "pad_token_id",
                 "unk_token", "all_special_tokens", "added_tokens_decoder", "model_max_length"):
        assert getattr(ours, attr) == getattr(auto, attr), attr
    assert ours.get_vocab() == auto.get_vocab()
    text = "SELECT name FROM users; -- 사용자 <|im_end|>\n\n  done"
    assert ours.encode(text) == auto.encode(text)
    assert ours.decode(ours.encode(text)) == auto.decode(auto.encode(text))


def test_model_specific_tokenizer_class_keeps_auto_tokenizer(tmp_path, default_model_dir, monkeypatch):
    for name in ("tokenizer.json", "chat_template.jinja"):
        (tmp_path / name).write_bytes((default_model_dir / name).read_bytes())
    config = json.loads((default_model_dir / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"}))
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda folder: ("auto", folder))
    assert load_tokenizer(tmp_path) == ("auto", str(tmp_path))


def test_cached_model_loads_without_transformers_model_code(default_model_dir):
    """The point of all the above: a fresh process loading the (already converted) default model imports
    no transformers model or config class and no torch._dynamo, the bulk of the former load time."""
    code = (
        "import sys\n"
        "from engine import LLM\n"
        "LLM(model='default', num_kv_blocks=64)\n"  # a small KV cache: the budget changes no import
        "print([m for m in sys.modules if m.startswith(('transformers.models.', 'torch._dynamo'))])\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"

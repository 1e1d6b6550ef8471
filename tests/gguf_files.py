"""GGUF files written in tests from HF checkpoints and tokenizers, laid out as llama.cpp's converter
(convert_hf_to_gguf.py) lays them out: its metadata keys per architecture, its tensor names, Q/K rows
permuted for the Llama-layout architectures, Gemma's norms stored as 1 + w, Llama 3's band scaling as a
`rope_freqs` tensor, YaRN and Ministral 3's attention temperature as keys, Phi-3's LongRoPE factors as
tensors, and the tokenizer as `tokenizer.ggml.*` (byte-level BPE: tokens, types and merges; SentencePiece:
pieces, scores and types). The engine must read such a file as it reads the HF folder it came from."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

# GGUF tensor names (per layer) of each HF name part, and the architectures' exceptions.
LAYER_PARTS = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
}
ARCH_PARTS = {
    "phi3": {"self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"},
    "gemma3": {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"},
    "gemma4": {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm", "per_layer_input_gate": "inp_gate",
               "per_layer_projection": "proj", "post_per_layer_input_norm": "post_norm"},
}
GLOBAL_PARTS = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                "lm_head.weight": "output.weight", "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
                "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
                "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight"}
MODEL_TYPES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "granite": "granite",
               "phi3": "phi3", "gemma3_text": "gemma3", "smollm3": "smollm3", "ministral3": "mistral3",
               "gemma4_text": "gemma4"}
PERMUTED = {"llama", "granite", "smollm3", "mistral3"}


def write_model_gguf(folder: Path, path: Path, qtype: int = gguf.GGMLQuantizationType.F32,
                     tokenizer_pre: str = "smollm") -> Path:
    """The HF checkpoint in `folder` (config.json, safetensors, tokenizer.json) as a GGUF file. Matrices
    are written as `qtype` (F32, F16 or a type the gguf package quantizes: Q8_0, Q4_0, ...); vectors as F32."""
    config = json.loads((folder / "config.json").read_text())
    arch = MODEL_TYPES[config["model_type"]]
    writer = gguf.GGUFWriter(str(path), arch)
    add_hyper_parameters(writer, arch, config)
    from transformers import PreTrainedTokenizerFast

    add_bpe_tokenizer(writer, PreTrainedTokenizerFast.from_pretrained(str(folder)), tokenizer_pre)
    state = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(f)))
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    for name, tensor in state.items():
        out = gguf_name(name, arch)
        if out is None:
            continue
        t = tensor.float()
        if arch in PERMUTED and out.endswith(("attn_q.weight", "attn_k.weight")):
            t = permute(t, heads if "attn_q" in out else kv_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            t = t + 1  # Gemma3RMSNorm's (1 + w), stored as llama.cpp computes it
        _add_tensor(writer, out, t.numpy(), qtype if t.dim() == 2 else gguf.GGMLQuantizationType.F32)
    for name, values in _rope_tensors(arch, config).items():
        writer.add_tensor(name, np.asarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def llama_cpp_gguf(folder: Path, out: Path, outtype: str) -> Path:
    """`folder` converted by llama.cpp's own convert_hf_to_gguf.py (llama-cpp-python's sdist carries it)."""
    from tests.engine.test_gguf_tokenizer import LLAMA_CPP

    tree = Path(LLAMA_CPP)
    if not (tree / "convert_hf_to_gguf.py").exists():
        pytest.skip("llama.cpp's source tree (llama-cpp-python's sdist) is not in the cache")
    env = os.environ | {"PYTHONPATH": str(tree / "gguf-py")}  # its gguf-py knows qwen35; the installed may not
    subprocess.run([sys.executable, str(tree / "convert_hf_to_gguf.py"), str(folder), "--outtype", outtype,
                    "--outfile", str(out)], check=True, env=env, capture_output=True)
    return out


def gguf_name(hf: str, arch: str) -> str | None:
    if hf in GLOBAL_PARTS:
        return GLOBAL_PARTS[hf]
    parts = hf.split(".")
    if parts[:2] != ["model", "layers"]:
        return None
    if parts[-1] == "layer_scalar":  # Gemma 4's, a weight in the file
        return f"blk.{parts[2]}.layer_output_scale.weight"
    layer, part, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
    short = ARCH_PARTS.get(arch, {}).get(part) or LAYER_PARTS.get(part)
    return f"blk.{layer}.{short}.{kind}" if short else None


def permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's q/k row order: each head's two rotary halves interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _add_tensor(writer: gguf.GGUFWriter, name: str, values: np.ndarray, qtype: int) -> None:
    qtype = gguf.GGMLQuantizationType(qtype)
    if qtype == gguf.GGMLQuantizationType.F32:
        writer.add_tensor(name, values.astype(np.float32))
    elif qtype == gguf.GGMLQuantizationType.F16:
        writer.add_tensor(name, values.astype(np.float16))
    else:
        blocks = gguf.quants.quantize(values.astype(np.float32), qtype)
        writer.add_tensor(name, blocks, raw_shape=blocks.shape, raw_dtype=qtype)


def add_hyper_parameters(writer: gguf.GGUFWriter, arch: str, c: dict) -> None:
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(c.get("num_key_value_heads") or heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-6))
    writer.add_vocab_size(c["vocab_size"])
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if arch == "gemma4":
        _gemma4_hyper_parameters(writer, c)
        return
    if arch == "gemma3":
        full = rope.get("full_attention", rope)
        local = rope.get("sliding_attention", {})
        writer.add_rope_freq_base(full.get("rope_theta", c.get("rope_theta", 1_000_000.0)))
        writer.add_float32(f"{arch}.rope.freq_base_swa", local.get("rope_theta", c.get("rope_local_base_freq", 1e4)))
        if full.get("rope_type") == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(full["factor"])
        if c.get("sliding_window"):
            writer.add_sliding_window(c["sliding_window"])
            writer.add_sliding_window_pattern([t == "sliding_attention" for t in c["layer_types"]])
        return
    writer.add_rope_freq_base(rope.get("rope_theta", c.get("rope_theta", 10_000.0)))
    partial = c.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1))
    writer.add_rope_dimension_count(int(head_dim * partial))
    if rope.get("rope_type") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope["factor"])
    if rope.get("rope_type") == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        writer.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        writer.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    if arch == "mistral3":  # Ministral3Model.set_gguf_parameters
        writer.add_rope_scaling_yarn_log_mul(rope["mscale_all_dim"])
        writer.add_attn_temperature_scale(rope["llama_4_scaling_beta"])
    if arch == "phi3":
        original = c["original_max_position_embeddings"]
        writer.add_rope_scaling_orig_ctx_len(original)
        scale = c["max_position_embeddings"] / original
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1)
    if arch == "granite":
        writer.add_attention_scale(c["attention_multiplier"])
        writer.add_embedding_scale(c["embedding_multiplier"])
        writer.add_residual_scale(c["residual_multiplier"])
        writer.add_logit_scale(c["logits_scaling"])


def _gemma4_hyper_parameters(writer: gguf.GGUFWriter, c: dict) -> None:
    """As Gemma4Model.set_gguf_parameters writes them: the global layers' head size as key_length, the sliding
    ones' as key_length_swa, KV heads and feed-forward sizes per layer where they differ."""
    types = c["layer_types"]
    full = types.index("full_attention")
    override = (c.get("per_layer_config") or {}).get(str(full), {})
    global_dim = c.get("global_head_dim") or override.get("head_dim", c["head_dim"])
    kv_full = c.get("num_global_key_value_heads") or override.get("num_key_value_heads")
    first_shared = c["num_hidden_layers"] - c["num_kv_shared_layers"]
    n_ff = [c["intermediate_size"] * (2 if c.get("use_double_wide_mlp") and i >= first_shared else 1)
            for i in range(c["num_hidden_layers"])]
    writer.add_feed_forward_length(n_ff if len(set(n_ff)) > 1 else n_ff[0])
    if kv_full is not None:
        writer.add_head_count_kv([c["num_key_value_heads"] if t == "sliding_attention" else kv_full for t in types])
    writer.add_key_length(global_dim)
    writer.add_value_length(global_dim)
    writer.add_key_length_swa(c["head_dim"])
    writer.add_value_length_swa(c["head_dim"])
    rope = c["rope_parameters"]
    writer.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    writer.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    writer.add_rope_dimension_count(global_dim)
    writer.add_rope_dimension_count_swa(c["head_dim"])
    writer.add_sliding_window(c["sliding_window"])
    writer.add_sliding_window_pattern([t == "sliding_attention" for t in types])
    writer.add_shared_kv_layers(c["num_kv_shared_layers"])
    writer.add_embedding_length_per_layer_input(c.get("hidden_size_per_layer_input") or 0)
    if c.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(c["final_logit_softcapping"])


def _rope_tensors(arch: str, c: dict) -> dict[str, list[float]]:
    if arch == "gemma4":  # proportional RoPE: the unrotated frequencies divided by 1e30 (generate_extra_tensors)
        full = c["rope_parameters"]["full_attention"]
        override = (c.get("per_layer_config") or {}).get(str(c["layer_types"].index("full_attention")), {})
        half = (c.get("global_head_dim") or override.get("head_dim", c["head_dim"])) // 2
        rotated = int(half * 2 * full["partial_rotary_factor"] / 2)
        return {"rope_freqs.weight": [1.0] * rotated + [1e30] * (half - rotated)}
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if arch == "phi3" and rope.get("rope_type") == "longrope":
        return {"rope_factors_long.weight": rope["long_factor"], "rope_factors_short.weight": rope["short_factor"]}
    if rope.get("rope_type") != "llama3":
        return {}
    # The converter's llama3 factors: 1 for short wavelengths, `factor` for long ones, a blend between.
    base = rope.get("rope_theta", c.get("rope_theta", 10_000.0))
    dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    factors = []
    for freq in 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)):
        wavelen = 2 * math.pi / float(freq)
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return {"rope_freqs.weight": factors}


# -- tokenizers ---------------------------------------------------------------------------------------
def add_bpe_tokenizer(writer: gguf.GGUFWriter, tok, pre: str) -> None:
    """A byte-level BPE HF tokenizer as the converter writes it (its get_vocab_base and SpecialVocab)."""
    data = json.loads(tok.backend_tokenizer.to_str())
    vocab = data["model"]["vocab"]
    size = max(max(vocab.values()), *(t["id"] for t in data["added_tokens"])) + 1
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [gguf.TokenType.UNUSED] * size
    for token, i in vocab.items():
        tokens[i], types[i] = token, gguf.TokenType.NORMAL
    for added in data["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    _add_specials(writer, tok)


def add_sentencepiece_tokenizer(writer: gguf.GGUFWriter, model_file: Path, tok) -> None:
    """A SentencePiece model as the converter writes it (_create_vocab_sentencepiece)."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(gguf.TokenType.UNKNOWN if sp.is_unknown(i) else gguf.TokenType.CONTROL if sp.is_control(i)
                     else gguf.TokenType.UNUSED if sp.is_unused(i) else gguf.TokenType.BYTE if sp.is_byte(i)
                     else gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    _add_specials(writer, tok)


def _add_specials(writer: gguf.GGUFWriter, tok) -> None:
    for kind in ("bos", "eos", "unk", "pad"):
        i = getattr(tok, f"{kind}_token_id", None)
        if i is not None:
            getattr(writer, f"add_{kind}_token_id")(i)
    writer.add_add_bos_token(bool(getattr(tok, "add_bos_token", False)))
    writer.add_add_eos_token(bool(getattr(tok, "add_eos_token", False)))
    if tok.chat_template:
        writer.add_chat_template(tok.chat_template)

"""A GGUF file's hyper-parameters as the config.json of the same model would state them.

llama.cpp's converter writes each architecture's settings under `{arch}.*` keys (`llama.embedding_length`,
`qwen2.attention.head_count_kv`, ...) and some of them as tensors (Llama 3's `rope_freqs`, Phi-3's
`rope_factors_long/short`). We translate them back into transformers' names so `ModelConfig.from_dict`
reads a GGUF model exactly as it reads an HF folder: one config path, one set of defaults."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.gguf_file import GGUFFile

# GGUF architecture -> (config.json model_type, HF class).
ARCHITECTURES = {
    "llama": ("llama", "LlamaForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "granite": ("granite", "GraniteForCausalLM"),
    "phi3": ("phi3", "Phi3ForCausalLM"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
    "smollm3": ("smollm3", "SmolLM3ForCausalLM"),
    "mistral3": ("ministral3", "Ministral3ForCausalLM"),  # llama.cpp's name for Ministral 3's text model
    "gemma4": ("gemma4_text", "Gemma4ForCausalLM"),
    "qwen35": ("qwen3_5_text", "Qwen3_5ForCausalLM"),
}
# Architectures whose files list some sizes per layer (head_count_kv, feed_forward_length) where they differ:
# the generic reading takes the first layer's, _family_extras the rest.
PER_LAYER_SIZES = {"gemma4"}
# llama.cpp marks the frequencies a proportional RoPE leaves unrotated with this divisor (rope_freqs).
UNROTATED_FREQ_FACTOR = 1e29

# Gemma 3 files leave these to the loader (llama.cpp's defaults for the architecture).
GEMMA3_SLIDING_WINDOW_PATTERN = 6
GEMMA3_LOCAL_ROPE_BASE = 10_000.0
# SmolLM3 skips RoPE in every fourth layer; llama.cpp fixes the step for the architecture.
SMOLLM3_NO_ROPE_STEP = 4


def gguf_config_dict(gguf: GGUFFile) -> dict[str, Any]:
    """The config.json of the model in `gguf`."""
    arch = gguf.architecture
    if arch not in ARCHITECTURES:
        raise ValueError(f"{gguf.path.name}: GGUF architecture {arch!r} is not supported; "
                         f"supported: {', '.join(ARCHITECTURES)}")
    model_type, hf_class = ARCHITECTURES[arch]

    one = _first if arch in PER_LAYER_SIZES else _scalar

    def need(key: str) -> Any:
        value = gguf.arch_get(key)
        if value is None:
            raise ValueError(f"{gguf.path.name} lacks {arch}.{key}")
        return one(value, f"{arch}.{key}")

    hidden, heads = int(need("embedding_length")), int(need("attention.head_count"))
    head_dim = int(_scalar(gguf.arch_get("attention.key_length", hidden // heads), "key_length"))
    embedding = gguf.tensors["token_embd.weight"]
    tokens = gguf.get("tokenizer.ggml.tokens")
    config: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [hf_class],
        "vocab_size": int(gguf.arch_get("vocab_size") or embedding.rows_shape[0] or len(tokens or [])),
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        # Qwen3.5's multi-token-prediction block is counted as extra layers after the model's own.
        "num_hidden_layers": int(need("block_count")) - int(gguf.arch_get("nextn_predict_layers", 0) or 0),
        "num_attention_heads": heads,
        "num_key_value_heads": int(one(gguf.arch_get("attention.head_count_kv", heads), "head_count_kv")),
        "head_dim": head_dim,
        "rms_norm_eps": float(gguf.arch_get("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(need("context_length")),
        "rope_theta": float(gguf.arch_get("rope.freq_base", 10_000.0)),
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        "attention_bias": "blk.0.attn_q.bias" in gguf.tensors,
        "bos_token_id": _int_or_none(gguf.get("tokenizer.ggml.bos_token_id")),
        "eos_token_id": _eos_ids(gguf),
    }
    rotary = gguf.arch_get("rope.dimension_count")
    if rotary is not None and int(rotary) != head_dim:
        config["partial_rotary_factor"] = int(rotary) / head_dim
    rope = _rope_scaling(gguf, arch)
    if rope:
        config["rope_scaling"] = rope
        if "original_max_position_embeddings" in rope:
            config["original_max_position_embeddings"] = rope["original_max_position_embeddings"]
    config.update(_family_extras(gguf, arch, config))
    return config


def _rope_scaling(gguf: GGUFFile, arch: str) -> dict[str, Any] | None:
    """RoPE scaling as HF's rope_scaling dict. Llama 3's band scaling arrives as llama.cpp applies it: one
    divisor per frequency (the `rope_freqs` tensor), which we pass on as `freq_factors`."""
    kind = gguf.arch_get("rope.scaling.type")
    factor = gguf.arch_get("rope.scaling.factor")
    original = gguf.arch_get("rope.scaling.original_context_length")
    rope: dict[str, Any] = {}
    if "rope_factors_long.weight" in gguf.tensors:  # Phi-3 LongRoPE
        rope = {"rope_type": "longrope", "long_factor": _floats(gguf, "rope_factors_long.weight"),
                "short_factor": _floats(gguf, "rope_factors_short.weight")}
        if gguf.arch_get("rope.scaling.attn_factor") is not None:
            rope["attention_factor"] = float(gguf.arch_get("rope.scaling.attn_factor"))
    elif kind in ("linear", "yarn") and factor:
        rope = {"rope_type": kind, "factor": float(factor)}
        if kind == "yarn":
            for ours, theirs in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
                if gguf.arch_get(f"rope.scaling.{theirs}") is not None:
                    rope[ours] = float(gguf.arch_get(f"rope.scaling.{theirs}"))
    elif kind not in (None, "none", "linear", "yarn"):
        raise ValueError(f"{gguf.path.name}: rope scaling {kind!r} is not supported (linear, yarn, longrope are)")
    if "rope_freqs.weight" in gguf.tensors:
        rope = {"rope_type": "default", **rope, "freq_factors": _floats(gguf, "rope_freqs.weight")}
    if rope and original:
        rope["original_max_position_embeddings"] = int(original)
    return rope or None


def _family_extras(gguf: GGUFFile, arch: str, config: dict[str, Any]) -> dict[str, Any]:
    if arch == "granite":
        names = {"embedding_multiplier": "embedding_scale", "attention_multiplier": "attention.scale",
                 "residual_multiplier": "residual_scale", "logits_scaling": "logit_scale"}
        return {ours: float(gguf.arch_get(theirs)) for ours, theirs in names.items()
                if gguf.arch_get(theirs) is not None}
    if arch == "gemma3":
        layers = config["num_hidden_layers"]
        window = int(gguf.arch_get("attention.sliding_window", 0) or 0)
        pattern = gguf.arch_get("attention.sliding_window_pattern", GEMMA3_SLIDING_WINDOW_PATTERN)
        # Either one flag per layer (sliding or not) or every n-th layer global, as llama.cpp reads it.
        sliding = ([bool(x) for x in pattern] if isinstance(pattern, np.ndarray | list)
                   else [(i + 1) % int(pattern) != 0 for i in range(layers)])
        extras: dict[str, Any] = {
            "rope_local_base_freq": float(gguf.arch_get("rope.freq_base_swa", GEMMA3_LOCAL_ROPE_BASE)),
            "hidden_activation": "gelu_pytorch_tanh",
            # llama.cpp's choice: 27B (62 layers) scales queries by hidden / heads, the others by head_dim.
            "query_pre_attn_scalar": (config["hidden_size"] // config["num_attention_heads"] if layers == 62
                                      else config["head_dim"]),
            "final_logit_softcapping": gguf.arch_get("final_logit_softcapping"),
        }
        extras["sliding_window"] = window or None  # no window in the file: every layer is global
        if window:
            extras["layer_types"] = ["sliding_attention" if s else "full_attention" for s in sliding]
        return extras
    if arch == "mistral3":
        # YaRN's attention factor as Ministral 3 states it (mscale = mscale_all_dim: the file keeps one, as the
        # yarn log multiplier), and Llama 4's attention temperature.
        rope = dict(config.get("rope_scaling") or {})
        log_mul = gguf.arch_get("rope.scaling.yarn_log_multiplier")
        if rope.get("rope_type") == "yarn" and log_mul is not None:
            rope["mscale"] = rope["mscale_all_dim"] = float(log_mul)
        beta = gguf.arch_get("attention.temperature_scale")
        if beta is not None:
            rope["llama_4_scaling_beta"] = float(beta)
            rope.setdefault("rope_type", "default")
        return {"rope_scaling": rope} if rope else {}
    if arch == "gemma4":
        return _gemma4_extras(gguf, config)
    if arch == "qwen35":
        return _qwen35_extras(gguf, config)
    if arch == "smollm3":
        step = SMOLLM3_NO_ROPE_STEP
        return {"no_rope_layers": [int((i + 1) % step != 0) for i in range(config["num_hidden_layers"])],
                "no_rope_layer_interval": step}
    return {}


def _gemma4_extras(gguf: GGUFFile, config: dict[str, Any]) -> dict[str, Any]:
    """Gemma 4 as llama.cpp's converter writes it: the global layers' head size as key_length and the sliding
    ones' as key_length_swa, KV heads (and, with double-wide MLPs, feed-forward sizes) per layer, the shared-KV
    layer count, the per-layer embedding size, and proportional RoPE as a rope_freqs tensor whose unrotated
    frequencies are divided by 1e30; keys as values where a global layer has no attn_v."""
    layers = config["num_hidden_layers"]
    pattern = gguf.arch_get("attention.sliding_window_pattern")
    sliding = [bool(x) for x in pattern] if pattern is not None else [False] * layers
    types = ["sliding_attention" if s else "full_attention" for s in sliding]
    full = types.index("full_attention")
    first_sliding = types.index("sliding_attention") if "sliding_attention" in types else full
    global_dim = int(gguf.arch_get("attention.key_length"))
    kv = gguf.arch_get("attention.head_count_kv", config["num_attention_heads"])
    kv = [int(x) for x in kv] if isinstance(kv, np.ndarray | list) else [int(kv)] * layers
    k_eq_v = f"blk.{full}.attn_k.weight" in gguf.tensors and f"blk.{full}.attn_v.weight" not in gguf.tensors
    rope_full: dict[str, Any] = {"rope_type": "proportional", "rope_theta": config["rope_theta"]}
    if "rope_freqs.weight" in gguf.tensors:
        factors = _floats(gguf, "rope_freqs.weight")
        rope_full["partial_rotary_factor"] = sum(f < UNROTATED_FREQ_FACTOR for f in factors) / (global_dim // 2)
    ple = int(gguf.arch_get("embedding_length_per_layer_input", 0) or 0)
    extras: dict[str, Any] = {
        "head_dim": int(gguf.arch_get("attention.key_length_swa", global_dim)),
        "global_head_dim": global_dim,
        "num_key_value_heads": kv[first_sliding],
        "num_global_key_value_heads": kv[full] if k_eq_v else None,
        "attention_k_eq_v": k_eq_v,
        "num_kv_shared_layers": int(gguf.arch_get("attention.shared_kv_layers", 0) or 0),
        "hidden_size_per_layer_input": ple,
        "vocab_size_per_layer_input": (gguf.tensors["per_layer_token_embd.weight"].rows_shape[0] if ple
                                       else config["vocab_size"]),
        "layer_types": types,
        "sliding_window": int(gguf.arch_get("attention.sliding_window", 0) or 0) or None,
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": gguf.arch_get("final_logit_softcapping"),
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default",
                                  "rope_theta": float(gguf.arch_get("rope.freq_base_swa", GEMMA3_LOCAL_ROPE_BASE))},
            "full_attention": rope_full,
        },
    }
    config.pop("rope_scaling", None)  # the rope_freqs tensor is read above, for the global layers only
    config.pop("partial_rotary_factor", None)
    return extras


def _qwen35_extras(gguf: GGUFFile, config: dict[str, Any]) -> dict[str, Any]:
    """Qwen3.5's linear-attention layers as llama.cpp's converter writes them, in the `ssm.*` keys it shares
    with Mamba: the convolution's kernel, the key head size (state_size), the key heads (group_count), the
    value heads (time_step_rank) and all value heads' width (inner_size); which layers are linear
    (recurrent_layers). The converter also reorders the value heads (tiled by key head, for ggml's
    broadcast): the model reads them so (ModelConfig.linear_value_heads_tiled) rather than undoing it, so
    quantized blocks stay as they are. Its multimodal RoPE sections change nothing for text, whose three
    position components are equal."""
    layers = config["num_hidden_layers"]
    value_heads = int(gguf.arch_get("ssm.time_step_rank"))
    recurrent = gguf.arch_get("attention.recurrent_layers")
    if recurrent is None:  # every n-th layer full, as llama.cpp reads a file without the list
        interval = int(gguf.arch_get("full_attention_interval", 4))
        recurrent = [(i + 1) % interval != 0 for i in range(layers)]
    return {
        "linear_conv_kernel_dim": int(gguf.arch_get("ssm.conv_kernel")),
        "linear_key_head_dim": int(gguf.arch_get("ssm.state_size")),
        "linear_num_key_heads": int(gguf.arch_get("ssm.group_count")),
        "linear_num_value_heads": value_heads,
        "linear_value_head_dim": int(gguf.arch_get("ssm.inner_size")) // value_heads,
        "layer_types": ["linear_attention" if r else "full_attention" for r in list(recurrent)[:layers]],
        "linear_value_heads_tiled": True,
    }


def _first(value: Any, key: str) -> Any:
    """The first layer's value of a per-layer array (or the value itself)."""
    return np.asarray(value).tolist()[0] if isinstance(value, np.ndarray | list) else value


def _eos_ids(gguf: GGUFFile) -> int | list[int] | None:
    """EOS and the other end-of-generation ids the file names (end of turn, end of message)."""
    ids = []
    for key in ("eos", "eot", "eom"):
        i = _int_or_none(gguf.get(f"tokenizer.ggml.{key}_token_id"))
        if i is not None and i not in ids:
            ids.append(i)
    return None if not ids else ids[0] if len(ids) == 1 else ids


def _floats(gguf: GGUFFile, name: str) -> list[float]:
    t = gguf.tensors[name]
    if t.qtype != 0:
        raise ValueError(f"{gguf.path.name}: {name} must be F32")
    return np.frombuffer(t.data.tobytes(), dtype=np.float32).tolist()


def _scalar(value: Any, key: str) -> Any:
    """Per-layer arrays (some files list head counts per layer) must agree to be one number."""
    if isinstance(value, np.ndarray | list):
        if len(set(np.asarray(value).tolist())) != 1:
            raise ValueError(f"per-layer {key} values differ; not supported")
        return np.asarray(value).tolist()[0]
    return value


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)

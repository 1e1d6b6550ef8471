"""A model's config.json, read into our own typed `ModelConfig`.

transformers' AutoConfig would give the same values, but importing a config class pulls in torch._dynamo
and the kernel-hub machinery (about 2.4 s in a fresh process), while reading the JSON takes a millisecond.
A key that config.json leaves out takes the default of the transformers config class of its model_type,
so a config means the same to us as to HF, whose outputs are our correctness oracle."""

from dataclasses import dataclass
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "granite", "phi3", "smollm3", "gemma3_text",
                         "gemma4_text", "gemma4", "ministral3", "mistral3", "qwen3_5_text", "qwen3_5")

FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"
LINEAR_ATTENTION = "linear_attention"  # Qwen3.5's Gated DeltaNet layers: a recurrent state, no KV cache

# transformers' RotaryEmbeddingConfigMixin.default_theta, which SmolLM3 and Gemma 3 override.
DEFAULT_ROPE_THETA = 10_000.0

# Defaults of each family's transformers 5 config class for the keys we read. They differ: a Mistral config
# without num_key_value_heads has 8 of them, a Qwen2 one has no eos_token_id, and so on.
_LLAMA = {
    "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": None, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "eos_token_id": 2, "head_dim": None, "hidden_act": "silu",
    "sliding_window": None, "rope_theta": DEFAULT_ROPE_THETA,
}
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32, "sliding_window": 4096},
    "qwen2": {
        **_LLAMA, "vocab_size": 151936, "num_key_value_heads": 32, "max_position_embeddings": 32768,
        "eos_token_id": None, "sliding_window": 4096, "max_window_layers": 28,
    },
    "qwen3": {
        **_LLAMA, "vocab_size": 151936, "num_key_value_heads": 32, "max_position_embeddings": 32768,
        "eos_token_id": None, "head_dim": 128, "sliding_window": 4096, "max_window_layers": 28,
    },
    "granite": {
        **_LLAMA, "embedding_multiplier": 1.0, "residual_multiplier": 1.0, "attention_multiplier": 1.0,
        "logits_scaling": 1.0,
    },
    "phi3": {
        **_LLAMA, "vocab_size": 32064, "hidden_size": 3072, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "eos_token_id": 32000, "original_max_position_embeddings": 4096,
    },
    "smollm3": {
        **_LLAMA, "vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
        "num_key_value_heads": 4, "max_position_embeddings": 32768, "tie_word_embeddings": True,
        "eos_token_id": 128001, "rope_theta": 2_000_000.0, "no_rope_layer_interval": 4,
    },
    "gemma3_text": {
        **_LLAMA, "vocab_size": 262_208, "hidden_size": 2304, "num_hidden_layers": 26, "num_attention_heads": 8,
        "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072, "tie_word_embeddings": True,
        "eos_token_id": 1, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096,
        "query_pre_attn_scalar": 256, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
        "sliding_window_pattern": 6,
    },
    "ministral3": {
        **_LLAMA, "vocab_size": 131_072, "hidden_size": 4096, "num_hidden_layers": 34, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 262_144, "rms_norm_eps": 1e-5, "sliding_window": None,
        "rope_parameters": {
            "type": "yarn", "rope_theta": 1_000_000.0, "factor": 16.0, "original_max_position_embeddings": 16384,
            "max_position_embeddings": 262_144, "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0,
            "mscale": 1.0, "llama_4_scaling_beta": 0.1,
        },
    },
    "qwen3_5_text": {
        **_LLAMA, "vocab_size": 248_320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
        "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 32768, "eos_token_id": None,
        "head_dim": 256, "full_attention_interval": 4, "partial_rotary_factor": 0.25, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
    },
    "gemma4_text": {
        **_LLAMA, "vocab_size": 262_144, "hidden_size": 2304, "num_hidden_layers": 30, "num_attention_heads": 8,
        "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072, "tie_word_embeddings": True,
        "eos_token_id": 1, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512,
        "sliding_window_pattern": 6, "global_head_dim": 512, "attention_k_eq_v": False, "num_kv_shared_layers": 0,
        "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262_144,
        "rope_parameters": {
            SLIDING_ATTENTION: {"rope_type": "default", "rope_theta": 10_000.0},
            FULL_ATTENTION: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
        },
    },
}

# A config.json without model_type still names its class; AutoConfig would refuse it, we need not.
_ARCHITECTURE_MODEL_TYPES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "GraniteForCausalLM": "granite", "Phi3ForCausalLM": "phi3",
    "SmolLM3ForCausalLM": "smollm3", "Gemma3ForCausalLM": "gemma3_text", "Gemma4ForCausalLM": "gemma4_text",
    "Gemma4ForConditionalGeneration": "gemma4", "Ministral3ForCausalLM": "ministral3",
    "Mistral3ForConditionalGeneration": "mistral3", "Qwen3_5ForCausalLM": "qwen3_5_text",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
}

# Multimodal checkpoints whose text model we serve: model_type -> the text config's model_type when it has none.
_MULTIMODAL_TEXT_TYPES = {"gemma4": "gemma4_text", "mistral3": "ministral3", "qwen3_5": "qwen3_5_text"}

# RoPE types scaled relative to a pretraining length; HF takes max_position_embeddings when none is given.
_ROPE_TYPES_WITH_ORIGINAL_LENGTH = ("llama3", "yarn", "longrope")


@dataclass(frozen=True)
class ModelConfig:
    """The fields of config.json that the engine reads, with HF's names and HF's resolved values. Fields a
    family does not have take the value that leaves the Llama computation unchanged (multipliers of 1)."""

    model_type: str
    architectures: list[str] | None
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    eos_token_id: int | list[int] | None
    # The transformers 5 layout whatever the file used: always rope_type and rope_theta, plus the keys of
    # that type (factor, original_max_position_embeddings, ...). Gemma 3 has one such dict per layer type.
    rope_parameters: dict[str, Any]
    hidden_act: str = "silu"  # Gemma's hidden_activation
    # HF's layer_types: "sliding_attention" layers see only the last sliding_window keys. Mistral and Phi-3
    # have no layer_types in HF; every layer of theirs slides when the config sets a window.
    sliding_window: int | None = None
    layer_types: list[str] | None = None
    no_rope_layers: list[int] | None = None  # SmolLM3: 0 where a layer has no RoPE
    # Granite's multipliers; attention_multiplier None is head_dim ** -0.5.
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float | None = None
    logits_scaling: float = 1.0
    # Gemma 3
    query_pre_attn_scalar: float | None = None
    final_logit_softcapping: float | None = None
    # Gemma 4: full-attention layers have a head size of their own (and, with attention_k_eq_v, their own KV
    # head count, their values being their keys' projection); the last num_kv_shared_layers layers attend over
    # the KV cache of the last earlier layer of their type; per-layer embeddings of hidden_size_per_layer_input
    # values per layer (0: none).
    global_head_dim: int | None = None
    num_global_key_value_heads: int | None = None
    attention_k_eq_v: bool = False
    num_kv_shared_layers: int = 0
    hidden_size_per_layer_input: int = 0
    vocab_size_per_layer_input: int | None = None
    # Qwen3.5's linear-attention layers (layer_types "linear_attention"): heads and sizes of the Gated DeltaNet
    linear_conv_kernel_dim: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    # The value heads in llama.cpp's tiled order (its GGUF files): value head j reads key head
    # j % linear_num_key_heads, where HF's grouped order has it read key head j // (value heads per key head).
    # No HF config states it; engine/gguf_config.py sets it for the files llama.cpp's converter reordered.
    linear_value_heads_tiled: bool = False

    @property
    def architecture(self) -> str:
        """The model class, as HF would pick it: the first listed, else the family's causal LM."""
        if self.architectures:
            return self.architectures[0]
        return {v: k for k, v in _ARCHITECTURE_MODEL_TYPES.items()}[self.model_type]

    def layer_type(self, layer: int) -> str:
        return self.layer_types[layer] if self.layer_types else FULL_ATTENTION

    def layer_rope_parameters(self, layer: int) -> dict[str, Any] | None:
        """The RoPE settings of one layer, or None for a layer without RoPE (SmolLM3's NoPE layers)."""
        if self.no_rope_layers is not None and not self.no_rope_layers[layer]:
            return None
        if self.model_type in ("gemma3_text", "gemma4_text"):
            return self.rope_parameters[self.layer_type(layer)]
        return self.rope_parameters

    def layer_sliding_window(self, layer: int) -> int | None:
        return self.sliding_window if self.layer_type(layer) == SLIDING_ATTENTION else None

    def layer_head_dim(self, layer: int) -> int:
        full = self.global_head_dim is not None and self.layer_type(layer) == FULL_ATTENTION
        return self.global_head_dim if full else self.head_dim

    def layer_num_kv_heads(self, layer: int) -> int:
        full = self.num_global_key_value_heads is not None and self.layer_type(layer) == FULL_ATTENTION
        return self.num_global_key_value_heads if full else self.num_key_value_heads

    def kv_source_layer(self, layer: int) -> int:
        """The layer whose keys and values `layer` attends over: itself, or for Gemma 4's KV-shared layers
        (the last num_kv_shared_layers) the last layer of the same type before them."""
        first_shared = self.num_hidden_layers - self.num_kv_shared_layers
        if layer < first_shared:
            return layer
        kind = self.layer_type(layer)
        return max(i for i in range(first_shared) if self.layer_type(i) == kind)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ModelConfig":
        architectures = raw.get("architectures")
        model_type = raw.get("model_type") or _ARCHITECTURE_MODEL_TYPES.get((architectures or [None])[0])
        if model_type in _MULTIMODAL_TEXT_TYPES:  # a multimodal checkpoint: we serve its text model
            raw = _text_config(raw, _MULTIMODAL_TEXT_TYPES[model_type])
            model_type = raw["model_type"]
            if model_type not in _FAMILY_DEFAULTS:
                raise ValueError(f"unsupported text model_type {model_type!r} in config.json's text_config; "
                                 f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        if model_type not in _FAMILY_DEFAULTS:
            raise ValueError(
                f"unsupported model_type {model_type!r} in config.json; "
                f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        defaults = _FAMILY_DEFAULTS[model_type]

        def get(key: str) -> Any:
            return raw.get(key, defaults.get(key))

        hidden_size, num_heads = get("hidden_size"), get("num_attention_heads")
        num_layers = get("num_hidden_layers")
        max_position_embeddings = get("max_position_embeddings")
        if model_type == "gemma3_text":
            if raw.get("attn_logit_softcapping") is not None or raw.get("use_bidirectional_attention"):
                raise ValueError("Gemma 3 attention logit soft-capping and bidirectional attention are not supported")
            rope = {
                FULL_ATTENTION: _rope_parameters(raw, max_position_embeddings, FULL_ATTENTION, get("rope_theta")),
                SLIDING_ATTENTION: _rope_parameters(raw, max_position_embeddings, SLIDING_ATTENTION,
                                                    get("rope_local_base_freq")),
            }
        elif model_type == "ministral3" and not (raw.get("rope_parameters") or raw.get("rope_scaling")):
            rope = _rope_parameters({**raw, "rope_parameters": defaults["rope_parameters"]}, max_position_embeddings,
                                    None, get("rope_theta"))
        elif model_type == "gemma4_text":
            params = raw.get("rope_parameters") or defaults["rope_parameters"]
            rope = {kind: {"rope_type": "default", **p} for kind, p in params.items()}
        else:
            rope = _rope_parameters(raw, max_position_embeddings, None, get("rope_theta"))
            if model_type == "phi3":
                rope.setdefault("partial_rotary_factor", 1.0)
                if rope["rope_type"] in ("su", "yarn"):  # Phi-3's early names for LongRoPE
                    rope["rope_type"] = "longrope"
                if rope["rope_type"] == "longrope":  # Phi3Config's own field wins, even at its default
                    rope["original_max_position_embeddings"] = get("original_max_position_embeddings")
        sliding_window, layer_types = _layer_types(model_type, raw, get, num_layers)
        no_rope_layers = None
        if model_type == "smollm3":
            interval = get("no_rope_layer_interval")
            no_rope_layers = raw.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
        extras = _gemma4_fields(raw, get, layer_types) if model_type == "gemma4_text" else {}
        if model_type == "qwen3_5_text":
            rope.setdefault("partial_rotary_factor", get("partial_rotary_factor"))
            extras = {k: get(k) for k in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
                                          "linear_num_key_heads", "linear_num_value_heads")}
            extras["linear_value_heads_tiled"] = bool(raw.get("linear_value_heads_tiled"))
        return cls(
            model_type=model_type,
            architectures=architectures,
            vocab_size=get("vocab_size"),
            hidden_size=hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            # An explicit null means as many as query heads in every family; an absent key, the default.
            num_key_value_heads=get("num_key_value_heads") or num_heads,
            # Qwen2Config has no head_dim field, but its model reads one from config.json like the others.
            head_dim=get("head_dim") or hidden_size // num_heads,
            rms_norm_eps=get("rms_norm_eps"),
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=bool(get("tie_word_embeddings")),
            eos_token_id=get("eos_token_id"),
            rope_parameters=rope,
            hidden_act=get("hidden_activation") or get("hidden_act"),
            sliding_window=sliding_window,
            layer_types=layer_types,
            no_rope_layers=no_rope_layers,
            embedding_multiplier=get("embedding_multiplier") or 1.0,
            residual_multiplier=get("residual_multiplier") or 1.0,
            attention_multiplier=get("attention_multiplier"),
            logits_scaling=get("logits_scaling") or 1.0,
            query_pre_attn_scalar=get("query_pre_attn_scalar"),
            final_logit_softcapping=raw.get("final_logit_softcapping"),
            **extras,  # Gemma 4's or Qwen3.5's fields
        )


def _layer_types(model_type: str, raw: dict[str, Any], get, num_layers: int) -> tuple[int | None, list[str]]:
    """(sliding_window, layer_types) as each family's config class resolves them."""
    window = get("sliding_window")
    if model_type in ("llama", "granite"):
        return None, [FULL_ATTENTION] * num_layers
    if model_type in ("mistral", "ministral3", "phi3"):  # one window for every layer, when set
        return window, [SLIDING_ATTENTION if window is not None else FULL_ATTENTION] * num_layers
    if model_type in ("qwen2", "qwen3", "smollm3") and not raw.get("use_sliding_window", False):
        window = None
    if model_type == "gemma4_text":
        pattern = get("sliding_window_pattern")
        types = list(raw.get("layer_types") or [SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION
                                                 for i in range(num_layers)])
        types[-1] = FULL_ATTENTION  # as Gemma4TextConfig forces it
        return window, types
    if raw.get("layer_types"):
        return window, list(raw["layer_types"])
    if model_type == "qwen3_5_text":
        interval = get("full_attention_interval")
        return None, [LINEAR_ATTENTION if (i + 1) % interval else FULL_ATTENTION for i in range(num_layers)]
    if model_type in ("qwen2", "qwen3"):
        first = get("max_window_layers")
        return window, [SLIDING_ATTENTION if window is not None and i >= first else FULL_ATTENTION
                        for i in range(num_layers)]
    if model_type == "smollm3":
        interval = get("no_rope_layer_interval")
        no_rope = raw.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
        return window, [SLIDING_ATTENTION if window is not None and not no_rope[i] else FULL_ATTENTION
                        for i in range(num_layers)]
    pattern = get("sliding_window_pattern")  # gemma3_text
    return window, [SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION for i in range(num_layers)]


def _text_config(raw: dict[str, Any], default_type: str) -> dict[str, Any]:
    """The text model's config of a multimodal checkpoint (Gemma4ForConditionalGeneration,
    Mistral3ForConditionalGeneration), keeping the outer class name and eos_token_id, and the outer
    tie_word_embeddings (transformers ties by it, whatever the text config says; both classes default to True)."""
    text = dict(raw.get("text_config") or {})
    text.setdefault("model_type", default_type)
    text["tie_word_embeddings"] = raw.get("tie_word_embeddings", True)
    text["architectures"] = raw.get("architectures") or [
        {v: k for k, v in _ARCHITECTURE_MODEL_TYPES.items()}[raw["model_type"]]]
    if "eos_token_id" in raw:
        text.setdefault("eos_token_id", raw["eos_token_id"])
    return text


def _gemma4_fields(raw: dict[str, Any], get, layer_types: list[str]) -> dict[str, Any]:
    """Gemma 4's own fields, resolved as Gemma4TextConfig does: the full-attention layers' head size and KV
    heads from per_layer_config (how transformers saves them) or global_head_dim and num_global_key_value_heads
    (how the checkpoints state them; the KV heads only where keys are values)."""
    if get("enable_moe_block"):
        raise ValueError("Gemma 4 mixture-of-experts layers (enable_moe_block) are not supported")
    if get("use_bidirectional_attention") == "all":
        raise ValueError("Gemma 4 with bidirectional attention (use_bidirectional_attention: all) is not supported")
    k_eq_v = bool(get("attention_k_eq_v"))
    overrides = {int(i): c for i, c in (raw.get("per_layer_config") or {}).items()}
    if overrides:
        full = [overrides.get(i, {}) for i, t in enumerate(layer_types) if t == FULL_ATTENTION]
        sliding = [overrides[i] for i, t in enumerate(layer_types) if t == SLIDING_ATTENTION and overrides.get(i)]
        dims = {c.get("head_dim", get("head_dim")) for c in full}
        heads = {c.get("num_key_value_heads") for c in full}
        if sliding or len(dims) > 1 or len(heads) > 1:
            raise ValueError("Gemma 4 per_layer_config: only one override for every full-attention layer is supported")
        global_head_dim, global_kv_heads = dims.pop(), heads.pop()
    else:
        global_head_dim = get("global_head_dim")
        global_kv_heads = get("num_global_key_value_heads") if k_eq_v else None
    shared = get("num_kv_shared_layers") or 0
    if shared and shared >= len(layer_types):
        raise ValueError("Gemma 4 with every layer's KV shared (num_kv_shared_layers = num_hidden_layers) "
                         "is not supported")
    return {
        "global_head_dim": global_head_dim, "num_global_key_value_heads": global_kv_heads,
        "attention_k_eq_v": k_eq_v, "num_kv_shared_layers": shared,
        "hidden_size_per_layer_input": get("hidden_size_per_layer_input") or 0,
        "vocab_size_per_layer_input": get("vocab_size_per_layer_input"),
    }


def _rope_parameters(raw: dict[str, Any], max_position_embeddings: int, layer_type: str | None,
                     default_theta: float) -> dict[str, Any]:
    """Normalises both layouts into transformers 5's: `rope_parameters: {rope_theta, rope_type, ...}` and
    the older top-level `rope_theta` plus `rope_scaling: {type | rope_type, factor, ...}`. `layer_type`
    picks one dict of Gemma 3's per-layer-type ones, whose old layout has rope_local_base_freq for the
    sliding layers' theta and rope_scaling for the full ones only.

    Precedence follows transformers' standardisation: rope_scaling over rope_parameters, a theta inside the
    dict over a top-level one, and a top-level original_max_position_embeddings over one inside (Phi-3)."""
    nested = raw.get("rope_parameters") or {}
    if layer_type is None:
        rope = dict(raw.get("rope_scaling") or nested)
        if any(isinstance(v, dict) for v in rope.values()):
            raise ValueError("per-layer-type rope_parameters are not supported for this model type")
        theta = raw.get("rope_theta", default_theta)
    else:
        rope = dict(nested.get(layer_type) or {})
        if layer_type == FULL_ATTENTION and raw.get("rope_scaling"):
            rope.update(raw["rope_scaling"])
        theta = raw.get("rope_theta" if layer_type == FULL_ATTENTION else "rope_local_base_freq", default_theta)
    legacy_type = rope.pop("type", None)
    rope["rope_type"] = rope.get("rope_type") or legacy_type or "default"
    rope.setdefault("rope_theta", theta)
    if raw.get("partial_rotary_factor") is not None:
        rope.setdefault("partial_rotary_factor", raw["partial_rotary_factor"])
    if rope["rope_type"] in _ROPE_TYPES_WITH_ORIGINAL_LENGTH:
        if "original_max_position_embeddings" in raw:
            rope["original_max_position_embeddings"] = raw["original_max_position_embeddings"]
        rope.setdefault("original_max_position_embeddings", max_position_embeddings)
    return rope

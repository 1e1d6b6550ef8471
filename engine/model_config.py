"""A model's config.json, read into our own typed `ModelConfig`.

transformers' AutoConfig would give the same values, but importing a config class pulls in torch._dynamo
and the kernel-hub machinery (about 2.4 s in a fresh process), while reading the JSON takes a millisecond.
A key that config.json leaves out takes the default of the transformers config class of its model_type,
so a config means the same to us as to HF, whose outputs are our correctness oracle."""

from dataclasses import dataclass
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")

# transformers' RotaryEmbeddingConfigMixin.default_theta: none of our families overrides it.
DEFAULT_ROPE_THETA = 10_000.0

# Defaults of LlamaConfig, MistralConfig and Qwen2Config (transformers 5) for the keys we read. They differ:
# a Mistral config without num_key_value_heads has 8 of them, a Qwen2 one has no eos_token_id, and so on.
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {
        "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": None, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "eos_token_id": 2,
    },
    "mistral": {
        "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "eos_token_id": 2,
    },
    "qwen2": {
        "vocab_size": 151936, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 32, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "eos_token_id": None,
    },
}

# A config.json without model_type still names its class; AutoConfig would refuse it, we need not.
_ARCHITECTURE_MODEL_TYPES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
}

# RoPE types scaled relative to a pretraining length; HF takes max_position_embeddings when none is given.
_ROPE_TYPES_WITH_ORIGINAL_LENGTH = ("llama3", "yarn", "longrope")


@dataclass(frozen=True)
class ModelConfig:
    """The fields of config.json that the engine reads, with HF's names and HF's resolved values."""

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
    # that type (factor, original_max_position_embeddings, ...).
    rope_parameters: dict[str, Any]

    @property
    def architecture(self) -> str:
        """The model class, as HF would pick it: the first listed, else the family's causal LM."""
        if self.architectures:
            return self.architectures[0]
        return {v: k for k, v in _ARCHITECTURE_MODEL_TYPES.items()}[self.model_type]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ModelConfig":
        architectures = raw.get("architectures")
        model_type = raw.get("model_type") or _ARCHITECTURE_MODEL_TYPES.get((architectures or [None])[0])
        if model_type not in _FAMILY_DEFAULTS:
            raise ValueError(
                f"unsupported model_type {model_type!r} in config.json; "
                f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        defaults = _FAMILY_DEFAULTS[model_type]

        def get(key: str) -> Any:
            return raw.get(key, defaults[key])

        hidden_size, num_heads = get("hidden_size"), get("num_attention_heads")
        max_position_embeddings = get("max_position_embeddings")
        return cls(
            model_type=model_type,
            architectures=architectures,
            vocab_size=get("vocab_size"),
            hidden_size=hidden_size,
            num_hidden_layers=get("num_hidden_layers"),
            num_attention_heads=num_heads,
            # An explicit null means as many as query heads in every family; an absent key, the default.
            num_key_value_heads=get("num_key_value_heads") or num_heads,
            # Qwen2Config has no head_dim field, but its model reads one from config.json like the others.
            head_dim=raw.get("head_dim") or hidden_size // num_heads,
            rms_norm_eps=get("rms_norm_eps"),
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=bool(get("tie_word_embeddings")),
            eos_token_id=get("eos_token_id"),
            rope_parameters=_rope_parameters(raw, max_position_embeddings),
        )


def _rope_parameters(raw: dict[str, Any], max_position_embeddings: int) -> dict[str, Any]:
    """Normalises both layouts into transformers 5's: `rope_parameters: {rope_theta, rope_type, ...}` and
    the older top-level `rope_theta` plus `rope_scaling: {type | rope_type, factor, ...}`.

    Precedence follows transformers' standardisation: rope_scaling over rope_parameters, a theta inside the
    dict over a top-level one, and a top-level original_max_position_embeddings over one inside (Phi-3)."""
    rope = dict(raw.get("rope_scaling") or raw.get("rope_parameters") or {})
    if any(isinstance(v, dict) for v in rope.values()):
        raise ValueError("per-layer-type rope_parameters are not supported; expected one flat dict")
    legacy_type = rope.pop("type", None)
    rope["rope_type"] = rope.get("rope_type") or legacy_type or "default"
    rope.setdefault("rope_theta", raw.get("rope_theta", DEFAULT_ROPE_THETA))
    if raw.get("partial_rotary_factor") is not None:
        rope.setdefault("partial_rotary_factor", raw["partial_rotary_factor"])
    if rope["rope_type"] in _ROPE_TYPES_WITH_ORIGINAL_LENGTH:
        if "original_max_position_embeddings" in raw:
            rope["original_max_position_embeddings"] = raw["original_max_position_embeddings"]
        rope.setdefault("original_max_position_embeddings", max_position_embeddings)
    return rope

"""RoPE inverse frequencies and attention scaling for each rope_type we serve.

The formulas are those of the papers and model cards (position interpolation, NTK-aware dynamic scaling,
Llama 3.1's frequency bands, YaRN, Phi-3's LongRoPE, Gemma 4's proportional RoPE), written so the float32
results equal what transformers 5 computes at model init: HF's outputs are our correctness oracle, so the
same rounding matters more than extra precision.
Importing transformers' rotary code instead would pull in torch._dynamo and seconds of imports."""

import math
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope", "proportional")


def rope_inv_freq(
    rope: dict[str, Any], head_dim: int, max_position_embeddings: int, long_context: bool = False
) -> tuple[torch.Tensor, float]:
    """(inv_freq [dim / 2] float32, attention scaling for cos and sin) from normalised rope parameters
    (`ModelConfig.rope_parameters`: rope_type, rope_theta and the type's keys). `long_context`: LongRoPE's
    frequencies for sequences past the original length (its long factors), else those up to it.

    `freq_factors` (a GGUF file's `rope_freqs`, engine/gguf_config.py) divide the frequencies one by one,
    as llama.cpp applies them: it is how such files carry Llama 3's band scaling."""
    inv_freq, scaling = _scaled_inv_freq(rope, head_dim, max_position_embeddings, long_context)
    factors = rope.get("freq_factors")
    if factors is not None:
        if len(factors) != inv_freq.numel():
            raise ValueError(f"freq_factors has {len(factors)} values for {inv_freq.numel()} rotary frequencies")
        inv_freq = inv_freq / torch.tensor(factors, dtype=torch.float32)
    return inv_freq, scaling


def _scaled_inv_freq(
    rope: dict[str, Any], head_dim: int, max_position_embeddings: int, long_context: bool
) -> tuple[torch.Tensor, float]:
    rope_type = rope.get("rope_type", "default")
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"unsupported rope_type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
    base = rope["rope_theta"]
    if rope_type == "default":
        # HF's default RoPE for Llama-family models ignores partial_rotary_factor; so do we.
        return _base_inv_freq(base, head_dim), 1.0
    dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    if rope_type == "linear":
        # Position interpolation: positions / factor, folded into the frequencies.
        return _base_inv_freq(base, dim) / _required(rope, "factor"), 1.0
    if rope_type == "dynamic":
        return _dynamic_ntk(rope, base, dim, max_position_embeddings), 1.0
    if rope_type == "llama3":
        return _llama3(rope, base, dim), 1.0
    if rope_type == "longrope":
        return _longrope(rope, base, dim, max_position_embeddings, long_context)
    if rope_type == "proportional":
        return _proportional(rope, base, head_dim), 1.0
    return _yarn(rope, base, dim, max_position_embeddings)


def _required(rope: dict[str, Any], key: str) -> Any:
    if rope.get(key) is None:
        raise ValueError(f"rope_type {rope.get('rope_type')!r} needs {key!r} in the config's rope parameters")
    return rope[key]


def _base_inv_freq(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _dynamic_ntk(rope: dict[str, Any], base: float, dim: int, max_position_embeddings: int) -> torch.Tensor:
    """NTK-aware scaling raises the base as the sequence outgrows the trained length. HF recomputes it in the
    forward pass once a sequence gets longer than max_position_embeddings; at init, and so for every length
    up to it, the sequence length is max_position_embeddings, which is what our cos/sin cache holds."""
    factor = _required(rope, "factor")
    seq_len = max_position_embeddings
    base = base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
    return _base_inv_freq(base, dim)


def _llama3(rope: dict[str, Any], base: float, dim: int) -> torch.Tensor:
    """Llama 3.1: wavelengths longer than the original context / low_freq_factor are divided by factor,
    shorter than original / high_freq_factor are kept, and the band in between is blended smoothly."""
    inv_freq = _base_inv_freq(base, dim)
    factor = _required(rope, "factor")
    low_freq_factor = _required(rope, "low_freq_factor")
    high_freq_factor = _required(rope, "high_freq_factor")
    old_context_len = _required(rope, "original_max_position_embeddings")
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor

    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    in_band = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(in_band, smoothed, scaled)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(
    rope: dict[str, Any], base: float, dim: int, max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    """YaRN: dimensions that rotate many times within the original context keep their frequency
    (extrapolation), those rotating less than once are interpolated by factor, with a linear ramp between
    beta_fast and beta_slow rotations; cos and sin are scaled by the attention factor."""
    original = _required(rope, "original_max_position_embeddings")
    # DeepSeek-V3 style configs leave factor out and mean the ratio of the two lengths.
    factor = rope.get("factor")
    if factor is None:
        factor = max_position_embeddings / original

    attention_factor = rope.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim))
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = rope.get("beta_fast") or 32
    beta_slow = rope.get("beta_slow") or 1

    def correction_dim(num_rotations: float) -> float:
        # The dimension whose wavelength fits num_rotations times into the original context.
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # keeps the ramp finite

    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolated = 1.0 / pos_freqs
    interpolated = 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp  # weight of the unscaled frequency per dimension
    inv_freq = interpolated * (1 - keep) + extrapolated * keep
    return inv_freq, attention_factor


def _proportional(rope: dict[str, Any], base: float, head_dim: int) -> torch.Tensor:
    """Gemma 4's global layers: the first partial_rotary_factor of the frequencies as a whole head's
    (exponents over head_dim, not over the rotated part), the rest 0, so those dimensions never rotate; all
    divided by factor. One frequency per pair of the whole head."""
    angles = int(rope.get("partial_rotary_factor", 1.0) * head_dim // 2)
    rotated = 1.0 / (base ** (torch.arange(0, 2 * angles, 2, dtype=torch.int64).float() / head_dim))
    inv_freq = torch.cat([rotated, torch.zeros(head_dim // 2 - angles, dtype=torch.float32)])
    return inv_freq / rope.get("factor", 1.0)


def _longrope(
    rope: dict[str, Any], base: float, dim: int, max_position_embeddings: int, long_context: bool
) -> tuple[torch.Tensor, float]:
    """LongRoPE (Phi-3): each frequency divided by a searched factor, one list for sequences up to the
    original length and one beyond; cos and sin scaled by sqrt(1 + ln(factor) / ln(original))."""
    original = _required(rope, "original_max_position_embeddings")
    factor = rope.get("factor")
    if factor is None:
        factor = max_position_embeddings / original
    attention_factor = rope.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext_factors = torch.tensor(_required(rope, "long_factor" if long_context else "short_factor"), dtype=torch.float32)
    if ext_factors.numel() * 2 != dim:
        raise ValueError(f"LongRoPE factors: {ext_factors.numel()} given, {dim // 2} rotary frequencies")
    # As transformers writes it: the factor multiplies the wavelength before the reciprocal.
    return 1.0 / (ext_factors * base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), attention_factor

"""A GGUF file's weights as the model serves them: quantized tensors stay in their GGUF blocks
(`kernels.quantized.QuantizedWeight`, views of the memory-mapped file), float tensors become torch
tensors, and every name becomes the Hugging Face name the model's `load_weights` takes.

The config and tokenizer come from the same file (engine/gguf_config.py, engine/gguf_tokenizer.py);
`--quantization none` dequantizes these blocks in memory, the float reference the blocks are compared with."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import torch

from engine.gguf_file import GGUFFile
from engine.model_config import ModelConfig
from kernels.quantized import SUPPORTED_TYPES, QuantizedWeight

# GGUF's per-layer tensor names (llama.cpp's convert_hf_to_gguf) and their Hugging Face names.
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
}
# Where an architecture's converter names a tensor differently from the Llama layout.
ARCH_LAYER_NAMES = {
    # Phi-3 keeps q/k/v and gate/up fused, as its checkpoints do.
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
    # Gemma 3: a norm before and after both attention and the MLP.
    "gemma3": {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"},
    # Gemma 4: Gemma 3's norms, the per-layer embeddings' gate, projection and norm, and the layer scalar.
    "gemma4": {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm", "inp_gate": "per_layer_input_gate",
               "proj": "per_layer_projection", "post_norm": "post_per_layer_input_norm",
               "layer_output_scale": "layer_scalar"},
    # Qwen3.5: its linear-attention layers' projections, convolution and gated norm under Mamba-like names.
    "qwen35": {"post_attention_norm": "post_attention_layernorm", "attn_qkv": "linear_attn.in_proj_qkv",
               "attn_gate": "linear_attn.in_proj_z", "ssm_alpha": "linear_attn.in_proj_a",
               "ssm_beta": "linear_attn.in_proj_b", "ssm_out": "linear_attn.out_proj",
               "ssm_conv1d": "linear_attn.conv1d", "ssm_norm": "linear_attn.norm"},
}
# Per-layer tensors whose HF name is a parameter of its own, not a module's weight or bias.
ARCH_LAYER_PARAMETERS = {"qwen35": {"ssm_a": "linear_attn.A_log", "ssm_dt.bias": "linear_attn.dt_bias"}}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
                "per_layer_token_embd": "model.embed_tokens_per_layer",
                "per_layer_model_proj": "model.per_layer_model_projection",
                "per_layer_proj_norm": "model.per_layer_projection_norm"}
# llama.cpp stores these architectures' q and k rows interleaved per head for its rotary layout; HF's are not.
PERMUTED_ARCHITECTURES = {"llama", "mistral", "mistral3", "granite", "smollm3"}
# Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w, so the file's norms are shifted.
# So are Qwen3.5's, but for its linear-attention layers' gated norm, which scales by w.
SHIFTED_NORM_ARCHITECTURES = {"gemma3", "qwen35"}
UNSHIFTED_NORMS = ("linear_attn.norm.weight",)
_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
_LAYER_PARAMETER = re.compile(r"blk\.(\d+)\.([\w.]+)$")


def hf_name(gguf_name: str, arch: str = "llama") -> str | None:
    """The Hugging Face name of a GGUF tensor, or None for tensors the model does not take (rope_freqs
    and Phi-3's rope factors, which engine/gguf_config.py reads into the config)."""
    if (m := _LAYER_PARAMETER.match(gguf_name)) and m.group(2) in ARCH_LAYER_PARAMETERS.get(arch, {}):
        return f"model.layers.{m.group(1)}.{ARCH_LAYER_PARAMETERS[arch][m.group(2)]}"
    if m := _LAYER.match(gguf_name):
        layer, part, kind = m.groups()
        name = ARCH_LAYER_NAMES.get(arch, {}).get(part) or LAYER_NAMES.get(part)
        return f"model.layers.{layer}.{name}.{kind}" if name else None
    base, _, kind = gguf_name.rpartition(".")
    return f"{GLOBAL_NAMES[base]}.{kind}" if base in GLOBAL_NAMES else None


def unpermute_rows(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's q/k row order (as transformers' GGUF reader does); rows are whole rows of
    blocks, so it applies to quantized bytes as to floats."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, half, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def read_gguf_weights(path: Path | GGUFFile, config: ModelConfig,
                      keep_quantized: bool = True) -> dict[str, torch.Tensor | QuantizedWeight]:
    """Every tensor of the file under its HF name; quantized ones of a type the kernels take are kept
    quantized (unless `keep_quantized` is False: the float reference), others (F32, F16, BF16, types
    without a kernel) become float32 tensors."""
    import gguf as gguf_package

    file = path if isinstance(path, GGUFFile) else GGUFFile(path)
    arch = file.architecture
    state: dict[str, torch.Tensor | QuantizedWeight] = {}
    for t in file.tensors.values():
        name = hf_name(t.name, arch)
        if name is None or _layer(t.name) >= config.num_hidden_layers:  # Qwen3.5's multi-token prediction block
            continue
        rows = t.data
        if arch in PERMUTED_ARCHITECTURES and (".q_proj." in name or ".k_proj." in name):
            heads = config.num_attention_heads if ".q_proj." in name else config.num_key_value_heads
            rows = unpermute_rows(rows, heads)
        shape = t.rows_shape
        if keep_quantized and t.qtype in SUPPORTED_TYPES and len(shape) == 2:
            state[name] = QuantizedWeight(_tensor(rows), t.qtype, (shape[0], shape[1]))
            continue
        qtype = gguf_package.GGMLQuantizationType(t.qtype)
        values = _tensor(np.asarray(gguf_package.quants.dequantize(rows, qtype), dtype=np.float32)).reshape(shape)
        if arch in SHIFTED_NORM_ARCHITECTURES and name.endswith("norm.weight") and not name.endswith(UNSHIFTED_NORMS):
            values = values - 1
        if name.endswith(".A_log"):  # llama.cpp stores the decay's A = -exp(A_log) itself
            values = torch.log(-values)
        state[name] = values
    return state


def _layer(gguf_name: str) -> int:
    """The layer a tensor belongs to (-1 for the model's own: embeddings, final norm, head)."""
    m = _LAYER_PARAMETER.match(gguf_name)
    return int(m.group(1)) if m else -1


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A torch view of a (read-only, memory-mapped) array: the weights are never written."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        return torch.from_numpy(np.ascontiguousarray(array))

"""A GGUF file's weights as the model serves them: quantized tensors stay in their GGUF blocks
(`kernels.quantized.QuantizedWeight`, read from the memory-mapped file), float tensors become torch
tensors, and every name becomes the Hugging Face name `LlamaForCausalLM.load_weights` takes.

The config and tokenizer still come from the converted folder (engine/loader.py); this module only
replaces the dequantized fp32 weights, so `--quantization none` (that folder's safetensors) stays the
reference the quantized model is compared with."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import torch

from engine.model_config import ModelConfig
from kernels.quantized import SUPPORTED_TYPES, QuantizedWeight

# GGUF's per-layer tensor names (llama.cpp's convert_hf_to_gguf) and their Hugging Face names.
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# llama.cpp stores Llama's q and k rows interleaved per head for its rotary layout; HF's are not.
PERMUTED_ARCHITECTURES = {"llama", "mistral"}
_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor, or None for tensors the model does not take (rope_freqs)."""
    if m := _LAYER.match(gguf_name):
        layer, part, kind = m.groups()
        return f"model.layers.{layer}.{LAYER_NAMES[part]}.{kind}" if part in LAYER_NAMES else None
    base, _, kind = gguf_name.rpartition(".")
    return f"{GLOBAL_NAMES[base]}.{kind}" if base in GLOBAL_NAMES else None


def unpermute_rows(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's q/k row order (as transformers' GGUF reader does); rows are whole rows of
    blocks, so it applies to quantized bytes as to floats."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, half, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def read_gguf_weights(path: Path, config: ModelConfig) -> dict[str, torch.Tensor | QuantizedWeight]:
    """Every tensor of the file under its HF name; quantized ones of a type the kernels take are kept
    quantized, others (F32, F16, BF16, types without a kernel) become float32 tensors."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("general.architecture")
    arch = bytes(field.parts[field.data[0]]).decode() if field else "llama"
    state: dict[str, torch.Tensor | QuantizedWeight] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        rows = t.data
        if arch in PERMUTED_ARCHITECTURES and (".q_proj." in name or ".k_proj." in name):
            heads = config.num_attention_heads if ".q_proj." in name else config.num_key_value_heads
            rows = unpermute_rows(rows, heads)
        qtype = int(t.tensor_type)
        shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists ne0 (the row length) first
        if qtype in SUPPORTED_TYPES and len(shape) == 2:
            state[name] = QuantizedWeight(_tensor(rows), qtype, (shape[0], shape[1]))
        else:
            values = gguf.quants.dequantize(rows, t.tensor_type)  # F32 comes back as it is, F16/BF16 widened
            state[name] = _tensor(np.asarray(values, dtype=np.float32)).reshape(shape)
    return state


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A torch view of a (read-only, memory-mapped) array: the weights are never written."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        return torch.from_numpy(np.ascontiguousarray(array))

"""The per-layer small ops through the C++ kernels of `csrc/fused_ops.cpp`: one call each instead of
5 to 15 ATen ops, which at batch 1 is most of what a decode step spends outside the matmuls.

Same contracts as the torch references in `kernels.norm`, `kernels.rotary` and `kernels.cache`;
`supports_*` say which inputs the C++ code takes (the rest stay on the reference)."""

from __future__ import annotations

import torch

from kernels.quantized import QuantizedWeight, StackedWeight

CPU_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def supports_rms_norm(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> bool:
    ok = x.dtype in CPU_DTYPES and weight.dtype in (x.dtype, torch.float32)
    return ok and (residual is None or (residual.dtype == x.dtype and residual.shape == x.shape))


def rms_norm_cpu(x, weight, eps, residual=None):
    if residual is None:
        return torch.ops.sllm_cpu.rms_norm(x, weight, float(eps))
    return torch.ops.sllm_cpu.fused_add_rms_norm(x, residual, weight, float(eps))


def supports_rotary(q: torch.Tensor, k: torch.Tensor) -> bool:
    return q.dtype in CPU_DTYPES and k.dtype == q.dtype and q.stride(-1) == 1 and k.stride(-1) == 1


def rotary_embedding_cpu(positions, q, k, cos_sin_cache):
    torch.ops.sllm_cpu.rotary_embedding(positions, q, k, cos_sin_cache)
    return q, k


def supports_store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    same = k.dtype == v.dtype == k_cache.dtype == v_cache.dtype and k.dtype in CPU_DTYPES
    return same and k.stride(-1) == 1 and v.stride(-1) == 1 and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1


def store_kv_cpu(k, v, k_cache, v_cache, slot_mapping):
    torch.ops.sllm_cpu.store_kv(k, v, k_cache, v_cache, slot_mapping)


MATRICES = ("qkv", "o", "gate_up", "down")
# Rows `decode_layers_cpu` takes in one call (csrc/decode_layers.cpp's kDecodeMaxRows): up to 8 decoding
# sequences, or a speculative verify step of a sequence's last token and up to 7 drafts.
DECODE_MAX_ROWS = 8
FLOAT_DECODE_MAX_ROWS = 4  # the float32 few-row kernel's one pass (kernels/linear.py: SMALL_LINEAR_MAX_ROWS)


def decode_max_rows(layers: dict[str, list]) -> int:
    """Rows worth one call for these weights: all 8 where every matrix is quantized (those kernels read
    a weight once for 8 rows); 4 with float32 matrices, which more rows would read twice, while the
    layer loop's GEMM reads them once."""
    return DECODE_MAX_ROWS if all(layers["types"]) else FLOAT_DECODE_MAX_ROWS


def decode_layer_weights(layers: dict[str, list]) -> dict[str, list]:
    """The per-layer lists as `decode_layers_cpu` takes them, built once at load: each matrix (a float32
    tensor, a `QuantizedWeight`, or a `StackedWeight`'s first part) as the tensor the C++ op reads, and
    `types` holding every layer's qkv, o, gate_up and down GGML types in that order (0 for float32); a
    `StackedWeight`'s second part goes to `tails`, with its slot (4 * layer + projection) and type."""
    out = dict(layers) | {name: [] for name in (*MATRICES, "types", "tails", "tail_slots", "tail_types")}
    for i in range(len(layers["qkv"])):
        for j, name in enumerate(MATRICES):
            w = layers[name][i]
            if isinstance(w, StackedWeight):
                out["tails"].append(w.parts[1].data)
                out["tail_slots"].append(4 * i + j)
                out["tail_types"].append(w.parts[1].qtype)
                w = w.parts[0]
            out[name].append(w.data if isinstance(w, QuantizedWeight) else w)
            out["types"].append(w.qtype if isinstance(w, QuantizedWeight) else 0)
    return out


def decode_layers_cpu(x, positions, cos_sin_cache, layers: dict[str, list], final_norm,
                      k_caches, v_caches, slot_mapping, block_tables, context_lens, *, eps: float, scale: float,
                      num_heads: int, num_kv_heads: int, head_dim: int,
                      lora: tuple[list[torch.Tensor], list[torch.Tensor], list[int]] | None = None) -> torch.Tensor:
    """Every decoder layer and the final norm of a decode step of 1 to DECODE_MAX_ROWS fp32 rows in one C++
    call and one OpenMP parallel region (`csrc/decode_layers.cpp`), over `torch.get_num_threads()` threads;
    the reference is the model's own layer loop. Each row attends over its own block table up to its own
    context length, after every row's keys and values are stored. `layers` comes from
    `decode_layer_weights`: in_norm, qkv, qkv_bias (empty without biases), o, post_norm, gate_up, down,
    types, and optionally q_norm / k_norm (per-head norms before RoPE), rotary (per layer, 0 where a
    layer has no RoPE), windows (per layer, 0 for the whole context) and residual_scale (each branch's
    factor before the residual). `lora`: the step's per-row adapters as `engine.lora.LoRABatch.decode_args`
    gives them (A's, B's per layer, projection and adapter slot; each row's slot, -1 for none)."""
    lora_a, lora_b, slots = lora if lora is not None else ([], [], [])
    return torch.ops.sllm_cpu.decode_layers(
        x, positions, cos_sin_cache, layers["in_norm"], layers["qkv"], layers["qkv_bias"], layers["o"],
        layers["post_norm"], layers["gate_up"], layers["down"], layers["types"], final_norm, k_caches, v_caches,
        slot_mapping, block_tables, context_lens, float(eps), float(scale), num_heads, num_kv_heads, head_dim,
        lora_a, lora_b, slots, layers.get("q_norm", []), layers.get("k_norm", []), layers.get("rotary", []),
        layers.get("windows", []), float(layers.get("residual_scale", 1.0)), layers.get("tails", []),
        layers.get("tail_slots", []), layers.get("tail_types", []),
    )

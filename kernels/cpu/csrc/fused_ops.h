// The small per-layer ops of fused_ops.cpp on one float32 row or head, with no threading and no torch
// types: the ops run them over their tensors, decode_layers.cpp inside its one parallel region.
// No torch headers (see decode_attention.h).
#pragma once

#include <cstdint>

namespace sllm_cpu {

// out = w * (x * rsqrt(mean(x^2) + eps)), as the rms_norm op computes a float32 row.
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps);
// Neox-style rotation in place of one head of 2 * half values; cos_sin: the position's row of the
// rotary cache (half cosines, then half sines).
void rotate_head(float* x, int64_t half, const float* cos_sin);
// out = silu(gate) * up, as kernels.activation.silu_and_mul_ref computes it (up to exp's rounding).
void silu_and_mul_row(const float* gate, const float* up, float* out, int64_t n);

// Element offset of `head` in cache slot `slot` of a logical [num_blocks, block_size, Hkv, D] cache
// with element strides (block, slot, head).
inline int64_t kv_slot_offset(int64_t slot, int64_t head, int64_t block_size, const int64_t strides[3]) {
  return slot / block_size * strides[0] + slot % block_size * strides[1] + head * strides[2];
}

}  // namespace sllm_cpu

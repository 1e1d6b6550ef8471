// y = x W^T (+ bias) for a few rows of x: the decode-step matmul, where the weight is read once from
// memory for all rows and its bandwidth is the whole cost. No torch headers (see decode_attention.h).
#pragma once

#include <cstdint>

namespace sllm_cpu {

constexpr int64_t kSmallLinearMaxRows = 4;

// Output columns [n0, n1) of y [M, N] (row stride ldy) from x [M, K] (row stride ldx) and the
// row-major float32 weight W [N, K]; bias [N] or nullptr. M <= kSmallLinearMaxRows; K a multiple of
// the path's vector width (16 for AVX-512, 8 for AVX2, any for the portable path).
using SmallLinearKernel = void (*)(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k,
                                   const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);
// The path for inner size K under the ceiling of isa.h.
SmallLinearKernel small_linear_kernel(int64_t k);
void small_linear_generic(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
                          int64_t n0, int64_t n1, float* y, int64_t ldy);
void small_linear_avx2(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
                       int64_t n0, int64_t n1, float* y, int64_t ldy);
void small_linear_avx512(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
                         int64_t n0, int64_t n1, float* y, int64_t ldy);

}  // namespace sllm_cpu

// The few-row float32 matmul with AVX2 + FMA, built like small_linear_avx512.cpp (the pragma enables
// AVX2 for this file's code only; the op calls it only on a CPU that has it). With 16 vector registers
// instead of 32, one or two x rows take four weight rows at a time and three or four rows take two, so
// the accumulators, weight vectors and x vector fit without spilling.
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "small_linear.h"
#include "vec_avx2.h"

namespace sllm_cpu {
namespace {

// R weight rows [n, n + R) against the M rows of x: y[i][n + r] for all i, r.
template <int M, int R>
void block(const float* x, int64_t ldx, const float* w, int64_t k, float* y, int64_t ldy) {
  __m256 acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  for (int64_t c = 0; c < k; c += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * k + c);
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + c);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(wv[r], xv, acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) y[i * ldy + r] = hsum(acc[i][r]);
}

template <int M>
void columns(const float* x, int64_t ldx, const float* w, int64_t k, const float* bias, int64_t n0, int64_t n1,
             float* y, int64_t ldy) {
  constexpr int R = M <= 2 ? 4 : 2;
  int64_t n = n0;
  for (; n + R <= n1; n += R) block<M, R>(x, ldx, w + n * k, k, y + n, ldy);
  for (; n < n1; ++n) block<M, 1>(x, ldx, w + n * k, k, y + n, ldy);
  if (bias != nullptr)
    for (int i = 0; i < M; ++i)
      for (int64_t j = n0; j < n1; ++j) y[i * ldy + j] += bias[j];
}

}  // namespace

void small_linear_avx2(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
                       int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (m) {
    case 1: return columns<1>(x, ldx, w, k, bias, n0, n1, y, ldy);
    case 2: return columns<2>(x, ldx, w, k, bias, n0, n1, y, ldy);
    case 3: return columns<3>(x, ldx, w, k, bias, n0, n1, y, ldy);
    default: return columns<4>(x, ldx, w, k, bias, n0, n1, y, ldy);
  }
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX2)

#include "small_linear.h"

namespace sllm_cpu {
void small_linear_avx2(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
                       int64_t n0, int64_t n1, float* y, int64_t ldy) {
  small_linear_generic(x, m, ldx, w, k, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu

#endif

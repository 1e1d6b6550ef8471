// The few-row float32 matmul with AVX-512: four weight rows at a time against every x row, so each
// weight element is loaded once per call whatever M is. Built like decode_task_avx512.cpp: the pragma
// enables AVX-512 for this file's code only, and the op calls it only on a CPU that has it.
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx2")

#include "small_linear.h"

namespace sllm_cpu {
namespace {

template <int M>
void four_rows(const float* x, int64_t ldx, const float* w, int64_t k, float* out[M]) {
  __m512 acc[M][4];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < 4; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; c += 16) {
    const __m512 w0 = _mm512_loadu_ps(w + c), w1 = _mm512_loadu_ps(w + k + c);
    const __m512 w2 = _mm512_loadu_ps(w + 2 * k + c), w3 = _mm512_loadu_ps(w + 3 * k + c);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
      acc[i][0] = _mm512_fmadd_ps(w0, xv, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(w1, xv, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(w2, xv, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(w3, xv, acc[i][3]);
    }
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < 4; ++r) out[i][r] = _mm512_reduce_add_ps(acc[i][r]);
}

template <int M>
void one_row(const float* x, int64_t ldx, const float* w, int64_t k, float* out[M]) {
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; c += 16) {
    const __m512 wv = _mm512_loadu_ps(w + c);
    for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * ldx + c), acc[i]);
  }
  for (int i = 0; i < M; ++i) out[i][0] = _mm512_reduce_add_ps(acc[i]);
}

template <int M>
void columns(const float* x, int64_t ldx, const float* w, int64_t k, const float* bias, int64_t n0, int64_t n1,
             float* y, int64_t ldy) {
  float* out[M];
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    for (int i = 0; i < M; ++i) out[i] = y + i * ldy + n;
    four_rows<M>(x, ldx, w + n * k, k, out);
  }
  for (; n < n1; ++n) {
    for (int i = 0; i < M; ++i) out[i] = y + i * ldy + n;
    one_row<M>(x, ldx, w + n * k, k, out);
  }
  if (bias != nullptr)
    for (int i = 0; i < M; ++i)
      for (int64_t j = n0; j < n1; ++j) y[i * ldy + j] += bias[j];
}

}  // namespace

void small_linear_avx512(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
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

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX-512)

#include "small_linear.h"

namespace sllm_cpu {
void small_linear_avx512(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
                         int64_t n0, int64_t n1, float* y, int64_t ldy) {
  small_linear_generic(x, m, ldx, w, k, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu

#endif

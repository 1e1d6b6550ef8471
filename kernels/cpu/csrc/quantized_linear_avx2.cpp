// The AVX2 path of quantized_linear.h: a block's 32 weights widened to four vectors of 8 floats
// (d * q + m in one FMA each), then four FMAs per row of x. One or two rows keep several accumulators
// each, so the FMA chains do not wait on each other's latency. The pragma enables AVX2 for this file
// only; the op calls it only on a CPU that has it.
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "quantized_linear.h"
#include "vec_avx2.h"

namespace sllm_cpu {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The block's weights 0-7, 8-15, 16-23, 24-31 as floats.
inline void widen(const uint8_t* blk, int64_t qtype, __m256 out[4]) {
  const __m256 d = _mm256_set1_ps(half_at(blk));
  if (qtype == kQ8_0) {
    for (int v = 0; v < 4; ++v) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * v));
      out[v] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d);
    }
    return;
  }
  const uint8_t* qs = blk + (qtype == kQ4_1 ? 4 : 2);
  const __m256 m = qtype == kQ4_1 ? _mm256_set1_ps(half_at(blk + 2)) : _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
  const __m256i mask = _mm256_set1_epi32(0x0F);
  for (int h = 0; h < 2; ++h) {  // bytes 0-7 hold weights 0-7 and 16-23, bytes 8-15 weights 8-15 and 24-31
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * h)));
    out[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, mask)), d, m);
    out[h + 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), d, m);
  }
}

// A accumulators per row for M rows.
template <int M, int A>
void rows(const float* x, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype, int64_t row_bytes,
          const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t bb = quant_block_bytes(qtype);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 acc[M][A];
    for (int i = 0; i < M; ++i)
      for (int a = 0; a < A; ++a) acc[i][a] = _mm256_setzero_ps();
    for (int64_t c = 0; c < k; c += kQuantBlock) {
      __m256 wv[4];
      widen(row + c / kQuantBlock * bb, qtype, wv);
      for (int i = 0; i < M; ++i) {
        const float* xi = x + i * ldx + c;
        for (int v = 0; v < 4; ++v) acc[i][v % A] = _mm256_fmadd_ps(wv[v], _mm256_loadu_ps(xi + 8 * v), acc[i][v % A]);
      }
    }
    for (int i = 0; i < M; ++i) {
      __m256 s = acc[i][0];
      for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[i][a]);
      y[i * ldy + n] = hsum(s) + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace

void quantized_linear_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                           int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (m) {
    case 1: return rows<1, 4>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 2: return rows<2, 2>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 3: return rows<3, 2>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 4: return rows<4, 2>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 5: return rows<5, 1>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 6: return rows<6, 1>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 7: return rows<7, 1>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    default: return rows<8, 1>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
  }
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX2)
#include "quantized_linear.h"

namespace sllm_cpu {
void quantized_linear_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                           int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  quantized_linear_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu
#endif

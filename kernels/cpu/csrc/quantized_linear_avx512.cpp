// The AVX-512 path of quantized_linear.h: a block's 32 weights widened to two vectors of 16 floats
// (d * q + m in one FMA each), then two FMAs per row of x into that row's two accumulators (one for
// each half of the block, so consecutive FMAs do not wait on each other). The op calls this only on a
// CPU with AVX-512 F/BW/VL/DQ.
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#include "quantized_linear.h"

namespace sllm_cpu {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The block's weights 0-15 and 16-31 as floats.
inline void widen(const uint8_t* blk, int64_t qtype, __m512& lo, __m512& hi) {
  const __m512 d = _mm512_set1_ps(half_at(blk));
  if (qtype == kQ8_0) {
    const __m128i* qs = reinterpret_cast<const __m128i*>(blk + 2);
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs))), d);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs + 1))), d);
    return;
  }
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (qtype == kQ4_1 ? 4 : 2))));
  const __m512 m = qtype == kQ4_1 ? _mm512_set1_ps(half_at(blk + 2)) : _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
  lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(0x0F))), d, m);
  hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4)), d, m);
}

template <int M>
void rows(const float* x, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype, int64_t row_bytes,
          const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t bb = quant_block_bytes(qtype);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[M][2];
    for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += kQuantBlock) {
      __m512 lo, hi;
      widen(row + c / kQuantBlock * bb, qtype, lo, hi);
      for (int i = 0; i < M; ++i) {
        const float* xi = x + i * ldx + c;
        acc[i][0] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xi), acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xi + 16), acc[i][1]);
      }
    }
    for (int i = 0; i < M; ++i)
      y[i * ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1])) + (bias ? bias[n] : 0.0f);
  }
}

}  // namespace

void quantized_linear_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                             int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (m) {
    case 1: return rows<1>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 2: return rows<2>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 3: return rows<3>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 4: return rows<4>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 5: return rows<5>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 6: return rows<6>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    case 7: return rows<7>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
    default: return rows<8>(x, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
  }
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX-512)
#include "quantized_linear.h"

namespace sllm_cpu {
void quantized_linear_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                             int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  quantized_linear_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu
#endif

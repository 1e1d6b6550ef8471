// The AVX-512 path of quantized_linear.h: 32 weights at a time widened to two vectors of 16 floats
// (d * q + m in one FMA each; a K-quant's sub-scales decoded first, the type a template parameter),
// then two FMAs per row of x into that row's two accumulators (one for
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

// 16 bytes widened to 16 int32 lanes.
inline __m512i bytes16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Bits first..first+15 of a Q5 block's qh as 0 or 16 per lane: those weights' fifth bits.
inline __m512i fifth_bits(__m512i qh, int first) {
  const __m512i at = _mm512_add_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(first));
  return _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(qh, at), _mm512_set1_epi32(1)), 4);
}

constexpr bool is_k(int Q) { return Q == kQ4_K || Q == kQ5_K || Q == kQ6_K; }
constexpr int64_t block_weights(int Q) { return is_k(Q) ? kMaxQuantBlock : kQuantBlock; }

// Weights 32c..32c+15 (lo) and 32c+16..32c+31 (hi) of the block as floats (c is 0 for 32-weight blocks).
template <int Q>
inline void widen(const uint8_t* blk, int c, __m512& lo, __m512& hi) {
  const __m512i low4 = _mm512_set1_epi32(0x0F);
  if constexpr (Q == kQ8_0) {
    const __m512 d = _mm512_set1_ps(half_at(blk));
    const __m128i* qs = reinterpret_cast<const __m128i*>(blk + 2);
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs))), d);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs + 1))), d);
  } else if constexpr (Q == kQ4_K || Q == kQ5_K) {
    int sc, mn;
    scale_min_k4(c, blk + 4, sc, mn);
    const __m512 d = _mm512_set1_ps(half_at(blk) * static_cast<float>(sc));
    const __m512 m = _mm512_set1_ps(-(half_at(blk + 2) * static_cast<float>(mn)));
    const uint8_t* qs = blk + (Q == kQ5_K ? 48 : 16) + 32 * (c / 2);
    const __m128i nibble = _mm_cvtsi32_si128(4 * (c & 1)), bit = _mm_cvtsi32_si128(c);
    __m512i q[2];
    for (int v = 0; v < 2; ++v) {
      q[v] = _mm512_and_si512(_mm512_srl_epi32(bytes16(qs + 16 * v), nibble), low4);
      if constexpr (Q == kQ5_K) {
        const __m512i h = _mm512_and_si512(_mm512_srl_epi32(bytes16(blk + 16 + 16 * v), bit), _mm512_set1_epi32(1));
        q[v] = _mm512_or_si512(q[v], _mm512_slli_epi32(h, 4));
      }
    }
    lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q[0]), d, m);
    hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q[1]), d, m);
  } else if constexpr (Q == kQ6_K) {
    const float d = half_at(blk + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const int h = c / 4, g = c % 4;
    const uint8_t* ql = blk + 64 * h + 32 * (g & 1);
    const uint8_t* qh = blk + 128 + 32 * h;
    const __m128i nibble = _mm_cvtsi32_si128(4 * (g >> 1)), pair = _mm_cvtsi32_si128(2 * g);
    __m512 out[2];
    for (int v = 0; v < 2; ++v) {
      const __m512i l = _mm512_and_si512(_mm512_srl_epi32(bytes16(ql + 16 * v), nibble), low4);
      const __m512i u = _mm512_and_si512(_mm512_srl_epi32(bytes16(qh + 16 * v), pair), _mm512_set1_epi32(3));
      const __m512i q = _mm512_sub_epi32(_mm512_or_si512(l, _mm512_slli_epi32(u, 4)), _mm512_set1_epi32(32));
      out[v] = _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(d * static_cast<float>(sc[2 * c + v])));
    }
    lo = out[0];
    hi = out[1];
  } else {  // Q4_0, Q4_1, Q5_0, Q5_1: byte j holds weight j (low nibble) and j + 16 (high nibble)
    constexpr bool with_min = Q == kQ4_1 || Q == kQ5_1, five = Q == kQ5_0 || Q == kQ5_1;
    const uint8_t* qs = blk + (with_min ? 4 : 2) + (five ? 4 : 0);
    const __m512 d = _mm512_set1_ps(half_at(blk));
    const __m512 m = with_min ? _mm512_set1_ps(half_at(blk + 2))
                              : _mm512_mul_ps(d, _mm512_set1_ps(Q == kQ4_0 ? -8.0f : -16.0f));
    const __m512i b = bytes16(qs);
    __m512i l = _mm512_and_si512(b, low4), u = _mm512_srli_epi32(b, 4);
    if constexpr (five) {
      uint32_t bits;
      std::memcpy(&bits, qs - 4, 4);
      const __m512i qh = _mm512_set1_epi32(static_cast<int>(bits));
      l = _mm512_or_si512(l, fifth_bits(qh, 0));
      u = _mm512_or_si512(u, fifth_bits(qh, 16));
    }
    lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l), d, m);
    hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), d, m);
  }
}

template <int Q, int M>
void rows(const float* x, int64_t ldx, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
          int64_t n1, float* y, int64_t ldy) {
  constexpr int64_t per = block_weights(Q);
  const int64_t bb = quant_block_bytes(Q);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[M][2];
    for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / per; ++b) {
      for (int c = 0; c < per / kQuantBlock; ++c) {
        __m512 lo, hi;
        widen<Q>(row + b * bb, c, lo, hi);
        for (int i = 0; i < M; ++i) {
          const float* xi = x + i * ldx + b * per + c * kQuantBlock;
          acc[i][0] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xi), acc[i][0]);
          acc[i][1] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xi + 16), acc[i][1]);
        }
      }
    }
    for (int i = 0; i < M; ++i)
      y[i * ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1])) + (bias ? bias[n] : 0.0f);
  }
}

template <int Q>
void by_rows(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t row_bytes,
             const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  with_row_count(m, [&](auto r) { rows<Q, decltype(r)::value>(x, ldx, k, w, row_bytes, bias, n0, n1, y, ldy); });
}

}  // namespace

void quantized_linear_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                             int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  with_quant_type(qtype, [&](auto q) {
    by_rows<decltype(q)::value>(x, m, ldx, k, w, row_bytes, bias, n0, n1, y, ldy);
  });
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

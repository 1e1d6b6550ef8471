// The AVX-512 VNNI int8-activation path of quantized_linear.h (Q4_1): two blocks' 64 nibbles as unsigned
// bytes times the activations' 64 int8 values in one vpdpbusd (16 int32 sums, 8 per block), then one
// FMA with the two blocks' d_w * d_x. Called only on a CPU with AVX-512 F/BW/VL/DQ and VNNI.
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

#include "quantized_linear.h"

namespace sllm_cpu {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// A Q4_1 block's 32 weights as unsigned bytes, in order.
inline __m256i nibbles(const uint8_t* blk) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

template <int M>
void rows(const Int8Rows& a, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
          int64_t n1, float* y, int64_t ldy) {
  const int64_t blocks = k / kQuantBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[M];
    float mins[M];
    for (int i = 0; i < M; ++i) {
      acc[i] = _mm512_setzero_ps();
      mins[i] = 0.0f;
    }
    for (int64_t b = 0; b < blocks; b += 2) {
      const uint8_t* blk = row + b * 20;
      const bool pair = b + 1 < blocks;  // else the last block alone, the upper half zero
      const __m512i wq = pair ? _mm512_inserti64x4(_mm512_castsi256_si512(nibbles(blk)), nibbles(blk + 20), 1)
                              : _mm512_zextsi256_si512(nibbles(blk));
      const float dw0 = half_at(blk), mw0 = half_at(blk + 2);
      const float dw1 = pair ? half_at(blk + 20) : 0.0f, mw1 = pair ? half_at(blk + 22) : 0.0f;
      for (int i = 0; i < M; ++i) {
        const int8_t* xq = a.q + i * k + b * kQuantBlock;
        const __m512i xv = pair ? _mm512_loadu_si512(xq)
                                : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, xv);
        const float* d = a.d + i * blocks + b;
        const float* s = a.s + i * blocks + b;
        const __m512 scale = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(dw0 * d[0])),
                                                _mm256_set1_ps(pair ? dw1 * d[1] : 0.0f), 1);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i]);
        mins[i] += mw0 * s[0] + (pair ? mw1 * s[1] : 0.0f);
      }
    }
    for (int i = 0; i < M; ++i) y[i * ldy + n] = _mm512_reduce_add_ps(acc[i]) + mins[i] + (bias ? bias[n] : 0.0f);
  }
}

}  // namespace

void quantized_linear_int8_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                  int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                  float* y, int64_t ldy) {
  if (qtype != kQ4_1) return quantized_linear_avx512(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
  const Int8Rows a = quantize_activations_here(x, m, ldx, k);
  switch (m) {
    case 1: return rows<1>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 2: return rows<2>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 3: return rows<3>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 4: return rows<4>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 5: return rows<5>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 6: return rows<6>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 7: return rows<7>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    default: return rows<8>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
  }
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX-512)
#include "quantized_linear.h"

namespace sllm_cpu {
void quantized_linear_int8_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                  int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                  float* y, int64_t ldy) {
  quantized_linear_int8_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu
#endif

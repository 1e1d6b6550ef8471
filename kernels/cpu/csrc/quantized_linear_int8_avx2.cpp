// The AVX2 int8-activation path of quantized_linear.h (Q4_1): a block's 32 nibbles as 32 unsigned bytes,
// times the activations' 32 int8 values with maddubs (pairs summed to int16; 15 * 127 * 2 cannot
// saturate) and madd (to 8 int32 sums), then one FMA of those sums with the block's d_w * d_x.
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

template <int M>
void rows(const Int8Rows& a, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
          int64_t n1, float* y, int64_t ldy) {
  const int64_t blocks = k / kQuantBlock;
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 acc[M];
    float mins[M];
    for (int i = 0; i < M; ++i) {
      acc[i] = _mm256_setzero_ps();
      mins[i] = 0.0f;
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = row + b * 20;
      const float dw = half_at(blk), mw = half_at(blk + 2);
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
      const __m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);  // weights 0-31
      for (int i = 0; i < M; ++i) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + i * k + b * kQuantBlock));
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, xq), ones);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * a.d[i * blocks + b]), acc[i]);
        mins[i] += mw * a.s[i * blocks + b];
      }
    }
    for (int i = 0; i < M; ++i) y[i * ldy + n] = hsum(acc[i]) + mins[i] + (bias ? bias[n] : 0.0f);
  }
}

}  // namespace

void quantized_linear_int8_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if (qtype != kQ4_1) return quantized_linear_avx2(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
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

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX2)
#include "quantized_linear.h"

namespace sllm_cpu {
void quantized_linear_int8_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  quantized_linear_int8_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu
#endif

// The int8-activation product of quantized_linear.h for every served type over 256-bit integer vectors:
// the AVX2 path's few-row loop (maddubs and madd). The AVX-512 VNNI file includes it for quantize_rows and
// takes its few rows through int8_rows_zmm.h (everything here has internal linkage, so the two copies
// never meet in the linker).
//
// Every type is walked 32 weights at a time (a legacy block, or one sub-block of a K-quant super-block).
// Each 32 becomes bytes an integer dot product takes, plus the floats that turn the dot into the
// product with the dequantized weight:
//   sum_j w_j * x_j  ~  scale * d_x * sum_j q_j * xq_j  +  min * s_x
// where xq, d_x and s_x = d_x * sum(xq) are the activations' int8 block (quantize_activations, here
// vectorized: quantize_rows). Q4_1, Q5_1, Q4_K and Q5_K keep their unsigned integers and add the minimum
// through s_x; Q4_0 and Q5_0 are taken unsigned too (q as stored) with -offset * d as their minimum; Q8_0
// uses maddubs' sign trick (|w| times x with w's sign). A legacy group's float factor is one scalar per
// row, broadcast from a register. The K-quants' activations share one d_x per super-block, so there the
// integer sub-scales join the dot (k_super_block) and a super-block is converted to float once; Q6_K's
// unsigned q + 32 (0-63) meet x as they are and the 32 comes off through the activations' sums.
// Include after the file's `#pragma GCC target(...)` (AVX2 at the least).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "group_bytes_avx2.h"
#include "quantized_linear.h"
#include "vec_avx2.h"

namespace sllm_cpu {
namespace {

// 8 int32 sums of the group's products with 32 activations (xq, already sign-adjusted for signed types).
inline __m256i group_dot(__m256i wq, __m256i xq) {
  const __m256i pairs = _mm256_maddubs_epi16(wq, xq);  // |w| <= 128 or w <= 31, |x| <= 127: no saturation
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// Block j of a 32-weight type times every row of x: one FMA per row into accumulator `slot`, the
// minimum's term as a scalar beside it: Q4_1's and Q5_1's own, or for Q4_0 and Q5_0, taken unsigned
// (shifted_group), -offset * d (two instructions a block fewer than abs and sign; only Q8_0, whose q + 128
// would overflow maddubs' int16 pairs, keeps the sign trick). The block's scale is a scalar broadcast from
// a register, never a vector of factors gathered through memory (a vector load of values just stored one
// by one cannot be forwarded from the stores and waits for them to retire).
template <int Q, int M, int A>
__attribute__((always_inline)) inline void legacy_group(const Int8Rows& a, int64_t k, int64_t groups, const uint8_t* row,
                                                        int64_t j, __m256 (&acc)[M][A], float (&mins)[M][A], int slot) {
  constexpr bool sign_trick = Q == kQ8_0;
  const uint8_t* blk = row + j * quant_block_bytes(Q);
  const float sc = half_bits(blk);
  const float mn = bytes_have_min(Q) ? half_bits(blk + 2) : -static_cast<float>(unsigned_offset(Q)) * sc;
  __m256i signs = _mm256_setzero_si256(), wq;
  if constexpr (sign_trick) {
    signs = group<Q>(blk, 0).q;
    wq = _mm256_abs_epi8(signs);
  } else {
    wq = shifted_group<Q>(blk);
  }
  for (int i = 0; i < M; ++i) {
    __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + i * k + j * kQuantBlock));
    if constexpr (sign_trick) xq = _mm256_sign_epi8(xq, signs);
    const __m256i dot = group_dot(wq, xq);
    acc[i][slot] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(sc * a.d[i * groups + j]), acc[i][slot]);
    if constexpr (!sign_trick) mins[i][slot] += mn * a.s[i * groups + j];
  }
}

// The 8 bytes of `bytes` as 8 floats.
inline __m256 byte_floats(uint64_t bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(bytes))));
}

// Q4_K/Q5_K's 12 scale bytes, as scale_min_k4 reads them, four at a time in general-purpose registers:
// sub-blocks 0-3 take the low 6 bits of bytes 0-3 (scales) and 4-7 (mins), sub-blocks 4-7 the nibbles of
// bytes 8-11 with the top 2 bits of bytes 0-3 (scales) or 4-7 (mins) above them. Byte c of `sc` and `mn`
// is sub-block c's.
inline void k_scale_bytes(const uint8_t* blk, uint64_t& sc, uint64_t& mn) {
  uint32_t lo, mid, hi;
  std::memcpy(&lo, blk + 4, 4);
  std::memcpy(&mid, blk + 8, 4);
  std::memcpy(&hi, blk + 12, 4);
  sc = (lo & 0x3F3F3F3Fu) | static_cast<uint64_t>((hi & 0x0F0F0F0Fu) | (((lo >> 6) & 0x03030303u) << 4)) << 32;
  mn = (mid & 0x3F3F3F3Fu) | static_cast<uint64_t>(((hi >> 4) & 0x0F0F0F0Fu) | (((mid >> 6) & 0x03030303u) << 4)) << 32;
}

// The 8 groups' float factors of a Q4_K or Q5_K super-block (d times each 6-bit sub-scale) and their
// minimums (-dmin times each 6-bit min).
inline void k_factors(const uint8_t* blk, __m256& scale8, __m256& min8) {
  uint64_t sc, mn;
  k_scale_bytes(blk, sc, mn);
  scale8 = _mm256_mul_ps(byte_floats(sc), _mm256_set1_ps(half_bits(blk)));
  min8 = _mm256_mul_ps(byte_floats(mn), _mm256_set1_ps(-half_bits(blk + 2)));
}

// For Q6_K: per row, the sum of each 16 activation bytes (k / 16 of them), which its 16 sub-scales weigh
// once per super-block to take back the 32 added to every weight (q6_unsigned).
inline const int16_t* q6_half_sums(const Int8Rows& a, int64_t m, int64_t k) {
  thread_local std::vector<int16_t> buf;
  int16_t* out = line_aligned(buf, m * k / 16);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; j += 32) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + i * k + j));
      __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, x), ones16);  // lanes 0-3: bytes 0-15, 4-7: 16-31
      v = _mm256_hadd_epi32(v, v);
      v = _mm256_hadd_epi32(v, v);
      out[(i * k + j) / 16] = static_cast<int16_t>(_mm256_cvtsi256_si32(v));
      out[(i * k + j) / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(v, 4));
    }
  return out;
}

// A K-quant super-block times every row: its activations share one d_x (activation_span), so each group's
// pair sums are weighed by the group's integer sub-scales in the same madd that widens them (int16
// multipliers instead of ones) and the 8 groups add up in int32: one conversion and one FMA per row a
// super-block, where a d_x per 32 took one of each a group. Q4_K and Q5_K add their minimums as before,
// dmin times each min times s_x; Q6_K's weights meet x unsigned (q + 32) and -32 times each 16
// activations' sum (q6_half_sums) times its sub-scale comes off once per super-block. No int32 overflows:
// a super-block's sum is at most 256 * 63 * 127 * 127 (Q6_K; Q5_K's 31 * 63 is smaller).
template <int Q, int M>
__attribute__((always_inline)) inline void k_super_block(const Int8Rows& a, int64_t k, int64_t groups, const uint8_t* blk,
                                                         int64_t b, __m256 (&acc)[M], __m256 (&mins)[M],
                                                         const int16_t* half_sums) {
  // Each group's multipliers for madd, picked per group by a byte shuffle within 128-bit lanes: Q4_K and Q5_K
  // one sub-scale for the group's 32 weights, Q6_K sub-scale 2c for weights 0-15 (the low lane's pairs)
  // and 2c + 1 for 16-31.
  __m256i scales[2];
  float d;
  __m256i q6_scales16;
  if constexpr (Q == kQ6_K) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    q6_scales16 = _mm256_cvtepi8_epi16(sc);
    scales[0] = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc));
    scales[1] = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc, 8)));
    d = half_bits(blk + 208);
  } else {
    uint64_t sc, mn;
    k_scale_bytes(blk, sc, mn);
    scales[0] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
    d = half_bits(blk);
    const __m256 min8 = _mm256_mul_ps(byte_floats(mn), _mm256_set1_ps(-half_bits(blk + 2)));
    for (int i = 0; i < M; ++i)
      mins[i] = _mm256_fmadd_ps(min8, _mm256_loadu_ps(a.s + i * groups + b * kChunk), mins[i]);
  }
  __m256i sum[M];
  for (int i = 0; i < M; ++i) sum[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int c = 0; c < kChunk; ++c) {
    __m256i wq, mul;
    if constexpr (Q == kQ6_K) {
      wq = q6_unsigned(blk, c);
      const int lo = 4 * (c % 4), hi = lo + 2;  // bytes of words 2(c % 4) and 2(c % 4) + 1
      mul = _mm256_shuffle_epi8(scales[c / 4], _mm256_set_m128i(_mm_set1_epi16(static_cast<short>((hi + 1) << 8 | hi)),
                                                                _mm_set1_epi16(static_cast<short>((lo + 1) << 8 | lo))));
    } else {
      wq = group<Q>(blk, c).q;
      mul = _mm256_shuffle_epi8(scales[0], _mm256_set1_epi16(static_cast<short>((2 * c + 1) << 8 | 2 * c)));
    }
    for (int i = 0; i < M; ++i) {
      const __m256i xq =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + i * k + (b * kChunk + c) * kQuantBlock));
      // |pair| <= 2 * 63 * 127 (Q6_K's q + 32): maddubs does not saturate
      sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(wq, xq), mul));
    }
  }
  for (int i = 0; i < M; ++i) {
    __m256i total = sum[i];
    if constexpr (Q == kQ6_K) {
      const __m256i hs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half_sums + (i * k + b * kMaxQuantBlock) / 16));
      total = _mm256_sub_epi32(total, _mm256_slli_epi32(_mm256_madd_epi16(hs, q6_scales16), 5));
    }
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(d * a.d[i * groups + b * kChunk]), acc[i]);
  }
}

// A accumulators per row for the 32-weight types (four for one or two rows, so consecutive blocks' FMAs do
// not wait on each other); the K-quants' one FMA a super-block needs one.
template <int Q, int M, int A>
void int8_rows(const Int8Rows& a, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
               int64_t n1, float* y, int64_t ldy, const int16_t* half_sums) {
  const int64_t groups = k / kQuantBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    float out[M];
    if constexpr (bytes_is_k(Q)) {
      __m256 acc[M], mins[M];
      for (int i = 0; i < M; ++i) acc[i] = mins[i] = _mm256_setzero_ps();
      for (int64_t b = 0; b < groups / kChunk; ++b)
        k_super_block<Q, M>(a, k, groups, row + b * quant_block_bytes(Q), b, acc, mins, half_sums);
      for (int i = 0; i < M; ++i) out[i] = hsum(_mm256_add_ps(acc[i], mins[i]));
    } else {
      __m256 acc[M][A];
      float mins[M][A];  // per slot, like acc: one chain of scalar additions would wait on its latency
      for (int i = 0; i < M; ++i)
        for (int s = 0; s < A; ++s) acc[i][s] = _mm256_setzero_ps(), mins[i][s] = 0.0f;
      int64_t j = 0;
      for (; j + 2 <= groups; j += 2) {
        legacy_group<Q, M, A>(a, k, groups, row, j, acc, mins, 0);
        legacy_group<Q, M, A>(a, k, groups, row, j + 1, acc, mins, 1 % A);
      }
      if (j < groups) legacy_group<Q, M, A>(a, k, groups, row, j, acc, mins, 0);
      for (int i = 0; i < M; ++i) {
        __m256 s = acc[i][0];
        float mn = mins[i][0];
        for (int t = 1; t < A; ++t) s = _mm256_add_ps(s, acc[i][t]), mn += mins[i][t];
        out[i] = hsum(s) + mn;
      }
    }
    for (int i = 0; i < M; ++i) y[i * ldy + n] = out[i] + (bias ? bias[n] : 0.0f);
  }
}

template <int Q>
void int8_by_rows(const Int8Rows& a, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias,
                  int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int16_t* half_sums = Q == kQ6_K ? q6_half_sums(a, m, k) : nullptr;
  with_row_count(m, [&](auto r) {
    constexpr int M = decltype(r)::value;
    int8_rows<Q, M, M <= 2 ? 4 : 1>(a, k, w, row_bytes, bias, n0, n1, y, ldy, half_sums);
  });
}

// The largest |x| of 32 values.
inline float block_amax(const float* xb) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax8 = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb));
  for (int t = 1; t < 4; ++t) amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * t)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// The largest |x| of the activation span (activation_span: one 32-value block, or a K-quant's 8) that
// block b of `row` lies in: taken into `amax` where b starts a span, kept for the span's other blocks
// (every caller walks a row's blocks in order).
inline float span_amax(const float* row, int64_t b, int64_t span, float& amax) {
  if (b * kQuantBlock % span == 0) {
    amax = 0.0f;
    for (int64_t t = 0; t < span; t += kQuantBlock) amax = std::max(amax, block_amax(row + b * kQuantBlock + t));
  }
  return amax;
}

// 32 values of x as int8 (half away from zero) at the scale d = amax / 127, and the sum of the q: the
// same float operations as the portable quantize_activations (so the same q, d and s), eight lanes at a time.
inline void quantize_block32(const float* xb, float amax, int8_t* qb, float& d, int& sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  const __m256 inv8 = _mm256_set1_ps(inv);
  __m256i r[4];
  for (int t = 0; t < 4; ++t) {  // |v| rounded half up, then v's sign: half away from zero
    const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * t), inv8);
    const __m256 mag = _mm256_floor_ps(_mm256_add_ps(_mm256_andnot_ps(sign, s), half));
    r[t] = _mm256_cvttps_epi32(_mm256_or_ps(mag, _mm256_and_ps(sign, s)));
  }
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_permutevar8x32_epi32(packed, order));
  const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  d = scale;
  sum = _mm_cvtsi128_si32(s4);
}

// Rows of x as int8 blocks for a `qtype` weight (quantize_block32 each, at its span's amax) into this
// thread's buffers.
inline Int8Rows quantize_rows(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t qtype) {
  thread_local std::vector<int8_t> qbuf;
  thread_local std::vector<float> dbuf, sbuf;
  const int64_t blocks = k / kQuantBlock, span = activation_span(qtype);
  int8_t* q = line_aligned(qbuf, m * k);
  float* dd = line_aligned(dbuf, m * blocks);
  float* ss = line_aligned(sbuf, m * blocks);
  for (int64_t i = 0; i < m; ++i) {
    float amax = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      float d;
      int sum;
      quantize_block32(x + i * ldx + b * kQuantBlock, span_amax(x + i * ldx, b, span, amax), q + i * k + b * kQuantBlock,
                       d, sum);
      dd[i * blocks + b] = d;
      ss[i * blocks + b] = d * static_cast<float>(sum);
    }
  }
  return {q, dd, ss};
}

// The entry point both files export: the activations quantized once per call, then the type's loop.
inline void int8_product(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                  int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const Int8Rows a = quantize_rows(x, m, ldx, k, qtype);
  with_quant_type(qtype, [&](auto q) {
    int8_by_rows<decltype(q)::value>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
  });
}

}  // namespace
}  // namespace sllm_cpu

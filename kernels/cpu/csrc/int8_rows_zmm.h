// The AVX-512 VNNI form of the few-row int8-activation product (quantized_int8_impl.h): two 32-weight
// groups at once in 512-bit vectors. One decode row reads every weight once a token and, on 256-bit
// vectors, spent more time unpacking and scaling groups than reading them (a 1B Q4_K_M file's matrices ran
// at 24-30 GB/s on one Zen 5 core that reads 36): here a pair of groups takes one unpacking, one vpdpbusd,
// one conversion and one FMA per row, where the 256-bit loop took each twice.
//
// A pair is 64 consecutive weights: groups 2p and 2p+1 of a K-quant super-block, or blocks j and j+1 of a
// 32-weight type, against 64 consecutive activation bytes. Weights are unsigned bytes for vpdpbusd:
// signed types are shifted up (Q4_0's q - 8 is held as q, Q8_0's q as q + 128) and the shift comes back
// through the activations' sums, per 32 where the scale is per 32 (off * d * s_x, beside Q4_1's minimum
// term), per 4 bytes for Q6_K, whose sub-scales cover 16 weights (a vector of -32 * sum of each 4
// activation bytes, made once per call, starts each dot). Same q, d and s as every other path; only the
// order of the float sums differs. Include after an AVX-512 F/BW/VL/DQ + VNNI target pragma.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "group_bytes_avx2.h"
#include "quantized_int8_impl.h"
#include "quantized_linear.h"

namespace sllm_cpu {
namespace {

// The weight bytes `bytes` from `at` on, kPrefetchAhead further in the matrix (a thread's rows are
// contiguous, so this runs past a row's end into the next ones). The hardware prefetcher alone left one
// Zen 5 core reading a Q6_K matrix from memory at 29 GB/s against 50 from cache; 16 KiB ahead it reads 40
// (a 215 MB tied head 31 -> 41 GB/s, a Q8_0 one 28 -> 42); 5-9 KiB ahead gave less, 32 KiB the same.
constexpr int64_t kPrefetchAhead = 16384;
inline void prefetch_ahead(const uint8_t* at, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead + o), _MM_HINT_T0);
}

// Two blocks' 16 nibble bytes as 64 bytes: block 0's low nibbles (weights 0-15), its high ones, then block 1's.
inline __m512i pair_nibbles(const uint8_t* q0, const uint8_t* q1) {
  const __m256i both = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q0)));
  const __m512i spread = _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
  return _mm512_and_si512(_mm512_shuffle_i64x2(spread, spread, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

// A Q5 block's 32 fifth bits, as a mask over its 32 bytes.
inline uint64_t fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

// Blocks b0 and b1 of a 32-weight type as 64 unsigned bytes.
template <int Q>
inline __m512i legacy_pair(const uint8_t* b0, const uint8_t* b1) {
  if constexpr (Q == kQ8_0) {
    const __m512i q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else if constexpr (Q == kQ4_0 || Q == kQ4_1) {
    const int at = Q == kQ4_1 ? 4 : 2;
    return pair_nibbles(b0 + at, b1 + at);
  } else {  // Q5_0, Q5_1: qh, then the nibbles
    const int at = Q == kQ5_1 ? 4 : 2;
    const __m512i low = pair_nibbles(b0 + at + 4, b1 + at + 4);
    const __mmask64 set = fifth_bits(b0 + at) | fifth_bits(b1 + at) << 32;
    return _mm512_mask_add_epi8(low, set, low, _mm512_set1_epi8(16));
  }
}

// Groups 2p and 2p+1 of a K-quant super-block as 64 unsigned bytes.
template <int Q, int P>
inline __m512i k_pair(const uint8_t* blk) {
  if constexpr (Q == kQ4_K || Q == kQ5_K) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (Q == kQ5_K ? 48 : 16) + 32 * P));
    __m512i q = _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(bytes), _mm256_srli_epi16(bytes, 4), 1), _mm512_set1_epi8(0x0F));
    if constexpr (Q == kQ5_K) {  // bit 2P of each qh byte for group 2P, bit 2P + 1 for the next
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)));
      const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * P))),
                                             _mm256_set1_epi8(static_cast<char>(1 << (2 * P + 1))), 1);
      q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
    }
    return q;
  } else {  // Q6_K: half P / 2; its groups 2(P % 2) and 2(P % 2) + 1 are ql's two 32-byte halves
    const int h = P / 2, g = 2 * (P % 2);
    const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
    const __m512i lo = _mm512_and_si512(g ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(0x0F));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * g)),
                                             _mm256_set1_epi16(static_cast<short>(2 * g + 2)), 1);
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(3));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
  }
}

// A accumulators per row, the pair index mod A choosing one: with one, a super-block's four FMAs each waited
// for the last. Two Zen 5 cores on a 9.4 MB matrix they had just read: Q4_K 108 -> 118 G weights/s, Q6_K
// 107-112 -> 120; Llama-3.2-1B Q4_K_M one stream 14.8 -> 14.4 ms a token while memory read ~77 GB/s.
template <int Q, int M, int A>
void zmm_rows(const Int8Rows& a, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
              int64_t n1, float* y, int64_t ldy, const int32_t* lane_off) {
  const int64_t groups = k / kQuantBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[M][A];
    __m256 acc8[M];  // the K-quants' minimum terms, 8 groups at a time
    float mins[M];
    for (int i = 0; i < M; ++i) {
      for (int s = 0; s < A; ++s) acc[i][s] = _mm512_setzero_ps();
      acc8[i] = _mm256_setzero_ps(), mins[i] = 0.0f;
    }
    if constexpr (bytes_is_k(Q)) {
      for (int64_t b = 0; b < groups / kChunk; ++b) {
        const uint8_t* blk = row + b * quant_block_bytes(Q);
        const int64_t g0 = b * kChunk;
        prefetch_ahead(blk, quant_block_bytes(Q));
        // Per row, the factor of each of the pair's 16 lanes comes from one 16-float vector by lane index.
        __m512 f[M];
        if constexpr (Q == kQ6_K) {  // 16 sub-scales times d, each times its group's d_x (2 sub-scales a group)
          const __m512 s16 = _mm512_mul_ps(
              _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))),
              _mm512_set1_ps(half_bits(blk + 208)));
          const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
          for (int i = 0; i < M; ++i)
            f[i] = _mm512_mul_ps(s16, _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(a.d + i * groups + g0))));
        } else {
          __m256 scale8, min8;
          k_factors(blk, scale8, min8);
          for (int i = 0; i < M; ++i) {
            f[i] = _mm512_castps256_ps512(_mm256_mul_ps(scale8, _mm256_loadu_ps(a.d + i * groups + g0)));
            acc8[i] = _mm256_fmadd_ps(min8, _mm256_loadu_ps(a.s + i * groups + g0), acc8[i]);
          }
        }
        const auto pair = [&](auto p) {
          constexpr int P = decltype(p)::value;
          const __m512i wq = k_pair<Q, P>(blk);
          // Q6_K's lane l takes sub-scale 4P + l / 4; the others' lane l group 2P + l / 8.
          const __m512i pick = Q == kQ6_K ? _mm512_setr_epi32(4 * P, 4 * P, 4 * P, 4 * P, 4 * P + 1, 4 * P + 1, 4 * P + 1,
                                                              4 * P + 1, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2,
                                                              4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3)
                                          : _mm512_setr_epi32(2 * P, 2 * P, 2 * P, 2 * P, 2 * P, 2 * P, 2 * P, 2 * P,
                                                              2 * P + 1, 2 * P + 1, 2 * P + 1, 2 * P + 1, 2 * P + 1,
                                                              2 * P + 1, 2 * P + 1, 2 * P + 1);
          for (int i = 0; i < M; ++i) {
            const int64_t at = i * k + (g0 + 2 * P) * kQuantBlock;
            const __m512i x = _mm512_loadu_si512(a.q + at);
            const __m512i start = Q == kQ6_K ? _mm512_loadu_si512(lane_off + at / 4) : _mm512_setzero_si512();
            const __m512i dot = _mm512_dpbusd_epi32(start, wq, x);
            acc[i][P % A] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(pick, f[i]), acc[i][P % A]);
          }
        };
        pair(std::integral_constant<int, 0>{});
        pair(std::integral_constant<int, 1>{});
        pair(std::integral_constant<int, 2>{});
        pair(std::integral_constant<int, 3>{});
      }
    } else {
      const int64_t bb = quant_block_bytes(Q);
      // A block's scale d, and its minimum (Q4_1, Q5_1) or the shift back of a signed type: -offset * d.
      const auto scales = [](const uint8_t* blk, float& d, float& mn) {
        d = half_bits(blk);
        mn = bytes_have_min(Q) ? half_bits(blk + 2) : -static_cast<float>(unsigned_offset(Q, true)) * d;
      };
      int64_t j = 0;
      for (; j + 2 <= groups; j += 2) {
        const uint8_t* b0 = row + j * bb;
        prefetch_ahead(b0, 2 * bb);
        const __m512i wq = legacy_pair<Q>(b0, b0 + bb);
        float d0, m0, d1, m1;
        scales(b0, d0, m0);
        scales(b0 + bb, d1, m1);
        for (int i = 0; i < M; ++i) {
          const float* dx = a.d + i * groups + j;
          const float* sx = a.s + i * groups + j;
          const __m512 f = _mm512_insertf32x8(_mm512_set1_ps(d0 * dx[0]), _mm256_set1_ps(d1 * dx[1]), 1);
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, _mm512_loadu_si512(a.q + i * k + j * kQuantBlock));
          acc[i][(j / 2) % A] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), f, acc[i][(j / 2) % A]);
          mins[i] += m0 * sx[0] + m1 * sx[1];
        }
      }
      if (j < groups) {  // an odd last block: its pair's second half multiplies zero activations
        const uint8_t* b0 = row + j * bb;
        const __m512i wq = legacy_pair<Q>(b0, b0);
        float d0, m0;
        scales(b0, d0, m0);
        for (int i = 0; i < M; ++i) {
          const __m512i x = _mm512_maskz_loadu_epi8(0xFFFFFFFFull, a.q + i * k + j * kQuantBlock);
          acc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, x)),
                                      _mm512_set1_ps(d0 * a.d[i * groups + j]), acc[i][0]);
          mins[i] += m0 * a.s[i * groups + j];
        }
      }
    }
    for (int i = 0; i < M; ++i) {
      const __m256 a8 = acc8[i];
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_movehdup_ps(h));
      __m512 sum = acc[i][0];
      for (int s = 1; s < A; ++s) sum = _mm512_add_ps(sum, acc[i][s]);
      y[i * ldy + n] = _mm512_reduce_add_ps(sum) + _mm_cvtss_f32(h) + mins[i] + (bias ? bias[n] : 0.0f);
    }
  }
}

// For Q6_K: per row, -32 times the sum of each 4 activation bytes, the value each int32 lane of a group's
// dot starts from when its weights are taken unsigned (q6_unsigned: q + 32).
inline const int32_t* q6_lane_offsets(const Int8Rows& a, int64_t m, int64_t k) {
  thread_local std::vector<int32_t> buf;
  int32_t* out = line_aligned(buf, m * k / 4);
  const __m256i thirty_two = _mm256_set1_epi8(32), minus_one = _mm256_set1_epi16(-1);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; j += 32) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + i * k + j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (i * k + j) / 4),
                          _mm256_madd_epi16(_mm256_maddubs_epi16(thirty_two, x), minus_one));
    }
  return out;
}

template <int Q>
void zmm_by_rows(const Int8Rows& a, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias,
                 int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int32_t* off = Q == kQ6_K ? q6_lane_offsets(a, m, k) : nullptr;
  with_row_count(m, [&](auto rows) {
    constexpr int M = decltype(rows)::value;
    zmm_rows<Q, M, M <= 2 ? 4 : M <= 4 ? 2 : 1>(a, k, w, row_bytes, bias, n0, n1, y, ldy, off);
  });
}

// The AVX-512 VNNI file's few-row entry point: quantize_rows as the 256-bit loop does, then pairs of groups.
inline void zmm_product(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                        int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const Int8Rows a = quantize_rows(x, m, ldx, k, qtype);
  with_quant_type(qtype, [&](auto q) { zmm_by_rows<decltype(q)::value>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy); });
}

}  // namespace
}  // namespace sllm_cpu

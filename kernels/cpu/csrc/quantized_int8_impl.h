// The int8-activation product of quantized_linear.h for every served type, written once over 256-bit
// integer vectors and included by the AVX2 and the AVX-512 VNNI files (each under its own target pragma;
// everything here has internal linkage, so the two copies never meet in the linker).
//
// Every type is walked 32 weights at a time (a legacy block, or one sub-block of a K-quant super-block).
// Each 32 becomes bytes an integer dot product takes, plus the floats that turn the dot into the
// product with the dequantized weight:
//   sum_j w_j * x_j  ~  scale * d_x * sum_j mul_j * q_j * xq_j  +  min * s_x
// where xq, d_x and s_x = d_x * sum(xq) are the activations' int8 block (quantize_activations). Types
// whose integers carry an offset (Q4_0's q - 8, Q5_0's q - 16) keep q unsigned and move the offset into
// `min` through s_x; Q8_0 and Q6_K, whose integers are signed, use maddubs' sign trick (|w| times x with
// w's sign); Q6_K's two 16-weight sub-scales are the int16 multipliers of the pairwise sum (`mul`).
// Include after the file's `#pragma GCC target(...)` with kVnni saying whether vpdpbusd may be used.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quantized_linear.h"
#include "vec_avx2.h"

namespace sllm_cpu {
namespace {

inline float half_bits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One 32-weight group's integers ready for the dot product; its floats come per chunk (chunk_floats).
struct Group {
  __m256i q;    // the weights as bytes (unsigned, or signed where the type is)
  __m256i mul;  // int16 multipliers of maddubs' pair sums (all 1 but for Q6_K's two sub-scales)
};

constexpr bool int8_is_k(int Q) { return Q == kQ4_K || Q == kQ5_K || Q == kQ6_K; }
constexpr bool int8_signed(int Q) { return Q == kQ8_0 || Q == kQ6_K; }
constexpr bool int8_has_min(int Q) { return Q != kQ8_0 && Q != kQ6_K; }
// Groups whose floats are decoded together: a K-quant super-block, or 8 legacy blocks.
constexpr int kChunk = 8;

// 16 bytes of nibbles as 32 bytes: the low nibbles (weights 0-15), then the high ones (16-31).
inline __m256i split_nibbles(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// The 32 bits of a Q5 block's qh as bytes of 0 or 16: byte j is 16 where bit j is set.
inline __m256i fifth_bit_bytes(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte j takes qh's byte j / 8, then every bit but bit j % 8 is set: all-ones where bit j was set.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// Group c (0 for the 32-weight types, 0-7 for the K-quants) of the block at blk.
template <int Q>
inline Group group(const uint8_t* blk, int c) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (Q == kQ8_0) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), ones};
  } else if constexpr (Q == kQ4_0 || Q == kQ4_1) {
    return {split_nibbles(blk + (Q == kQ4_1 ? 4 : 2)), ones};
  } else if constexpr (Q == kQ5_0 || Q == kQ5_1) {
    const int at = Q == kQ5_1 ? 4 : 2;  // qh, then 16 bytes of nibbles
    return {_mm256_or_si256(split_nibbles(blk + at + 4), fifth_bit_bytes(blk + at)), ones};
  } else if constexpr (Q == kQ4_K || Q == kQ5_K) {
    const uint8_t* qs = blk + (Q == kQ5_K ? 48 : 16) + 32 * (c / 2);  // groups 2p and 2p+1 share 32 bytes
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
    __m256i q = _mm256_and_si256(c & 1 ? _mm256_srli_epi16(bytes, 4) : bytes, _mm256_set1_epi8(0x0F));
    if constexpr (Q == kQ5_K) {  // group c's fifth bits: bit c of each of the 32 qh bytes
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
      q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
    }
    return {q, ones};
  } else {  // Q6_K: group c = 32 weights of half c / 4, ql nibbles and two qh bits each, minus 32
    const int h = c / 4, g = c % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (g & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i lo = _mm256_and_si256(g >> 1 ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), _mm256_set1_epi8(3));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 2 * c;
    return {q, _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]))};
  }
}

// The floats of groups j0..j0+count-1 of a row (count <= kChunk; a K-quant chunk is one super-block):
// each group's scale (times the dot of its integers) and minimum (times the activations' s).
template <int Q>
inline void chunk_floats(const uint8_t* row, int64_t j0, int count, float* scale, float* min) {
  if constexpr (int8_is_k(Q)) {
    const uint8_t* blk = row + (j0 / kChunk) * quant_block_bytes(Q);
    if constexpr (Q == kQ6_K) {
      const float d = half_bits(blk + 208);
      for (int c = 0; c < kChunk; ++c) scale[c] = d;
    } else {
      const float d = half_bits(blk), dmin = half_bits(blk + 2);
      for (int c = 0; c < kChunk; ++c) {
        int sc, mn;
        scale_min_k4(c, blk + 4, sc, mn);
        scale[c] = d * static_cast<float>(sc);
        min[c] = -(dmin * static_cast<float>(mn));
      }
    }
  } else {
    for (int c = 0; c < count; ++c) {
      const uint8_t* blk = row + (j0 + c) * quant_block_bytes(Q);
      scale[c] = half_bits(blk);
      if constexpr (Q == kQ4_1 || Q == kQ5_1) min[c] = half_bits(blk + 2);
      if constexpr (Q == kQ4_0) min[c] = -8.0f * scale[c];
      if constexpr (Q == kQ5_0) min[c] = -16.0f * scale[c];
    }
  }
}

// 8 int32 sums of the group's products with 32 activations (xq, already sign-adjusted for signed types).
template <int Q, bool kVnni>
inline __m256i group_dot(__m256i wq, __m256i mul, __m256i xq) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  if constexpr (kVnni && Q != kQ6_K) return _mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, xq);
#endif
  const __m256i pairs = _mm256_maddubs_epi16(wq, xq);  // at most 2 * 255 * 127 for unsigned 8-bit weights
  return _mm256_madd_epi16(pairs, mul);
}

template <int Q, int M, bool kVnni>
void int8_rows(const Int8Rows& a, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
               int64_t n1, float* y, int64_t ldy) {
  constexpr int per_block = int8_is_k(Q) ? kChunk : 1;  // groups a block holds
  const int64_t bb = quant_block_bytes(Q), groups = k / kQuantBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 acc[M], mins[M];
    for (int i = 0; i < M; ++i) acc[i] = mins[i] = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < groups; j0 += kChunk) {
      const int count = static_cast<int>(std::min<int64_t>(kChunk, groups - j0));
      alignas(32) float scale[kChunk] = {}, min[kChunk] = {}, dx[kChunk] = {}, sx[kChunk] = {};
      chunk_floats<Q>(row, j0, count, scale, min);
      const __m256 scale_v = _mm256_load_ps(scale), min_v = _mm256_load_ps(min);
      Group g[kChunk];
      __m256i wq[kChunk];
      for (int c = 0; c < count; ++c) {
        const int64_t j = j0 + c;
        g[c] = group<Q>(row + (j / per_block) * bb, static_cast<int>(j % per_block));
        wq[c] = int8_signed(Q) ? _mm256_abs_epi8(g[c].q) : g[c].q;
      }
      for (int i = 0; i < M; ++i) {
        const float* d = a.d + i * groups + j0;
        const float* s = a.s + i * groups + j0;
        __m256 dv, sv;
        if (count == kChunk) {
          dv = _mm256_loadu_ps(d);
          sv = _mm256_loadu_ps(s);
        } else {
          for (int c = 0; c < count; ++c) dx[c] = d[c], sx[c] = s[c];
          dv = _mm256_load_ps(dx);
          sv = _mm256_load_ps(sx);
        }
        alignas(32) float both[kChunk];
        _mm256_store_ps(both, _mm256_mul_ps(scale_v, dv));
        if constexpr (int8_has_min(Q)) mins[i] = _mm256_fmadd_ps(min_v, sv, mins[i]);
        const int8_t* xrow = a.q + i * k + j0 * kQuantBlock;
        for (int c = 0; c < count; ++c) {
          __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xrow + c * kQuantBlock));
          if constexpr (int8_signed(Q)) xq = _mm256_sign_epi8(xq, g[c].q);
          const __m256i dot = group_dot<Q, kVnni>(wq[c], g[c].mul, xq);
          acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(both + c), acc[i]);
        }
      }
    }
    for (int i = 0; i < M; ++i) y[i * ldy + n] = hsum(_mm256_add_ps(acc[i], mins[i])) + (bias ? bias[n] : 0.0f);
  }
}

template <int Q, bool kVnni>
void int8_by_rows(const Int8Rows& a, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias,
                  int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (m) {
    case 1: return int8_rows<Q, 1, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 2: return int8_rows<Q, 2, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 3: return int8_rows<Q, 3, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 4: return int8_rows<Q, 4, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 5: return int8_rows<Q, 5, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 6: return int8_rows<Q, 6, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    case 7: return int8_rows<Q, 7, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
    default: return int8_rows<Q, 8, kVnni>(a, k, w, row_bytes, bias, n0, n1, y, ldy);
  }
}

// The entry point both files export: the activations quantized once per call, then the type's loop.
template <bool kVnni>
void int8_product(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                  int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const Int8Rows a = quantize_activations_here(x, m, ldx, k);
  switch (qtype) {
    case kQ4_0: return int8_by_rows<kQ4_0, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ4_1: return int8_by_rows<kQ4_1, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ5_0: return int8_by_rows<kQ5_0, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ5_1: return int8_by_rows<kQ5_1, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ8_0: return int8_by_rows<kQ8_0, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ4_K: return int8_by_rows<kQ4_K, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ5_K: return int8_by_rows<kQ5_K, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    default: return int8_by_rows<kQ6_K, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
  }
}

}  // namespace
}  // namespace sllm_cpu

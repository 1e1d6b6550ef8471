// A 32-weight group of any served GGUF type as 32 bytes in one AVX2 register, in the weights' order:
// what the int8-activation path multiplies with the activations' bytes (quantized_int8_impl.h), and what
// the float path widens to floats (quantized_linear_avx2.cpp), since unpacking bits 32 at a time takes
// fewer instructions than 8 at a time. Include after a `#pragma GCC target("avx2,...")`, as vec_avx2.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quantized_linear.h"

namespace sllm_cpu {
namespace {

inline float half_bits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One 32-weight group's integers (its floats, Q6_K's two 16-weight sub-scales among them, come from the
// block: each path decodes those).
struct Group {
  __m256i q;  // the weights as bytes (unsigned, or signed where the type is)
};

constexpr bool bytes_is_k(int Q) { return Q == kQ4_K || Q == kQ5_K || Q == kQ6_K; }
constexpr bool bytes_have_min(int Q) { return Q == kQ4_1 || Q == kQ5_1 || Q == kQ4_K || Q == kQ5_K; }
// Weights Q's type makes unsigned by adding this (0: unsigned already, Q8_0's sign trick, or Q6_K); the
// shift comes back as a minimum of -offset * d. Q8_0's q + 128 only under VNNI, whose int32 sums take it
// (maddubs' int16 pairs would overflow).
constexpr int unsigned_offset(int Q, bool vnni = false) {
  return Q == kQ4_0 ? 8 : Q == kQ5_0 ? 16 : Q == kQ8_0 && vnni ? 128 : 0;
}
// The 32-weight groups of a K-quant super-block.
constexpr int kChunk = 8;

// 16 bytes of nibbles as 32 bytes: the low nibbles (weights 0-15), then the high ones (16-31).
inline __m256i split_nibbles(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// The 32 bits of a Q5 block's qh as bytes: byte j all ones where bit j is set, else zero.
inline __m256i bit_bytes(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte j takes qh's byte j / 8, then every bit but bit j % 8 is set: all-ones where bit j was set.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

// Q6_K's group c as its unsigned 6-bit values (0-63, the weight plus 32): 32 weights of half c / 4, ql
// nibbles and two qh bits each.
inline __m256i q6_unsigned(const uint8_t* blk, int c) {
  const int h = c / 4, g = c % 4;
  const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (g & 1)));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
  const __m256i lo = _mm256_and_si256(g >> 1 ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(0x0F));
  // Bits 2g and 2g + 1 of each qh byte moved straight to bits 4-5 (one shift, none for g = 2): a 16-bit
  // shift by at most 4 brings nothing from the neighbouring byte into bits 4-5.
  const __m256i up = g == 0   ? _mm256_slli_epi16(qh, 4)
                     : g == 1 ? _mm256_slli_epi16(qh, 2)
                     : g == 2 ? qh
                              : _mm256_srli_epi16(qh, 2);
  return _mm256_or_si256(lo, _mm256_and_si256(up, _mm256_set1_epi8(0x30)));
}

// A 32-weight block's bytes plus unsigned_offset(Q): Q4_0's and Q5_0's q as stored (0-15, 0-31), or
// Q4_1's and Q5_1's, which are unsigned already.
template <int Q>
inline __m256i shifted_group(const uint8_t* blk) {
  static_assert(Q == kQ4_0 || Q == kQ4_1 || Q == kQ5_0 || Q == kQ5_1);
  const int at = Q == kQ4_1 || Q == kQ5_1 ? 4 : 2;
  if constexpr (Q == kQ4_0 || Q == kQ4_1) return split_nibbles(blk + at);
  const __m256i set = bit_bytes(blk + at), low = split_nibbles(blk + at + 4);  // qh, then the nibbles
  return _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

// Group c (0 for the 32-weight types, 0-7 for the K-quants) of the block at blk.
template <int Q>
inline Group group(const uint8_t* blk, int c) {
  if constexpr (Q == kQ8_0) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2))};
  } else if constexpr (Q == kQ4_0) {
    return {_mm256_sub_epi8(shifted_group<Q>(blk), _mm256_set1_epi8(8))};
  } else if constexpr (Q == kQ4_1 || Q == kQ5_1) {
    return {shifted_group<Q>(blk)};
  } else if constexpr (Q == kQ5_0) {  // qh, then 16 bytes of nibbles
    const __m256i set = bit_bytes(blk + 2), low = split_nibbles(blk + 6);
    // q - 16 as a signed byte: q itself where the fifth bit is set, else the nibble with 0xF0 over it.
    return {_mm256_or_si256(low, _mm256_andnot_si256(set, _mm256_set1_epi8(static_cast<char>(0xF0))))};
  } else if constexpr (Q == kQ4_K || Q == kQ5_K) {
    const uint8_t* qs = blk + (Q == kQ5_K ? 48 : 16) + 32 * (c / 2);  // groups 2p and 2p+1 share 32 bytes
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
    __m256i q = _mm256_and_si256(c & 1 ? _mm256_srli_epi16(bytes, 4) : bytes, _mm256_set1_epi8(0x0F));
    if constexpr (Q == kQ5_K) {  // group c's fifth bits: bit c of each of the 32 qh bytes
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
      q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
    }
    return {q};
  } else {  // Q6_K: its unsigned 6 bits, minus 32
    return {_mm256_sub_epi8(q6_unsigned(blk, c), _mm256_set1_epi8(32))};
  }
}

}  // namespace
}  // namespace sllm_cpu

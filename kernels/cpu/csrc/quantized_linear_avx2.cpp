// The AVX2 path of quantized_linear.h: 32 weights at a time widened to four vectors of 8 floats
// (d * q + m in one FMA each; a K-quant's sub-scales decoded first), then four FMAs per row of x. The
// type is a template parameter, so each type's loop carries no branch on it. One or two rows keep several accumulators
// each, so the FMA chains do not wait on each other's latency. The pragma enables AVX2 for this file
// only; the op calls it only on a CPU that has it.
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "group_bytes_avx2.h"
#include "quantized_linear.h"
#include "vec_avx2.h"

namespace sllm_cpu {
namespace {

// 8 bytes widened to 8 int32 lanes.
inline __m256i bytes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

constexpr int64_t block_weights(int Q) { return bytes_is_k(Q) ? kMaxQuantBlock : kQuantBlock; }

// 32 signed bytes (weights in order) as four vectors of 8 floats.
inline void bytes_to_floats(__m256i q, __m256 out[4]) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

// Weights 32c..32c+31 of the block as floats, in four vectors of 8 (c is 0 for 32-weight blocks).
template <int Q>
inline void widen(const uint8_t* blk, int c, __m256 out[4]) {
  const __m256i low4 = _mm256_set1_epi32(0x0F);
  if constexpr (Q == kQ8_0) {
    const __m256 d = _mm256_set1_ps(half_bits(blk));
    for (int v = 0; v < 4; ++v) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * v));
      out[v] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d);
    }
  } else if constexpr (Q == kQ4_K || Q == kQ5_K) {
    int sc, mn;
    scale_min_k4(c, blk + 4, sc, mn);
    const __m256 d = _mm256_set1_ps(half_bits(blk) * static_cast<float>(sc));
    const __m256 m = _mm256_set1_ps(-(half_bits(blk + 2) * static_cast<float>(mn)));
    const uint8_t* qs = blk + (Q == kQ5_K ? 48 : 16) + 32 * (c / 2);
    const __m128i nibble = _mm_cvtsi32_si128(4 * (c & 1)), bit = _mm_cvtsi32_si128(c);
    for (int v = 0; v < 4; ++v) {
      __m256i q = _mm256_and_si256(_mm256_srl_epi32(bytes8(qs + 8 * v), nibble), low4);
      if constexpr (Q == kQ5_K) {
        const __m256i h = _mm256_and_si256(_mm256_srl_epi32(bytes8(blk + 16 + 8 * v), bit), _mm256_set1_epi32(1));
        q = _mm256_or_si256(q, _mm256_slli_epi32(h, 4));
      }
      out[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, m);
    }
  } else if constexpr (Q == kQ6_K) {  // signed bytes, then each 16 weights' sub-scale
    const __m256i mul = group<Q>(blk, c).q;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 2 * c;
    bytes_to_floats(mul, out);
    const float d = half_bits(blk + 208);
    for (int v = 0; v < 4; ++v) out[v] = _mm256_mul_ps(out[v], _mm256_set1_ps(d * static_cast<float>(sc[v / 2])));
  } else if constexpr (Q == kQ5_0 || Q == kQ5_1) {  // q - 16 as signed bytes (Q5_0), or q and the minimum
    bytes_to_floats(group<Q>(blk, c).q, out);
    const __m256 d = _mm256_set1_ps(half_bits(blk));
    const __m256 m = Q == kQ5_1 ? _mm256_set1_ps(half_bits(blk + 2)) : _mm256_setzero_ps();
    for (int v = 0; v < 4; ++v) out[v] = _mm256_fmadd_ps(out[v], d, m);
  } else {  // Q4_0, Q4_1
    const uint8_t* qs = blk + (Q == kQ4_1 ? 4 : 2);
    const __m256 d = _mm256_set1_ps(half_bits(blk));
    const __m256 m = Q == kQ4_1 ? _mm256_set1_ps(half_bits(blk + 2)) : _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
    for (int h = 0; h < 2; ++h) {  // bytes 0-7 hold weights 0-7 and 16-23, bytes 8-15 weights 8-15 and 24-31
      const __m256i b = bytes8(qs + 8 * h);
      out[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, low4)), d, m);
      out[h + 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), d, m);
    }
  }
}

// A accumulators per row for M rows.
template <int Q, int M, int A>
void rows(const float* x, int64_t ldx, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
          int64_t n1, float* y, int64_t ldy) {
  constexpr int64_t per = block_weights(Q);
  const int64_t bb = quant_block_bytes(Q);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 acc[M][A];
    for (int i = 0; i < M; ++i)
      for (int a = 0; a < A; ++a) acc[i][a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / per; ++b) {
      for (int c = 0; c < per / kQuantBlock; ++c) {
        __m256 wv[4];
        widen<Q>(row + b * bb, c, wv);
        for (int i = 0; i < M; ++i) {
          const float* xi = x + i * ldx + b * per + c * kQuantBlock;
          for (int v = 0; v < 4; ++v) acc[i][v % A] = _mm256_fmadd_ps(wv[v], _mm256_loadu_ps(xi + 8 * v), acc[i][v % A]);
        }
      }
    }
    for (int i = 0; i < M; ++i) {
      __m256 s = acc[i][0];
      for (int a = 1; a < A; ++a) s = _mm256_add_ps(s, acc[i][a]);
      y[i * ldy + n] = hsum(s) + (bias ? bias[n] : 0.0f);
    }
  }
}

// One row of x (a decode step of one sequence): each group's integers meet x first,
//   sum_j (d q_j + m) x_j = d * sum_j q_j x_j + m * sum_j x_j,
// so a group costs four FMAs of q with x and one with d, not four more to dequantize (the FMA units
// bound this loop); the minimum's term takes x's sum per 32, computed once per call. Same product up to
// float rounding (quantized_linear_ref is the reference).
template <int Q>
inline void group_ints(const uint8_t* blk, int c, __m256i out[4]) {
  if constexpr (Q == kQ8_0) {
    for (int v = 0; v < 4; ++v)
      out[v] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * v)));
  } else if constexpr (Q == kQ4_0 || Q == kQ4_1) {
    const uint8_t* qs = blk + (Q == kQ4_1 ? 4 : 2);
    const __m256i low4 = _mm256_set1_epi32(0x0F), off = _mm256_set1_epi32(Q == kQ4_0 ? 8 : 0);
    for (int h = 0; h < 2; ++h) {  // bytes 0-7 hold weights 0-7 and 16-23, bytes 8-15 weights 8-15 and 24-31
      const __m256i b = bytes8(qs + 8 * h);
      out[h] = _mm256_sub_epi32(_mm256_and_si256(b, low4), off);
      out[h + 2] = _mm256_sub_epi32(_mm256_srli_epi32(b, 4), off);
    }
  } else {
    const __m256i q = group<Q>(blk, c).q;
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    out[0] = _mm256_cvtepi8_epi32(lo);
    out[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8));
    out[2] = _mm256_cvtepi8_epi32(hi);
    out[3] = _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8));
  }
}

template <int Q>
void one_row(const float* x, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t n0,
             int64_t n1, float* y) {
  constexpr int64_t per = block_weights(Q), groups_per = per / kQuantBlock;
  const int64_t bb = quant_block_bytes(Q), groups = k / kQuantBlock;
  thread_local std::vector<float> sums;
  if constexpr (bytes_have_min(Q)) {
    sums.resize(groups);
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + g * kQuantBlock;
      __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xg), _mm256_loadu_ps(xg + 8)),
                               _mm256_add_ps(_mm256_loadu_ps(xg + 16), _mm256_loadu_ps(xg + 24)));
      sums[g] = hsum(s);
    }
  }
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    float mins[2] = {0.0f, 0.0f};
    for (int64_t b = 0; b < k / per; ++b) {
      const uint8_t* blk = row + b * bb;
#pragma GCC unroll 8
      for (int c = 0; c < groups_per; ++c) {
        const int64_t g = b * groups_per + c;
        const float* xg = x + g * kQuantBlock;
        __m256i q[4];
        group_ints<Q>(blk, c, q);
        __m256 t[2];
        for (int h = 0; h < 2; ++h)
          t[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[2 * h + 1]), _mm256_loadu_ps(xg + 16 * h + 8),
                                 _mm256_mul_ps(_mm256_cvtepi32_ps(q[2 * h]), _mm256_loadu_ps(xg + 16 * h)));
        float d0, d1, m = 0.0f;  // the factors of weights 0-15 and 16-31 (they differ in Q6_K only)
        if constexpr (Q == kQ6_K) {
          const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 2 * c;
          const float d = half_bits(blk + 208);
          d0 = d * static_cast<float>(sc[0]);
          d1 = d * static_cast<float>(sc[1]);
        } else if constexpr (Q == kQ4_K || Q == kQ5_K) {
          int s6, m6;
          scale_min_k4(c, blk + 4, s6, m6);
          d0 = d1 = half_bits(blk) * static_cast<float>(s6);
          m = -(half_bits(blk + 2) * static_cast<float>(m6));
        } else {
          d0 = d1 = half_bits(blk);
          if constexpr (Q == kQ4_1 || Q == kQ5_1) m = half_bits(blk + 2);
        }
        const int slot = c & 1;
        if constexpr (Q == kQ6_K) {
          acc[slot] = _mm256_fmadd_ps(t[0], _mm256_set1_ps(d0), acc[slot]);
          acc[slot] = _mm256_fmadd_ps(t[1], _mm256_set1_ps(d1), acc[slot]);
        } else {
          acc[slot] = _mm256_fmadd_ps(_mm256_add_ps(t[0], t[1]), _mm256_set1_ps(d0), acc[slot]);
        }
        if constexpr (bytes_have_min(Q)) mins[slot] += m * sums[g];
      }
    }
    y[n] = hsum(_mm256_add_ps(acc[0], acc[1])) + (mins[0] + mins[1]) + (bias ? bias[n] : 0.0f);
  }
}

template <int Q>
void by_rows(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t row_bytes,
             const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if (m == 1) return one_row<Q>(x, k, w, row_bytes, bias, n0, n1, y);
  with_row_count(m, [&](auto r) {
    constexpr int M = decltype(r)::value;
    rows<Q, M, M <= 4 ? 2 : 1>(x, ldx, k, w, row_bytes, bias, n0, n1, y, ldy);
  });
}

// Many rows of x (quantized_gemm_avx2): a tile of kTileRows weight rows by up to kTileK weights is
// dequantized once into a float buffer that stays in cache, then every row of x meets it in a register
// block of 4 x rows by 3 weight rows (12 accumulators, each vector of x and of the tile loaded once per
// 3 or 4 FMAs), instead of one pass over the blocks per 8 rows of x.
constexpr int64_t kTileRows = 12, kTileK = 2048;  // 96 KB of floats: within the L2 of every x86 we meet
constexpr int kMr = 4, kNr = 3;

template <int Q>
void dequantize_tile(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t k0, int64_t kc, float* tile) {
  constexpr int64_t per = block_weights(Q);
  const int64_t bb = quant_block_bytes(Q);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    float* out = tile + r * kc;
    for (int64_t kk = 0; kk < kc; kk += kQuantBlock) {
      const int64_t at = k0 + kk;
      __m256 v[4];
      widen<Q>(row + (at / per) * bb, static_cast<int>((at % per) / kQuantBlock), v);
      for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + kk + 8 * q, v[q]);
    }
  }
}

// y[i, c] (+)= x[i, :kc] . tile[c, :kc] for MR rows of x and NR rows of the tile.
template <int MR, int NR>
inline void tile_block(const float* x, int64_t ldx, const float* tile, int64_t kc, float* y, int64_t ldy, bool add) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int c = 0; c < NR; ++c) acc[i][c] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < kc; kk += 8) {
    __m256 wv[NR];
    for (int c = 0; c < NR; ++c) wv[c] = _mm256_loadu_ps(tile + c * kc + kk);
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);
      for (int c = 0; c < NR; ++c) acc[i][c] = _mm256_fmadd_ps(xv, wv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int c = 0; c < NR; ++c) y[i * ldy + c] = (add ? y[i * ldy + c] : 0.0f) + hsum(acc[i][c]);
}

template <int MR>
inline void tile_rows(const float* x, int64_t ldx, const float* tile, int64_t rows, int64_t kc, float* y, int64_t ldy,
                      bool add) {
  int64_t c = 0;
  for (; c + kNr <= rows; c += kNr) tile_block<MR, kNr>(x, ldx, tile + c * kc, kc, y + c, ldy, add);
  if (rows - c == 2) tile_block<MR, 2>(x, ldx, tile + c * kc, kc, y + c, ldy, add);
  if (rows - c == 1) tile_block<MR, 1>(x, ldx, tile + c * kc, kc, y + c, ldy, add);
}

template <int Q>
void gemm(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias,
          int64_t n0, int64_t n1, float* y, int64_t ldy) {
  thread_local std::vector<float> buffer;
  buffer.resize(kTileRows * std::min(k, kTileK));
  float* tile = buffer.data();
  for (int64_t t0 = n0; t0 < n1; t0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, n1 - t0);
    for (int64_t k0 = 0; k0 < k; k0 += kTileK) {  // a multiple of 256: chunks hold whole super-blocks
      const int64_t kc = std::min(kTileK, k - k0);
      dequantize_tile<Q>(w + t0 * row_bytes, row_bytes, rows, k0, kc, tile);
      const bool add = k0 > 0;
      int64_t i = 0;
      for (; i + kMr <= m; i += kMr) tile_rows<kMr>(x + i * ldx + k0, ldx, tile, rows, kc, y + i * ldy + t0, ldy, add);
      const float* xi = x + i * ldx + k0;
      float* yi = y + i * ldy + t0;
      if (m - i == 3) tile_rows<3>(xi, ldx, tile, rows, kc, yi, ldy, add);
      if (m - i == 2) tile_rows<2>(xi, ldx, tile, rows, kc, yi, ldy, add);
      if (m - i == 1) tile_rows<1>(xi, ldx, tile, rows, kc, yi, ldy, add);
    }
    if (bias)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < rows; ++c) y[i * ldy + t0 + c] += bias[t0 + c];
  }
}

}  // namespace

void quantized_linear_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                           int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  with_quant_type(qtype, [&](auto q) {
    by_rows<decltype(q)::value>(x, m, ldx, k, w, row_bytes, bias, n0, n1, y, ldy);
  });
}

void quantized_gemm_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                         int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  with_quant_type(qtype, [&](auto q) {
    gemm<decltype(q)::value>(x, m, ldx, k, w, row_bytes, bias, n0, n1, y, ldy);
  });
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
void quantized_gemm_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                         int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  quantized_linear_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu
#endif

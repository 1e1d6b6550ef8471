// The many-row int8-activation product of quantized_linear.h (prefill chunks and decode batches of more
// than kQuantMaxRows rows while int8 activations are on), written once over 256-bit integer vectors and
// included, after quantized_int8_impl.h, by the AVX2 and the AVX-512 VNNI files.
//
// The few-row loop turns each 32-weight dot product into a float with one FMA (its factor d_w * d_x is
// the group's own); with many rows that conversion is a quarter of the work. Here both operands are laid
// out so that one vector's 8 int32 lanes hold the partial dots of 8 different groups ("an octet"): lane l
// of step t holds weights 4t..4t+3 of group l, so maddubs + madd (or one vpdpbusd) per step sums 4
// products into each group's own lane, and after the octet's 8 steps one conversion and one FMA with the
// vector of the 8 groups' factors serve 256 products. Q6_K's lanes hold 16 weights (its sub-scales cover
// 16), so its octet is 4 steps of 128 weights.
//
// Weights are made unsigned (q + 8 for Q4_0, + 16 for Q5_0, + 32 for Q6_K) so that maddubs' unsigned
// operand needs no sign trick per row; the offset comes back, like Q4_1's minimum, as a float term
// min_w * s_x per lane, with s_x = d_x * sum(q_x) over the lane's weights. Q8_0 stays signed (q + 128
// would overflow maddubs' int16 pairs) and takes the sign trick. Narrow weights let several steps' pair
// sums add up in int16 before one widening (all 8 of an octet for 4-bit weights, 4 for 5-bit, 2 for 6).
//
// A tile of weight rows is unpacked into this layout once per call (kTileRows rows, all of K), then every
// row of x meets it in register blocks of kMr rows by kNr weight rows.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "group_bytes_avx2.h"
#include "quantized_int8_impl.h"
#include "quantized_linear.h"
#include "vec_avx2.h"

namespace sllm_cpu {
namespace {

constexpr int kOctetMr = 4, kOctetNr = 2;
constexpr int64_t kOctetTileRows = 16;  // a multiple of kOctetNr; 16 rows of K = 8192 are 128 KB of bytes

constexpr int octet_steps(int Q) { return octet_lane_weights(Q) / 4; }
// Weights Q's type makes unsigned by adding this (0: unsigned already, or Q8_0's sign trick).
constexpr int unsigned_offset(int Q) { return Q == kQ4_0 ? 8 : Q == kQ5_0 ? 16 : Q == kQ6_K ? 32 : 0; }
// Steps whose maddubs pair sums may be added as int16 before widening to int32 (each pair at most
// 2 * 127 times the largest unsigned weight, the run's sum under 32767): 8 for 4 bits, 4 for 5, 2 for 6.
constexpr int int16_run(int Q) {
  return Q == kQ4_0 || Q == kQ4_1 || Q == kQ4_K ? 8 : Q == kQ5_0 || Q == kQ5_1 || Q == kQ5_K ? 4 : 2;
}

// Lane `lane` of octet `o` takes 32 (or 16) bytes from `src`, 4 at a time, one per step.
inline void scatter_lane(const uint8_t* src, int lane_weights, uint8_t* octet, int lane) {
  for (int t = 0; t < lane_weights / 4; ++t) std::memcpy(octet + 32 * t + 4 * lane, src + 4 * t, 4);
}

// Weight row `row` of the matrix in the octet layout: bytes [octets][steps][32], and per lane the
// factor d_w (times the sub-scale) and the minimum (or -offset * factor).
template <int Q>
void octet_weight_row(const uint8_t* row, int64_t k, int64_t octets, uint8_t* bytes, float* factor, float* mins) {
  constexpr int lw = octet_lane_weights(Q), ob = 8 * lw;
  const int64_t lanes = k / lw;
  if (lanes < octets * 8) {  // the last octet's missing lanes: zero weights and factors
    std::memset(bytes + (octets - 1) * ob, 0, ob);
    std::fill(factor + (octets - 1) * 8, factor + octets * 8, 0.0f);
    std::fill(mins + (octets - 1) * 8, mins + octets * 8, 0.0f);
  }
  alignas(32) uint8_t q[32];
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(unsigned_offset(Q)));
  if constexpr (!bytes_is_k(Q)) {
    for (int64_t b = 0; b < lanes; ++b) {
      const uint8_t* blk = row + b * quant_block_bytes(Q);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_add_epi8(group<Q>(blk, 0).q, offset));
      scatter_lane(q, lw, bytes + (b / 8) * ob, static_cast<int>(b % 8));
      const float d = half_bits(blk);
      factor[b] = d;
      mins[b] = bytes_have_min(Q) ? half_bits(blk + 2) : -static_cast<float>(unsigned_offset(Q)) * d;
    }
  } else if constexpr (Q == kQ6_K) {
    for (int64_t s = 0; s < k / kMaxQuantBlock; ++s) {
      const uint8_t* blk = row + s * quant_block_bytes(Q);
      const float d = half_bits(blk + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      for (int c = 0; c < kChunk; ++c) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_add_epi8(group<Q>(blk, c).q, offset));
        for (int h = 0; h < 2; ++h) {
          const int64_t lane = 16 * s + 2 * c + h;
          scatter_lane(q + 16 * h, lw, bytes + (lane / 8) * ob, static_cast<int>(lane % 8));
          factor[lane] = d * static_cast<float>(sc[2 * c + h]);
          mins[lane] = -32.0f * factor[lane];
        }
      }
    }
  } else {  // Q4_K, Q5_K: one lane per 32-weight group, 8 a super-block, so one octet each
    for (int64_t s = 0; s < k / kMaxQuantBlock; ++s) {
      const uint8_t* blk = row + s * quant_block_bytes(Q);
      __m256 scale8, min8;
      k_factors(blk, scale8, min8);
      _mm256_storeu_ps(factor + 8 * s, scale8);
      _mm256_storeu_ps(mins + 8 * s, min8);
      for (int c = 0; c < kChunk; ++c) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(q), group<Q>(blk, c).q);
        scatter_lane(q, lw, bytes + s * ob, c);
      }
    }
  }
}

// acc += the 4-product sums of each int32 lane of w (unsigned, or Q8_0's signed bytes) times x.
template <int Q, bool kVnni>
inline __m256i octet_dot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (Q == kQ8_0) {
    x = _mm256_sign_epi8(x, w);
    w = _mm256_abs_epi8(w);
  }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  if constexpr (kVnni) return _mm256_dpbusd_epi32(acc, w, x);
#endif
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

// Where one side's rows lie in the octet layout.
struct OctetRows {
  const uint8_t* q;
  const float* d;  // x: its scales; w: its factors
  const float* s;  // x: d times the sums of q; w: its minimums
  int64_t q_stride, f_stride;  // bytes and floats between consecutive rows
};

// y[i, c] = x row i . weight row c for MR rows of x and NR weight rows, over every octet. A run of
// steps sums in integers (int16 runs of int16_run steps with maddubs; int32 over the octet with VNNI or
// Q8_0's sign trick), then one conversion and FMA per run with the lanes' factors d_w * d_x.
template <int Q, int MR, int NR, bool kVnni>
inline void octet_block(const OctetRows& x, const OctetRows& w, int64_t octets, float* y, int64_t ldy) {
  constexpr int steps = octet_steps(Q);
  constexpr bool int16 = !kVnni && Q != kQ8_0;
  constexpr int run = int16 ? std::min(int16_run(Q), steps) : steps;
  __m256 accf[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int c = 0; c < NR; ++c) accf[i][c] = _mm256_setzero_ps();
  for (int64_t o = 0; o < octets; ++o) {
    for (int t0 = 0; t0 < steps; t0 += run) {
      __m256i acc[MR][NR];
      for (int i = 0; i < MR; ++i)
        for (int c = 0; c < NR; ++c) acc[i][c] = _mm256_setzero_si256();
      // Not unrolled: unrolled, GCC regroups the int16 additions into a tree over all steps and spills
      // the 64 products of a 4 x 2 block to the stack.
#pragma GCC unroll 1
      for (int t = t0; t < t0 + run; ++t) {
        __m256i wv[NR];
        for (int c = 0; c < NR; ++c)
          wv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q + c * w.q_stride + (o * steps + t) * 32));
        for (int i = 0; i < MR; ++i) {
          const __m256i xv =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + i * x.q_stride + (o * steps + t) * 32));
          for (int c = 0; c < NR; ++c) {
            if constexpr (int16)
              acc[i][c] = _mm256_add_epi16(acc[i][c], _mm256_maddubs_epi16(wv[c], xv));
            else
              acc[i][c] = octet_dot<Q, kVnni>(acc[i][c], wv[c], xv);
          }
        }
      }
      for (int i = 0; i < MR; ++i) {
        const __m256 xd = _mm256_loadu_ps(x.d + i * x.f_stride + 8 * o);
        for (int c = 0; c < NR; ++c) {
          __m256i sums = acc[i][c];
          if constexpr (int16) sums = _mm256_madd_epi16(sums, _mm256_set1_epi16(1));
          const __m256 f = _mm256_mul_ps(_mm256_loadu_ps(w.d + c * w.f_stride + 8 * o), xd);
          accf[i][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), f, accf[i][c]);
        }
      }
    }
    if constexpr (Q != kQ8_0) {
      for (int i = 0; i < MR; ++i) {
        const __m256 xs = _mm256_loadu_ps(x.s + i * x.f_stride + 8 * o);
        for (int c = 0; c < NR; ++c)
          accf[i][c] = _mm256_fmadd_ps(_mm256_loadu_ps(w.s + c * w.f_stride + 8 * o), xs, accf[i][c]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int c = 0; c < NR; ++c) y[i * ldy + c] = hsum(accf[i][c]);
}

template <int Q, int MR, bool kVnni>
inline void octet_rows(const OctetRows& x, const OctetRows& w, int64_t rows, int64_t octets, float* y, int64_t ldy) {
  int64_t c = 0;
  for (; c + kOctetNr <= rows; c += kOctetNr) {
    const OctetRows wc{w.q + c * w.q_stride, w.d + c * w.f_stride, w.s + c * w.f_stride, w.q_stride, w.f_stride};
    octet_block<Q, MR, kOctetNr, kVnni>(x, wc, octets, y + c, ldy);
  }
  for (; c < rows; ++c) {
    const OctetRows wc{w.q + c * w.q_stride, w.d + c * w.f_stride, w.s + c * w.f_stride, w.q_stride, w.f_stride};
    octet_block<Q, MR, 1, kVnni>(x, wc, octets, y + c, ldy);
  }
}

template <int Q, bool kVnni>
void octet_gemm(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias,
                int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t octets = a.octets, ob = 8 * octet_lane_weights(Q);
  thread_local std::vector<uint8_t> tile_q;
  thread_local std::vector<float> tile_f, tile_m;
  tile_q.resize(kOctetTileRows * octets * ob);
  tile_f.resize(kOctetTileRows * octets * 8);
  tile_m.resize(kOctetTileRows * octets * 8);
  const OctetRows tile{tile_q.data(), tile_f.data(), tile_m.data(), octets * ob, octets * 8};
  const OctetRows xr{reinterpret_cast<const uint8_t*>(a.q), a.d, a.s, octets * ob, octets * 8};
  for (int64_t t0 = n0; t0 < n1; t0 += kOctetTileRows) {
    const int64_t rows = std::min(kOctetTileRows, n1 - t0);
    for (int64_t r = 0; r < rows; ++r)
      octet_weight_row<Q>(w + (t0 + r) * row_bytes, k, octets, tile_q.data() + r * tile.q_stride,
                          tile_f.data() + r * tile.f_stride, tile_m.data() + r * tile.f_stride);
    int64_t i = 0;
    for (; i + kOctetMr <= m; i += kOctetMr) {
      const OctetRows xi{xr.q + i * xr.q_stride, xr.d + i * xr.f_stride, xr.s + i * xr.f_stride, xr.q_stride,
                         xr.f_stride};
      octet_rows<Q, kOctetMr, kVnni>(xi, tile, rows, octets, y + i * ldy + t0, ldy);
    }
    for (; i < m; ++i) {
      const OctetRows xi{xr.q + i * xr.q_stride, xr.d + i * xr.f_stride, xr.s + i * xr.f_stride, xr.q_stride,
                         xr.f_stride};
      octet_rows<Q, 1, kVnni>(xi, tile, rows, octets, y + i * ldy + t0, ldy);
    }
    if (bias)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < rows; ++c) y[r * ldy + t0 + c] += bias[t0 + c];
  }
}

// Rows [i0, i1) of x quantized (the same q, d and s as quantize_activations) into the octet layout of
// `qtype` at `out` (whose rows are indexed from 0 = x's row 0).
inline void octet_activations_impl(const float* x, int64_t i0, int64_t i1, int64_t ldx, int64_t k, int64_t qtype,
                                   const Int8OctetsOut& out) {
  const int lw = qtype == kQ6_K ? 16 : 32;
  const int64_t octets = int8_octets(k, qtype), ob = 8 * lw, blocks = k / kQuantBlock;
  alignas(32) int8_t q[32];
  for (int64_t i = i0; i < i1; ++i) {
    uint8_t* qrow = reinterpret_cast<uint8_t*>(out.q) + i * octets * ob;
    float* drow = out.d + i * octets * 8;
    float* srow = out.s + i * octets * 8;
    std::memset(qrow + (octets - 1) * ob, 0, ob);
    std::fill(drow + (octets - 1) * 8, drow + octets * 8, 0.0f);
    std::fill(srow + (octets - 1) * 8, srow + octets * 8, 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      float d;
      int sum;
      quantize_block32(x + i * ldx + b * kQuantBlock, q, d, sum);
      if (lw == 32) {
        scatter_lane(reinterpret_cast<const uint8_t*>(q), lw, qrow + (b / 8) * ob, static_cast<int>(b % 8));
        drow[b] = d;
        srow[b] = d * static_cast<float>(sum);
        continue;
      }
      for (int h = 0; h < 2; ++h) {
        const int64_t lane = 2 * b + h;
        int part = 0;
        for (int j = 0; j < 16; ++j) part += q[16 * h + j];
        scatter_lane(reinterpret_cast<const uint8_t*>(q + 16 * h), lw, qrow + (lane / 8) * ob,
                     static_cast<int>(lane % 8));
        drow[lane] = d;
        srow[lane] = d * static_cast<float>(part);
      }
    }
  }
}

template <bool kVnni>
void octet_product(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t qtype, int64_t row_bytes,
                   const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (qtype) {
    case kQ4_0: return octet_gemm<kQ4_0, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ4_1: return octet_gemm<kQ4_1, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ5_0: return octet_gemm<kQ5_0, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ5_1: return octet_gemm<kQ5_1, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ8_0: return octet_gemm<kQ8_0, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ4_K: return octet_gemm<kQ4_K, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    case kQ5_K: return octet_gemm<kQ5_K, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
    default: return octet_gemm<kQ6_K, kVnni>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
  }
}

}  // namespace
}  // namespace sllm_cpu

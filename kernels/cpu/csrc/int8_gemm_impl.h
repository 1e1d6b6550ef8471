// The many-row int8-activation product of quantized_linear.h (prefill chunks and decode batches of more
// than kQuantMaxRows rows while int8 activations are on), written once over 256-bit integer vectors and
// included, after quantized_int8_impl.h, by the AVX2 and the AVX-512 VNNI files.
//
// The few-row loop turns each 32-weight dot product into a float with one FMA (its factor d_w * d_x is
// the group's own); with many rows that conversion is a quarter of the work. Here both operands are laid
// out so that one vector's 8 int32 lanes hold the partial dots of 8 different groups ("an octet"): lane l
// of step t holds weights 4t..4t+3 of group l, so maddubs + madd (or one vpdpbusd) per step sums 4
// products into each group's own lane, and after the octet's 8 steps one conversion and one FMA with the
// vector of the 8 groups' factors serve 256 products.
//
// Weights are made unsigned (q + 8 for Q4_0, + 16 for Q5_0) so that maddubs' unsigned operand needs no
// sign trick per row; the offset comes back, like Q4_1's minimum, as a float term min_w * s_x per lane,
// with s_x = d_x * sum(q_x) over the lane's weights. Q8_0 stays signed on AVX2 (q + 128 would overflow
// maddubs' int16 pairs) and takes the sign trick; vpdpbusd sums its four products straight into int32, so
// under VNNI Q8_0 is q + 128 like the others (no sign and abs per product). Narrow weights let several steps' pair sums add up in int16
// before one widening (all 8 of an octet for 4-bit weights, 4 for 5-bit).
// Q6_K's 16-weight sub-scales are integers, so they multiply in the widening itself (madd with the
// sub-scale in place of 1, as llama.cpp does): its signed weights take maddubs' signed side and x its
// unsigned one (q_x + 128), whose excess, 128 * sub-scale * sum(q_w), is a constant of the weight row
// that starts the lane's int32 sum; one float factor d_w * d_x per lane remains.
//
// A tile of weight rows is unpacked into this layout once per call (kOctetTileRows rows, all of K), then
// every row of x meets it in register blocks of kOctetMr rows by kOctetNr weight rows.
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

constexpr int kOctetSteps = 8;
// Q6_K's extra bytes per octet of a weight row: sub-scales as int16 pairs for steps 0-3 and 4-7 (32
// bytes each), then each lane's starting sum (8 int32).
constexpr int64_t kQ6Extra = 96;
// Whether the product takes the minimum's (or offset's) float term min_w * s_x.
constexpr bool has_min_term(int Q, bool vnni) { return Q != kQ8_0 || vnni; }
// Steps whose maddubs pair sums may be added as int16 before widening to int32 (each pair at most
// 2 * 127 times the largest unsigned weight, the run's sum under 32767): 8 for 4 bits, 4 for 5 (Q8_0
// widens every step, Q6_K every 2: q6_block).
constexpr int int16_run(int Q) { return Q == kQ4_0 || Q == kQ4_1 || Q == kQ4_K ? 8 : 4; }

// Stores the octet of 8 lanes of 32 bytes (r[l]: lane l's weights in order): step t's vector takes
// dword t of every lane, an 8 x 8 transpose of 32-bit elements.
inline void store_octet32(const __m256i (&r)[8], uint8_t* out) {
  __m256 t[8], u[8];
  for (int j = 0; j < 4; ++j) {
    t[2 * j] = _mm256_unpacklo_ps(_mm256_castsi256_ps(r[2 * j]), _mm256_castsi256_ps(r[2 * j + 1]));
    t[2 * j + 1] = _mm256_unpackhi_ps(_mm256_castsi256_ps(r[2 * j]), _mm256_castsi256_ps(r[2 * j + 1]));
  }
  for (int j = 0; j < 2; ++j) {  // u[4j + 0..3]: dwords 0, 1, 2, 3 (and 4-7 in the high half) of lanes 4j..4j+3
    u[4 * j] = _mm256_shuffle_ps(t[4 * j], t[4 * j + 2], 0x44);
    u[4 * j + 1] = _mm256_shuffle_ps(t[4 * j], t[4 * j + 2], 0xEE);
    u[4 * j + 2] = _mm256_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0x44);
    u[4 * j + 3] = _mm256_shuffle_ps(t[4 * j + 1], t[4 * j + 3], 0xEE);
  }
  for (int d = 0; d < 4; ++d) {
    _mm256_storeu_ps(reinterpret_cast<float*>(out + 32 * d), _mm256_permute2f128_ps(u[d], u[4 + d], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(out + 32 * (d + 4)), _mm256_permute2f128_ps(u[d], u[4 + d], 0x31));
  }
}

// A short last octet of s steps (octet_last_steps): lane l holds 4s bytes of group l / (8 / s), from byte
// (l % (8 / s)) * 4s on, step t's four of them at 4t; `groups` holds s groups (zeros where none is left).
inline void store_short_octet(const uint8_t (*groups)[32], int s, uint8_t* out) {
  const int per = 8 / s;
  for (int t = 0; t < s; ++t)
    for (int l = 0; l < 8; ++l) std::memcpy(out + 32 * t + 4 * l, groups[l / per] + (l % per) * 4 * s + 4 * t, 4);
}

// Weight row `row` of the matrix in the octet layout: bytes [octets][8 steps][32], and per lane the
// factor d_w (times the sub-scale) and the minimum (or -offset * factor); Q6_K's factor is d_w alone and
// its sub-scales and starting sums go to `extra` (kQ6Extra bytes an octet).
template <int Q, bool kVnni>
void octet_weight_row(const uint8_t* row, int64_t k, int64_t octets, uint8_t* bytes, float* factor, float* mins,
                      uint8_t* extra) {
  constexpr int kOffset = unsigned_offset(Q, kVnni);
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(kOffset));
  if constexpr (!bytes_is_k(Q)) {
    const int64_t lanes = k / kQuantBlock;
    std::fill(factor + (octets - 1) * 8, factor + octets * 8, 0.0f);  // the last octet's missing lanes
    std::fill(mins + (octets - 1) * 8, mins + octets * 8, 0.0f);
    const int last = octet_last_steps(k);
    for (int64_t o = 0; o < octets; ++o) {
      if (o + 1 == octets && last < kOctetSteps) {  // a short octet: each lane takes its group's factor
        alignas(32) uint8_t q[8][32] = {};
        const int per = kOctetSteps / last;
        for (int j = 0; j < last && 8 * o + j < lanes; ++j) {
          const uint8_t* blk = row + (8 * o + j) * quant_block_bytes(Q);
          _mm256_store_si256(reinterpret_cast<__m256i*>(q[j]), _mm256_add_epi8(group<Q>(blk, 0).q, offset));
          const float d = half_bits(blk);
          std::fill(factor + 8 * o + per * j, factor + 8 * o + per * (j + 1), d);
          std::fill(mins + 8 * o + per * j, mins + 8 * o + per * (j + 1),
                    bytes_have_min(Q) ? half_bits(blk + 2) : -static_cast<float>(kOffset) * d);
        }
        store_short_octet(q, last, bytes + o * kOctet);
        continue;
      }
      __m256i r[8];
      for (int l = 0; l < 8; ++l) {
        const int64_t b = 8 * o + l;
        if (b >= lanes) {
          r[l] = _mm256_setzero_si256();
          continue;
        }
        const uint8_t* blk = row + b * quant_block_bytes(Q);
        r[l] = _mm256_add_epi8(group<Q>(blk, 0).q, offset);
        const float d = half_bits(blk);
        factor[b] = d;
        mins[b] = bytes_have_min(Q) ? half_bits(blk + 2) : -static_cast<float>(kOffset) * d;
      }
      store_octet32(r, bytes + o * kOctet);
    }
  } else if constexpr (Q == kQ6_K) {
    for (int64_t s = 0; s < octets; ++s) {
      const uint8_t* blk = row + s * quant_block_bytes(Q);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      std::fill(factor + 8 * s, factor + 8 * s + 8, half_bits(blk + 208));
      std::fill(mins + 8 * s, mins + 8 * s + 8, 0.0f);
      int16_t* pairs = reinterpret_cast<int16_t*>(extra + s * kQ6Extra);
      int32_t* start = reinterpret_cast<int32_t*>(extra + s * kQ6Extra + 64);
      __m256i r[8];
      for (int c = 0; c < kChunk; ++c) {
        r[c] = group<Q>(blk, c).q;
        for (int h = 0; h < 2; ++h) pairs[16 * h + 2 * c] = pairs[16 * h + 2 * c + 1] = sc[2 * c + h];
        // sums of weights 4j..4j+3 in lane j: 0-3 under sub-scale 2c, 4-7 under 2c + 1
        const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), r[c]), _mm256_set1_epi16(1));
        alignas(32) int32_t lane[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(lane), sums);
        start[c] = -128 * (sc[2 * c] * (lane[0] + lane[1] + lane[2] + lane[3]) +
                           sc[2 * c + 1] * (lane[4] + lane[5] + lane[6] + lane[7]));
      }
      store_octet32(r, bytes + s * kOctet);
    }
  } else {  // Q4_K, Q5_K: one lane per 32-weight group, 8 a super-block, so one octet each
    for (int64_t s = 0; s < octets; ++s) {
      const uint8_t* blk = row + s * quant_block_bytes(Q);
      __m256 scale8, min8;
      k_factors(blk, scale8, min8);
      _mm256_storeu_ps(factor + 8 * s, scale8);
      _mm256_storeu_ps(mins + 8 * s, min8);
      __m256i r[8];
      for (int c = 0; c < kChunk; ++c) r[c] = group<Q>(blk, c).q;
      store_octet32(r, bytes + s * kOctet);
    }
  }
}

// acc += the 4-product sums of each int32 lane of w (unsigned, or Q8_0's signed bytes) times x.
template <int Q, bool kVnni>
inline __m256i octet_dot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (Q == kQ8_0 && !kVnni) {
    x = _mm256_sign_epi8(x, w);
    w = _mm256_abs_epi8(w);
  }
  if constexpr (kVnni) return _mm256_dpbusd_epi32(acc, w, x);  // no #if: see group_dot
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

// Where one side's rows lie in the octet layout.
struct OctetRows {
  const uint8_t* q;
  const float* d;  // x: its scales; w: its factors
  const float* s;  // x: d times the sums of q; w: its minimums
  const uint8_t* e;  // w of Q6_K: kQ6Extra bytes an octet
  int64_t q_stride, f_stride;  // bytes and floats between consecutive rows (kQ6Extra / 4 floats a
                               // row's octet for `e`)
  OctetRows row(int64_t r) const {
    return {q + r * q_stride, d + r * f_stride, s + r * f_stride, e ? e + r * f_stride / 8 * kQ6Extra : nullptr,
            q_stride, f_stride};
  }
};

// Q6_K's block (every path: its sub-scales need the int16 widening): runs of 2 steps of maddubs(x + 128,
// w) in int16, widened by madd with the lanes' sub-scales into int32 sums that start at the weight
// row's excess, then one conversion and FMA per octet.
template <int MR, int NR>
inline void q6_block(const OctetRows& x, const OctetRows& w, int64_t octets, float* y, int64_t ldy) {
  __m256 accf[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int c = 0; c < NR; ++c) accf[i][c] = _mm256_setzero_ps();
  const int64_t e_stride = w.f_stride / 8 * kQ6Extra;
  for (int64_t o = 0; o < octets; ++o) {
    __m256i acc[MR][NR];
    for (int c = 0; c < NR; ++c) {
      const uint8_t* extra = w.e + c * e_stride + o * kQ6Extra;
      const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(extra + 64));
      for (int i = 0; i < MR; ++i) acc[i][c] = start;
    }
#pragma GCC unroll 1
    for (int t = 0; t < kOctetSteps; t += 2) {
      __m256i w0[NR], w1[NR], sc[NR];
      for (int c = 0; c < NR; ++c) {
        const uint8_t* wq = w.q + c * w.q_stride + (o * kOctetSteps + t) * 32;
        w0[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq));
        w1[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 32));
        sc[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.e + c * e_stride + o * kQ6Extra + 32 * (t / 4)));
      }
      for (int i = 0; i < MR; ++i) {
        const uint8_t* xq = x.q + i * x.q_stride + (o * kOctetSteps + t) * 32;
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
        const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
        for (int c = 0; c < NR; ++c) {
          const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(x0, w0[c]), _mm256_maddubs_epi16(x1, w1[c]));
          acc[i][c] = _mm256_add_epi32(acc[i][c], _mm256_madd_epi16(pairs, sc[c]));
        }
      }
    }
    for (int i = 0; i < MR; ++i) {
      const __m256 xd = _mm256_loadu_ps(x.d + i * x.f_stride + 8 * o);
      for (int c = 0; c < NR; ++c) {
        const __m256 f = _mm256_mul_ps(_mm256_loadu_ps(w.d + c * w.f_stride + 8 * o), xd);
        accf[i][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][c]), f, accf[i][c]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int c = 0; c < NR; ++c) y[i * ldy + c] = hsum(accf[i][c]);
}

// y[i, c] = x row i . weight row c for MR rows of x and NR weight rows, over every octet. A run of
// steps sums in integers (int16 runs of int16_run steps with maddubs; int32 over the octet with VNNI or
// Q8_0's sign trick), then one conversion and FMA per run with the lanes' factors d_w * d_x.
// The last octet takes `last_steps` (octet_last_steps; the K-quants' octets are whole super-blocks, never short).
template <int Q, int MR, int NR, bool kVnni>
inline void octet_block(const OctetRows& x, const OctetRows& w, int64_t octets, int last_steps, float* y,
                        int64_t ldy) {
  if constexpr (Q == kQ6_K) {  // its own widening; the rest of this body is never instantiated for it
    q6_block<MR, NR>(x, w, octets, y, ldy);
  } else {
    constexpr int steps = kOctetSteps;
    constexpr bool int16 = !kVnni && Q != kQ8_0;
    constexpr int run = int16 ? std::min(int16_run(Q), steps) : steps;
    __m256 accf[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int c = 0; c < NR; ++c) accf[i][c] = _mm256_setzero_ps();
    for (int64_t o = 0; o < octets; ++o) {
      const int octet_steps = o + 1 == octets ? last_steps : steps;
      for (int t0 = 0; t0 < octet_steps; t0 += run) {
        __m256i acc[MR][NR];
        for (int i = 0; i < MR; ++i)
          for (int c = 0; c < NR; ++c) acc[i][c] = _mm256_setzero_si256();
        // Not unrolled: unrolled, GCC regroups the int16 additions into a tree over all steps and spills
        // the 64 products of a 4 x 2 block to the stack.
  #pragma GCC unroll 1
        for (int t = t0; t < std::min(t0 + run, octet_steps); ++t) {
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
      if constexpr (has_min_term(Q, kVnni)) {
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
}

template <int Q, int MR, bool kVnni>
inline void octet_rows(const OctetRows& x, const OctetRows& w, int64_t rows, int64_t octets, int last_steps, float* y,
                       int64_t ldy) {
  int64_t c = 0;
  for (; c + kOctetNr <= rows; c += kOctetNr) {
    octet_block<Q, MR, kOctetNr, kVnni>(x, w.row(c), octets, last_steps, y + c, ldy);
  }
  for (; c < rows; ++c) {
    octet_block<Q, MR, 1, kVnni>(x, w.row(c), octets, last_steps, y + c, ldy);
  }
}

// Every row of x against one unpacked tile of `rows` weight rows, in 256-bit register blocks. octet_gemm
// takes this as its tile routine; the AVX-512 VNNI file passes its 512-bit one (int8_gemm_zmm.h).
template <int Q, bool kVnni>
struct YmmOctetTile {
  static void run(const OctetRows& x, int64_t m, const OctetRows& tile, int64_t rows, int64_t octets, int last,
                  float* y, int64_t ldy) {
    int64_t i = 0;
    for (; i + kOctetMr <= m; i += kOctetMr) octet_rows<Q, kOctetMr, kVnni>(x.row(i), tile, rows, octets, last, y + i * ldy, ldy);
    for (; i < m; ++i) octet_rows<Q, 1, kVnni>(x.row(i), tile, rows, octets, last, y + i * ldy, ldy);
  }
};

template <int Q, bool kVnni, template <int, bool> class Tile>
void octet_gemm(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t row_bytes, const float* bias,
                int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t octets = a.octets;
  thread_local std::vector<uint8_t> tile_q, tile_e;
  thread_local std::vector<float> tile_f, tile_m;
  const OctetRows tile{line_aligned(tile_q, kOctetTileRows * octets * kOctet),
                       line_aligned(tile_f, kOctetTileRows * octets * 8), line_aligned(tile_m, kOctetTileRows * octets * 8),
                       Q == kQ6_K ? line_aligned(tile_e, kOctetTileRows * octets * kQ6Extra) : nullptr,
                       octets * kOctet, octets * 8};
  const OctetRows xr{reinterpret_cast<const uint8_t*>(a.q), a.d, a.s, nullptr, octets * kOctet, octets * 8};
  for (int64_t t0 = n0; t0 < n1; t0 += kOctetTileRows) {
    const int64_t rows = std::min(kOctetTileRows, n1 - t0);
    for (int64_t r = 0; r < rows; ++r) {
      const OctetRows out = tile.row(r);
      octet_weight_row<Q, kVnni>(w + (t0 + r) * row_bytes, k, octets, const_cast<uint8_t*>(out.q), const_cast<float*>(out.d),
                          const_cast<float*>(out.s), const_cast<uint8_t*>(out.e));
    }
    Tile<Q, kVnni>::run(xr, m, tile, rows, octets, octet_last_steps(k), y + t0, ldy);
    if (bias)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < rows; ++c) y[r * ldy + t0 + c] += bias[t0 + c];
  }
}

// Rows [i0, i1) of x quantized (the same q, d and s as quantize_activations) into the octet layout at
// `out` (whose rows are indexed from x's first); for a Q6_K weight the bytes are q + 128.
inline void octet_activations_impl(const float* x, int64_t i0, int64_t i1, int64_t ldx, int64_t k, int64_t qtype,
                                   const Int8OctetsOut& out) {
  const int64_t octets = int8_octets(k), blocks = k / kQuantBlock, span = activation_span(qtype);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(qtype == kQ6_K ? 0x80 : 0));
  for (int64_t i = i0; i < i1; ++i) {
    uint8_t* qrow = reinterpret_cast<uint8_t*>(out.q) + i * octets * kOctet;
    float* drow = out.d + i * octets * 8;
    float* srow = out.s + i * octets * 8;
    std::fill(drow + (octets - 1) * 8, drow + octets * 8, 0.0f);
    std::fill(srow + (octets - 1) * 8, srow + octets * 8, 0.0f);
    const int last = octet_last_steps(k);
    float amax = 0.0f;  // a K-quant's span is one octet's 8 groups (its K is whole octets)
    for (int64_t o = 0; o < octets; ++o) {
      alignas(32) int8_t q[8][32];
      if (o + 1 == octets && last < kOctetSteps) {  // a short octet (never for a Q6_K weight: its K is whole octets)
        const int per = kOctetSteps / last;
        for (int j = 0; j < last; ++j) {
          const int64_t b = 8 * o + j;
          float d = 0.0f;
          int sum = 0;
          std::fill(q[j], q[j] + 32, static_cast<int8_t>(0));
          if (b < blocks)
            quantize_block32(x + i * ldx + b * kQuantBlock, span_amax(x + i * ldx, b, span, amax), q[j], d, sum);
          for (int p = 0; p < per; ++p) {  // s per lane: the sum over the lane's own 4 * last bytes
            int part = 0;
            for (int e = 0; e < 4 * last; ++e) part += q[j][p * 4 * last + e];
            drow[8 * o + per * j + p] = d;
            srow[8 * o + per * j + p] = d * static_cast<float>(part);
          }
        }
        store_short_octet(reinterpret_cast<const uint8_t(*)[32]>(q), last, qrow + o * kOctet);
        continue;
      }
      __m256i r[8];
      for (int l = 0; l < 8; ++l) {
        const int64_t b = 8 * o + l;
        if (b >= blocks) {  // a missing lane: zero bytes (q + 128 too), zero scale
          r[l] = _mm256_setzero_si256();
          continue;
        }
        int sum;
        quantize_block32(x + i * ldx + b * kQuantBlock, span_amax(x + i * ldx, b, span, amax), q[l], drow[b], sum);
        srow[b] = drow[b] * static_cast<float>(sum);
        r[l] = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q[l])), flip);
      }
      store_octet32(r, qrow + o * kOctet);
    }
  }
}

template <bool kVnni, template <int, bool> class Tile = YmmOctetTile>
void octet_product(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t qtype, int64_t row_bytes,
                   const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  with_quant_type(qtype, [&](auto q) {
    octet_gemm<decltype(q)::value, kVnni, Tile>(a, m, k, w, row_bytes, bias, n0, n1, y, ldy);
  });
}

}  // namespace
}  // namespace sllm_cpu

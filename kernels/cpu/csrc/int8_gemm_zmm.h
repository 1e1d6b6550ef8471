// The AVX-512 VNNI tile routine of the many-row int8 product (int8_gemm_impl.h's octet_gemm): the same
// octet layout, two weight rows per 512-bit vector. Step t of an octet is 32 bytes per weight row (lane l:
// weights 4t..4t+3 of group l), so rows c and c+1 side by side fill a 512-bit vector and one vpdpbusd
// against x's 32 bytes, broadcast to both halves, does what two 256-bit ones did; the octet's conversion
// and FMAs with the lanes' factors go two rows at a time too. A register block is 6 rows of x by 4 weight
// rows (12 int32 and 12 float accumulators; Q6_K's block then spills a little, and is still 8% faster than
// at 4 rows of x), then 4 and 1 rows for the rest of x; a tile's last 1-3 weight rows take the 256-bit VNNI
// blocks, whose integers, factors and order of float sums these are (the two give the same bits). Include
// after an AVX-512 F/BW/VL/DQ + VNNI target pragma.
//
// Two Zen 5 cores, x of 256 rows, a 1B Q4_K_M file's matrices, 256-bit blocks -> these: Q4_K 600-617 ->
// 847 GOP/s, Q8_0 600 -> 797-823, Q6_K 410 -> 652-665; its 1,000-token prefill 4.2 -> 3.2 s.
#pragma once

#include <immintrin.h>

#include "int8_gemm_impl.h"

namespace sllm_cpu {
namespace {

constexpr int kZmmPairs = 2;  // pairs of weight rows in a register block
constexpr int kZmmMr = 6;  // rows of x in a register block

// Rows c and c+1's 32 bytes at `off` of their rows, as one vector (row c low).
inline __m512i row_pair(const uint8_t* q, int64_t stride, int64_t off) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + off))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + stride + off)), 1);
}
inline __m512 row_pair(const float* f, int64_t stride, int64_t off) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(f + off)), _mm256_loadu_ps(f + stride + off), 1);
}
inline __m512i both_halves(const uint8_t* q) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
}
inline __m512 both_halves(const float* f) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(f)); }

// y[i, c] for MR rows of x and 2 * kZmmPairs weight rows (rows 2p and 2p + 1 in pair p's halves).
template <int Q, int MR>
inline void zmm_octet_block(const OctetRows& x, const OctetRows& w, int64_t octets, int last_steps, float* y,
                            int64_t ldy) {
  constexpr int NP = kZmmPairs;
  const int64_t pair = 2 * w.q_stride, fpair = 2 * w.f_stride;
  __m512 accf[MR][NP];
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) accf[i][p] = _mm512_setzero_ps();
  for (int64_t o = 0; o < octets; ++o) {
    __m512i acc[MR][NP];
    if constexpr (Q == kQ6_K) {  // q6_block's arithmetic: runs of 2 steps widened by the sub-scales
      const int64_t e_stride = w.f_stride / 8 * kQ6Extra;
      for (int p = 0; p < NP; ++p) {
        const __m512i start = row_pair(w.e + 2 * p * e_stride, e_stride, o * kQ6Extra + 64);
        for (int i = 0; i < MR; ++i) acc[i][p] = start;
      }
#pragma GCC unroll 1
      for (int t = 0; t < kOctetSteps; t += 2) {
        __m512i w0[NP], w1[NP], sc[NP];
        const int64_t off = (o * kOctetSteps + t) * 32;
        for (int p = 0; p < NP; ++p) {
          w0[p] = row_pair(w.q + p * pair, w.q_stride, off);
          w1[p] = row_pair(w.q + p * pair, w.q_stride, off + 32);
          sc[p] = row_pair(w.e + 2 * p * e_stride, e_stride, o * kQ6Extra + 32 * (t / 4));
        }
        for (int i = 0; i < MR; ++i) {
          const __m512i x0 = both_halves(x.q + i * x.q_stride + off), x1 = both_halves(x.q + i * x.q_stride + off + 32);
          for (int p = 0; p < NP; ++p) {
            const __m512i pairs = _mm512_add_epi16(_mm512_maddubs_epi16(x0, w0[p]), _mm512_maddubs_epi16(x1, w1[p]));
            acc[i][p] = _mm512_add_epi32(acc[i][p], _mm512_madd_epi16(pairs, sc[p]));
          }
        }
      }
    } else {
      for (int i = 0; i < MR; ++i)
        for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_si512();
      const int steps = o + 1 == octets ? last_steps : kOctetSteps;
#pragma GCC unroll 1
      for (int t = 0; t < steps; ++t) {
        const int64_t off = (o * kOctetSteps + t) * 32;
        __m512i wv[NP];
        for (int p = 0; p < NP; ++p) wv[p] = row_pair(w.q + p * pair, w.q_stride, off);
        for (int i = 0; i < MR; ++i) {
          const __m512i xv = both_halves(x.q + i * x.q_stride + off);
          for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_dpbusd_epi32(acc[i][p], wv[p], xv);
        }
      }
    }
    __m512 wd[NP];
    for (int p = 0; p < NP; ++p) wd[p] = row_pair(w.d + p * fpair, w.f_stride, 8 * o);
    for (int i = 0; i < MR; ++i) {
      const __m512 xd = both_halves(x.d + i * x.f_stride + 8 * o);
      for (int p = 0; p < NP; ++p)
        accf[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][p]), _mm512_mul_ps(wd[p], xd), accf[i][p]);
    }
    if constexpr (Q != kQ6_K) {  // under VNNI every other type takes the minimum's (or offset's) term
      __m512 ws[NP];
      for (int p = 0; p < NP; ++p) ws[p] = row_pair(w.s + p * fpair, w.f_stride, 8 * o);
      for (int i = 0; i < MR; ++i) {
        const __m512 xs = both_halves(x.s + i * x.f_stride + 8 * o);
        for (int p = 0; p < NP; ++p) accf[i][p] = _mm512_fmadd_ps(ws[p], xs, accf[i][p]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) {
      y[i * ldy + 2 * p] = hsum(_mm512_castps512_ps256(accf[i][p]));
      y[i * ldy + 2 * p + 1] = hsum(_mm512_extractf32x8_ps(accf[i][p], 1));
    }
}

template <int Q, int MR>
inline void zmm_octet_rows(const OctetRows& x, const OctetRows& w, int64_t rows, int64_t octets, int last_steps,
                           float* y, int64_t ldy) {
  int64_t c = 0;
  for (; c + 2 * kZmmPairs <= rows; c += 2 * kZmmPairs) zmm_octet_block<Q, MR>(x, w.row(c), octets, last_steps, y + c, ldy);
  if (c < rows) octet_rows<Q, MR, true>(x, w.row(c), rows - c, octets, last_steps, y + c, ldy);
}

template <int Q, bool kVnni>
struct ZmmOctetTile {
  static_assert(kVnni, "the 512-bit routine is the VNNI file's");
  static void run(const OctetRows& x, int64_t m, const OctetRows& tile, int64_t rows, int64_t octets, int last,
                  float* y, int64_t ldy) {
    int64_t i = 0;
    for (; i + kZmmMr <= m; i += kZmmMr) zmm_octet_rows<Q, kZmmMr>(x.row(i), tile, rows, octets, last, y + i * ldy, ldy);
    for (; i + kOctetMr <= m; i += kOctetMr) zmm_octet_rows<Q, kOctetMr>(x.row(i), tile, rows, octets, last, y + i * ldy, ldy);
    for (; i < m; ++i) zmm_octet_rows<Q, 1>(x.row(i), tile, rows, octets, last, y + i * ldy, ldy);
  }
};

}  // namespace
}  // namespace sllm_cpu

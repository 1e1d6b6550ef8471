// Decode attention with AVX-512 intrinsics, for head sizes that are a multiple of 16.
//
// Built without -mavx512f: the pragma below turns AVX-512 on for this file's own code only, after
// every include, and the op calls in here only when the CPU reports AVX-512 at run time. So the
// library still loads and runs on a CPU without it.
#include <cmath>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx2")

#include "decode_task_impl.h"

namespace sllm_cpu {
namespace {

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1u);
}

// exp(x) for x <= 0 (scores minus their running max): Cephes' expf, 2^k * e^r with |r| <= ln2/2,
// accurate to about 2 ulp, which keeps fp32 results within 1e-6 of the torch reference.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // e^-104 is 0 in fp32; keeps -inf from making NaN
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, k);
}

// Lane j of the result is the sum of the 16 lanes of v[j]: pairwise interleave-and-add at 32-bit,
// 64-bit and 128-bit granularity, each level halving the number of vectors.
inline __m512 sum16(const __m512* v) {
  __m512 a[8];
  for (int i = 0; i < 8; ++i)
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  __m512 b[4];
  for (int i = 0; i < 4; ++i) {
    const __m512d lo = _mm512_castps_pd(a[2 * i]);
    const __m512d hi = _mm512_castps_pd(a[2 * i + 1]);
    b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi)), _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi)));
  }
  // Now lane L (128-bit) of b[i] holds, per element j, the lane-L sum of v[4i + j]; fold the lanes.
  const __m512 c0 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], 0x88), _mm512_shuffle_f32x4(b[0], b[1], 0xDD));
  const __m512 c1 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], 0x88), _mm512_shuffle_f32x4(b[2], b[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xDD));
}

struct Avx512Ops {
  template <KvType KT>
  static void to_float(const uint16_t* src, float* dst, int64_t d) {
    for (int64_t i = 0; i < d; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      if constexpr (KT == KvType::BF16) {
        // bf16 is the top half of an fp32: widen and shift.
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
      } else {
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
      }
    }
  }

  static void scores(const float* q, int64_t group, int64_t d, const float* k, int64_t k_stride, int64_t n,
                     float* out) {
    // 16 tokens at a time: 16 lane-wise partial dot products, then one transposing reduction that
    // yields their 16 sums in one vector (45 shuffles and adds instead of 16 horizontal reductions).
    for (int64_t g = 0; g < group; ++g) {
      const float* qg = q + g * d;
      for (int64_t t0 = 0; t0 < n; t0 += 16) {
        const int64_t m = n - t0 < 16 ? n - t0 : 16;
        const float* kt = k + t0 * k_stride;
        __m512 part[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) part[j] = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i += 16) {
          const __m512 qv = _mm512_loadu_ps(qg + i);
#pragma GCC unroll 16
          for (int j = 0; j < 16; ++j)
            if (j < m) part[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kt + j * k_stride + i), part[j]);
        }
        _mm512_mask_storeu_ps(out + g * n + t0, tail_mask(m), sum16(part));
      }
    }
  }

  static float max(const float* x, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t t = 0; t < n; t += 16) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, tail_mask(n - t), x + t));
    return _mm512_reduce_max_ps(m);
  }

  static float exp_shifted(float* x, int64_t n, float shift) {
    const __m512 sh = _mm512_set1_ps(shift);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t t = 0; t < n; t += 16) {
      const __mmask16 mask = tail_mask(n - t);
      const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + t), sh));
      _mm512_mask_storeu_ps(x + t, mask, e);
      sum = _mm512_mask_add_ps(sum, mask, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
  }

  static void accumulate(const float* probs, const float* alpha, int64_t group, int64_t d, const float* v,
                         int64_t v_stride, int64_t n, float* acc) {
    for (int64_t g = 0; g < group; ++g) {
      float* ag = acc + g * d;
      const float* pg = probs + g * n;
      const __m512 a = _mm512_set1_ps(alpha[g]);
      int64_t i = 0;
      // Four independent accumulators per pass (a 64-wide slice of the head) hide the FMA latency
      // of the chain over the block's tokens.
      for (; i + 64 <= d; i += 64) {
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(ag + i), a);
        __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(ag + i + 16), a);
        __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(ag + i + 32), a);
        __m512 a3 = _mm512_mul_ps(_mm512_loadu_ps(ag + i + 48), a);
        for (int64_t t = 0; t < n; ++t) {
          const float* vt = v + t * v_stride + i;
          const __m512 w = _mm512_set1_ps(pg[t]);
          a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vt), a0);
          a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vt + 16), a1);
          a2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vt + 32), a2);
          a3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vt + 48), a3);
        }
        _mm512_storeu_ps(ag + i, a0);
        _mm512_storeu_ps(ag + i + 16, a1);
        _mm512_storeu_ps(ag + i + 32, a2);
        _mm512_storeu_ps(ag + i + 48, a3);
      }
      for (; i < d; i += 16) {
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(ag + i), a);
        for (int64_t t = 0; t < n; ++t) a0 = _mm512_fmadd_ps(_mm512_set1_ps(pg[t]), _mm512_loadu_ps(v + t * v_stride + i), a0);
        _mm512_storeu_ps(ag + i, a0);
      }
    }
  }
};

}  // namespace

void decode_task_avx512(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s) {
  switch (p.kv_type) {
    case KvType::F32:
      return decode_task_impl<Avx512Ops, KvType::F32>(p, seq, kv_head, part, s);
    case KvType::BF16:
      return decode_task_impl<Avx512Ops, KvType::BF16>(p, seq, kv_head, part, s);
    case KvType::F16:
      return decode_task_impl<Avx512Ops, KvType::F16>(p, seq, kv_head, part, s);
  }
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC (clang ignores `#pragma GCC target`): the op never selects this path

#include "decode_attention.h"

namespace sllm_cpu {
void decode_task_avx512(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s) {
  decode_task_generic(p, seq, kv_head, part, s);
}
}  // namespace sllm_cpu

#endif

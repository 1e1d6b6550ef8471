// Decode attention with AVX2 + FMA intrinsics (8 floats a vector), for head sizes that are a multiple
// of 8: the path of x86-64 CPUs without AVX-512 (most AMD EPYC and Ryzen parts, many cloud instances).
//
// Built like decode_task_avx512.cpp: the pragma enables AVX2, FMA and F16C for this file's own code
// only, after every include, and the op calls in here only when the CPU reports them at run time.
#include <cmath>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "decode_task_impl.h"
#include "vec_avx2.h"

namespace sllm_cpu {
namespace {

// Lanes [0, remaining) set: AVX2 has no mask registers, its masked loads and stores take a vector.
inline __m256i tail_mask(int64_t remaining) {
  const int32_t r = remaining >= 8 ? 8 : static_cast<int32_t>(remaining);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) for x <= 0, as exp512 in decode_task_avx512.cpp (Cephes' expf, about 2 ulp). Without
// AVX-512's scalef, 2^k is built in the exponent bits, which only holds for normal results: below
// x = -87 (e^-87 is near FLT_MIN) the result is set to 0, so -inf gives 0 rather than NaN.
inline __m256 exp256(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// Lane j of the result is the sum of the 8 lanes of v[j]: two levels of pairwise horizontal adds leave
// each vector's low-half and high-half sums in the two 128-bit halves, which one cross-half add folds.
inline __m256 sum8(const __m256* v) {
  const __m256 a0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 a1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

struct Avx2Ops {
  template <KvType KT>
  static void to_float(const uint16_t* src, float* dst, int64_t d) {
    for (int64_t i = 0; i < d; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      if constexpr (KT == KvType::BF16) {
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
      } else {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
      }
    }
  }

  static void scores(const float* q, int64_t group, int64_t d, const float* k, int64_t k_stride, int64_t n,
                     float* out) {
    // 8 tokens at a time: 8 lane-wise partial dot products, then one transposing reduction.
    for (int64_t g = 0; g < group; ++g) {
      const float* qg = q + g * d;
      for (int64_t t0 = 0; t0 < n; t0 += 8) {
        const int64_t m = n - t0 < 8 ? n - t0 : 8;
        const float* kt = k + t0 * k_stride;
        __m256 part[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) part[j] = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
          const __m256 qv = _mm256_loadu_ps(qg + i);
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j)
            if (j < m) part[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kt + j * k_stride + i), part[j]);
        }
        _mm256_maskstore_ps(out + g * n + t0, tail_mask(m), sum8(part));
      }
    }
  }

  static float max(const float* x, int64_t n) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    __m256 m = neg_inf;
    for (int64_t t = 0; t < n; t += 8) {
      const __m256i mask = tail_mask(n - t);
      const __m256 v = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + t, mask), _mm256_castsi256_ps(mask));
      m = _mm256_max_ps(m, v);
    }
    return hmax(m);
  }

  static float exp_shifted(float* x, int64_t n, float shift) {
    const __m256 sh = _mm256_set1_ps(shift);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t t = 0; t < n; t += 8) {
      const __m256i mask = tail_mask(n - t);
      const __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(_mm256_maskload_ps(x + t, mask), sh)),
                                     _mm256_castsi256_ps(mask));
      _mm256_maskstore_ps(x + t, mask, e);
      sum = _mm256_add_ps(sum, e);
    }
    return hsum(sum);
  }

  static void accumulate(const float* probs, const float* alpha, int64_t group, int64_t d, const float* v,
                         int64_t v_stride, int64_t n, float* acc) {
    for (int64_t g = 0; g < group; ++g) {
      float* ag = acc + g * d;
      const float* pg = probs + g * n;
      const __m256 a = _mm256_set1_ps(alpha[g]);
      int64_t i = 0;
      // Four independent accumulators per pass (a 32-wide slice of the head) hide the FMA latency.
      for (; i + 32 <= d; i += 32) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(ag + i), a);
        __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(ag + i + 8), a);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(ag + i + 16), a);
        __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(ag + i + 24), a);
        for (int64_t t = 0; t < n; ++t) {
          const float* vt = v + t * v_stride + i;
          const __m256 w = _mm256_set1_ps(pg[t]);
          a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vt), a0);
          a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vt + 8), a1);
          a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vt + 16), a2);
          a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vt + 24), a3);
        }
        _mm256_storeu_ps(ag + i, a0);
        _mm256_storeu_ps(ag + i + 8, a1);
        _mm256_storeu_ps(ag + i + 16, a2);
        _mm256_storeu_ps(ag + i + 24, a3);
      }
      for (; i < d; i += 8) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(ag + i), a);
        for (int64_t t = 0; t < n; ++t) a0 = _mm256_fmadd_ps(_mm256_set1_ps(pg[t]), _mm256_loadu_ps(v + t * v_stride + i), a0);
        _mm256_storeu_ps(ag + i, a0);
      }
    }
  }
};

}  // namespace

void decode_task_avx2(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s) {
  switch (p.kv_type) {
    case KvType::F32:
      return decode_task_impl<Avx2Ops, KvType::F32>(p, seq, kv_head, part, s);
    case KvType::BF16:
      return decode_task_impl<Avx2Ops, KvType::BF16>(p, seq, kv_head, part, s);
    case KvType::F16:
      return decode_task_impl<Avx2Ops, KvType::F16>(p, seq, kv_head, part, s);
  }
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC: the op never selects this path (isa.cpp reports no AVX2)

#include "decode_attention.h"

namespace sllm_cpu {
void decode_task_avx2(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s) {
  decode_task_generic(p, seq, kv_head, part, s);
}
}  // namespace sllm_cpu

#endif

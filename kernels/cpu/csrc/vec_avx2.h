// Vector helpers shared by the AVX2 translation units (*_avx2.cpp). Include it after their
// `#pragma GCC target("avx2,...")`, never from a portable file: each includer compiles its own copy for
// AVX2, with internal linkage (the anonymous namespace), so the linker cannot merge one into code that
// runs on a CPU without AVX2 (see decode_attention.h).
#pragma once

#include <immintrin.h>

namespace sllm_cpu {
namespace {

// The sum of v's 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace sllm_cpu

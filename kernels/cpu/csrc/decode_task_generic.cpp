// Decode attention for any x86-64 or other CPU: plain loops the compiler vectorises with the baseline
// instruction set (-O3), used when AVX-512 is missing or the head size is not a multiple of 16.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>

#include "decode_task_impl.h"

namespace sllm_cpu {
namespace {

struct GenericOps {
  template <KvType KT>
  static void to_float(const uint16_t* src, float* dst, int64_t d) {
    for (int64_t i = 0; i < d; ++i) {
      if constexpr (KT == KvType::BF16) {
        const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(dst + i, &bits, sizeof(bits));
      } else {
        dst[i] = c10::detail::fp16_ieee_to_fp32_value(src[i]);
      }
    }
  }

  static void scores(const float* q, int64_t group, int64_t d, const float* k, int64_t k_stride, int64_t n,
                     float* out) {
    // Eight independent partial sums: without -ffast-math the compiler may not reorder one running
    // sum, but it vectorises the eight lanes (SSE: two registers), which is most of the speed.
    constexpr int64_t kLanes = 8;
    const int64_t body = d - d % kLanes;
    for (int64_t t = 0; t < n; ++t) {
      const float* kt = k + t * k_stride;
      for (int64_t g = 0; g < group; ++g) {
        const float* qg = q + g * d;
        float lanes[kLanes] = {};
        for (int64_t i = 0; i < body; i += kLanes)
          for (int64_t j = 0; j < kLanes; ++j) lanes[j] += qg[i + j] * kt[i + j];
        float dot = 0.0f;
        for (int64_t j = 0; j < kLanes; ++j) dot += lanes[j];
        for (int64_t i = body; i < d; ++i) dot += qg[i] * kt[i];
        out[g * n + t] = dot;
      }
    }
  }

  static float max(const float* x, int64_t n) {
    float m = -INFINITY;
    for (int64_t t = 0; t < n; ++t) m = x[t] > m ? x[t] : m;
    return m;
  }

  static float exp_shifted(float* x, int64_t n, float shift) {
    float sum = 0.0f;
    for (int64_t t = 0; t < n; ++t) {
      x[t] = std::exp(x[t] - shift);
      sum += x[t];
    }
    return sum;
  }

  static void accumulate(const float* probs, const float* alpha, int64_t group, int64_t d, const float* v,
                         int64_t v_stride, int64_t n, float* acc) {
    for (int64_t g = 0; g < group; ++g) {
      float* ag = acc + g * d;
      const float* pg = probs + g * n;
      for (int64_t i = 0; i < d; ++i) ag[i] *= alpha[g];
      for (int64_t t = 0; t < n; ++t) {
        const float* vt = v + t * v_stride;
        const float w = pg[t];
        for (int64_t i = 0; i < d; ++i) ag[i] += w * vt[i];
      }
    }
  }
};

}  // namespace

void decode_task_generic(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s) {
  switch (p.kv_type) {
    case KvType::F32:
      return decode_task_impl<GenericOps, KvType::F32>(p, seq, kv_head, part, s);
    case KvType::BF16:
      return decode_task_impl<GenericOps, KvType::BF16>(p, seq, kv_head, part, s);
    case KvType::F16:
      return decode_task_impl<GenericOps, KvType::F16>(p, seq, kv_head, part, s);
  }
}

}  // namespace sllm_cpu

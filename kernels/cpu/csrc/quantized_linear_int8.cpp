// The int8-activation products of quantized_linear.h: the switch, the activations' quantization (shared
// by every path, so they agree on q), and the portable path.
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "quantized_linear.h"

namespace sllm_cpu {
namespace {

std::atomic<bool>& int8_slot() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace

void set_int8_activations(bool on) { int8_slot().store(on, std::memory_order_relaxed); }
bool int8_activations() { return int8_slot().load(std::memory_order_relaxed); }

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

void quantize_activations(const float* x, int64_t m, int64_t ldx, int64_t k, int8_t* q, float* d, float* s) {
  const int64_t blocks = k / kQuantBlock;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + i * ldx + b * kQuantBlock;
      int8_t* qb = q + i * k + b * kQuantBlock;
      float amax = 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
      int sum = 0;
      for (int j = 0; j < kQuantBlock; ++j) {  // rounded half away from zero, as torch's reference does
        const float v = xb[j] * inv;
        const int r = static_cast<int>(std::floor(std::fabs(v) + 0.5f));
        qb[j] = static_cast<int8_t>(v < 0 ? -r : r);
        sum += qb[j];
      }
      d[i * blocks + b] = scale;
      s[i * blocks + b] = scale * static_cast<float>(sum);
    }
  }
}

Int8Rows quantize_activations_here(const float* x, int64_t m, int64_t ldx, int64_t k) {
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, s;
  q.resize(m * k);
  d.resize(m * k / kQuantBlock);
  s.resize(m * k / kQuantBlock);
  quantize_activations(x, m, ldx, k, q.data(), d.data(), s.data());
  return {q.data(), d.data(), s.data()};
}

void quantized_linear_int8_generic(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                   int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                   float* y, int64_t ldy) {
  if (qtype != kQ4_1) return quantized_linear_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
  const Int8Rows a = quantize_activations_here(x, m, ldx, k);
  const int64_t blocks = k / kQuantBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * 20;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float dw = half_to_float(h);
        std::memcpy(&h, blk + 2, 2);
        const float mw = half_to_float(h);
        const int8_t* xq = a.q + i * k + b * kQuantBlock;
        int dot = 0;
        for (int j = 0; j < 16; ++j) dot += (blk[4 + j] & 0x0F) * xq[j] + (blk[4 + j] >> 4) * xq[j + 16];
        acc += dw * a.d[i * blocks + b] * static_cast<float>(dot) + mw * a.s[i * blocks + b];
      }
      y[i * ldy + n] = acc + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace sllm_cpu

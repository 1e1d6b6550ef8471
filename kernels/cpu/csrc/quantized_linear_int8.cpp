// The int8-activation products of quantized_linear.h: the switch, the activations' quantization (shared
// by every path, so they agree on q), and the portable path (every type, one 32-weight group at a time).
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

void quantize_activations(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t qtype, int8_t* q, float* d,
                          float* s) {
  const int64_t blocks = k / kQuantBlock, span = activation_span(qtype) / kQuantBlock;
  for (int64_t i = 0; i < m; ++i) {
    float amax = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + i * ldx + b * kQuantBlock;
      int8_t* qb = q + i * k + b * kQuantBlock;
      if (b % span == 0) {
        amax = 0.0f;
        for (int j = 0; j < kQuantBlock * span; ++j) amax = std::max(amax, std::fabs(xb[j]));
      }
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

Int8Rows quantize_activations_here(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t qtype) {
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, s;
  q.resize(m * k);
  d.resize(m * k / kQuantBlock);
  s.resize(m * k / kQuantBlock);
  quantize_activations(x, m, ldx, k, qtype, q.data(), d.data(), s.data());
  return {q.data(), d.data(), s.data()};
}

namespace {

// Group c of a block as the vector paths see it (quantized_int8_impl.h): 32 integers, the int16
// multipliers of its two halves (Q6_K's sub-scales, else 1), the float scale and the minimum (times s_x).
struct PortableGroup {
  int q[32];
  int mul[2] = {1, 1};
  float scale;
  float min = 0.0f;
};

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

PortableGroup portable_group(const uint8_t* blk, int64_t qtype, int c) {
  PortableGroup g;
  g.scale = half_at(blk);
  if (qtype == kQ8_0) {
    for (int j = 0; j < 32; ++j) g.q[j] = static_cast<int8_t>(blk[2 + j]);
  } else if (qtype == kQ4_0 || qtype == kQ4_1 || qtype == kQ5_0 || qtype == kQ5_1) {
    const bool with_min = qtype == kQ4_1 || qtype == kQ5_1, five = qtype == kQ5_0 || qtype == kQ5_1;
    const uint8_t* qs = blk + (with_min ? 4 : 2) + (five ? 4 : 0);
    uint32_t qh = 0;
    if (five) std::memcpy(&qh, qs - 4, 4);
    for (int j = 0; j < 16; ++j) {
      g.q[j] = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      g.q[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
    g.min = with_min ? half_at(blk + 2) : -(five ? 16.0f : 8.0f) * g.scale;
  } else if (qtype == kQ4_K || qtype == kQ5_K) {
    int sc, mn;
    scale_min_k4(c, blk + 4, sc, mn);
    const uint8_t* qs = blk + (qtype == kQ5_K ? 48 : 16) + 32 * (c / 2);
    for (int j = 0; j < 32; ++j) {
      g.q[j] = (qs[j] >> (4 * (c & 1))) & 0x0F;
      if (qtype == kQ5_K) g.q[j] |= ((blk[16 + j] >> c) & 1) << 4;
    }
    g.scale *= static_cast<float>(sc);
    g.min = -(half_at(blk + 2) * static_cast<float>(mn));
  } else {  // Q6_K
    const int h = c / 4, gi = c % 4;
    const uint8_t* ql = blk + 64 * h + 32 * (gi & 1);
    const uint8_t* qh = blk + 128 + 32 * h;
    for (int j = 0; j < 32; ++j) g.q[j] = (((ql[j] >> (4 * (gi >> 1))) & 0x0F) | (((qh[j] >> (2 * gi)) & 3) << 4)) - 32;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 2 * c;
    g.mul[0] = sc[0];
    g.mul[1] = sc[1];
    g.scale = half_at(blk + 208);
  }
  return g;
}

}  // namespace

void quantized_linear_int8_generic(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                   int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                   float* y, int64_t ldy) {
  const Int8Rows a = quantize_activations_here(x, m, ldx, k, qtype);
  const int64_t bb = quant_block_bytes(qtype), groups = quant_block_weights(qtype) / kQuantBlock;
  const int64_t per_row = k / kQuantBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < per_row; ++j) {
        const PortableGroup g = portable_group(row + (j / groups) * bb, qtype, static_cast<int>(j % groups));
        const int8_t* xq = a.q + i * k + j * kQuantBlock;
        int dot = 0;
        for (int l = 0; l < 32; ++l) dot += g.mul[l / 16] * g.q[l] * xq[l];
        acc += g.scale * a.d[i * per_row + j] * static_cast<float>(dot) + g.min * a.s[i * per_row + j];
      }
      y[i * ldy + n] = acc + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace sllm_cpu

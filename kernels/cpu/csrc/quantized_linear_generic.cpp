// The portable path of quantized_linear.h: each block dequantized into floats (32, or a K-quant's 256),
// then multiplied with every row of x.
#include <cstring>

#include "quantized_linear.h"

namespace sllm_cpu {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3FF) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000 | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: one scale (and minimum) for 32 weights.
void dequantize_legacy(const uint8_t* blk, int64_t qtype, float* out) {
  const float d = half_at(blk);
  if (qtype == kQ8_0) {
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
    return;
  }
  const bool with_min = qtype == kQ4_1 || qtype == kQ5_1, five = qtype == kQ5_0 || qtype == kQ5_1;
  const uint8_t* qs = blk + (with_min ? 4 : 2) + (five ? 4 : 0);
  uint32_t qh = 0;  // Q5: bit j is weight j's fifth bit
  if (five) std::memcpy(&qh, qs - 4, 4);
  const float m = with_min ? half_at(blk + 2) : 0.0f;
  const int offset = qtype == kQ4_0 ? 8 : 16;
  for (int j = 0; j < 16; ++j) {  // byte j: weight j in its low nibble, weight j + 16 in its high one
    const int lo = (qs[j] & 0x0F) | (five ? ((qh >> j) & 1) << 4 : 0);
    const int hi = (qs[j] >> 4) | (five ? ((qh >> (j + 16)) & 1) << 4 : 0);
    if (with_min) {
      out[j] = d * static_cast<float>(lo) + m;
      out[j + 16] = d * static_cast<float>(hi) + m;
    } else {
      out[j] = d * static_cast<float>(lo - offset);
      out[j + 16] = d * static_cast<float>(hi - offset);
    }
  }
}

// Q4_K, Q5_K: 8 sub-blocks of 32, each d * scale * q - dmin * min.
void dequantize_q4_k_q5_k(const uint8_t* blk, int64_t qtype, float* out) {
  const float d = half_at(blk), dmin = half_at(blk + 2);
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (qtype == kQ5_K ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    scale_min_k4(j, blk + 4, sc, mn);
    const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(mn);
    const uint8_t* q = qs + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> (4 * (j & 1))) & 0x0F;
      if (qtype == kQ5_K) v |= ((qh[l] >> j) & 1) << 4;
      out[32 * j + l] = scale * static_cast<float>(v) - min;
    }
  }
}

// Q6_K: 16 groups of 16, each d * int8 scale * (6-bit q - 32).
void dequantize_q6_k(const uint8_t* blk, float* out) {
  const float d = half_at(blk + 208);
  const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
  for (int c = 0; c < 8; ++c) {  // 32 weights: half c / 4, group g of that half
    const int h = c / 4, g = c % 4;
    const uint8_t* ql = blk + 64 * h + 32 * (g & 1);
    const uint8_t* qh = blk + 128 + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> (4 * (g >> 1))) & 0x0F) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
      out[32 * c + l] = d * static_cast<float>(sc[2 * c + l / 16]) * static_cast<float>(q);
    }
  }
}

}  // namespace

void dequantize_block(const uint8_t* blk, int64_t qtype, float* out) {
  switch (qtype) {
    case kQ4_K:
    case kQ5_K: return dequantize_q4_k_q5_k(blk, qtype, out);
    case kQ6_K: return dequantize_q6_k(blk, out);
    default: return dequantize_legacy(blk, qtype, out);
  }
}

void quantized_linear_generic(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                              int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t bb = quant_block_bytes(qtype), per = quant_block_weights(qtype);
  float wf[kMaxQuantBlock];
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    // One partial sum per position in 32 weights: independent lanes the compiler vectorises for any CPU.
    float acc[kQuantMaxRows][kQuantBlock] = {};
    for (int64_t b = 0; b < k / per; ++b) {
      dequantize_block(row + b * bb, qtype, wf);
      for (int64_t c = 0; c < per; c += kQuantBlock) {
        for (int64_t i = 0; i < m; ++i) {
          const float* xi = x + i * ldx + b * per + c;
          for (int j = 0; j < kQuantBlock; ++j) acc[i][j] += wf[c + j] * xi[j];
        }
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      float s = 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) s += acc[i][j];
      y[i * ldy + n] = s + (bias ? bias[n] : 0.0f);
    }
  }
}

}  // namespace sllm_cpu

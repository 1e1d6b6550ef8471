// The portable path of quantized_linear.h: each block dequantized into 32 floats, then multiplied with
// every row of x.
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

void dequantize_block(const uint8_t* blk, int64_t qtype, float* out) {
  uint16_t h;
  std::memcpy(&h, blk, 2);
  const float d = half_to_float(h);
  if (qtype == kQ8_0) {
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
    return;
  }
  if (qtype == kQ4_1) {
    std::memcpy(&h, blk + 2, 2);
    const float m = half_to_float(h);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * static_cast<float>(blk[4 + j] & 0x0F) + m;
      out[j + 16] = d * static_cast<float>(blk[4 + j] >> 4) + m;
    }
    return;
  }
  for (int j = 0; j < 16; ++j) {  // Q4_0: d * (q - 8)
    out[j] = d * static_cast<float>((blk[2 + j] & 0x0F) - 8);
    out[j + 16] = d * static_cast<float>((blk[2 + j] >> 4) - 8);
  }
}

void quantized_linear_generic(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                              int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t bb = quant_block_bytes(qtype);
  float wf[kQuantBlock];
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    // One partial sum per block position: independent lanes the compiler vectorises for any CPU.
    float acc[kQuantMaxRows][kQuantBlock] = {};
    for (int64_t c = 0; c < k; c += kQuantBlock) {
      dequantize_block(row + c / kQuantBlock * bb, qtype, wf);
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx + c;
        for (int j = 0; j < kQuantBlock; ++j) acc[i][j] += wf[j] * xi[j];
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

// The few-row float32 matmul in portable C++, for CPUs without AVX2 (or another architecture): each
// weight row is read once for all x rows, with eight partial sums per product that the compiler
// vectorises with the baseline instruction set (the order of a float sum is not its to change).
#include <cstdint>

#include "small_linear.h"

namespace sllm_cpu {
namespace {

constexpr int64_t kLanes = 8;

template <int M>
void columns(const float* x, int64_t ldx, const float* w, int64_t k, const float* bias, int64_t n0, int64_t n1,
             float* y, int64_t ldy) {
  const int64_t body = k - k % kLanes;
  for (int64_t n = n0; n < n1; ++n) {
    const float* wn = w + n * k;
    float lanes[M][kLanes] = {};
    for (int64_t c = 0; c < body; c += kLanes)
      for (int i = 0; i < M; ++i)
        for (int64_t j = 0; j < kLanes; ++j) lanes[i][j] += wn[c + j] * x[i * ldx + c + j];
    for (int i = 0; i < M; ++i) {
      float dot = 0.0f;
      for (int64_t j = 0; j < kLanes; ++j) dot += lanes[i][j];
      for (int64_t c = body; c < k; ++c) dot += wn[c] * x[i * ldx + c];
      y[i * ldy + n] = bias != nullptr ? dot + bias[n] : dot;
    }
  }
}

}  // namespace

void small_linear_generic(const float* x, int64_t m, int64_t ldx, const float* w, int64_t k, const float* bias,
                          int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (m) {
    case 1: return columns<1>(x, ldx, w, k, bias, n0, n1, y, ldy);
    case 2: return columns<2>(x, ldx, w, k, bias, n0, n1, y, ldy);
    case 3: return columns<3>(x, ldx, w, k, bias, n0, n1, y, ldy);
    default: return columns<4>(x, ldx, w, k, bias, n0, n1, y, ldy);
  }
}

}  // namespace sllm_cpu

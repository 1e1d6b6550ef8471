// The AVX2 int8-activation path of quantized_linear.h: each 32 weights as bytes times the activations'
// 32 int8 values with maddubs (pairs summed to int16) and madd (to 8 int32 sums), then one FMA of those
// sums with the group's scale times d_x (quantized_int8_impl.h).
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "quantized_int8_impl.h"

namespace sllm_cpu {

void quantized_linear_int8_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  int8_product<false>(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX2)
#include "quantized_linear.h"

namespace sllm_cpu {
void quantized_linear_int8_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  quantized_linear_int8_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}
}  // namespace sllm_cpu
#endif

// The AVX2 int8-activation path of quantized_linear.h: each 32 weights as bytes times the activations'
// 32 int8 values with maddubs (pairs summed to int16) and madd (to 8 int32 sums), then one FMA of those
// sums with the group's scale times d_x (quantized_int8_impl.h).
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "int8_gemm_impl.h"
#include "quantized_int8_impl.h"

namespace sllm_cpu {

void quantized_linear_int8_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  int8_product(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}

void quantized_gemm_int8_avx2(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t qtype,
                              int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  octet_product<false>(a, m, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}

void octet_activations_avx2(const float* x, int64_t i0, int64_t i1, int64_t ldx, int64_t k, int64_t qtype,
                            const Int8OctetsOut& out) {
  octet_activations_impl(x, i0, i1, ldx, k, qtype, out);
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
void quantized_gemm_int8_avx2(const Int8Octets&, int64_t, int64_t, const uint8_t*, int64_t, int64_t, const float*,
                              int64_t, int64_t, float*, int64_t) {
  __builtin_trap();
}
void octet_activations_avx2(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, const Int8OctetsOut&) {
  __builtin_trap();
}
}  // namespace sllm_cpu
#endif

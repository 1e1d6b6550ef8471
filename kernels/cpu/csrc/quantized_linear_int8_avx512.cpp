// The AVX-512 VNNI int8-activation path of quantized_linear.h: few rows two groups at a time in 512-bit
// vectors (int8_rows_zmm.h), many rows through the octet product with vpdpbusd in place of maddubs and
// madd, two weight rows per 512-bit vector (int8_gemm_zmm.h). Called only on a CPU with AVX-512
// F/BW/VL/DQ and VNNI.
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

#include "int8_gemm_impl.h"
#include "int8_gemm_zmm.h"
#include "int8_rows_zmm.h"
#include "quantized_int8_impl.h"

namespace sllm_cpu {

void quantized_linear_int8_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                  int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                  float* y, int64_t ldy) {
  zmm_product(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}

void quantized_gemm_int8_avx512(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  octet_product<true, ZmmOctetTile>(a, m, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}

}  // namespace sllm_cpu

#pragma GCC pop_options

#else  // not x86-64 GCC: never called (isa.cpp reports no AVX-512)
#include "quantized_linear.h"

namespace sllm_cpu {
void quantized_linear_int8_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                  int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                  float* y, int64_t ldy) {
  quantized_linear_int8_generic(x, m, ldx, k, w, qtype, row_bytes, bias, n0, n1, y, ldy);
}
void quantized_gemm_int8_avx512(const Int8Octets&, int64_t, int64_t, const uint8_t*, int64_t, int64_t, const float*,
                                int64_t, int64_t, float*, int64_t) {
  __builtin_trap();
}
}  // namespace sllm_cpu
#endif

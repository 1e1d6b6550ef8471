// y = x W^T (+ bias) where W stays in GGUF's quantized blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 weights
// a block) and the K-quants Q4_K, Q5_K, Q6_K (256-weight super-blocks of 8 or 16 sub-scales; see
// kernels/gguf_blocks.py for the layouts). Every path walks a row 32 weights at a time: each 32 are
// dequantized in registers (their scale, and minimum, decoded from the block) and multiplied with the
// float32 activations, so the result is the float product with the dequantized weight up to rounding
// (kernels/quantized.py's `quantized_linear_ref`). The weight is read once for all rows of x.
//
// llama.cpp instead quantizes the activations to int8 per block and takes integer dot products, which
// costs fewer instructions; on the default model that flipped greedy choices against the float
// reference (345-370 of 512 tokens agree over 16 prompts, 6-8 of 16 answers whole, by path), far from the
// float product's 512 of 512, so it is a switch, off by default (set_int8_activations below).
// No torch headers (see decode_attention.h).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

namespace sllm_cpu {

// The weights every path dequantizes at once (a legacy block, a K-quant sub-block or two of Q6_K's).
constexpr int64_t kQuantBlock = 32;
constexpr int64_t kMaxQuantBlock = 256;  // a K-quant super-block
constexpr int64_t kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8;  // GGML type ids
constexpr int64_t kQ4_K = 12, kQ5_K = 13, kQ6_K = 14;
// Rows of x one pass over the weight serves; more rows take more passes.
constexpr int64_t kQuantMaxRows = 8;

// Bytes and weights of one block of `qtype`, or 0 for a type without a kernel. Inline and constexpr: a
// kernel templated on the type asks once per block, and an out-of-line call there (the int8 path did)
// spilled every accumulator to the stack around it and halved the legacy types' speed.
constexpr int64_t quant_block_bytes(int64_t qtype) {
  switch (qtype) {
    case kQ4_0: return 18;
    case kQ4_1: return 20;
    case kQ5_0: return 22;
    case kQ5_1: return 24;
    case kQ8_0: return 34;
    case kQ4_K: return 144;
    case kQ5_K: return 176;
    case kQ6_K: return 210;
    default: return 0;
  }
}
constexpr int64_t quant_block_weights(int64_t qtype) {
  return qtype == kQ4_K || qtype == kQ5_K || qtype == kQ6_K ? kMaxQuantBlock
                                                            : (quant_block_bytes(qtype) ? kQuantBlock : 0);
}

// Output columns [n0, n1) of y [M, N] (row stride ldy) from M <= kQuantMaxRows rows of x [M, K] (row
// stride ldx); weight row n starts at w + n * row_bytes.
using QuantizedKernel = void (*)(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                                 int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);
void quantized_linear_generic(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                              int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);
void quantized_linear_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                           int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);
void quantized_linear_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                             int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);

// Any number of rows of x at once (the float path of AVX2 and AVX-512 CPUs for more than kQuantMaxRows):
// a tile of weight rows dequantized into a cached float buffer, then register-blocked FMAs over every row.
void quantized_gemm_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                         int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);
// Rows of x from which the op takes quantized_gemm_avx2 rather than passes of kQuantMaxRows.
constexpr int64_t kQuantGemmRows = kQuantMaxRows + 1;

// The path under the ceiling of isa.h for calls of up to kQuantMaxRows rows (the int8-activation one
// below while it is switched on); quantized_linear runs longer calls in passes of it on the portable path.
QuantizedKernel quantized_linear_kernel();

// Switched on per process, every type, every call: x quantized to int8 (quantize_activations: as
// llama.cpp's Q8_1 per 32 values for the 32-weight types, as its Q8_K per 256 for the K-quants, both with
// float32 scales), then integer dot products per 32 weights, d_w * d_x * sum(q_w * q_x) + m_w * s_x
// (quantized_int8_impl.h; the AVX2 few-row loop sums a K-quant super-block's in integers before one
// conversion, which one scale per 256 activations allows), with AVX-512 VNNI (vpdpbusd)
// where the CPU has it, AVX2's maddubs otherwise; past kQuantMaxRows rows on those paths, the octet
// product below (int8_gemm_impl.h) in place of the float tiles. Fewer instructions per weight than the
// float paths, at the cost of the activations' rounding (kernels/quantized.py: `quantized_linear_int8_ref`
// is its exact reference).
void set_int8_activations(bool on);
bool int8_activations();
void quantized_linear_int8_generic(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                   int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                   float* y, int64_t ldy);
void quantized_linear_int8_avx2(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);
void quantized_linear_int8_avx512(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w,
                                  int64_t qtype, int64_t row_bytes, const float* bias, int64_t n0, int64_t n1,
                                  float* y, int64_t ldy);
// Whether the CPU has AVX-512 VNNI (the int8 AVX-512 path needs it; without it AVX2's path runs).
bool cpu_has_avx512_vnni();

// Rows of x as int8 for a product with a `qtype` weight: q [m, k], and per 32 values the scale d and
// s = d * sum(q), where d = max|x| / 127 over the weight's block (activation_span: 32 values, or a
// K-quant's 256, whose 8 groups then share one d). `q`, `d`, `s` have room for m rows (row strides k and
// k / 32). Portable, so every path agrees.
constexpr int64_t activation_span(int64_t qtype) { return quant_block_weights(qtype); }
void quantize_activations(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t qtype, int8_t* q, float* d,
                          float* s);
// The same into this thread's buffers (valid until its next call): what each int8 kernel call reads.
struct Int8Rows {
  const int8_t* q;
  const float* d;
  const float* s;
};
Int8Rows quantize_activations_here(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t qtype);

// Calls of more rows with int8 activations (AVX2 and AVX-512 VNNI; int8_gemm_impl.h): x quantized as
// above, once per call, into "octets": 8 lanes of 32 weights interleaved 4 bytes at a time, so one
// integer vector sums 8 groups' products in 8 lanes. A row's last octet may be short (octet_last_steps).
constexpr int64_t kOctet = 8 * kQuantBlock;
constexpr int64_t int8_octets(int64_t k) { return (k / kQuantBlock + 7) / 8; }
// Steps of a row's last octet. Where at most 4 groups are left over (K = 576: 18 groups, 2 past two octets),
// they spread over all 8 lanes, 8 / s lanes a group with s the power of two at least their count, so the
// octet takes s steps instead of 8 (padded to one lane a group, it would cost K = 768's work); more than 4
// keep one lane each, the missing lanes zero.
constexpr int octet_last_steps(int64_t k) {
  const int64_t left = k / kQuantBlock % 8;
  return left == 0 || left > 4 ? 8 : left > 2 ? 4 : static_cast<int>(left);
}
struct Int8Octets {
  const int8_t* q;  // [m][octets][256] (q + 128 as bytes for a Q6_K weight)
  const float* d;   // [m][octets][8]: each lane's scale d_x
  const float* s;   // [m][octets][8]: d_x times the sum of the lane's q
  int64_t octets;
};
struct Int8OctetsOut {
  int8_t* q;
  float* d;
  float* s;
};
// Rows [i0, i1) of x into `out` (rows indexed from x's first), for a product with a `qtype` weight.
void octet_activations_avx2(const float* x, int64_t i0, int64_t i1, int64_t ldx, int64_t k, int64_t qtype,
                            const Int8OctetsOut& out);
// Output columns [n0, n1) of y [m, N] from those rows.
void quantized_gemm_int8_avx2(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t qtype,
                              int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);
void quantized_gemm_int8_avx512(const Int8Octets& a, int64_t m, int64_t k, const uint8_t* w, int64_t qtype,
                                int64_t row_bytes, const float* bias, int64_t n0, int64_t n1, float* y, int64_t ldy);

// IEEE half to float, for the blocks' scales (portable; the vector paths use F16C).
float half_to_float(uint16_t h);
// One block's weights (quant_block_weights) as the format defines them, operation for operation as
// ggml does, so bit-exact (the dequantize op and the portable path).
void dequantize_block(const uint8_t* blk, int64_t qtype, float* out);

namespace {
// n values of scratch in `buf` (a thread's, reused from call to call), starting on a 64-byte line, so that
// the 512-bit loads of the activations never straddle two lines (a vector's own start has malloc's 16-byte
// alignment).
template <class T>
inline T* line_aligned(std::vector<T>& buf, int64_t n) {
  buf.resize(static_cast<size_t>(n) + 64 / sizeof(T));
  const auto at = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<T*>((at + 63) & ~static_cast<uintptr_t>(63));
}

// f(std::integral_constant<int, Q>{}) for the GGML type id `qtype` (Q6_K past the others: the op checked
// the type), so that each path's loop is instantiated per type and carries no branch on it.
template <class F>
inline decltype(auto) with_quant_type(int64_t qtype, F&& f) {
  switch (qtype) {
    case kQ4_0: return f(std::integral_constant<int, kQ4_0>{});
    case kQ4_1: return f(std::integral_constant<int, kQ4_1>{});
    case kQ5_0: return f(std::integral_constant<int, kQ5_0>{});
    case kQ5_1: return f(std::integral_constant<int, kQ5_1>{});
    case kQ8_0: return f(std::integral_constant<int, kQ8_0>{});
    case kQ4_K: return f(std::integral_constant<int, kQ4_K>{});
    case kQ5_K: return f(std::integral_constant<int, kQ5_K>{});
    default: return f(std::integral_constant<int, kQ6_K>{});
  }
}

// f(std::integral_constant<int, M>{}) for M = m rows of x (1 to kQuantMaxRows; more take M = 8), so that
// each few-row loop keeps its per-row accumulators in registers.
template <class F>
inline decltype(auto) with_row_count(int64_t m, F&& f) {
  switch (m) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// Sub-block j's 6-bit scale and minimum in Q4_K/Q5_K's 12 packed bytes (ggml's get_scale_min_k4).
// Internal linkage: each path compiles its own copy under its own target flags (see vec_avx2.h).
inline void scale_min_k4(int j, const uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
}  // namespace

}  // namespace sllm_cpu

// The ops `torch.ops.sllm_cpu.quantized_linear` (x [M, K] float32 times a GGUF-quantized weight [N, K],
// see quantized_linear.h) and `torch.ops.sllm_cpu.dequantize` (GGUF blocks to float32 rows: the large-M
// fallback and the embedding lookup).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#include "isa.h"
#include "ops.h"
#include "quantized_linear.h"

namespace sllm_cpu {

namespace {

// Weight rows per thread at the least: 128 rows of 576 Q4 weights is ~40 KB, above the fork cost.
constexpr int64_t kMinRowsPerThread = 128;

// Many rows with int8 activations: x quantized into octets once (its rows split over the threads),
// then the weight rows split over the threads (`grain` at the least) as for the float product. The octets
// live in the calling thread's buffers, reused from call to call (every byte read is written first).
void int8_octet_product(const float* x, int64_t m, int64_t ldx, int64_t k, const uint8_t* w, int64_t qtype,
                        int64_t row_bytes, const float* bias, int64_t n, float* y, int64_t grain, bool vnni) {
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, s;
  const int64_t octets = int8_octets(k);
  const Int8OctetsOut out{line_aligned(q, m * octets * kOctet), line_aligned(d, m * octets * 8),
                          line_aligned(s, m * octets * 8)};
  at::parallel_for(0, m, 16, [&](int64_t i0, int64_t i1) { octet_activations_avx2(x, i0, i1, ldx, k, qtype, out); });
  const Int8Octets a{out.q, out.d, out.s, octets};
  at::parallel_for(0, n, grain, [&](int64_t n0, int64_t n1) {
    (vnni ? quantized_gemm_int8_avx512 : quantized_gemm_int8_avx2)(a, m, k, w, qtype, row_bytes, bias, n0, n1, y, n);
  });
}

}  // namespace

QuantizedKernel quantized_linear_kernel() {
  const Isa isa = pick_isa(isa_ceiling(), kQuantBlock);
  if (int8_activations()) {
    switch (isa) {
      case Isa::Avx512: return cpu_has_avx512_vnni() ? quantized_linear_int8_avx512 : quantized_linear_int8_avx2;
      case Isa::Avx2: return quantized_linear_int8_avx2;
      default: return quantized_linear_int8_generic;
    }
  }
  switch (isa) {
    case Isa::Avx512: return quantized_linear_avx512;
    case Isa::Avx2: return quantized_linear_avx2;
    default: return quantized_linear_generic;
  }
}

void check_quantized_weight(const at::Tensor& data, int64_t qtype, int64_t n, int64_t k) {
  const int64_t bb = quant_block_bytes(qtype);
  TORCH_CHECK(bb > 0, "sllm_cpu: no quantized kernel for GGML type ", qtype);
  const int64_t per = quant_block_weights(qtype);
  TORCH_CHECK(k % per == 0, "sllm_cpu: K must be a multiple of ", per, " for GGML type ", qtype);
  TORCH_CHECK(data.device().is_cpu() && data.scalar_type() == at::kByte && data.is_contiguous() && data.dim() == 2 &&
                  data.size(0) == n && data.size(1) == k / per * bb,
              "sllm_cpu: the weight must be contiguous uint8 [N, K / block weights * block bytes]");
}

at::Tensor quantized_linear(const at::Tensor& x_in, const at::Tensor& data, int64_t qtype, int64_t n, int64_t k,
                            const std::optional<at::Tensor>& bias_in) {
  check_quantized_weight(data, qtype, n, k);
  TORCH_CHECK(x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat && x_in.dim() == 2 && x_in.size(1) == k,
              "sllm_cpu: quantized_linear takes float32 x [M, K]");
  const at::Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  const int64_t m = x.size(0);
  at::Tensor bias;
  if (bias_in.has_value()) {
    bias = bias_in->to(at::kFloat).contiguous();
    TORCH_CHECK(bias.numel() == n, "sllm_cpu: bias must be [N]");
  }
  at::Tensor y = at::empty({m, n}, x.options());
  if (m == 0) return y;
  const QuantizedKernel kernel = quantized_linear_kernel();
  const int64_t row_bytes = data.size(1), ldx = x.stride(0);
  const float* xp = x.data_ptr<float>();
  const uint8_t* wp = data.data_ptr<uint8_t>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int64_t threads = at::get_num_threads();
  const int64_t grain = std::max<int64_t>(kMinRowsPerThread, (n + threads - 1) / threads);
  const Isa isa = pick_isa(isa_ceiling(), kQuantBlock);
  if (m >= kQuantGemmRows && isa != Isa::Generic && int8_activations()) {
    int8_octet_product(xp, m, ldx, k, wp, qtype, row_bytes, bp, n, yp, grain,
                       isa == Isa::Avx512 && cpu_has_avx512_vnni());
    return y;
  }
  if (m >= kQuantGemmRows && isa != Isa::Generic) {
    at::parallel_for(0, n, grain, [&](int64_t n0, int64_t n1) {
      quantized_gemm_avx2(xp, m, ldx, k, wp, qtype, row_bytes, bp, n0, n1, yp, n);
    });
    return y;
  }
  at::parallel_for(0, n, grain, [&](int64_t n0, int64_t n1) {
    // Rows of x in groups of kQuantMaxRows, each group one pass over this thread's weight rows.
    for (int64_t i0 = 0; i0 < m; i0 += kQuantMaxRows) {
      const int64_t rows = std::min(kQuantMaxRows, m - i0);
      kernel(xp + i0 * ldx, rows, ldx, k, wp, qtype, row_bytes, bp, n0, n1, yp + i0 * n, n);
    }
  });
  return y;
}

at::Tensor dequantize(const at::Tensor& data, int64_t qtype, int64_t k) {
  TORCH_CHECK(data.dim() == 2, "sllm_cpu: dequantize takes uint8 rows [N, bytes]");
  const int64_t n = data.size(0);
  check_quantized_weight(data, qtype, n, k);
  at::Tensor out = at::empty({n, k}, data.options().dtype(at::kFloat));
  const int64_t bb = quant_block_bytes(qtype), per = quant_block_weights(qtype), blocks = k / per;
  const int64_t row_bytes = data.size(1);
  const uint8_t* src = data.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, n, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < blocks; ++b) dequantize_block(src + r * row_bytes + b * bb, qtype, dst + r * k + b * per);
    }
  });
  return out;
}

void set_int8_activations_op(bool on) { set_int8_activations(on); }
bool int8_activations_op() { return int8_activations(); }

}  // namespace sllm_cpu

TORCH_LIBRARY_FRAGMENT(sllm_cpu, m) {
  m.def("set_int8_activations(bool on) -> ()", &sllm_cpu::set_int8_activations_op);
  m.def("int8_activations() -> bool", &sllm_cpu::int8_activations_op);
  m.def("quantized_linear(Tensor x, Tensor data, int qtype, int n, int k, Tensor? bias=None) -> Tensor");
  m.def("dequantize(Tensor data, int qtype, int k) -> Tensor");
}

TORCH_LIBRARY_IMPL(sllm_cpu, CPU, m) {
  m.impl("quantized_linear", &sllm_cpu::quantized_linear);
  m.impl("dequantize", &sllm_cpu::dequantize);
}

// The op `torch.ops.sllm_cpu.small_linear`: float32 x [M, K] @ W[N, K]^T (+ bias) for M <= 4 rows,
// the shape of every matmul in a decode step with a few sequences. At M = 1 MKL's GEMV through
// F.linear streamed SmolLM2's layer weights at 25-30 GB/s on this kind of machine, and each call paid
// for the transpose view and matmul dispatch; this reads the weight once, four rows at a time, each
// thread one contiguous slice of it, on the instruction-set path isa.h picks for K.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "isa.h"
#include "ops.h"
#include "small_linear.h"

namespace sllm_cpu {
namespace {

// Weight rows per thread at the least: 64 rows of 576 floats is ~150 KB, well above the fork cost.
constexpr int64_t kMinRowsPerThread = 64;

}  // namespace

SmallLinearKernel small_linear_kernel(int64_t k) {
  switch (pick_isa(isa_ceiling(), k)) {
    case Isa::Avx512: return small_linear_avx512;
    case Isa::Avx2: return small_linear_avx2;
    default: return small_linear_generic;
  }
}

at::Tensor small_linear(const at::Tensor& x_in, const at::Tensor& weight, const std::optional<at::Tensor>& bias_in) {
  TORCH_CHECK(x_in.device().is_cpu() && weight.device().is_cpu(), "sllm_cpu: CPU tensors only");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
              "sllm_cpu: small_linear is float32 only");
  TORCH_CHECK(x_in.dim() == 2 && weight.dim() == 2 && x_in.size(1) == weight.size(1),
              "sllm_cpu: small_linear takes x [M, K] and weight [N, K]");
  TORCH_CHECK(weight.is_contiguous(), "sllm_cpu: the weight must be contiguous");
  const int64_t m = x_in.size(0), k = x_in.size(1), n = weight.size(0);
  TORCH_CHECK(m >= 1 && m <= kSmallLinearMaxRows, "sllm_cpu: small_linear takes 1 to ", kSmallLinearMaxRows, " rows");
  const SmallLinearKernel kernel = small_linear_kernel(k);
  const at::Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  at::Tensor bias;
  if (bias_in.has_value()) {
    bias = bias_in->to(at::kFloat).contiguous();
    TORCH_CHECK(bias.numel() == n, "sllm_cpu: bias must be [N]");
  }
  at::Tensor y = at::empty({m, n}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int64_t ldx = x.stride(0);
  // Whole groups of four rows per thread, so every slice but the last takes the four-row path.
  const int64_t groups = (n + 3) / 4;
  const int64_t grain = std::max<int64_t>(kMinRowsPerThread / 4, (groups + at::get_num_threads() - 1) / at::get_num_threads());
  at::parallel_for(0, groups, grain, [&](int64_t g0, int64_t g1) {
    kernel(xp, m, ldx, wp, k, bp, g0 * 4, std::min(n, g1 * 4), yp, n);
  });
  return y;
}

}  // namespace sllm_cpu

TORCH_LIBRARY_FRAGMENT(sllm_cpu, m) {
  m.def("small_linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(sllm_cpu, CPU, m) { m.impl("small_linear", &sllm_cpu::small_linear); }

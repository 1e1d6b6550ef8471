// Per-row LoRA deltas (lora_delta.h), and the op `torch.ops.sllm_cpu.lora_add_` that adds them to a
// projection's output in place for any number of rows. The model's Python layer loop calls it once per
// projection instead of a gather, two matmuls and a scatter-add per adapter: about five ATen calls each,
// which at 4 adapters x 4 projections x 30 layers cost more than the deltas' arithmetic.
#include "lora_delta.h"

#include "ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

namespace sllm_cpu {
namespace {

// One group of m rows sharing pair p: gather, shrink, expand into scratch, add to y.
void add_group(const LoraPair& p, const int64_t* group, int64_t m, const float* x, int64_t ldx, int64_t k,
               int64_t n, int64_t n0, int64_t n1, float* y, int64_t ldy, float* scratch) {
  float* xs = scratch;
  float* s = xs + m * k;
  float* t = s + m * p.rank;
  for (int64_t i = 0; i < m; ++i) std::copy(x + group[i] * ldx, x + group[i] * ldx + k, xs + i * k);
  p.shrink(xs, m, k, p.a, k, nullptr, 0, p.rank, s, p.rank);
  p.expand(s, m, p.rank, p.b, p.rank, nullptr, n0, n1, t, n);
  for (int64_t i = 0; i < m; ++i) {
    float* yr = y + group[i] * ldy;
    const float* tr = t + i * n;
    for (int64_t j = n0; j < n1; ++j) yr[j] += tr[j];
  }
}

}  // namespace

void lora_add_columns(const LoraPair* const* pairs, const float* x, int64_t rows, int64_t ldx, int64_t k,
                      int64_t n, int64_t n0, int64_t n1, float* y, int64_t ldy, float* scratch) {
  if (n0 >= n1) return;
  std::vector<char> done(static_cast<size_t>(rows), 0);
  int64_t group[kSmallLinearMaxRows];
  for (int64_t first = 0; first < rows; ++first) {
    const LoraPair* p = pairs[first];
    if (p == nullptr || done[first]) continue;
    int64_t m = 0;
    for (int64_t r = first; r < rows; ++r) {
      if (done[r] || pairs[r] != p) continue;
      done[r] = 1;
      group[m++] = r;
      if (m == kSmallLinearMaxRows) {
        add_group(*p, group, m, x, ldx, k, n, n0, n1, y, ldy, scratch);
        m = 0;
      }
    }
    if (m > 0) add_group(*p, group, m, x, ldx, k, n, n0, n1, y, ldy, scratch);
  }
}

LoraRows lora_rows(at::TensorList a, at::TensorList b, at::IntArrayRef row_slots, int64_t n, int64_t k,
                   const char* what) {
  TORCH_CHECK(a.size() == b.size(), "sllm_cpu: ", what, " needs as many LoRA B matrices as A matrices");
  LoraRows out;
  out.pairs.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].numel() == 0 && b[i].numel() == 0) continue;  // this adapter leaves the projection alone
    const int64_t r = a[i].dim() == 2 ? a[i].size(0) : -1;
    TORCH_CHECK(r >= 1 && a[i].scalar_type() == at::kFloat && b[i].scalar_type() == at::kFloat &&
                    a[i].is_contiguous() && b[i].is_contiguous() && a[i].device().is_cpu() &&
                    b[i].device().is_cpu() && a[i].size(1) == k && b[i].dim() == 2 && b[i].size(0) == n &&
                    b[i].size(1) == r,
                "sllm_cpu: ", what, ": LoRA A must be contiguous float32 [r, ", k, "] and B [", n, ", r]");
    out.pairs[i] = LoraPair{a[i].data_ptr<float>(), b[i].data_ptr<float>(), r, small_linear_kernel(k),
                            small_linear_kernel(r)};
  }
  const int64_t rows = static_cast<int64_t>(row_slots.size());
  out.rows.assign(static_cast<size_t>(rows), nullptr);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t slot = row_slots[i];
    TORCH_CHECK(slot >= -1 && slot < static_cast<int64_t>(a.size()), "sllm_cpu: ", what, ": LoRA slot ", slot,
                " out of range");
    if (slot >= 0 && out.pairs[slot].a != nullptr) {
      out.rows[i] = &out.pairs[slot];
      out.max_rank = std::max(out.max_rank, out.pairs[slot].rank);
    }
  }
  return out;
}

// y [T, N] += each row's adapter delta; `a`/`b` hold one A [r, K] / B [N, r] per adapter slot (empty
// tensors where an adapter leaves this projection alone) and row_slots[t] the row's slot, -1 for none.
void lora_add_(at::Tensor& y, const at::Tensor& x_in, at::TensorList a, at::TensorList b, at::IntArrayRef row_slots) {
  TORCH_CHECK(y.device().is_cpu() && y.scalar_type() == at::kFloat && y.dim() == 2 && y.stride(1) == 1,
              "sllm_cpu: lora_add_ takes a float32 y [T, N] with unit column stride");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && x_in.dim() == 2 && x_in.size(0) == y.size(0),
              "sllm_cpu: lora_add_ takes a float32 x [T, K]");
  const at::Tensor x = x_in.stride(1) == 1 ? x_in : x_in.contiguous();
  const int64_t t = y.size(0), n = y.size(1), k = x.size(1);
  TORCH_CHECK(static_cast<int64_t>(row_slots.size()) == t, "sllm_cpu: lora_add_ needs one LoRA slot per row");
  const LoraRows rows = lora_rows(a, b, row_slots, n, k, "lora_add_");
  if (rows.max_rank == 0) return;
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t ldx = x.stride(0), ldy = y.stride(0);
  // Columns split across threads in blocks large enough to pay for the fork; every thread shrinks all
  // its rows again (rank x K per row: small next to the expand's N x rank).
  at::parallel_for(0, (n + 63) / 64, 4, [&](int64_t c0, int64_t c1) {
    std::vector<float> scratch(static_cast<size_t>(lora_scratch_floats(k, n, rows.max_rank)));
    lora_add_columns(rows.rows.data(), xp, t, ldx, k, n, c0 * 64, std::min(n, c1 * 64), yp, ldy, scratch.data());
  });
}

}  // namespace sllm_cpu

TORCH_LIBRARY_FRAGMENT(sllm_cpu, m) {
  m.def("lora_add_(Tensor(a!) y, Tensor x, Tensor[] a, Tensor[] b, int[] row_slots) -> ()");
}

TORCH_LIBRARY_IMPL(sllm_cpu, CPU, m) { m.impl("lora_add_", &sllm_cpu::lora_add_); }

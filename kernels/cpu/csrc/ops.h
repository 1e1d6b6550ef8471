// The library's ops as C++ functions, for ops that compose others (decode_layers.cpp) without going
// through the dispatcher. Each is registered under the same name in `torch.ops.sllm_cpu`.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>
#include <vector>

#include "decode_attention.h"
#include "isa.h"
#include "lora_delta.h"

namespace sllm_cpu {

// The path for an op's `isa` argument: "auto" picks under the ceiling (isa.h); "generic", "avx2" or
// "avx512" names one, which the CPU and the operand size `n` must allow (tests and benchmarks).
Isa choose_isa(c10::string_view requested, int64_t n);

// The rows of a decode problem in row sets (decode_attention.h): sorted by their block tables (so rows
// that share blocks sit together, a prompt's rows in order), cut where two neighbours share no block,
// and the runs cut again into sets of at most kMaxSetRows rows, more of them while the batch has fewer
// than about four tasks per thread. `shared` is false when no set has two rows: the mode is then no use.
// A DecodeProblem points into it.
struct RowSets {
  std::vector<int32_t> rows;
  std::vector<int64_t> start;
  int64_t max_rows = 0;
  bool shared = false;
};
RowSets find_row_sets(const int32_t* tables, int64_t stride, const int32_t* lens, int64_t batch, int64_t block_size,
                      int64_t num_kv_heads, int team);

// The decode attention problem over these caches for `num_q_heads` query heads, checked (every block a
// sequence reads exists), in row-set mode when `sets` (which must outlive it) has shared rows. `tables`
// and `lens` are int32 and contiguous, and must outlive it; q, out, ALiBi slopes and the partition
// buffers are the caller's; plan_partitions comes after.
DecodeProblem decode_problem(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& tables,
                             const at::Tensor& lens, int64_t num_q_heads, int64_t head_dim, const RowSets* sets);
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                  const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                                  const std::optional<at::Tensor>& alibi_slopes, c10::string_view isa,
                                  int64_t sliding_window, bool shared_prefixes, bool split_contexts);
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                      const at::Tensor& weight, double eps);
void rotary_embedding(const at::Tensor& positions, at::Tensor& q, at::Tensor& k, const at::Tensor& cos_sin_cache);
void store_kv(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
              const at::Tensor& slot_mapping);
at::Tensor small_linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias);
// x [M, K] float32 times a weight [N, K] kept in GGUF blocks (uint8 rows; `qtype` a GGML type id).
// Checks a GGUF-quantized weight [N, K] as quantized_linear reads it.
void check_quantized_weight(const at::Tensor& data, int64_t qtype, int64_t n, int64_t k);
at::Tensor quantized_linear(const at::Tensor& x, const at::Tensor& data, int64_t qtype, int64_t n, int64_t k,
                            const std::optional<at::Tensor>& bias);
// Each row's LoRA pair for a projection [n, k]: `a`/`b` one A [r, k] / B [n, r] per adapter slot (empty
// where the adapter leaves the projection alone), row_slots[i] row i's slot (-1: none); checked.
LoraRows lora_rows(at::TensorList a, at::TensorList b, at::IntArrayRef row_slots, int64_t n, int64_t k,
                   const char* what);

}  // namespace sllm_cpu

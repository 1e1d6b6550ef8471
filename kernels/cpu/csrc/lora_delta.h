// Per-row LoRA deltas for a projection, on the few-row kernels: rows of one step carry different adapters
// (or none), and each row adds its own `(x A^T) B^T` (the scale folded into B) to the base output, the
// Punica / S-LoRA idea on the CPU. Used inside the one-call decode op (decode_layers.cpp) and by the op
// `lora_add_` for the Python layer loop. No torch headers (see decode_attention.h).
#pragma once

#include <cstdint>
#include <vector>

#include "small_linear.h"

namespace sllm_cpu {

// One adapter's matrices for one projection [N, K]: A [rank, K] and B [N, rank], float32, row-major.
struct LoraPair {
  const float* a = nullptr;
  const float* b = nullptr;
  int64_t rank = 0;
  SmallLinearKernel shrink = nullptr;  // picked for K
  SmallLinearKernel expand = nullptr;  // picked for rank
};

// One projection's pairs for a step: one per adapter slot (null matrices where that adapter leaves the
// projection alone) and each row's pair (null: no delta on that row).
struct LoraRows {
  std::vector<LoraPair> pairs;
  std::vector<const LoraPair*> rows;
  int64_t max_rank = 0;  // 0: no row has a delta here
};

// Floats of scratch `lora_add_columns` needs for inner size K, output width N and ranks up to R.
inline int64_t lora_scratch_floats(int64_t k, int64_t n, int64_t r) { return kSmallLinearMaxRows * (k + r + n); }

// y[i, n0:n1] += (x_i A^T) B[n0:n1]^T for every row i of x [rows, K] whose pair (`pairs[i]`) is not null;
// y is [rows, N] with row stride ldy. Rows that share a pair go through the kernels together, up to
// kSmallLinearMaxRows at a time, so each A and B is read once per group. `scratch` holds
// lora_scratch_floats(K, N, R) floats.
void lora_add_columns(const LoraPair* const* pairs, const float* x, int64_t rows, int64_t ldx, int64_t k,
                      int64_t n, int64_t n0, int64_t n1, float* y, int64_t ldy, float* scratch);

}  // namespace sllm_cpu

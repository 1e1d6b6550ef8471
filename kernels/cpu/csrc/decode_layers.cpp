// The op `torch.ops.sllm_cpu.decode_layers`: every decoder layer of a Llama-family model (Qwen3's q/k
// norms, Granite's residual multiplier, layers without RoPE and sliding windows included) and the final
// norm for a decode step of 1 to kDecodeMaxRows float32 rows, in one call that opens one OpenMP parallel
// region. A row is one token whose attention reads its own block table up to its own context length, so
// a speculative verify step (a sequence's last token and its drafts, each row seeing the rows before it,
// whose keys and values are stored before any row attends) is a decode step too.
// Its reference is the model's own Python layer loop (engine/models/llama.py), which it must match.
//
// Why one region: at batch 1 a step of the default model (30 layers, ~2 MB of quantized weights each)
// is a few milliseconds of weight streaming, and the same ops as ATen-level calls each allocated their
// output and opened their own parallel region: ~240 fork/joins per step at tens of microseconds each,
// about as long as the matmuls. Here every op runs on raw pointers into buffers allocated once per call,
// split across the team (matmuls by output columns, attention by (sequence, KV head, context partition)
// task, rotary and the KV store by heads, SiLU-and-mul by columns), with a barrier only where the next
// op reads what other threads wrote: five per layer. Each thread recomputes RMSNorm into its own copy
// of h (a few hundred flops a row) instead of splitting it, which saves two barriers per layer, and
// adds the residual to the output columns it computed itself.
//
// The kernels are the ATen-level ops' own (small_linear.h, quantized_linear.h, decode_attention.h,
// fused_ops.h) on the same instruction-set paths, and every value is computed by the same arithmetic
// whatever the thread count or split, so the result is those ops' (SiLU-and-mul aside, whose exp is
// the C library's here and ATen's vectorised one in the layer loop).
//
// Rows may carry LoRA adapters (the optional lora_* arguments, engine/lora.py): each thread adds its rows'
// deltas to the columns of each projection it computed (lora_delta.h), so adapters cost no barrier.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "decode_attention.h"
#include "fused_ops.h"
#include "lora_delta.h"
#include "isa.h"
#include "ops.h"
#include "quantized_linear.h"
#include "small_linear.h"

namespace sllm_cpu {
namespace {

// Rows of one call: a verify step of one sequence with up to 7 drafts. The quantized kernels read each
// weight once for all of them (kQuantMaxRows); float32 weights take passes of kSmallLinearMaxRows.
constexpr int64_t kDecodeMaxRows = 8;

// One weight matrix [N, K] of a layer as the kernels read it: float32 rows (`type` 0, GGML's F32) or
// GGUF blocks (`type` a GGML quantized type), with its kernel picked once per call.
struct Matrix {
  const void* w = nullptr;
  int64_t type = 0;
  int64_t k = 0;
  int64_t row_bytes = 0;
  const float* bias = nullptr;
  SmallLinearKernel small = nullptr;
  QuantizedKernel quantized = nullptr;
  // A fused matrix whose parts differ in type (a Q4_K_M file's Q4_K q and k beside a Q6_K v) keeps them
  // apart: rows from `split` on are `tail`'s (kernels/quantized.py's StackedWeight).
  const Matrix* tail = nullptr;
  int64_t split = 0;

  // Columns [n0, n1) of y = x W^T (+ bias) for `rows` rows of x, in passes of as many rows as the
  // kernel serves with one read of the weight.
  void columns(const float* x, int64_t rows, int64_t ldx, int64_t n0, int64_t n1, float* y, int64_t ldy) const {
    if (tail != nullptr && n1 > split) {
      tail->columns(x, rows, ldx, std::max(n0, split) - split, n1 - split, y + split, ldy);
      n1 = std::min(n1, split);
    }
    if (n0 >= n1) return;
    const int64_t pass = type == 0 ? kSmallLinearMaxRows : kQuantMaxRows;
    for (int64_t r0 = 0; r0 < rows; r0 += pass) {
      const int64_t m = std::min(pass, rows - r0);
      if (type == 0) {
        small(x + r0 * ldx, m, ldx, static_cast<const float*>(w), k, bias, n0, n1, y + r0 * ldy, ldy);
      } else {
        quantized(x + r0 * ldx, m, ldx, k, static_cast<const uint8_t*>(w), type, row_bytes, bias, n0, n1,
                  y + r0 * ldy, ldy);
      }
    }
  }
};

Matrix matrix(const at::Tensor& w, int64_t type, int64_t n, int64_t k, const char* name, const at::Tensor& bias) {
  Matrix m;
  m.type = type;
  m.k = k;
  if (type == 0) {
    TORCH_CHECK(w.device().is_cpu() && w.scalar_type() == at::kFloat && w.is_contiguous() && w.dim() == 2 &&
                    w.size(0) == n && w.size(1) == k,
                "sllm_cpu: decode_layers' ", name, " weight must be contiguous float32 [", n, ", ", k, "]");
    m.small = small_linear_kernel(k);
  } else {
    check_quantized_weight(w, type, n, k);
    m.row_bytes = w.size(1);
    m.quantized = quantized_linear_kernel();  // a decode call has at most kQuantMaxRows rows
  }
  m.w = w.data_ptr();
  if (bias.defined()) {
    TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.numel() == n,
                "sllm_cpu: decode_layers' ", name, " bias must be contiguous float32 [", n, "]");
    m.bias = bias.data_ptr<float>();
  }
  return m;
}

const float* norm_weight(const at::Tensor& w, int64_t hidden) {
  TORCH_CHECK(w.device().is_cpu() && w.scalar_type() == at::kFloat && w.is_contiguous() && w.dim() == 1 &&
                  w.size(0) == hidden,
              "sllm_cpu: decode_layers' norm weights must be contiguous float32 [hidden]");
  return w.data_ptr<float>();
}

struct Layer {
  const float* in_norm;
  const float* post_norm;
  const float* q_norm = nullptr;  // per-head RMSNorm of q and k before RoPE (Qwen3), or none
  const float* k_norm = nullptr;
  bool rotate = true;  // false: a layer without RoPE (SmolLM3)
  Matrix qkv, o, gate_up, down;
  DecodeProblem attention;
  void* k_cache;  // of attention.kv_type
  void* v_cache;
  // Per-row LoRA deltas of qkv, o, gate_up and down (null: no row has one on that projection).
  const LoraRows* lora[4] = {};
};

// One head's new key or value into its cache slot, rounded to a 16-bit cache's type as torch's `.to`
// rounds (to nearest, ties to even), so this path and the per-op one (kernels/cache.py) store the same bits.
void store_head(const float* v, void* cache, KvType type, int64_t off, int64_t n) {
  switch (type) {
    case KvType::F32:
      std::copy(v, v + n, static_cast<float*>(cache) + off);
      return;
    case KvType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<c10::BFloat16*>(cache)[off + i] = c10::BFloat16(v[i]);
      return;
    case KvType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<c10::Half*>(cache)[off + i] = c10::Half(v[i]);
      return;
  }
}

// Bytes a row of the matrix takes: its tail's from `split` on.
int64_t row_bytes_at(const Matrix& m, int64_t row) {
  if (m.tail != nullptr && row >= m.split) return row_bytes_at(*m.tail, row - m.split);
  return m.type == 0 ? m.k * static_cast<int64_t>(sizeof(float)) : m.row_bytes;
}

// Thread `tid`'s heads [begin, end) of the qkv projection, split by the bytes of their rows rather than
// their count: a Q4_K_M layer's Q6_K v heads take 46% more than its Q4_K q and k heads, and an even count
// gave them all to the last thread while the first waited at the barrier (Llama-3.2-1B on two threads:
// 0.16 ms a token, 0.08 split by bytes; the Q6_K rows still cost a little more a byte).
std::pair<int64_t, int64_t> share_heads(const Matrix& qkv, int64_t heads, int64_t head_dim, int tid, int team) {
  const auto bytes = [&](int64_t h) { return row_bytes_at(qkv, h * head_dim); };
  int64_t total = 0;
  for (int64_t h = 0; h < heads; ++h) total += bytes(h);
  // Boundary j: the head count whose bytes come nearest j / team of the total.
  const auto boundary = [&](int j) -> int64_t {
    if (j >= team) return heads;
    const int64_t target = total * j / team;
    int64_t h = 0, sum = 0;
    while (h < heads && sum + bytes(h) <= target) sum += bytes(h++);
    if (h < heads && (sum + bytes(h) - target) < target - sum) ++h;
    return h;
  };
  return {boundary(tid), boundary(tid + 1)};
}

// Thread `tid`'s share [begin, end) of n items split over `team` threads in whole units of `unit` items.
std::pair<int64_t, int64_t> share(int64_t n, int64_t unit, int tid, int team) {
  const int64_t units = (n + unit - 1) / unit;
  const int64_t u0 = units * tid / team, u1 = units * (tid + 1) / team;
  return {std::min(n, u0 * unit), std::min(n, u1 * unit)};
}

// Floats rounded up to whole 64-byte lines, so no two threads' buffers share a line.
int64_t lines(int64_t floats) { return (floats + 15) / 16 * 16; }

// The team's barrier between ops. It spins (with the pause hint) and does not sleep, whatever
// OMP_WAIT_POLICY / GOMP_SPINCOUNT say (they are process-wide, so we leave them alone), because the
// gaps between two barriers of a step are microseconds and a futex sleep and wake-up costs tens of
// them; after kSpins rounds it yields the core, so an oversubscribed machine still makes progress
// (on a 2-core machine busy with other jobs, steps took about half as long as with libgomp's barrier).
class SpinBarrier {
 public:
  void wait(int team) {
    const unsigned gen = gen_.load(std::memory_order_relaxed);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == team) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int64_t spins = 0; gen_.load(std::memory_order_acquire) == gen; ++spins) {
      if (spins < kSpins) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  static constexpr int64_t kSpins = 1 << 16;
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<unsigned> gen_{0};
};

// The step's LoRA deltas: `lora_a` / `lora_b` hold, per layer and per projection (qkv, o, gate_up, down),
// one A [r, K] / B [N, r] per adapter slot (empty tensors where that adapter leaves the projection alone),
// and lora_slots[t] is row t's slot (-1: none). Empty lists: no adapter in the step. Entry 4 * i + j is
// layer i's projection j.
std::vector<LoraRows> step_loras(at::TensorList lora_a, at::TensorList lora_b, at::IntArrayRef lora_slots,
                                 int64_t num_layers, int64_t t, int64_t hidden, int64_t qkv_n, int64_t q_size,
                                 int64_t inter) {
  std::vector<LoraRows> out;
  if (lora_a.empty() && lora_b.empty()) return out;
  const int64_t slots = static_cast<int64_t>(lora_a.size()) / (4 * num_layers);
  TORCH_CHECK(slots >= 1 && static_cast<int64_t>(lora_a.size()) == slots * 4 * num_layers &&
                  lora_b.size() == lora_a.size() && static_cast<int64_t>(lora_slots.size()) == t,
              "sllm_cpu: decode_layers needs LoRA A and B per layer, projection and adapter slot, and a slot per row");
  const int64_t ks[] = {hidden, q_size, hidden, inter};
  const int64_t ns[] = {qkv_n, hidden, 2 * inter, hidden};
  out.reserve(static_cast<size_t>(4 * num_layers));
  for (int64_t i = 0; i < 4 * num_layers; ++i) {
    out.push_back(lora_rows(lora_a.slice(i * slots, slots), lora_b.slice(i * slots, slots), lora_slots, ns[i % 4],
                            ks[i % 4], "decode_layers"));
  }
  return out;
}

}  // namespace

// Returns the hidden states after the final norm, [T, hidden]. Weights come per layer in lists; q, k and
// v share one projection (qkv) and gate and up another (gate_up), as the model stores them. `types` holds
// each layer's qkv, o, gate_up and down weight types in that order (0: float32, else GGUF blocks).
// The families past plain Llama: q_norm / k_norm per layer (empty lists: none), `rotary` per layer (0: no
// RoPE there; empty: every layer), `windows` per layer (a sliding window's keys, 0: the whole context;
// empty: none) and `residual_scale`, the factor of each branch before it joins the residual (Granite).
// A fused matrix of two GGUF types comes as its first rows in its list and the rest in `tails`, at
// `tail_slots` (4 * layer + projection, in the order of `types`) with `tail_types`.
at::Tensor decode_layers(const at::Tensor& x_in, const at::Tensor& positions_in, const at::Tensor& cos_sin_cache,
                         at::TensorList in_norm, at::TensorList qkv, at::TensorList qkv_bias, at::TensorList o,
                         at::TensorList post_norm, at::TensorList gate_up, at::TensorList down,
                         at::IntArrayRef types, const at::Tensor& final_norm, at::TensorList k_caches,
                         at::TensorList v_caches, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
                         const at::Tensor& context_lens, double eps, double scale, int64_t num_heads,
                         int64_t num_kv_heads, int64_t head_dim, at::TensorList lora_a, at::TensorList lora_b,
                         at::IntArrayRef lora_slots, at::TensorList q_norm, at::TensorList k_norm,
                         at::IntArrayRef rotary, at::IntArrayRef windows, double residual_scale,
                         at::TensorList tails, at::IntArrayRef tail_slots, at::IntArrayRef tail_types) {
  const size_t num_layers = qkv.size();
  TORCH_CHECK(tail_slots.size() == tails.size() && tail_types.size() == tails.size(),
              "sllm_cpu: decode_layers needs a slot and a type per tail");
  TORCH_CHECK(num_layers >= 1 && in_norm.size() == num_layers && o.size() == num_layers &&
                  post_norm.size() == num_layers && gate_up.size() == num_layers && down.size() == num_layers &&
                  k_caches.size() == num_layers && v_caches.size() == num_layers &&
                  (qkv_bias.empty() || qkv_bias.size() == num_layers) && types.size() == 4 * num_layers &&
                  q_norm.size() == k_norm.size() && (q_norm.empty() || q_norm.size() == num_layers) &&
                  (rotary.empty() || rotary.size() == num_layers) && (windows.empty() || windows.size() == num_layers),
              "sllm_cpu: decode_layers needs one of each weight and cache per layer");
  const int64_t t = x_in.size(0);
  TORCH_CHECK(x_in.dim() == 2 && t >= 1 && t <= kDecodeMaxRows, "sllm_cpu: decode_layers takes 1 to ",
              kDecodeMaxRows, " rows");
  TORCH_CHECK(x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat, "sllm_cpu: decode_layers is float32 only");
  TORCH_CHECK(head_dim % 2 == 0 && num_heads >= 1 && num_kv_heads >= 1, "sllm_cpu: bad head shape");
  const at::Tensor x = x_in.contiguous();
  const int64_t hidden = x.size(1), q_size = num_heads * head_dim, kv_size = num_kv_heads * head_dim;
  // Each matrix slot's tail (kernels/quantized.py's StackedWeight), -1 for none.
  std::vector<int64_t> tail_at(4 * num_layers, -1);
  for (size_t j = 0; j < tails.size(); ++j) {
    TORCH_CHECK(tail_slots[j] >= 0 && tail_slots[j] < static_cast<int64_t>(4 * num_layers),
                "sllm_cpu: decode_layers' tail slot ", tail_slots[j], " is not a matrix of its layers");
    tail_at[tail_slots[j]] = static_cast<int64_t>(j);
  }
  const int64_t gate_up_rows = gate_up[0].size(0) + (tail_at[2] < 0 ? 0 : tails[tail_at[2]].size(0));
  const int64_t qkv_n = q_size + 2 * kv_size, inter = gate_up_rows / 2;

  // The step's inputs, checked once for all layers.
  const at::Tensor positions = positions_in.to(at::kLong).contiguous();
  const at::Tensor slots = slot_mapping.to(at::kLong).contiguous();
  const at::Tensor cos_sin = cos_sin_cache.to(at::kFloat).contiguous();
  const at::Tensor tables = block_tables.to(at::kInt).contiguous();
  const at::Tensor lens = context_lens.to(at::kInt).contiguous();
  TORCH_CHECK(positions.numel() == t && slots.numel() == t && tables.dim() == 2 && tables.size(0) == t,
              "sllm_cpu: decode_layers needs one position, slot and block table per row");
  TORCH_CHECK(cos_sin.dim() == 2 && cos_sin.size(1) == head_dim, "sllm_cpu: cos_sin_cache must be [max_position, D]");
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t r = 0; r < t; ++r) {
    TORCH_CHECK(pos[r] >= 0 && pos[r] < cos_sin.size(0), "sllm_cpu: position ", pos[r], " outside the rotary cache");
  }

  std::vector<Layer> layers(num_layers);
  // Matrix `slot` (4 * layer + projection) of n rows: the weight alone, or its first rows and a tail of
  // another type where `tail_slots` names the slot.
  std::vector<Matrix> tail_matrices;
  tail_matrices.reserve(tails.size());  // the layers point into it: no reallocation
  const auto stacked = [&](const at::Tensor& w, int64_t type, int64_t n, int64_t k, const char* name,
                           const at::Tensor& bias, int64_t slot) {
    const int64_t j = tail_at[slot];
    if (j < 0) return matrix(w, type, n, k, name, bias);
    const int64_t split = w.size(0);
    TORCH_CHECK(split > 0 && split < n && tails[j].dim() == 2, "sllm_cpu: decode_layers' ", name,
                " parts must split its ", n, " rows");
    Matrix head = matrix(w, type, split, k, name, bias.defined() ? bias.slice(0, 0, split) : bias);
    tail_matrices.push_back(matrix(tails[j], tail_types[j], n - split, k, name,
                                   bias.defined() ? bias.slice(0, split, n) : bias));
    head.tail = &tail_matrices.back();
    head.split = split;
    return head;
  };
  // One plan for every layer (the task split and buffers are layer 0's; the rows' tables are the same).
  const int threads = std::max(1, at::get_num_threads());
  TORCH_CHECK(k_caches[0].dim() == 4, "sllm_cpu: decode_layers needs caches [num_blocks, block_size, Hkv, D]");
  const RowSets sets = find_row_sets(tables.data_ptr<int32_t>(), tables.size(1), lens.data_ptr<int32_t>(), t,
                                     k_caches[0].size(1), num_kv_heads, threads);
  for (size_t i = 0; i < num_layers; ++i) {
    Layer& l = layers[i];
    const at::Tensor& kc = k_caches[i];
    const at::Tensor& vc = v_caches[i];
    TORCH_CHECK(kc.dim() == 4 && kc.size(2) == num_kv_heads,
                "sllm_cpu: decode_layers needs caches [num_blocks, block_size, Hkv, D]");
    l.attention = decode_problem(kc, vc, tables, lens, num_heads, head_dim, &sets);
    for (int64_t r = 0; r < t; ++r) {
      TORCH_CHECK(slot[r] < kc.size(0) * kc.size(1), "sllm_cpu: slot ", slot[r], " outside the KV cache");
    }
    l.k_cache = kc.data_ptr();  // float32, bfloat16 or float16: decode_problem checked the type
    l.v_cache = vc.data_ptr();
    l.in_norm = norm_weight(in_norm[i], hidden);
    l.post_norm = norm_weight(post_norm[i], hidden);
    if (!q_norm.empty()) {
      l.q_norm = norm_weight(q_norm[i], head_dim);
      l.k_norm = norm_weight(k_norm[i], head_dim);
    }
    l.rotate = rotary.empty() || rotary[i] != 0;
    if (!windows.empty()) {
      TORCH_CHECK(windows[i] >= 0, "sllm_cpu: a sliding window must be >= 0");
      l.attention.sliding_window = windows[i];
    }
    plan_partitions(l.attention, true);
    const int64_t* type = types.data() + 4 * i;
    const at::Tensor none;
    l.qkv = stacked(qkv[i], type[0], qkv_n, hidden, "qkv", qkv_bias.empty() ? none : qkv_bias[i], 4 * i);
    l.o = stacked(o[i], type[1], hidden, q_size, "o", none, 4 * i + 1);
    l.gate_up = stacked(gate_up[i], type[2], 2 * inter, hidden, "gate_up", none, 4 * i + 2);
    l.down = stacked(down[i], type[3], hidden, inter, "down", none, 4 * i + 3);
  }
  const float* final_w = norm_weight(final_norm, hidden);
  const std::vector<LoraRows> loras = step_loras(lora_a, lora_b, lora_slots, static_cast<int64_t>(num_layers), t,
                                                 hidden, qkv_n, q_size, inter);
  int64_t lora_rank = 0;
  for (size_t i = 0; i < loras.size(); ++i) {
    if (loras[i].max_rank > 0) layers[i / 4].lora[i % 4] = &loras[i];
    lora_rank = std::max(lora_rank, loras[i].max_rank);
  }

  // Every buffer of the step, in one allocation: the shared ones, then one block per thread.
  const DecodeProblem& plan = layers[0].attention;
  const int64_t parts = plan.num_parts, part_slots = parts > 1 ? t * num_heads * parts : 0;
  const int64_t own_h = lines(t * hidden), own_scratch = lines(scratch_floats(plan));
  const int64_t own_attn = parts > 1 ? lines(t * q_size) : 0;
  const int64_t lora_k = std::max({hidden, q_size, inter}), lora_n = std::max({hidden, qkv_n, 2 * inter});
  const int64_t own_lora = lora_rank > 0 ? lines(lora_scratch_floats(lora_k, lora_n, lora_rank)) : 0;
  const int64_t own = own_h + own_scratch + own_attn + own_lora;
  const int64_t sizes[] = {lines(t * hidden),    lines(t * hidden), lines(t * qkv_n),
                           lines(t * q_size),    lines(t * q_size), lines(t * 2 * inter),
                           lines(t * inter),     lines(part_slots * (head_dim + 2))};
  int64_t shared = 0;
  for (int64_t n : sizes) shared += n;
  at::Tensor buffer = at::empty({shared + threads * own}, x.options());
  at::Tensor out = at::empty({t, hidden}, x.options());
  float* residual = buffer.data_ptr<float>();
  float* y = residual + sizes[0];
  float* qkv_out = y + sizes[1];
  float* q = qkv_out + sizes[2];
  float* attn = q + sizes[3];
  float* gate_up_out = attn + sizes[4];
  float* act = gate_up_out + sizes[5];
  float* partials = act + sizes[6];
  float* own_base = partials + sizes[7];
  std::copy(x.data_ptr<float>(), x.data_ptr<float>() + t * hidden, residual);
  for (Layer& l : layers) {
    l.attention.q = q;
    l.attention.out = attn;
    l.attention.part_acc = partials;
    l.attention.part_max = partials + part_slots * head_dim;
    l.attention.part_sum = l.attention.part_max + part_slots;
  }

  const DecodeTask task = decode_task_for(pick_isa(isa_ceiling(), head_dim));
  const int64_t heads = num_heads + 2 * num_kv_heads, half = head_dim / 2;
  const float* cs = cos_sin.data_ptr<float>();
  const float eps_f = static_cast<float>(eps), scale_f = static_cast<float>(scale);
  const float branch_f = static_cast<float>(residual_scale);
  float* out_p = out.data_ptr<float>();

  SpinBarrier barrier;
#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num(), team = omp_get_num_threads();
    const auto team_barrier = [&] { barrier.wait(team); };
    float* h = own_base + tid * own;
    const Scratch scratch = scratch_at(plan, h + own_h);
    float* attn_own = h + own_h + own_scratch;
    float* lora_scratch = attn_own + own_attn;
    // Adds the rows' adapter deltas to columns [n0, n1) of a projection this thread just computed.
    const auto lora = [&](const Layer& l, int j, const float* in, int64_t k, int64_t n, int64_t n0, int64_t n1,
                          float* out) {
      if (l.lora[j] != nullptr) lora_add_columns(l.lora[j]->rows.data(), in, t, k, k, n, n0, n1, out, n, lora_scratch);
    };
    // This thread's heads of the qkv projection (rotated and stored by it), its columns of the hidden
    // state and of the intermediate one, and its attention tasks.
    int64_t hd0, hd1, c0, c1, g0, g1, a0, a1;
    std::tie(c0, c1) = share(hidden, 16, tid, team);
    std::tie(g0, g1) = share(inter, 16, tid, team);
    std::tie(a0, a1) = decode_task_range(plan, tid, team);
    const auto add_residual = [&] {
      for (int64_t r = 0; r < t; ++r)
        for (int64_t j = c0; j < c1; ++j) {
          // Scaled, rounded, then added: the layer loop's `x * scale` before its fused residual add (a
          // factor of 1 leaves y exact).
          const float branch = y[r * hidden + j] * branch_f;
          residual[r * hidden + j] = branch + residual[r * hidden + j];
        }
    };
    for (const Layer& l : layers) {
      std::tie(hd0, hd1) = share_heads(l.qkv, heads, head_dim, tid, team);
      for (int64_t r = 0; r < t; ++r) rms_norm_row(residual + r * hidden, l.in_norm, h + r * hidden, hidden, eps_f);
      l.qkv.columns(h, t, hidden, hd0 * head_dim, hd1 * head_dim, qkv_out, qkv_n);
      lora(l, 0, h, hidden, qkv_n, hd0 * head_dim, hd1 * head_dim, qkv_out);
      for (int64_t r = 0; r < t; ++r) {
        const float* row = cs + pos[r] * head_dim;
        for (int64_t hd = hd0; hd < hd1; ++hd) {
          float* v = qkv_out + r * qkv_n + hd * head_dim;
          if (hd < num_heads) {  // q, pre-scaled for the scores as paged_decode_attention scales it
            if (l.q_norm != nullptr) rms_norm_row(v, l.q_norm, v, head_dim, eps_f);
            if (l.rotate) rotate_head(v, half, row);
            float* qh = q + r * q_size + hd * head_dim;
            for (int64_t i = 0; i < head_dim; ++i) qh[i] = v[i] * scale_f;
          } else if (hd < num_heads + num_kv_heads) {
            if (l.k_norm != nullptr) rms_norm_row(v, l.k_norm, v, head_dim, eps_f);
            if (l.rotate) rotate_head(v, half, row);
            const int64_t off = kv_slot_offset(slot[r], hd - num_heads, plan.block_size, l.attention.k_strides);
            if (slot[r] >= 0) store_head(v, l.k_cache, l.attention.kv_type, off, head_dim);
          } else if (slot[r] >= 0) {
            const int64_t off = kv_slot_offset(slot[r], hd - num_heads - num_kv_heads, plan.block_size,
                                               l.attention.v_strides);
            store_head(v, l.v_cache, l.attention.kv_type, off, head_dim);
          }
        }
      }
      team_barrier();
      run_decode_tasks(l.attention, task, a0, a1, scratch);
      team_barrier();
      const float* o_in = attn;
      if (parts > 1) {  // every thread merges all partitions into its own copy: cheaper than a barrier
        DecodeProblem merged = l.attention;
        merged.out = attn_own;
        combine_partitions(merged, 0, t * num_heads);
        o_in = attn_own;
      }
      l.o.columns(o_in, t, q_size, c0, c1, y, hidden);
      lora(l, 1, o_in, q_size, hidden, c0, c1, y);
      add_residual();
      team_barrier();
      for (int64_t r = 0; r < t; ++r) rms_norm_row(residual + r * hidden, l.post_norm, h + r * hidden, hidden, eps_f);
      // Gate columns [g0, g1) and the up columns they pair with, so this thread's SiLU-and-mul needs no
      // other thread's output.
      l.gate_up.columns(h, t, hidden, g0, g1, gate_up_out, 2 * inter);
      l.gate_up.columns(h, t, hidden, inter + g0, inter + g1, gate_up_out, 2 * inter);
      lora(l, 2, h, hidden, 2 * inter, g0, g1, gate_up_out);
      lora(l, 2, h, hidden, 2 * inter, inter + g0, inter + g1, gate_up_out);
      for (int64_t r = 0; r < t; ++r) {
        const float* gu = gate_up_out + r * 2 * inter;
        silu_and_mul_row(gu + g0, gu + inter + g0, act + r * inter + g0, g1 - g0);
      }
      team_barrier();
      l.down.columns(act, t, inter, c0, c1, y, hidden);
      lora(l, 3, act, inter, hidden, c0, c1, y);
      add_residual();
      team_barrier();
    }
    if (tid == 0) {
      for (int64_t r = 0; r < t; ++r) rms_norm_row(residual + r * hidden, final_w, out_p + r * hidden, hidden, eps_f);
    }
  }
  return out;
}

}  // namespace sllm_cpu

TORCH_LIBRARY_FRAGMENT(sllm_cpu, m) {
  m.def(
      "decode_layers(Tensor x, Tensor positions, Tensor cos_sin_cache, Tensor[] in_norm, Tensor[] qkv, "
      "Tensor[] qkv_bias, Tensor[] o, Tensor[] post_norm, Tensor[] gate_up, Tensor[] down, int[] types, "
      "Tensor final_norm, "
      "Tensor(a!)[] k_caches, Tensor(b!)[] v_caches, Tensor slot_mapping, Tensor block_tables, "
      "Tensor context_lens, float eps, float scale, int num_heads, int num_kv_heads, int head_dim, "
      "Tensor[] lora_a, Tensor[] lora_b, int[] lora_slots, Tensor[] q_norm, Tensor[] k_norm, "
      "int[] rotary, int[] windows, float residual_scale, Tensor[] tails, int[] tail_slots, int[] tail_types) "
      "-> Tensor");
}

TORCH_LIBRARY_IMPL(sllm_cpu, CPU, m) { m.impl("decode_layers", &sllm_cpu::decode_layers); }

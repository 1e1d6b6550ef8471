// The op: `torch.ops.sllm_cpu.paged_decode_attention`, decode attention (one query token per sequence)
// read straight out of the paged KV cache through the block tables, with no gathered copy of K/V.
// Parallel over (sequence, KV head) with at::parallel_for, so it follows torch.set_num_threads; a batch
// of one or two sequences is also split along its context (see num_partitions).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "decode_attention.h"
#include "ops.h"

namespace sllm_cpu {

namespace {

// Context partitions per (sequence, KV head). A decode batch of one or two sequences has fewer tasks
// than a machine has threads (SmolLM2 has 3 KV heads), and a task's K/V stream, cold in memory after
// the weights went through the caches, is read at a fraction of the bandwidth that several streams
// get; so such batches are split into partitions of at least kMinPartitionTokens tokens until there
// are about kTargetTasks tasks. Independent of the thread count, so results do not depend on it.
constexpr int64_t kTargetTasks = 8;
constexpr int64_t kMinPartitionTokens = 128;
// Rows a set holds at most: its query heads' scores and accumulators stay in L1/L2 (8 rows x 3 heads x
// 64 floats), and 8 reads of a shared block become one.
constexpr int64_t kMaxSetRows = 8;
// A row set is worth its gathering only with some tasks per thread to balance.
constexpr int64_t kTasksPerThread = 4;

int64_t num_partitions(int64_t tasks, int64_t max_ctx) {
  if (tasks >= kTargetTasks) return 1;
  const int64_t wanted = (kTargetTasks + tasks - 1) / tasks;
  return std::max<int64_t>(1, std::min<int64_t>(wanted, max_ctx / kMinPartitionTokens));
}

KvType kv_type(const at::Tensor& cache) {
  switch (cache.scalar_type()) {
    case at::kFloat:
      return KvType::F32;
    case at::kBFloat16:
      return KvType::BF16;
    case at::kHalf:
      return KvType::F16;
    default:
      TORCH_CHECK(false, "sllm_cpu: unsupported KV cache dtype ", cache.scalar_type());
  }
}

}  // namespace

DecodeTask decode_task_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return decode_task_avx512;
    case Isa::Avx2:
      return decode_task_avx2;
    default:
      return decode_task_generic;
  }
}

RowSets find_row_sets(const int32_t* tables, int64_t stride, const int32_t* lens, int64_t batch, int64_t block_size,
                      int64_t num_kv_heads, int team) {
  RowSets s;
  if (batch < 2) return s;
  // Every block a row reads counts, its last partly filled one too: the rows of one prompt share it.
  const auto used = [&](int64_t b) { return (static_cast<int64_t>(lens[b]) + block_size - 1) / block_size; };
  std::vector<int32_t> order(batch);
  for (int64_t b = 0; b < batch; ++b) order[b] = static_cast<int32_t>(b);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return std::lexicographical_compare(tables + x * stride, tables + x * stride + used(x), tables + y * stride,
                                        tables + y * stride + used(y));
  });
  // Runs of neighbours that start with the same block.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t i = 0, j = 1; j <= batch; ++j) {
    if (j < batch && used(order[j - 1]) > 0 && used(order[j]) > 0 &&
        tables[order[j - 1] * stride] == tables[order[j] * stride])
      continue;
    runs.emplace_back(i, j);
    i = j;
  }
  // Sets per run: at most kMaxSetRows rows each, then split further (the run with the most rows a set
  // first) while the batch is short of tasks; a set of one row is a row on its own.
  std::vector<int64_t> sets(runs.size());
  int64_t total = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    sets[r] = (runs[r].second - runs[r].first + kMaxSetRows - 1) / kMaxSetRows;
    total += sets[r];
  }
  while (total * num_kv_heads < kTasksPerThread * team) {
    size_t widest = 0;
    int64_t widest_rows = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
      const int64_t per_set = (runs[r].second - runs[r].first + sets[r] - 1) / sets[r];
      if (per_set > widest_rows) widest = r, widest_rows = per_set;
    }
    if (widest_rows <= 1) break;
    ++sets[widest];
    ++total;
  }
  s.start.push_back(0);
  for (size_t r = 0; r < runs.size(); ++r) {
    const int64_t first = runs[r].first, rows = runs[r].second - first;
    for (int64_t k = 0; k < sets[r]; ++k) {  // near-equal sets, in sorted order
      const int64_t lo = first + rows * k / sets[r], hi = first + rows * (k + 1) / sets[r];
      for (int64_t i = lo; i < hi; ++i) s.rows.push_back(order[i]);
      s.start.push_back(static_cast<int64_t>(s.rows.size()));
      s.max_rows = std::max(s.max_rows, hi - lo);
    }
  }
  s.shared = s.max_rows > 1;
  return s;
}

void plan_partitions(DecodeProblem& p, bool allow_split) {
  if (p.num_sets > 0) {
    p.num_parts = 1;
    p.partition_tokens = p.max_ctx;
    return;
  }
  p.num_parts = allow_split ? num_partitions(p.batch * p.num_kv_heads, p.max_ctx) : 1;
  p.partition_tokens = (p.max_ctx + p.num_parts - 1) / p.num_parts;
  p.partition_tokens = (p.partition_tokens + p.block_size - 1) / p.block_size * p.block_size;
}

int64_t num_decode_tasks(const DecodeProblem& p) {
  if (p.num_sets > 0) return p.num_sets * p.num_kv_heads;
  return p.batch * p.num_kv_heads * p.num_parts;
}

namespace {

// Task i as (sequence, KV head, part); a row set's task as (set, KV head, 0).
struct TaskIndex {
  int64_t seq, kv_head, part;
};

TaskIndex task_index(const DecodeProblem& p, int64_t i) {
  const int64_t heads = p.num_kv_heads;
  if (p.num_sets > 0) return {i / heads, i % heads, 0};
  const int64_t parts = p.num_parts;
  return {i / (heads * parts), i / parts % heads, i % parts};
}

// Query rows times keys of task i, plus a block's worth of keys per row for its fixed costs.
int64_t task_work(const DecodeProblem& p, int64_t i) {
  const TaskIndex t = task_index(p, i);
  const int64_t group = p.num_q_heads / p.num_kv_heads;
  if (p.num_sets > 0) {
    int64_t keys = 0;
    for (int64_t r = p.set_start[t.seq]; r < p.set_start[t.seq + 1]; ++r)
      keys += p.context_lens[p.set_rows[r]] + p.block_size;
    return group * keys;
  }
  const int64_t ctx = p.context_lens[t.seq], begin = t.part * p.partition_tokens;
  const int64_t keys = p.num_parts > 1 ? std::max<int64_t>(0, std::min(p.partition_tokens, ctx - begin)) : ctx;
  return group * (keys + p.block_size);
}

}  // namespace

std::pair<int64_t, int64_t> decode_task_range(const DecodeProblem& p, int tid, int team) {
  const int64_t tasks = num_decode_tasks(p);
  int64_t total = 0;
  for (int64_t i = 0; i < tasks; ++i) total += task_work(p, i);
  // Thread j starts at the first task whose work before it reaches j / team of the total.
  const auto start = [&](int j) {
    if (j >= team) return tasks;
    const int64_t goal = total * j / team;
    int64_t done = 0, i = 0;
    for (; i < tasks && done < goal; ++i) done += task_work(p, i);
    return i;
  };
  return {start(tid), start(tid + 1)};
}

int64_t scratch_floats(const DecodeProblem& p) {
  const int64_t group = p.num_q_heads / p.num_kv_heads, bs = p.block_size, d = p.head_dim;
  const int64_t rows = p.num_sets > 0 ? group * p.max_set_rows : group;
  return rows * bs + 2 * bs * d + rows * d + 3 * rows + (p.num_sets > 0 ? rows * d : 0);
}

Scratch scratch_at(const DecodeProblem& p, float* buf) {
  const int64_t group = p.num_q_heads / p.num_kv_heads, bs = p.block_size, d = p.head_dim;
  const int64_t rows = p.num_sets > 0 ? group * p.max_set_rows : group;
  Scratch s{};
  s.scores = buf;
  s.k_rows = s.scores + rows * bs;
  s.v_rows = s.k_rows + bs * d;
  s.acc = s.v_rows + bs * d;
  s.row_max = s.acc + rows * d;
  s.row_sum = s.row_max + rows;
  s.alpha = s.row_sum + rows;
  s.q_rows = p.num_sets > 0 ? s.alpha + rows : nullptr;
  return s;
}

void run_decode_tasks(const DecodeProblem& p, DecodeTask task, int64_t begin, int64_t end, const Scratch& s) {
  for (int64_t i = begin; i < end; ++i) {
    const TaskIndex t = task_index(p, i);
    task(p, t.seq, t.kv_head, t.part, s);
  }
}

// Merges the partitions' online-softmax states: each accumulator and sum is rescaled from its own
// running max to the overall one, as the block loop does between blocks.
void combine_partitions(const DecodeProblem& p, int64_t row0, int64_t row1) {
  const int64_t parts = p.num_parts, d = p.head_dim;
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t first = row * parts;
    float m = -INFINITY;
    for (int64_t j = 0; j < parts; ++j) m = std::max(m, p.part_max[first + j]);
    float* out = p.out + row * d;
    std::fill(out, out + d, 0.0f);
    if (m == -INFINITY) continue;  // an empty context: zeros, as the unsplit task writes
    float sum = 0.0f;
    for (int64_t j = 0; j < parts; ++j) {
      const float w = std::exp(p.part_max[first + j] - m);
      sum += p.part_sum[first + j] * w;
      const float* acc = p.part_acc + (first + j) * d;
      for (int64_t i = 0; i < d; ++i) out[i] += acc[i] * w;
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < d; ++i) out[i] *= inv;
  }
}

DecodeProblem decode_problem(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& tables,
                             const at::Tensor& lens, int64_t num_q_heads, int64_t head_dim, const RowSets* sets) {
  TORCH_CHECK(k_cache.device().is_cpu() && v_cache.device().is_cpu(), "sllm_cpu: CPU tensors only");
  TORCH_CHECK(k_cache.dim() == 4 && v_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(),
              "sllm_cpu: caches must be [num_blocks, block_size, Hkv, D]");
  TORCH_CHECK(k_cache.scalar_type() == v_cache.scalar_type(), "sllm_cpu: K and V caches differ in dtype");
  TORCH_CHECK(k_cache.stride(3) == 1 && v_cache.stride(3) == 1, "sllm_cpu: head_dim must be contiguous");
  const int64_t num_blocks = k_cache.size(0), block_size = k_cache.size(1), num_kv_heads = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == head_dim, "sllm_cpu: q and cache head sizes differ");
  TORCH_CHECK(num_q_heads % num_kv_heads == 0, "sllm_cpu: Hq must be a multiple of Hkv");
  TORCH_CHECK(tables.scalar_type() == at::kInt && lens.scalar_type() == at::kInt && tables.is_contiguous() &&
                  lens.is_contiguous() && tables.dim() == 2,
              "sllm_cpu: block tables must be int32 [B, n] and context lengths int32 [B]");
  const int64_t batch = tables.size(0);
  TORCH_CHECK(lens.numel() == batch, "sllm_cpu: context_lens must be [B]");
  const int32_t* table_ptr = tables.data_ptr<int32_t>();
  const int32_t* len_ptr = lens.data_ptr<int32_t>();
  // Every block a task will read must exist: a bad table would otherwise read outside the cache.
  int64_t max_ctx = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* row = table_ptr + b * tables.size(1);
    const int64_t used = (static_cast<int64_t>(len_ptr[b]) + block_size - 1) / block_size;
    TORCH_CHECK(len_ptr[b] >= 0 && used <= tables.size(1), "sllm_cpu: context length ", len_ptr[b],
                " exceeds the block table of sequence ", b);
    for (int64_t j = 0; j < used; ++j) {
      TORCH_CHECK(row[j] >= 0 && row[j] < num_blocks, "sllm_cpu: block id ", row[j], " out of range");
    }
    max_ctx = std::max<int64_t>(max_ctx, len_ptr[b]);
  }
  DecodeProblem p{};
  p.batch = batch;
  p.max_ctx = max_ctx;
  if (sets != nullptr && sets->shared) {
    p.num_sets = static_cast<int64_t>(sets->start.size()) - 1;
    p.set_rows = sets->rows.data();
    p.set_start = sets->start.data();
    p.max_set_rows = sets->max_rows;
  }
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.kv_type = kv_type(k_cache);
  for (int i = 0; i < 3; ++i) {
    p.k_strides[i] = k_cache.stride(i);
    p.v_strides[i] = v_cache.stride(i);
  }
  p.block_tables = table_ptr;
  p.block_table_stride = tables.size(1);
  p.context_lens = len_ptr;
  p.num_q_heads = num_q_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  return p;
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                  const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                                  const std::optional<at::Tensor>& alibi_slopes, c10::string_view isa,
                                  int64_t sliding_window, bool shared_prefixes, bool split_contexts) {
  TORCH_CHECK(q.device().is_cpu(), "sllm_cpu: CPU tensors only");
  TORCH_CHECK(q.dim() == 3, "sllm_cpu: q must be [B, Hq, D]");
  const int64_t batch = q.size(0), num_q_heads = q.size(1), head_dim = q.size(2);
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == batch, "sllm_cpu: block_tables must be [B, n]");
  const Isa path = choose_isa(isa, head_dim);
  const at::Tensor tables = block_tables.to(at::kInt).contiguous();
  const at::Tensor lens = context_lens.to(at::kInt).contiguous();
  const int team = std::max(1, at::get_num_threads());
  RowSets sets;
  if (shared_prefixes) {
    sets = find_row_sets(tables.data_ptr<int32_t>(), tables.size(1), lens.data_ptr<int32_t>(), batch,
                         k_cache.size(1), k_cache.size(2), team);
  }
  DecodeProblem p = decode_problem(k_cache, v_cache, tables, lens, num_q_heads, head_dim, &sets);
  TORCH_CHECK(sliding_window >= 0, "sllm_cpu: sliding_window must be >= 0");
  p.sliding_window = sliding_window;
  at::Tensor slopes;
  if (alibi_slopes.has_value()) {
    slopes = alibi_slopes->to(at::kFloat).contiguous();
    TORCH_CHECK(slopes.numel() == num_q_heads, "sllm_cpu: alibi_slopes must be [Hq]");
    p.alibi_slopes = slopes.data_ptr<float>();
  }
  plan_partitions(p, split_contexts);

  // Scaling q once costs B*Hq*D multiplies instead of one per score.
  const at::Tensor qf = (q.to(at::kFloat) * scale).contiguous();
  at::Tensor out = at::empty({batch, num_q_heads, head_dim}, q.options().dtype(at::kFloat));
  p.q = qf.data_ptr<float>();
  p.out = out.data_ptr<float>();
  at::Tensor partials;
  if (p.num_parts > 1) {
    const int64_t slots = batch * num_q_heads * p.num_parts;
    partials = at::empty({slots * (head_dim + 2)}, q.options().dtype(at::kFloat));
    p.part_acc = partials.data_ptr<float>();
    p.part_max = p.part_acc + slots * head_dim;
    p.part_sum = p.part_max + slots;
  }

  const DecodeTask task = decode_task_for(path);
  const int64_t floats = scratch_floats(p);
  at::parallel_for(0, team, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(floats);
    for (int64_t tid = begin; tid < end; ++tid) {
      const auto range = decode_task_range(p, static_cast<int>(tid), team);
      run_decode_tasks(p, task, range.first, range.second, scratch_at(p, buf.data()));
    }
  });
  if (p.num_parts > 1) {
    at::parallel_for(0, batch * num_q_heads, 16, [&](int64_t begin, int64_t end) { combine_partitions(p, begin, end); });
  }
  return out.to(q.scalar_type());
}

}  // namespace sllm_cpu

TORCH_LIBRARY(sllm_cpu, m) {
  m.def(
      "paged_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
      "Tensor context_lens, float scale, Tensor? alibi_slopes=None, str isa='auto', int sliding_window=0, "
      "bool shared_prefixes=True, bool split_contexts=True) -> Tensor");
}

TORCH_LIBRARY_IMPL(sllm_cpu, CPU, m) { m.impl("paged_decode_attention", &sllm_cpu::paged_decode_attention); }

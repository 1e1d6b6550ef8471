// The block loop of paged decode attention, written once over the vector primitives of an ISA.
//
// Each translation unit that includes this header supplies an `Ops` struct (generic C++ or AVX-512
// intrinsics) and instantiates `decode_task_impl` with it; everything here has internal linkage, so
// the two instantiations never meet in the linker.
//
// One task is one sequence and one KV head: the `group` query heads that share the head are processed
// together, so each K and V row is read from memory once for all of them (in row-set mode, a set of
// sequences and one KV head). The context is walked one
// physical block at a time through the block table, with a FlashAttention-style online softmax: a
// running max and sum per query head, and the accumulator rescaled whenever the max grows, so no
// score vector longer than one block ever exists.
#pragma once

#include <cmath>
#include <cstdint>

#include "decode_attention.h"

namespace sllm_cpu {
namespace {

template <KvType KT>
struct KvElem {
  using type = uint16_t;  // bf16 and fp16 are converted bit patterns
};
template <>
struct KvElem<KvType::F32> {
  using type = float;
};

// The block's rows as fp32: in place for an fp32 cache, else converted into `buf` (one pass, so the
// score and value loops, which read each row `group` times, only touch L1-resident fp32).
template <class Ops, KvType KT>
inline const float* block_rows(const typename KvElem<KT>::type* src, int64_t slot_stride, int64_t n, int64_t d,
                               float* buf, int64_t* row_stride) {
  if constexpr (KT == KvType::F32) {
    *row_stride = slot_stride;
    return src;
  } else {
    for (int64_t t = 0; t < n; ++t) Ops::template to_float<KT>(src + t * slot_stride, buf + t * d, d);
    *row_stride = d;
    return buf;
  }
}

template <class Elem>
inline void prefetch_rows(const Elem* rows, int64_t stride, int64_t n, int64_t d) {
  constexpr int64_t line = 64 / sizeof(Elem);  // elements per cache line
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; i += line) __builtin_prefetch(rows + t * stride + i);
}

// One block's scores turned into probabilities for `group` query rows, each row's running max and sum
// updated and its accumulator's rescale factor left in s.alpha[g]. Rows are `heads` query heads of one
// sequence after another (`row_at(g / heads)`: its context length and first key), so a set's rows and a
// row's own heads run through the same arithmetic, row by row.
template <class Ops, class RowAt>
inline void block_softmax(const DecodeProblem& p, int64_t first_head, int64_t heads, int64_t group, int64_t start,
                          int64_t n, float* row_max, float* row_sum, const Scratch& s, RowAt row_at) {
  for (int64_t g = 0; g < group; ++g) {
    int64_t ctx, first_key;
    row_at(g / heads, &ctx, &first_key);
    float* sg = s.scores + g * n;
    for (int64_t t = 0; start + t < first_key; ++t) sg[t] = -INFINITY;
    if (p.alibi_slopes != nullptr) {
      // ALiBi: -slope * distance from the query, which sits at position ctx - 1.
      const float slope = p.alibi_slopes[first_head + g % heads];
      for (int64_t t = 0; t < n; ++t) sg[t] -= slope * static_cast<float>(ctx - 1 - (start + t));
    }
    const float block_max = Ops::max(sg, n);
    const float new_max = block_max > row_max[g] ? block_max : row_max[g];
    s.alpha[g] = std::exp(row_max[g] - new_max);  // 0 on the first block (max was -inf)
    row_sum[g] = row_sum[g] * s.alpha[g] + Ops::exp_shifted(sg, n, new_max);
    row_max[g] = new_max;
  }
}

inline int64_t first_key_of(const DecodeProblem& p, int64_t ctx) {
  return p.sliding_window > 0 && ctx > p.sliding_window ? ctx - p.sliding_window : 0;
}

// Writes `heads` output rows of `seq` from their accumulators.
inline void write_rows(const DecodeProblem& p, int64_t seq, int64_t first_head, int64_t heads, const float* acc,
                       const float* row_sum) {
  const int64_t d = p.head_dim;
  float* out = p.out + (seq * p.num_q_heads + first_head) * d;
  for (int64_t g = 0; g < heads; ++g) {
    // An empty context (never scheduled by the engine) yields zeros rather than 0/0.
    const float inv = row_sum[g] > 0.0f ? 1.0f / row_sum[g] : 0.0f;
    for (int64_t i = 0; i < d; ++i) out[g * d + i] = acc[g * d + i] * inv;
  }
}

// A row set's task (decode_attention.h): block index by block index, the set's rows that read the same
// physical block there (neighbours, as the set is sorted by tables) take it together, rows with as many
// of its slots in their context in one call of the score and value loops.
template <class Ops, KvType KT>
inline void set_task_impl(const DecodeProblem& p, int64_t set, int64_t kv_head, const Scratch& s) {
  using Elem = typename KvElem<KT>::type;
  const int64_t heads = p.num_q_heads / p.num_kv_heads, d = p.head_dim, bs = p.block_size;
  const int64_t first_head = kv_head * heads;
  const int32_t* rows = p.set_rows + p.set_start[set];
  const int64_t count = p.set_start[set + 1] - p.set_start[set];
  const Elem* k_head = static_cast<const Elem*>(p.k_cache) + kv_head * p.k_strides[2];
  const Elem* v_head = static_cast<const Elem*>(p.v_cache) + kv_head * p.v_strides[2];
  const auto ctx_of = [&](int64_t r) { return static_cast<int64_t>(p.context_lens[rows[r]]); };
  const auto table_of = [&](int64_t r) { return p.block_tables + rows[r] * p.block_table_stride; };
  int64_t blocks = 0;
  for (int64_t r = 0; r < count; ++r) {
    const float* src = p.q + (rows[r] * p.num_q_heads + first_head) * d;
    for (int64_t i = 0; i < heads * d; ++i) s.q_rows[r * heads * d + i] = src[i];
    const int64_t used = (ctx_of(r) + bs - 1) / bs;
    blocks = used > blocks ? used : blocks;
  }
  for (int64_t g = 0; g < count * heads; ++g) {
    s.row_max[g] = -INFINITY;
    s.row_sum[g] = 0.0f;
  }
  for (int64_t i = 0; i < count * heads * d; ++i) s.acc[i] = 0.0f;
  // Row r reads block b when some of its context is there, past the blocks wholly before its window.
  const auto reads = [&](int64_t r, int64_t b) {
    const int64_t ctx = ctx_of(r);
    return b * bs < ctx && b >= first_key_of(p, ctx) / bs;
  };
  const auto slots = [&](int64_t r, int64_t b) { return ctx_of(r) - b * bs < bs ? ctx_of(r) - b * bs : bs; };
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * bs;
    for (int64_t r = 0; r < count;) {
      if (!reads(r, b)) {
        ++r;
        continue;
      }
      const int32_t block = table_of(r)[b];
      int64_t e = r + 1, most = slots(r, b);
      for (; e < count && reads(e, b) && table_of(e)[b] == block; ++e) most = slots(e, b) > most ? slots(e, b) : most;
      if (b + 1 < blocks && start + bs < ctx_of(r)) {  // the next block of this run's first row (see below)
        const int64_t next = table_of(r)[b + 1];
        prefetch_rows(k_head + next * p.k_strides[0], p.k_strides[1], bs, d);
        prefetch_rows(v_head + next * p.v_strides[0], p.v_strides[1], bs, d);
      }
      int64_t k_stride = 0, v_stride = 0;
      const float* k = block_rows<Ops, KT>(k_head + block * p.k_strides[0], p.k_strides[1], most, d, s.k_rows, &k_stride);
      const float* v = block_rows<Ops, KT>(v_head + block * p.v_strides[0], p.v_strides[1], most, d, s.v_rows, &v_stride);
      for (int64_t i = r; i < e;) {
        const int64_t n = slots(i, b);
        int64_t j = i + 1;
        while (j < e && slots(j, b) == n) ++j;
        const int64_t g0 = i * heads, group = (j - i) * heads;
        Ops::scores(s.q_rows + g0 * d, group, d, k, k_stride, n, s.scores);
        block_softmax<Ops>(p, first_head, heads, group, start, n, s.row_max + g0, s.row_sum + g0, s,
                           [&](int64_t row, int64_t* ctx, int64_t* first_key) {
                             *ctx = ctx_of(i + row);
                             *first_key = first_key_of(p, *ctx);
                           });
        Ops::accumulate(s.scores, s.alpha, group, d, v, v_stride, n, s.acc + g0 * d);
        i = j;
      }
      r = e;
    }
  }
  for (int64_t r = 0; r < count; ++r)
    write_rows(p, rows[r], first_head, heads, s.acc + r * heads * d, s.row_sum + r * heads);
}

// A sequence's task over context partition `part` (or its whole context), or in row-set mode a set's.
template <class Ops, KvType KT>
inline void decode_task_impl(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s) {
  if (p.num_sets > 0) return set_task_impl<Ops, KT>(p, seq, kv_head, s);
  using Elem = typename KvElem<KT>::type;
  const int64_t group = p.num_q_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const int64_t bs = p.block_size;
  const int64_t first_head = kv_head * group;
  const int64_t ctx = p.context_lens[seq];
  const float* q = p.q + (seq * p.num_q_heads + first_head) * d;
  const int32_t* table = p.block_tables + seq * p.block_table_stride;
  const Elem* k_head = static_cast<const Elem*>(p.k_cache) + kv_head * p.k_strides[2];
  const Elem* v_head = static_cast<const Elem*>(p.v_cache) + kv_head * p.v_strides[2];

  for (int64_t g = 0; g < group; ++g) {
    s.row_max[g] = -INFINITY;
    s.row_sum[g] = 0.0f;
  }
  for (int64_t i = 0; i < group * d; ++i) s.acc[i] = 0.0f;

  // This task's slice of the context; partitions are whole blocks, so `start` stays block-aligned.
  // A sliding window drops the keys before `first_key`: the blocks wholly before it are skipped, and
  // the earlier slots of the block holding it score -inf.
  const int64_t first_key = first_key_of(p, ctx);
  int64_t begin = 0, end = ctx;
  if (p.num_parts > 1) {
    begin = part * p.partition_tokens;
    end = ctx < begin + p.partition_tokens ? ctx : begin + p.partition_tokens;
  }
  if (begin < first_key / bs * bs) begin = first_key / bs * bs;
  for (int64_t start = begin; start < end; start += bs) {
    const int64_t n = end - start < bs ? end - start : bs;
    const int64_t block = table[start / bs];
    if (start + bs < end) {
      // Blocks are scattered (a 16-token fp32 block of one head is exactly one 4 KiB page), so the
      // hardware prefetcher, which stops at page boundaries, never runs ahead: fetch the next block's
      // K and V while this one is computed.
      const int64_t next = table[start / bs + 1];
      const int64_t next_n = end - start - bs < bs ? end - start - bs : bs;
      prefetch_rows(k_head + next * p.k_strides[0], p.k_strides[1], next_n, d);
      prefetch_rows(v_head + next * p.v_strides[0], p.v_strides[1], next_n, d);
    }
    int64_t k_stride = 0;
    int64_t v_stride = 0;
    const float* k = block_rows<Ops, KT>(k_head + block * p.k_strides[0], p.k_strides[1], n, d, s.k_rows, &k_stride);
    Ops::scores(q, group, d, k, k_stride, n, s.scores);
    block_softmax<Ops>(p, first_head, group, group, start, n, s.row_max, s.row_sum, s,
                       [&](int64_t, int64_t* c, int64_t* f) {
                         *c = ctx;
                         *f = first_key;
                       });
    const float* v = block_rows<Ops, KT>(v_head + block * p.v_strides[0], p.v_strides[1], n, d, s.v_rows, &v_stride);
    Ops::accumulate(s.scores, s.alpha, group, d, v, v_stride, n, s.acc);
  }

  if (p.num_parts > 1) {
    for (int64_t g = 0; g < group; ++g) {
      const int64_t slot = (seq * p.num_q_heads + first_head + g) * p.num_parts + part;
      p.part_max[slot] = s.row_max[g];  // -inf and 0 for a partition past the end of the context
      p.part_sum[slot] = s.row_sum[g];
      for (int64_t i = 0; i < d; ++i) p.part_acc[slot * d + i] = s.acc[g * d + i];
    }
    return;
  }
  write_rows(p, seq, first_head, group, s.acc, s.row_sum);
}

}  // namespace
}  // namespace sllm_cpu

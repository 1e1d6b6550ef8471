// The block loop of paged decode attention, written once over the vector primitives of an ISA.
//
// Each translation unit that includes this header supplies an `Ops` struct (generic C++ or AVX-512
// intrinsics) and instantiates `decode_task_impl` with it; everything here has internal linkage, so
// the two instantiations never meet in the linker.
//
// One task is one sequence and one KV head: the `group` query heads that share the head are processed
// together, so each K and V row is read from memory once for all of them. The context is walked one
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

// A shared-prefix task (part < p.shared_parts; `seq` is then its group) is the same loop over `group`
// rows of every row of the group at once: their query rows gathered, the keys a part of the prefix every
// table of the group starts with.
template <class Ops, KvType KT>
inline void decode_task_impl(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s) {
  using Elem = typename KvElem<KT>::type;
  const int64_t heads = p.num_q_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const int64_t bs = p.block_size;
  const int64_t first_head = kv_head * heads;
  const bool shared = part < p.shared_parts;
  const int64_t grp = shared ? seq : -1;
  const int32_t* members = shared ? p.group_rows + p.group_start[grp] : nullptr;
  const int64_t group = shared ? heads * (p.group_start[grp + 1] - p.group_start[grp]) : heads;  // query rows
  const int64_t ctx = shared ? p.group_tokens[grp] : p.context_lens[seq];
  const float* q = p.q + (seq * p.num_q_heads + first_head) * d;
  if (shared) {
    for (int64_t r = 0; r < group / heads; ++r) {
      const float* src = p.q + (members[r] * p.num_q_heads + first_head) * d;
      for (int64_t i = 0; i < heads * d; ++i) s.q_rows[r * heads * d + i] = src[i];
    }
    q = s.q_rows;
    seq = members[0];  // the group's blocks, through its first row's table
  }
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
  // the earlier slots of the block holding it score -inf (never in shared-prefix mode).
  const int64_t first_key = p.sliding_window > 0 && ctx > p.sliding_window ? ctx - p.sliding_window : 0;
  // (No std::min here: a library template instantiated under this file's AVX-512 target could be the
  // copy the linker keeps for the portable path too.)
  const auto least = [](int64_t a, int64_t b) { return a < b ? a : b; };
  int64_t begin = 0, end = ctx;
  if (shared) {  // this part of the group's prefix
    begin = least(ctx, part * p.group_chunk[grp]);
    end = least(ctx, begin + p.group_chunk[grp]);
  } else if (p.shared_parts > 0) {  // the row's own rest, after its group's prefix
    begin = p.row_shared[seq];
    if (begin == 0) {  // in no group: its shared parts are empty
      for (int64_t g = 0; g < heads; ++g)
        for (int64_t j = 0; j < p.shared_parts; ++j) {
          const int64_t slot = (seq * p.num_q_heads + first_head + g) * p.num_parts + j;
          p.part_max[slot] = -INFINITY;
          p.part_sum[slot] = 0.0f;
        }
    }
  } else if (p.num_parts > 1) {
    begin = part * p.partition_tokens;
    end = least(ctx, begin + p.partition_tokens);
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
    for (int64_t g = 0; g < group; ++g) {
      float* sg = s.scores + g * n;
      for (int64_t t = 0; start + t < first_key; ++t) sg[t] = -INFINITY;
      if (p.alibi_slopes != nullptr) {
        // ALiBi: -slope * distance from the query, which sits at position ctx - 1.
        const float slope = p.alibi_slopes[first_head + g];
        for (int64_t t = 0; t < n; ++t) sg[t] -= slope * static_cast<float>(ctx - 1 - (start + t));
      }
      const float block_max = Ops::max(sg, n);
      const float new_max = block_max > s.row_max[g] ? block_max : s.row_max[g];
      s.alpha[g] = std::exp(s.row_max[g] - new_max);  // 0 on the first block (max was -inf)
      s.row_sum[g] = s.row_sum[g] * s.alpha[g] + Ops::exp_shifted(sg, n, new_max);
      s.row_max[g] = new_max;
    }
    const float* v = block_rows<Ops, KT>(v_head + block * p.v_strides[0], p.v_strides[1], n, d, s.v_rows, &v_stride);
    Ops::accumulate(s.scores, s.alpha, group, d, v, v_stride, n, s.acc);
  }

  if (p.num_parts > 1) {
    for (int64_t g = 0; g < group; ++g) {  // a shared task's row g is member g / heads's head g % heads
      const int64_t row_seq = shared ? members[g / heads] : seq;
      const int64_t slot = (row_seq * p.num_q_heads + first_head + g % heads) * p.num_parts + part;
      p.part_max[slot] = s.row_max[g];  // -inf and 0 for a partition past the end of the context
      p.part_sum[slot] = s.row_sum[g];
      for (int64_t i = 0; i < d; ++i) p.part_acc[slot * d + i] = s.acc[g * d + i];
    }
    return;
  }
  float* out = p.out + (seq * p.num_q_heads + first_head) * d;
  for (int64_t g = 0; g < group; ++g) {
    // An empty context (never scheduled by the engine) yields zeros rather than 0/0.
    const float inv = s.row_sum[g] > 0.0f ? 1.0f / s.row_sum[g] : 0.0f;
    for (int64_t i = 0; i < d; ++i) out[g * d + i] = s.acc[g * d + i] * inv;
  }
}

}  // namespace
}  // namespace sllm_cpu

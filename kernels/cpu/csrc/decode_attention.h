// Paged decode attention on the CPU: the problem description shared by the op (decode_attention.cpp)
// and the per-ISA task bodies (decode_task_generic.cpp, decode_task_avx512.cpp).
//
// This header includes no torch headers on purpose: the AVX2 and AVX-512 translation units compile
// everything after their includes for their instruction set, and any inline library function it instantiated could be merged by
// the linker with the generic copy and then crash on a CPU without AVX-512.
#pragma once

#include <cstdint>
#include <utility>

#include "isa.h"

namespace sllm_cpu {

enum class KvType { F32, BF16, F16 };

struct DecodeProblem {
  const float* q;  // [B, Hq, D], already multiplied by the softmax scale
  float* out;      // [B, Hq, D]
  const void* k_cache;  // logical [num_blocks, block_size, Hkv, D], any strides with unit last stride
  const void* v_cache;
  KvType kv_type;
  int64_t k_strides[3];  // block, slot, head (elements)
  int64_t v_strides[3];
  const int32_t* block_tables;  // [B, max_blocks]
  int64_t block_table_stride;
  const int32_t* context_lens;  // [B]
  const float* alibi_slopes;    // [Hq] or nullptr
  int64_t sliding_window;       // a row reads only its last that many keys; 0: its whole context
  int64_t num_q_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t block_size;
  // Split-context ("flash-decoding") mode, for batches with fewer (sequence, KV head) tasks than
  // threads: task `part` covers tokens [part * partition_tokens, +partition_tokens) and writes its
  // unnormalised accumulator, running max and sum to the part_* arrays, indexed
  // [(seq * num_q_heads + head) * num_parts + part]; the op combines them. num_parts 1: no split.
  int64_t num_parts;
  int64_t partition_tokens;
  float* part_acc;  // [..., D]
  float* part_max;
  float* part_sum;
  int64_t batch;    // sequences (rows of q)
  int64_t max_ctx;  // the longest context
  // Row-set ("shared-prefix") mode, for rows whose block tables share physical blocks (the rows of one
  // prompt; prompts over one system prompt or schema under prefix caching): rows sorted by their tables
  // and cut into sets (ops.h's find_row_sets), a task per set and KV head. The task walks block index
  // by block index, and each block its rows share is read (and converted to fp32) once for all their
  // query heads; each row keeps its own running max, sum and accumulator over its whole context, so
  // its arithmetic is exactly that of the row computed alone, whatever set it falls in. No partitions.
  int64_t num_sets;          // 0: off
  const int32_t* set_rows;   // the rows, set after set
  const int64_t* set_start;  // [num_sets + 1]: where each set's rows start in set_rows
  int64_t max_set_rows;
};

// Per-thread work buffers, sized by the op for one task's query rows: `group` of them, or in
// row-set mode `group` for every row of the largest set.
struct Scratch {
  float* scores;  // [group, block_size]: scores, then probabilities, of the current block
  float* k_rows;  // [block_size, D]: the current K block in fp32 when the cache is not fp32
  float* v_rows;  // [block_size, D]
  float* acc;     // [group, D]: running sum of probability-weighted V rows
  float* row_max;  // [group]: running max of the scores
  float* row_sum;  // [group]: running sum of exp(score - row_max)
  float* alpha;    // [group]: rescale factor of acc for the current block
  float* q_rows;   // [rows, D]: a set's query rows, gathered (row-set mode only)
};

// Attention of one sequence's query heads that share KV head `kv_head`, over context partition `part`;
// writes their output rows (or, when split, their partial results).
void decode_task_generic(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s);
void decode_task_avx2(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s);
void decode_task_avx512(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s);
using DecodeTask = void (*)(const DecodeProblem& p, int64_t seq, int64_t kv_head, int64_t part, const Scratch& s);
DecodeTask decode_task_for(Isa isa);

// The work of one call, in raw-pointer pieces with no threading of their own: the op runs them under
// at::parallel_for, decode_layers.cpp inside its one parallel region.
//
// Sets p.num_parts and p.partition_tokens, or keeps the row sets: a batch whose rows share blocks is
// done in row sets, one short of tasks without them is split along its contexts when `allow_split`
// (which changes a row's summation order: off where a row's result must not depend on its batch).
void plan_partitions(DecodeProblem& p, bool allow_split);
// Tasks in a batch: sequences x KV heads x context partitions, or in row-set mode sets x KV heads.
int64_t num_decode_tasks(const DecodeProblem& p);
// Thread `tid` of `team`'s contiguous range of those tasks, split by their work (query rows times keys).
std::pair<int64_t, int64_t> decode_task_range(const DecodeProblem& p, int tid, int team);
// Floats of one thread's Scratch, and the Scratch laid out over `buf` (that many floats).
int64_t scratch_floats(const DecodeProblem& p);
Scratch scratch_at(const DecodeProblem& p, float* buf);
// Tasks [begin, end) of num_decode_tasks, one after the other on the calling thread.
void run_decode_tasks(const DecodeProblem& p, DecodeTask task, int64_t begin, int64_t end, const Scratch& s);
// Output rows [row0, row1) of the [B * Hq] rows from the partitions' states (split mode only).
void combine_partitions(const DecodeProblem& p, int64_t row0, int64_t row1);

}  // namespace sllm_cpu

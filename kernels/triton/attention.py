"""Attention over the paged KV cache (contract: `kernels.attention`).

Three kernels:
- `_decode_kernel`: one query token per sequence. A program owns (sequence, KV head, partition) and
  processes all `Hq // Hkv` query heads that share the KV head together, so each K/V tile is read
  from memory once per KV head. A tile spans `BLOCK_N` tokens and may cross pages: every token's
  physical block is looked up in the block table.
- split-K (flash-decoding): with few sequences and long contexts the (sequence, KV head) grid does not
  fill the GPU, so the context is cut into partitions of `partition_size` tokens, each program writes
  a normalised partial output and its log-sum-exp, and `_decode_reduce_kernel` combines them.
- `_prefill_kernel`: varlen packed causal attention, FlashAttention-2 style (grid over query tiles,
  query heads and sequences, online softmax over key tiles). K/V always come through the block table,
  so a cached prefix (prefix caching, chunked prefill) is attended to like any other key.

A sliding window W (`USE_WINDOW`) is honoured by where the key loops start, not only by a mask: a decode
program starts at its sequence's window (`ctx - W`), split-K partitions tile the window rather than the
whole context, and a prefill query tile starts at the window of its first query. Blocks wholly before
the window are never read, so a long prompt of a windowed layer costs O(q_len * W), not O(q_len * ctx).

Scores are kept in the log2 domain (`scale * log2(e)`, `exp2`); ALiBi slopes are scaled to match.
Padding query heads up to 16 rows keeps `tl.dot` shapes legal on the GPU."""

import functools
import math

import torch
import triton
import triton.language as tl

LOG2E = math.log2(math.e)

# Tokens per K/V tile. 64 tokens x 128 dims x 2 bytes = 16 KiB per operand tile.
DECODE_BLOCK_N = 64
# Split-K: a partition is at least this many tokens, and when split_k=True comes without a size, this
# many. The automatic choice aims at SPLIT_TARGET_WAVES programs per SM (a guess to tune on the GPU
# with benchmarks/triton_kernels.py, which prints auto, single-pass and split-K side by side).
DECODE_MIN_PARTITION = 256
DECODE_PARTITION_SIZE = 512
SPLIT_TARGET_WAVES = 4


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 inputs must not silently drop to TF32 on the GPU (1e-4 contract); irrelevant for 16-bit.
    return "ieee" if dtype == torch.float32 else "tf32"


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _device_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # the interpreter has no occupancy to fill; tests choose split_k explicitly
    return _num_sms(device.index if device.index is not None else torch.cuda.current_device())


@triton.jit
def _decode_kernel(
    out_ptr,  # [B, Hq, D] (not SPLIT) or float32 partial outputs [B, Hq, P, D] (SPLIT)
    lse_ptr,  # float32 [B, Hq, P], log2-domain log-sum-exp per partition (SPLIT only)
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    context_lens_ptr,
    alibi_ptr,
    scale_log2,
    stride_qb,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_kd,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_vd,
    stride_btb,
    stride_btn,
    stride_ob,
    stride_oh,
    stride_op,
    stride_od,
    stride_lb,
    stride_lh,
    stride_lp,
    num_q_per_kv,
    partition_size,
    window,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    USE_ALIBI: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)

    ctx = tl.load(context_lens_ptr + seq).to(tl.int32)
    # The query sits at ctx - 1 and sees keys from ctx - W on; partitions are laid from there, so every
    # program of a windowed layer works inside the window and none reads a block before it.
    first = tl.maximum(ctx - window, 0) if USE_WINDOW else 0
    if SPLIT:
        start = first + part * partition_size
        end = tl.minimum(ctx, start + partition_size)
    else:
        start = first
        end = ctx

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    g_mask = offs_g < num_q_per_kv
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * num_q_per_kv + offs_g

    q_ptrs = q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=g_mask[:, None] & d_mask[None, :], other=0.0)
    if USE_ALIBI:
        slopes = tl.load(alibi_ptr + heads, mask=g_mask, other=0.0).to(tl.float32) * 1.4426950408889634

    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)

    bt_row = block_tables_ptr + seq * stride_btb
    k_base = k_cache_ptr + kv_head * stride_kh
    v_base = v_cache_ptr + kv_head * stride_vh
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        valid = pos < end
        page = tl.load(bt_row + (pos // PAGE_SIZE) * stride_btn, mask=valid, other=0).to(tl.int64)
        k_tok = page * stride_kb + (pos % PAGE_SIZE) * stride_ks
        v_tok = page * stride_vb + (pos % PAGE_SIZE) * stride_vs
        kv_mask = valid[:, None] & d_mask[None, :]
        k = tl.load(k_base + k_tok[:, None] + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION) * scale_log2  # [G, N]
        if USE_ALIBI:
            s += slopes[:, None] * (pos - (ctx - 1)).to(tl.float32)[None, :]
        s = tl.where(valid[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + v_tok[:, None] + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        v = v.to(q.dtype)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    has_keys = l_i > 0.0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + seq * stride_ob + heads[:, None] * stride_oh + offs_d[None, :] * stride_od
    if SPLIT:
        out_ptrs += part * stride_op
        lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + seq * stride_lb + heads * stride_lh + part * stride_lp, lse, mask=g_mask)
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=g_mask[:, None] & d_mask[None, :])


@triton.jit
def _decode_reduce_kernel(
    out_ptr,
    part_out_ptr,
    lse_ptr,
    context_lens_ptr,
    stride_ob,
    stride_oh,
    stride_od,
    stride_pb,
    stride_ph,
    stride_pp,
    stride_pd,
    stride_lb,
    stride_lh,
    stride_lp,
    partition_size,
    window,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_P: tl.constexpr,
    USE_WINDOW: tl.constexpr,
):
    # Combine partitions: out = sum_p 2^(lse_p - max) * out_p / sum_p 2^(lse_p - max).
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    ctx = tl.load(context_lens_ptr + seq).to(tl.int32)
    num_parts = tl.cdiv(tl.minimum(ctx, window) if USE_WINDOW else ctx, partition_size)
    offs_p = tl.arange(0, BLOCK_P)
    offs_d = tl.arange(0, BLOCK_D)
    p_mask = offs_p < num_parts
    d_mask = offs_d < HEAD_DIM

    lse = tl.load(
        lse_ptr + seq * stride_lb + head * stride_lh + offs_p * stride_lp, mask=p_mask, other=float("-inf")
    )
    lse_max = tl.max(lse, axis=0)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    w = tl.exp2(lse - lse_max)
    denom = tl.sum(w, axis=0)
    part_ptrs = part_out_ptr + seq * stride_pb + head * stride_ph
    part_ptrs = part_ptrs + offs_p[:, None] * stride_pp + offs_d[None, :] * stride_pd
    parts = tl.load(part_ptrs, mask=p_mask[:, None] & d_mask[None, :], other=0.0)
    out = tl.sum(parts * w[:, None], axis=0) / tl.where(denom > 0.0, denom, 1.0)
    tl.store(
        out_ptr + seq * stride_ob + head * stride_oh + offs_d * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=d_mask,
    )


@triton.jit
def _prefill_kernel(
    out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    query_start_loc_ptr,
    context_lens_ptr,
    alibi_ptr,
    scale_log2,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_kd,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_vd,
    stride_btb,
    stride_btn,
    stride_ot,
    stride_oh,
    stride_od,
    num_q_per_kv,
    window,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    USE_ALIBI: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2).to(tl.int64)

    q_start = tl.load(query_start_loc_ptr + seq).to(tl.int32)
    q_len = tl.load(query_start_loc_ptr + seq + 1).to(tl.int32) - q_start
    if tile * BLOCK_M < q_len:
        ctx = tl.load(context_lens_ptr + seq).to(tl.int32)
        prefix = ctx - q_len  # tokens already cached before this step's queries
        kv_head = head // num_q_per_kv

        offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        m_mask = offs_m < q_len
        d_mask = offs_d < HEAD_DIM
        q_pos = prefix + offs_m

        rows = (q_start + offs_m).to(tl.int64)
        q_ptrs = q_ptr + rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=m_mask[:, None] & d_mask[None, :], other=0.0)
        if USE_ALIBI:
            slope = tl.load(alibi_ptr + head).to(tl.float32) * 1.4426950408889634

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

        # Causal: the last query of this tile sees keys [0, prefix + (tile + 1) * BLOCK_M). With a window
        # the tile's first query, at prefix + tile * BLOCK_M, sees nothing before its position - W + 1, and
        # the later queries even less: the loop starts there, so keys behind the window are never loaded.
        kv_end = tl.minimum(ctx, prefix + (tile + 1) * BLOCK_M)
        kv_start = tl.maximum(prefix + tile * BLOCK_M - window + 1, 0) if USE_WINDOW else 0
        bt_row = block_tables_ptr + seq * stride_btb
        k_base = k_cache_ptr + kv_head * stride_kh
        v_base = v_cache_ptr + kv_head * stride_vh
        for n0 in range(kv_start, kv_end, BLOCK_N):
            pos = n0 + offs_n
            valid = pos < kv_end
            page = tl.load(bt_row + (pos // PAGE_SIZE) * stride_btn, mask=valid, other=0).to(tl.int64)
            k_tok = page * stride_kb + (pos % PAGE_SIZE) * stride_ks
            v_tok = page * stride_vb + (pos % PAGE_SIZE) * stride_vs
            kv_mask = valid[:, None] & d_mask[None, :]
            k = tl.load(k_base + k_tok[:, None] + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION) * scale_log2  # [M, N]
            if USE_ALIBI:
                s += slope * (pos[None, :] - q_pos[:, None]).to(tl.float32)
            visible = valid[None, :] & (pos[None, :] <= q_pos[:, None])
            if USE_WINDOW:
                visible &= pos[None, :] > q_pos[:, None] - window
            s = tl.where(visible, s, float("-inf"))

            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_ref = m_new
            if USE_WINDOW:
                # A row whose window starts past this whole key tile has no visible key yet, and
                # exp2(-inf - -inf) is NaN; any finite reference gives alpha = p = 0 instead. With BLOCK_M <=
                # BLOCK_N only padding rows (never stored) get there, but a tuning with BLOCK_M > BLOCK_N
                # would reach real ones. Without a window key 0 is visible to every row from the first tile.
                m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_ref)
            p = tl.exp2(s - m_ref[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + v_tok[:, None] + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PRECISION)
            m_i = m_new

        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        out_ptrs = out_ptr + rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :] * stride_od
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & d_mask[None, :])


def _check_cache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int]:
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    assert k_cache.dim() == 4 and v_cache.shape == k_cache.shape, (
        "caches are [num_blocks, block_size, Hkv, D]"
    )
    num_kv_heads = k_cache.shape[2]
    assert k_cache.shape[3] == head_dim and num_q_heads % num_kv_heads == 0
    return num_kv_heads, num_q_heads // num_kv_heads


def _effective_window(window: int | None, block_tables: torch.Tensor, page_size: int) -> int | None:
    """The window, or None when it cannot cut anything: no context is longer than the block table holds,
    so a window at least that wide compiles and runs the plain kernels."""
    if window is None:
        return None
    assert window >= 1, f"sliding_window must be positive, got {window}"
    return None if window >= block_tables.shape[1] * page_size else int(window)


def paged_decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    alibi_slopes: torch.Tensor | None = None,
    sliding_window: int | None = None,
    *,
    split_k: bool | None = None,
    partition_size: int | None = None,
) -> torch.Tensor:
    """q [B, Hq, D] -> [B, Hq, D]; one query token per sequence at position context_lens[b] - 1.

    `split_k=None` uses flash-decoding when (sequences x KV heads) programs are too few to fill the
    GPU, cutting the context into just enough partitions (of >= DECODE_MIN_PARTITION tokens) to reach
    about SPLIT_TARGET_WAVES programs per SM; True/False force it (tests, benchmarks), and
    `partition_size` (a multiple of 16) overrides the size. No host sync: partitions are planned from
    the block table width, an upper bound of max(context_lens), never from the lengths themselves, or
    from the window when it is shorter: a windowed layer's partitions cover the window only."""
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads, group = _check_cache(q, k_cache, v_cache)
    page_size = k_cache.shape[1]
    out = torch.empty((batch, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    sliding_window = _effective_window(sliding_window, block_tables, page_size)
    # What one query can see: every partition lies inside it.
    max_len = block_tables.shape[1] * page_size if sliding_window is None else sliding_window
    if split_k is None:
        wanted = triton.cdiv(SPLIT_TARGET_WAVES * _device_sms(q.device), batch * num_kv_heads)
        parts = min(wanted, max_len // DECODE_MIN_PARTITION)
        split_k = parts > 1
        if split_k and partition_size is None:
            partition_size = triton.cdiv(triton.cdiv(max_len, parts), DECODE_BLOCK_N) * DECODE_BLOCK_N
    partition_size = partition_size or DECODE_PARTITION_SIZE
    assert partition_size % 16 == 0, "partition_size must be a multiple of 16"
    num_parts = triton.cdiv(max_len, partition_size)
    if num_parts <= 1:
        split_k = False

    block_d = max(16, triton.next_power_of_2(head_dim))
    block_g = max(16, triton.next_power_of_2(group))
    # Tiles divide a partition evenly: 64 tokens, or fewer for the small partitions of the tests.
    block_n = math.gcd(DECODE_BLOCK_N, partition_size) if split_k else DECODE_BLOCK_N
    alibi = alibi_slopes if alibi_slopes is not None else q  # placeholder pointer when unused
    common = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_G=block_g,
        BLOCK_N=block_n,
        PAGE_SIZE=page_size,
        USE_ALIBI=alibi_slopes is not None,
        USE_WINDOW=sliding_window is not None,
        SPLIT=split_k,
        DOT_PRECISION=_dot_precision(q.dtype),
        num_warps=4,
        num_stages=2,
    )
    args = (
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        alibi,
        scale * LOG2E,
        *q.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        *block_tables.stride(),
    )
    if not split_k:
        _decode_kernel[(batch, num_kv_heads, 1)](
            out,
            out,
            *args,
            out.stride(0),
            out.stride(1),
            0,
            out.stride(2),
            0,
            0,
            0,
            group,
            partition_size,
            sliding_window or 0,
            **common,
        )
        return out

    part_out = torch.empty((batch, num_q_heads, num_parts, head_dim), dtype=torch.float32, device=q.device)
    lse = torch.empty((batch, num_q_heads, num_parts), dtype=torch.float32, device=q.device)
    _decode_kernel[(batch, num_kv_heads, num_parts)](
        part_out, lse, *args, *part_out.stride(), *lse.stride(), group, partition_size, sliding_window or 0,
        **common,
    )
    _decode_reduce_kernel[(batch, num_q_heads)](
        out,
        part_out,
        lse,
        context_lens,
        *out.stride(),
        *part_out.stride(),
        *lse.stride(),
        partition_size,
        sliding_window or 0,
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_P=triton.next_power_of_2(num_parts),
        USE_WINDOW=sliding_window is not None,
        num_warps=4,
    )
    return out


def paged_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    alibi_slopes: torch.Tensor | None = None,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Packed varlen causal attention: q [T, Hq, D], query_start_loc [B+1], context_lens [B] -> [T, Hq, D].

    Decode-only batches (every q_len == 1) go to the decode kernel; anything else, including mixed
    batches, runs the prefill kernel, which is exact for q_len == 1 too. `sliding_window` as in
    `kernels.attention`."""
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads, group = _check_cache(q, k_cache, v_cache)
    batch = query_start_loc.shape[0] - 1
    out = torch.empty((num_tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    if num_tokens == 0 or batch == 0:
        return out
    max_q_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())  # the one host sync
    if max_q_len == 1 and num_tokens == batch:
        return paged_decode_attention_triton(
            q, k_cache, v_cache, block_tables, context_lens, scale, alibi_slopes, sliding_window
        )
    sliding_window = _effective_window(sliding_window, block_tables, k_cache.shape[1])

    wide = q.element_size() >= 4  # float32 tiles take twice the shared memory
    block_m = 32 if wide else 64
    block_n = 32 if wide else 64
    grid = (triton.cdiv(max_q_len, block_m), num_q_heads, batch)
    _prefill_kernel[grid](
        out,
        q,
        k_cache,
        v_cache,
        block_tables,
        query_start_loc,
        context_lens,
        alibi_slopes if alibi_slopes is not None else q,
        scale * LOG2E,
        *q.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        *block_tables.stride(),
        *out.stride(),
        group,
        sliding_window or 0,
        HEAD_DIM=head_dim,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        PAGE_SIZE=k_cache.shape[1],
        USE_ALIBI=alibi_slopes is not None,
        USE_WINDOW=sliding_window is not None,
        DOT_PRECISION=_dot_precision(q.dtype),
        num_warps=4,
        num_stages=2,
    )
    return out

"""Attention over the paged KV cache.

Every token's K/V is stored (`kernels.cache.store_kv`) before attention runs, so attention reads the
whole context, cached prefix and new tokens alike, through each sequence's block table. That one
contract covers decode, prefill, chunked prefill and prefix-cache hits.

Shapes: q [T, Hq, D] packed over sequences; `query_start_loc` [B+1] (cu_seqlens of the queries);
`context_lens` [B] = tokens in the cache for each sequence after this step (new ones included), so the
i-th query token of sequence b sits at position context_lens[b] - q_len[b] + i and is causal.
GQA: Hq is a multiple of Hkv; query head h reads KV head h // (Hq // Hkv).
`alibi_slopes` [Hq] adds -slope * (query_pos - key_pos) to the scores (ALiBi) instead of RoPE.
`sliding_window` W (None: the whole context) lets a query see only the W most recent keys, its own
included (key_pos > query_pos - W), as HF's sliding-window masks do (Mistral, Gemma 3's local layers).

The torch functions here are the contract. The public `paged_attention` / `paged_decode_attention` run
Triton on CUDA tensors and the C++ kernel of `kernels.cpu` on CPU tensors when it built."""

import torch
import torch.nn.functional as F

from kernels.cpu import isa
from kernels.cpu.attention import paged_attention_cpu, paged_decode_attention_cpu
from kernels.dispatch import use_cpu_kernels, use_triton


def _gather_heads(cache: torch.Tensor, block_tables: torch.Tensor, length: int) -> torch.Tensor:
    """Block tables [B, max_blocks] -> keys or values [Hkv, B, length, D].

    The engine stores each layer's cache head-major ([Hkv, blocks, block_size, D] underneath the logical
    [blocks, block_size, Hkv, D] view), so one index_select per layer yields each head's context
    contiguously, ready for a batched matmul, with no transpose copy on the CPU."""
    bs, hkv, d = cache.shape[1:]
    num = (length + bs - 1) // bs
    idx = block_tables[:, :num].reshape(-1).long()
    b = block_tables.shape[0]
    return cache.permute(2, 0, 1, 3).index_select(1, idx).view(hkv, b, num * bs, d)[:, :, :length]


def _alibi_bias(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    # [Hq, Q, K]: penalise distance linearly; future keys are masked separately.
    dist = (q_pos[:, None] - k_pos[None, :]).float()
    return -slopes.float()[:, None, None] * dist


def paged_decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    alibi_slopes: torch.Tensor | None = None,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """One query token per sequence: q [B, Hq, D] -> [B, Hq, D].

    GQA as a grouped matmul: the query heads sharing a KV head form the rows of one GEMM against it,
    so K/V are never repeated per query head."""
    b, hq, d = q.shape
    hkv = k_cache.shape[2]
    length = int(context_lens.max())
    k = _gather_heads(k_cache, block_tables, length).to(q.dtype)  # [Hkv, B, L, D]
    v = _gather_heads(v_cache, block_tables, length).to(q.dtype)
    qg = q.reshape(b, hkv, hq // hkv, d).transpose(0, 1)  # [Hkv, B, G, D]
    scores = torch.matmul(qg.float(), k.float().transpose(-1, -2)) * scale  # [Hkv, B, G, L]
    key_pos = torch.arange(length, device=q.device)
    ctx = context_lens.to(q.device).long()
    if alibi_slopes is not None:
        dist = (ctx - 1)[:, None] - key_pos[None, :]  # [B, L]
        slopes = alibi_slopes.float().view(hkv, 1, hq // hkv, 1)
        scores = scores - slopes * dist[None, :, None, :].float()
    outside = key_pos[None, :] >= ctx[:, None]  # [B, L]: slots past each sequence's context
    if sliding_window is not None:
        outside |= key_pos[None, :] < (ctx - sliding_window)[:, None]
    scores.masked_fill_(outside[None, :, None, :], float("-inf"))
    # A zero probability does not cancel what a slot outside the context holds: 0 * NaN or 0 * inf (a
    # recycled block of another request, an fp16 overflow) is NaN. Those V rows are zeroed too.
    v = v.float().masked_fill(outside[None, :, :, None], 0.0)
    out = torch.matmul(scores.softmax(-1), v)  # [Hkv, B, G, D]
    return out.transpose(0, 1).reshape(b, hq, d).to(q.dtype)


def _prefill_one(q, k_cache, v_cache, block_table, ctx: int, scale: float, alibi_slopes, sliding_window):
    n, hq, _ = q.shape
    k = _gather_heads(k_cache, block_table[None], ctx)[:, 0].to(q.dtype)  # [Hkv, ctx, D]
    v = _gather_heads(v_cache, block_table[None], ctx)[:, 0].to(q.dtype)
    qh = q.transpose(0, 1)  # [Hq, n, D]
    gqa = hq != k.shape[0]
    if alibi_slopes is None and ctx == n and (sliding_window is None or sliding_window >= ctx):
        out = F.scaled_dot_product_attention(qh, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    else:
        q_pos = torch.arange(ctx - n, ctx, device=q.device)
        k_pos = torch.arange(ctx, device=q.device)
        causal = k_pos[None, :] <= q_pos[:, None]
        if sliding_window is not None:
            causal &= k_pos[None, :] > q_pos[:, None] - sliding_window
        if alibi_slopes is None:
            mask = causal
        else:
            mask = _alibi_bias(alibi_slopes, q_pos, k_pos).masked_fill(~causal, float("-inf")).to(q.dtype)
        out = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return out.transpose(0, 1)


def paged_attention_ref(
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
    """Variable-length causal attention for a packed batch; see the module docstring."""
    starts = query_start_loc.tolist()
    q_lens = [starts[i + 1] - starts[i] for i in range(len(starts) - 1)]
    if all(n == 1 for n in q_lens):
        return paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale, alibi_slopes,
                                          sliding_window)
    out = torch.empty_like(q)
    decode = [i for i, n in enumerate(q_lens) if n == 1]
    if decode:
        idx = torch.tensor(decode, device=q.device)
        rows = torch.tensor([starts[i] for i in decode], device=q.device)
        out[rows] = paged_decode_attention_ref(
            q[rows], k_cache, v_cache, block_tables[idx], context_lens[idx], scale, alibi_slopes, sliding_window
        )
    ctx_lens = context_lens.tolist()
    for i, n in enumerate(q_lens):
        if n > 1:
            s = starts[i]
            out[s : s + n] = _prefill_one(
                q[s : s + n], k_cache, v_cache, block_tables[i], ctx_lens[i], scale, alibi_slopes, sliding_window
            )
    return out


def paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale, alibi_slopes=None,
                           sliding_window=None):
    if use_triton(q):
        from kernels.triton.attention import paged_decode_attention_triton

        return paged_decode_attention_triton(q, k_cache, v_cache, block_tables, context_lens, scale, alibi_slopes,
                                             sliding_window)
    if use_cpu_kernels(q):
        return paged_decode_attention_cpu(q, k_cache, v_cache, block_tables, context_lens, scale, alibi_slopes,
                                          sliding_window=sliding_window)
    return paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale, alibi_slopes,
                                      sliding_window)


def paged_attention(q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, alibi_slopes=None,
                    sliding_window=None):
    if use_triton(q):
        from kernels.triton.attention import paged_attention_triton

        return paged_attention_triton(
            q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, alibi_slopes, sliding_window
        )
    if use_cpu_kernels(q) and isa.resolve(q.shape[-1]) != "generic":
        # On the portable path the C++ kernel run once per query token is slower than the reference's
        # SDPA on prompts (0.3-0.5x at 514 tokens); decode steps still take it (paged_decode_attention).
        return paged_attention_cpu(q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale,
                                   alibi_slopes, sliding_window=sliding_window)
    return paged_attention_ref(q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale, alibi_slopes,
                               sliding_window)

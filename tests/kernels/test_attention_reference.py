"""The torch attention references (kernels/attention.py) are the contract every kernel is tested
against, and the CPU path wherever the C++ kernels are off or slower (prefill on the portable path,
SLLM_CPU_KERNELS=0). They gather whole blocks and mask scores: a slot outside a sequence's context
must still never reach a result, whatever it holds (NaN here; a recycled block's K/V, or an fp16
overflow, in the engine)."""

import pytest
import torch
from kernel_helpers import alibi_slopes, paged_cache, rel_err

from kernels.attention import paged_attention_ref, paged_decode_attention_ref


@pytest.mark.parametrize("alibi", [False, True], ids=["rope", "alibi"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_references_ignore_poisoned_slots(alibi, dtype):
    gen = torch.Generator().manual_seed(7)
    # Decode rows of ragged lengths (the shorter ones read the longer ones' blocks, and the table's
    # padding, which points at another sequence's block), in a mixed batch with a prompt and a chunk.
    ctx, q_lens = [20, 1, 37, 45, 3], [20, 1, 1, 8, 1]
    k_cache, v_cache, k_dirty, v_dirty, block_tables = paged_cache(ctx, 16, 2, 64, dtype, gen)
    q = torch.randn(sum(q_lens), 6, 64, generator=gen).to(dtype)
    starts = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    context_lens = torch.tensor(ctx, dtype=torch.int32)
    slopes = alibi_slopes(6) if alibi else None
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    clean = paged_attention_ref(q, k_cache, v_cache, block_tables, starts, context_lens, 0.125, slopes)
    dirty = paged_attention_ref(q, k_dirty, v_dirty, block_tables, starts, context_lens, 0.125, slopes)
    assert rel_err(dirty, clean) < tol
    rows = starts[1:][torch.tensor(q_lens) == 1] - 1
    decode = [i for i, n in enumerate(q_lens) if n == 1]
    out = paged_decode_attention_ref(q[rows], k_dirty, v_dirty, block_tables[decode], context_lens[decode], 0.125,
                                     slopes)
    assert rel_err(out, clean[rows]) < tol

import pytest
import torch

from kernels.cache import store_kv_ref

pytest.importorskip("triton")
from kernels.triton.cache import store_kv_triton  # noqa: E402


@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize(
    ("dtype", "cache_dtype"),
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.float16),
    ],
)
def test_store_kv_matches_reference(block_size, dtype, cache_dtype):
    gen = torch.Generator().manual_seed(block_size)
    num_tokens, num_kv_heads, head_dim, num_blocks = 11, 3, 64, 6
    # K and V as strided views of a fused QKV projection, the way a model produces them.
    qkv = torch.randn(num_tokens, (4 + 2 * num_kv_heads) * head_dim, generator=gen).to(dtype)
    k = qkv[:, 4 * head_dim : (4 + num_kv_heads) * head_dim].view(num_tokens, num_kv_heads, head_dim)
    v = qkv[:, (4 + num_kv_heads) * head_dim :].view(num_tokens, num_kv_heads, head_dim)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[[2, 7]] = -1  # padding tokens are not stored
    slots[0] = num_blocks * block_size - 1  # the very last slot of the cache
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(cache_dtype)
    v_cache = torch.randn(shape, generator=gen).to(cache_dtype)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()

    store_kv_triton(k, v, k_cache, v_cache, slots)
    store_kv_ref(k, v, k_ref, v_ref, slots)
    assert torch.equal(k_cache, k_ref)
    assert torch.equal(v_cache, v_ref)


def test_store_kv_int32_slots_and_empty():
    gen = torch.Generator().manual_seed(1)
    k = torch.randn(4, 2, 128, generator=gen)
    v = torch.randn(4, 2, 128, generator=gen)
    k_cache, v_cache = torch.zeros(2, 16, 2, 128), torch.zeros(2, 16, 2, 128)
    slots = torch.tensor([31, -1, 0, 16], dtype=torch.int32)
    store_kv_triton(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache[1, 15], k[0]) and torch.equal(v_cache[0, 0], v[2])
    assert torch.equal(k_cache[1, 0], k[3]) and int((k_cache != 0).any(-1).any(-1).sum()) == 3
    store_kv_triton(k[:0], v[:0], k_cache, v_cache, slots[:0])  # no tokens: a no-op

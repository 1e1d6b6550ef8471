"""GGUF-quantized weights (kernels/quantized.py, kernels/gguf_blocks.py): blocks of every served type
decoded bit-exactly as the `gguf` package decodes them, and the C++ product against its torch reference
on every CPU path, over ragged shapes."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from kernels.cpu.build import cpu_kernels_available
from kernels.gguf_blocks import HALF_FIELDS
from kernels.linear import linear
from kernels.quantized import (
    BLOCK,
    NAMES,
    Q4_0,
    Q4_1,
    Q4_K,
    Q5_0,
    Q5_1,
    Q5_K,
    Q6_K,
    Q8_0,
    QuantizedWeight,
    StackedWeight,
    cat_rows,
    dequantize,
    int8_activations,
    quantize_q8_0,
    quantized_embedding,
    quantized_linear,
    quantized_linear_int8_ref,
    quantized_linear_ref,
)
from tests.cpu_paths import cpu_paths

TYPES = [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K]
needs_kernels = pytest.mark.skipif(not cpu_kernels_available(), reason="the C++ CPU kernels did not build")


def random_weight(n: int, k: int, qtype: int, seed: int = 0) -> QuantizedWeight:
    """Valid random blocks built byte-wise (gguf-py cannot quantize the K-quants): every quant, high-bit
    and sub-scale byte value, the fp16 scales (and minimums) finite halves of both signs."""
    per, size = BLOCK[qtype]
    gen = np.random.default_rng(seed)
    blocks = gen.integers(0, 256, size=(n * k // per, size), dtype=np.uint8)
    scale = 0.02 if per == 32 else 0.0005  # a K-quant multiplies by a 6-bit (or int8) sub-scale too
    for offset in HALF_FIELDS[qtype]:  # every other byte is a free bit pattern
        halves = (gen.standard_normal(n * k // per) * scale).astype(np.float16)
        blocks[:, offset:offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return QuantizedWeight(torch.from_numpy(blocks.reshape(n, -1)), qtype, (n, k))


def ragged_k(qtype: int, k: int) -> int:
    """K for a test shape: as given for 32-weight blocks, a multiple of 256 for the K-quants (their rows
    are whole super-blocks by definition)."""
    return k if BLOCK[qtype][0] == 32 else 256 * (1 + k % 3)


@pytest.mark.parametrize("qtype", TYPES, ids=NAMES.get)
def test_blocks_decode_as_the_gguf_package_does(qtype):
    k = ragged_k(qtype, 96)
    w = random_weight(24, k, qtype)
    want = gguf_dequantize(w.data.numpy(), GGMLQuantizationType(qtype))
    assert np.isfinite(want).all()
    assert np.array_equal(dequantize(w).numpy(), want)
    if cpu_kernels_available():
        assert np.array_equal(torch.ops.sllm_cpu.dequantize(w.data, qtype, k).numpy(), want)


@pytest.mark.parametrize("qtype", [Q5_0, Q5_1], ids=NAMES.get)
def test_blocks_the_gguf_package_writes_decode_to_its_values(qtype):
    """Q5_0/Q5_1 blocks as gguf-py quantizes real weights (not only random bytes) decode as it does."""
    w = torch.randn(16, 160, generator=torch.Generator().manual_seed(9))
    data = gguf_quantize(w.numpy(), GGMLQuantizationType(qtype))
    q = QuantizedWeight(torch.from_numpy(data), qtype, (16, 160))
    assert np.array_equal(dequantize(q).numpy(), gguf_dequantize(data, GGMLQuantizationType(qtype)))
    torch.testing.assert_close(dequantize(q), w, rtol=0, atol=w.abs().max().item() / 15)


@needs_kernels
@pytest.mark.parametrize("cpu_path", cpu_paths(32), indirect=True)
@pytest.mark.parametrize("qtype", TYPES, ids=NAMES.get)
@pytest.mark.parametrize("m,n,k", [(1, 37, 32), (2, 200, 96), (3, 129, 576), (4, 64, 160), (5, 77, 64),
                                   (8, 300, 128), (9, 41, 224), (17, 53, 96), (64, 33, 64), (30, 26, 2304),
                                   (101, 13, 96)])
def test_kernel_equals_its_reference(cpu_path, qtype, m, n, k):
    """Every path and type; past 8 rows the vector paths' tiled product (tile rows and K chunks cut short,
    every remainder of its 4-by-3 register block)."""
    k = ragged_k(qtype, k)
    w = random_weight(n, k, qtype, seed=m * n)
    gen = torch.Generator().manual_seed(k)
    x = torch.randn(m, k, generator=gen)
    bias = torch.randn(n, generator=gen)
    got = quantized_linear(x, w, bias)
    want = quantized_linear_ref(x, w, bias)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@needs_kernels
@pytest.mark.parametrize("cpu_path", cpu_paths(32), indirect=True)
@pytest.mark.parametrize("qtype", TYPES, ids=NAMES.get)
@pytest.mark.parametrize("m,n,k", [(1, 37, 32), (2, 21, 64), (3, 129, 576), (5, 17, 96), (7, 9, 224), (8, 300, 160),
                                   (9, 41, 224), (12, 23, 288), (30, 35, 2304), (33, 21, 576), (46, 23, 576),
                                   (67, 19, 96)])
def test_int8_activation_kernel_equals_its_reference(cpu_path, qtype, m, n, k):
    """The int8-activation path of every type: its own reference up to float rounding, and the float
    product within the activations' rounding (2% of the largest output on these random blocks); an odd
    count of 32-weight blocks (K not a multiple of 64) included. Past 8 rows the vector paths take the
    octet product (int8_gemm_impl.h): every kind of last octet (7 groups left over: one lane each, one
    missing; 3: a short octet of 4 steps, one group missing; 1 and 2: of 1 and 2 steps; none), ragged tiles
    of weight rows and every remainder of its 4-by-2 register block, and on AVX-512 VNNI of the 6-by-4 one
    of two weight rows per 512-bit vector (int8_gemm_zmm.h: then 4 and 1 rows of x; a tile's last 1-3
    weight rows take 256-bit blocks);
    the portable path passes of 8 rows. Up to
    8 rows, AVX-512 VNNI takes pairs of groups in 512-bit vectors (int8_rows_zmm.h): each row count, an odd
    last block."""
    k = ragged_k(qtype, k)
    w = random_weight(n, k, qtype, seed=m * n)
    gen = torch.Generator().manual_seed(k)
    x = torch.randn(m, k, generator=gen)
    bias = torch.randn(n, generator=gen)
    with int8_activations():
        got = quantized_linear(x, w, bias)
    want = quantized_linear_int8_ref(x, w, bias)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    exact = quantized_linear_ref(x, w, bias)
    torch.testing.assert_close(got, exact, rtol=0, atol=0.02 * exact.abs().max().item())
    assert not torch.equal(got, quantized_linear(x, w, bias))  # outside the block: float activations again


@pytest.mark.parametrize("qtype", TYPES, ids=NAMES.get)
def test_embedding_rows_and_stacked_rows(qtype):
    """cat_rows: one type stays one matrix; two runs of one type each are a StackedWeight read part by part;
    three runs become one Q8_0 matrix."""
    k = ragged_k(qtype, 64)
    w = random_weight(50, k, qtype, seed=5)
    ids = torch.tensor([[3, 0, 49], [7, 7, 1]])
    assert torch.equal(quantized_embedding(ids, w), dequantize(w)[ids])
    parts = [random_weight(8, k, qtype, seed=s) for s in (1, 2)]
    both = cat_rows(parts)
    assert isinstance(both, QuantizedWeight) and both.shape == (16, k)
    assert torch.equal(dequantize(both), torch.cat([dequantize(p) for p in parts]))
    other = random_weight(8, k, Q8_0 if qtype != Q8_0 else Q4_0)
    # Two runs of one type each (q and k, then v): kept apart, each part as it was, and read apart.
    stacked = cat_rows([parts[0], parts[1], other])
    assert isinstance(stacked, StackedWeight) and stacked.shape == (24, k)
    assert stacked.parts[0].qtype == qtype and stacked.parts[1] is other
    assert torch.equal(dequantize(stacked), torch.cat([dequantize(p) for p in (*parts, other)]))
    x, bias = torch.randn(3, k), torch.randn(24)
    got = linear(x, stacked, bias)
    torch.testing.assert_close(got, F.linear(x, dequantize(stacked), bias), rtol=1e-5, atol=1e-4)
    # Three runs: one Q8_0 matrix, exact where each part's ints fit.
    mixed = cat_rows([parts[0], other, parts[1]])
    assert isinstance(mixed, QuantizedWeight) and mixed.qtype == Q8_0 and mixed.shape == (24, k)
    if qtype in (Q4_0, Q5_0, Q8_0):
        want = torch.cat([dequantize(parts[0]), dequantize(other), dequantize(parts[1])])
        assert torch.equal(dequantize(mixed), want)


@needs_kernels
@pytest.mark.parametrize("cpu_path", cpu_paths(32), indirect=True)
@pytest.mark.parametrize("types", [(Q4_K, Q6_K), (Q4_K, Q8_0), (Q5_0, Q8_0)],
                         ids=lambda t: "+".join(NAMES[q] for q in t))
def test_int8_stacked_parts_quantize_for_their_own_types(cpu_path, types):
    """A Q4_K_M file's q and k (Q4_K) beside v (Q6_K), a K-quant beside a 32-weight type, two 32-weight
    types: each part's activations per its own block (256 values, or 32), as the reference says; one
    outlier per row makes the spans' scales differ from per-32 ones."""
    a, b = types
    k = 512
    stacked = cat_rows([random_weight(8, k, a, seed=1), random_weight(8, k, a, seed=2), random_weight(8, k, b, seed=3)])
    assert isinstance(stacked, StackedWeight)
    gen = torch.Generator().manual_seed(7)
    x, bias = torch.randn(3, k, generator=gen), torch.randn(24, generator=gen)
    x[:, 5] = 40.0
    with int8_activations():
        got = linear(x, stacked, bias)
    want = quantized_linear_int8_ref(x, stacked, bias)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


def test_int8_weights_are_q8_0_blocks_as_the_gguf_package_writes_them():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(40, 96, generator=gen) * torch.logspace(-3, 1, 40).unsqueeze(1)
    w[3, :32] = 0  # an all-zero block: scale 0, no division by it
    w[5, 7] = 2.5 * w[5, :32].abs().max()  # a block whose rounding has exact halves to break
    q = quantize_q8_0(w)
    want = gguf_quantize(w.numpy(), GGMLQuantizationType.Q8_0)
    assert np.array_equal(q.data.numpy(), want)
    torch.testing.assert_close(dequantize(q), w, rtol=0, atol=w.abs().amax(dim=1, keepdim=True).max() / 254)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q8_0(torch.zeros(4, 40))


def test_a_malformed_weight_is_refused():
    with pytest.raises(ValueError, match="multiple of 32"):
        QuantizedWeight(torch.zeros(4, 20, dtype=torch.uint8), Q4_1, (4, 40))
    with pytest.raises(ValueError, match="multiple of 256"):
        QuantizedWeight(torch.zeros(4, 72, dtype=torch.uint8), Q4_K, (4, 128))
    if cpu_kernels_available():
        with pytest.raises(RuntimeError, match="multiple of 256"):
            torch.ops.sllm_cpu.quantized_linear(torch.zeros(1, 128), torch.zeros(4, 72, dtype=torch.uint8), Q4_K,
                                                4, 128, None)


@pytest.mark.parametrize("qtype", [Q4_0, Q5_0])
def test_promotion_to_q8_0_is_lossless(qtype):
    """Where one matrix must hold Q4_0 or Q5_0 rows beside Q8_0 ones (three runs of types; rows reordered
    for partial rotary), the promoted blocks decode to exactly the same weights and stay quantized."""
    from kernels.quantized import as_q8_0, cat_rows

    w = random_weight(48, 96, qtype, seed=7)
    promoted = as_q8_0(w)
    assert promoted.qtype == Q8_0 and torch.equal(dequantize(promoted), dequantize(w))
    fused = cat_rows([w, random_weight(16, 96, Q8_0, seed=8), w])
    assert isinstance(fused, QuantizedWeight) and fused.qtype == Q8_0 and fused.shape == (112, 96)
    assert torch.equal(dequantize(fused)[:48], dequantize(w))


def test_mixed_k_quants_stack_exactly_or_fuse_as_q8_0_within_its_rounding():
    """Q4_K q beside Q6_K v (Llama-3.2-1B's Q4_K_M file): stacked, each part the file's own blocks; as one
    type (as_one_type, where rows are reordered), requantized to Q8_0, each weight within half a step (its
    block's largest weight / 127), plus the step's own fp16 rounding times 127."""
    from kernels.quantized import Q4_K, Q6_K, as_one_type, cat_rows

    q, v = random_weight(32, 256, Q4_K, seed=9), random_weight(16, 256, Q6_K, seed=10)
    want = torch.cat([dequantize(q), dequantize(v)])
    stacked = cat_rows([q, v])
    assert isinstance(stacked, StackedWeight) and torch.equal(dequantize(stacked), want)
    fused = as_one_type(stacked)
    assert isinstance(fused, QuantizedWeight) and fused.qtype == Q8_0
    step = want.reshape(-1, 32).abs().amax(dim=1, keepdim=True) / 127
    assert ((dequantize(fused) - want).reshape(-1, 32).abs() <= step * 0.6 + 1e-7).all()

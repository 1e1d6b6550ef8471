"""CPU linear layers (kernels/linear.py): packed bf16/fp16 weights and the C++ few-row float32 matmul
give the same numbers as `F.linear`, and the engine's models use them.

oneDNN packs a bf16 weight only on CPUs with AVX-512 (or AMX), and an fp16 one only with AVX512-FP16 or
AVX-NE-CONVERT; elsewhere `pack_linear` logs a warning and returns None, and `F.linear` runs. Each test
asks torch what this CPU can do and checks the packing where it is possible, the fallback where not."""

import logging

import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels.linear import use_small_linear
from tests.cpu_paths import cpu_paths


def can_pack(dtype: torch.dtype) -> bool:
    if dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return torch.ops.mkldnn._is_mkldnn_fp16_supported()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_packed_linear_equals_f_linear(dtype, rows, caplog):
    torch.manual_seed(0)
    x, w, b = torch.randn(rows, 96, dtype=dtype), torch.randn(200, 96, dtype=dtype), torch.randn(200, dtype=dtype)
    with caplog.at_level(logging.WARNING, logger="kernels.linear"):
        packed = kernels.pack_linear(w)
    if can_pack(dtype):
        assert packed is not None and not caplog.records
    else:
        assert packed is None, "oneDNN packed a weight this CPU cannot run packed"
        assert "plain F.linear is used" in caplog.text
    for bias in (None, b):
        ref = F.linear(x.float(), w.float(), None if bias is None else bias.float())
        out = kernels.linear(x, w, bias, packed)
        assert out.dtype == dtype and out.shape == ref.shape
        torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())


def test_fp32_weights_are_not_packed():
    assert kernels.pack_linear(torch.randn(8, 4)) is None  # F.linear is already the fast fp32 path


needs_kernels = pytest.mark.skipif(
    not use_small_linear(torch.zeros(1, 16), torch.zeros(1, 16)), reason="the C++ CPU kernels are not built"
)


@needs_kernels
@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize("out_features", [1, 5, 576, 1003])
def test_small_linear_equals_f_linear(cpu_path, rows, out_features):
    gen = torch.Generator().manual_seed(rows * out_features)
    x = torch.randn(rows, 2 * 576, generator=gen)[:, ::2]  # strided columns: copied once, still right
    w, b = torch.randn(out_features, 576, generator=gen), torch.randn(out_features, generator=gen)
    for bias in (None, b):
        torch.testing.assert_close(kernels.linear(x, w, bias), F.linear(x, w, bias), rtol=1e-5, atol=1e-4)


@needs_kernels
@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
@pytest.mark.parametrize("k", [8, 24, 40, 100])
def test_small_linear_any_k(cpu_path, k):
    """A K that a vector path does not divide steps down (to AVX2 for 8/24/40, the portable loop for 100)."""
    gen = torch.Generator().manual_seed(k)
    x, w = torch.randn(3, k, generator=gen), torch.randn(37, k, generator=gen)
    torch.testing.assert_close(kernels.linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-4)


def test_small_linear_only_where_it_applies():
    use = use_small_linear
    w = torch.randn(8, 32)
    assert not use(torch.randn(5, 32), w), "more than four rows go to MKL's GEMM"
    assert not use(torch.randn(1, 32, dtype=torch.bfloat16), w.bfloat16()), "bf16 has its packed path"
    assert not use(torch.randn(1, 32), torch.randn(32, 8).t()), "the weight must be contiguous"


def test_a_bf16_engine_packs_its_matmuls_and_agrees_with_fp32(tmp_path):
    from engine import LLM, SamplingParams
    from engine.loader import resolve_model
    from tests.engine.conftest import make_tiny_llama

    folder = make_tiny_llama(tmp_path / "tiny", resolve_model("default"))
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    prompt = ["The capital of France is"]
    bf16 = LLM(model=str(folder), dtype="bfloat16", num_kv_blocks=16)
    model = bf16.engine.runner.model
    matmuls = {"lm_head"} | {f"model.layers.{i}.{n}" for i in range(model.num_layers)
                             for n in ("qkv", "o", "gate_up", "down")}
    assert set(model.packed) == (matmuls if can_pack(torch.bfloat16) else set())
    fp32 = LLM(model=str(folder), num_kv_blocks=16)
    assert not fp32.engine.runner.model.packed
    first = [o.outputs[0].token_ids[:3] for o in (bf16.generate(prompt, params, use_tqdm=False)[0],
                                                  fp32.generate(prompt, params, use_tqdm=False)[0])]
    assert first[0] == first[1]  # peaked logits: bf16 rounding does not flip the first greedy choices

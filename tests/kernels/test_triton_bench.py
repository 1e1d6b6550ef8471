"""The CPU-side parts of benchmarks/triton_kernels.py: case construction, checks, byte accounting, the table."""

import math
import os

import pytest
import torch

from benchmarks import triton_kernels as bench

pytest.importorskip("triton")


def test_main_without_cuda_exits_with_a_message(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert "no CUDA device" in str(exc.value.code)


# float32 is opt-in (SLLM_SLOW=1), about 30 s on the interpreter: the bench's own code is the same for
# both dtypes (float16 below; float32 in the dry run, whose 16 checked rows run every kernel), and each
# kernel in float32 is checked against its reference by test_kernel_attention*, test_kernel_elementwise
# and test_kernel_cache.
FLOAT32_OPT_IN = pytest.mark.skipif(not os.environ.get("SLLM_SLOW"), reason="float32 is opt-in: SLLM_SLOW=1")


@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, marks=[pytest.mark.slow, FLOAT32_OPT_IN]),
                                   torch.float16])
def test_small_cases_pass_their_checks_on_the_interpreter(dtype):
    rows = bench.check_cases(bench.small_cases(dtype, "cpu"))
    assert len(rows) == 13
    assert sum("window=" in r.name for r in rows) == 3
    bad = [(r.name, r.shape, r.err, r.note) for r in rows if r.note or not r.err <= r.tol]
    assert not bad, bad


def test_check_cases_reports_a_broken_kernel_as_a_row():
    def boom():
        raise RuntimeError("kaput")

    case = bench.Case("broken", "x", run=boom, ref=None, check=boom, tol=1e-4)
    (row,) = bench.check_cases([case])
    assert math.isinf(row.err) and "kaput" in row.note


def test_time_case_turns_bytes_into_bandwidth(monkeypatch):
    monkeypatch.setattr(bench, "_time_ms", lambda fn: 2.0)
    case = bench.decode_case(2, 40, 4, 2, 64, 16, torch.float32, "cpu", split_k=False)
    # K and V for 80 tokens x 2 heads x 64 dims in float32, plus q/out, block tables, lengths.
    assert case.bytes == 2 * 80 * 2 * 64 * 4 + 2 * (2 * 4 * 64 * 4) + 2 * 3 * 4 + 2 * 4
    row = bench.time_case(case, copy_gbps=case.bytes / 2e-3 / 1e9 * 2)
    assert row.err < 1e-4 and row.note == ""
    assert row.gbps == pytest.approx(case.bytes / 2e-3 / 1e9)
    assert row.frac == pytest.approx(0.5)
    assert row.tflops == pytest.approx(case.flops / 2e-3 / 1e12)


def test_prefill_flops_count_causal_pairs():
    case = bench.prefill_case([3], [2], 2, 1, 64, 8, torch.float32, "cpu")
    # Queries at positions 2, 3, 4 see 3 + 4 + 5 keys.
    assert case.flops == 4 * 12 * 2 * 64 and case.bytes == 0
    case = bench.prefill_case([3], [2], 2, 1, 64, 8, torch.float32, "cpu", window=4)
    assert case.flops == 4 * (3 + 4 + 4) * 2 * 64 and case.name.endswith("window=4")


def test_windowed_decode_counts_only_the_window_bytes():
    full = bench.decode_case(2, 40, 4, 2, 64, 16, torch.float32, "cpu", split_k=False)
    windowed = bench.decode_case(2, 40, 4, 2, 64, 16, torch.float32, "cpu", split_k=False, window=10)
    assert full.bytes - windowed.bytes == 2 * (80 - 20) * 2 * 64 * 4
    assert windowed.flops * 4 == full.flops
    assert windowed.check() < 1e-4


def test_format_table():
    rows = [
        bench.Row("paged_decode_attention [auto]", "B=64", 1.2e-4, 1e-2, 0.25, 1.0, 2100.0, 0.75, 3.3),
        bench.Row("flash_attn_with_kvcache", "B=64", None, None, None, note="flash_attn not installed"),
        bench.Row("store_kv", "T=8", math.inf, 0.0, None, note="error: RuntimeError"),
    ]
    text = bench.format_table(rows)
    lines = text.splitlines()
    assert lines[0].startswith("kernel") and set(lines[1]) <= {"-", " "}
    assert "4.0x" in lines[2] and "75%" in lines[2] and "2100" in lines[2]
    assert "flash_attn not installed" in lines[3] and "inf" in lines[4]


def test_run_all_dry_run_on_cpu(monkeypatch):
    """The whole benchmark flow at toy sizes on the interpreter, with the GPU timer replaced."""
    monkeypatch.setattr(bench, "_time_ms", lambda fn: (fn(), 1.0)[1])
    lines: list[str] = []
    rows = bench.run_all(
        "cpu", 2, 64, 4, 2, 64, 16, "float32", (), lines.append,
        long_context=96, prefill_len=32, tokens=16, hidden=64, intermediate=64, copy_bytes=1 << 12,
    )  # fmt: skip
    text = "\n".join(lines)
    assert "device-to-device copy bandwidth" in text and "of copy bandwidth" in text
    assert "correctness failure" not in text, text
    ours = [r for r in rows if not r.baseline]
    assert len(ours) == 16 and all(r.err is not None and r.err <= r.tol for r in ours)
    sdpa = [r for r in rows if r.name.startswith("torch SDPA")]
    assert len(sdpa) == 2 and all(r.err < 1e-4 for r in sdpa)
    decode = [r for r in ours if r.name.startswith("paged_decode") and r.ms is not None]
    assert all(r.gbps and r.frac for r in decode)

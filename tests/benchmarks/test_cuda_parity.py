"""benchmarks/cuda_parity.py, the GPU machine's parity script, as its CPU dry run: the table it prints and
its exit code, so that a lent GPU's few minutes are not spent on a broken script."""

import pytest

from benchmarks import cuda_parity
from engine.loader import resolve_model


@pytest.fixture(scope="module")
def default_model_dir():
    return resolve_model("default")


def test_dry_run_on_the_cpu_prints_equal_rows_and_passes(default_model_dir, capsys):
    rc = cuda_parity.main(["--tokenizer-from", str(default_model_dir), "--device", "cpu", "--only", "llama_gqa"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| llama_gqa |")]
    assert rc == 0 and "float32 parity: all equal" in out
    assert len(rows) == 2 * 4  # four checks, printed as they finish and again in the table
    assert all("| equal |" in r for r in rows) and "1 preemptions" in out


def test_a_differing_float32_row_fails_the_run_and_bf16_agreement_does_not(default_model_dir, monkeypatch, capsys):
    rows = {"fp32": "| m | fp32 mixed batch | DIFFER 4/5 | 1.0 |",
            "bf16": "| m | bf16 mixed batch (agreement, not required) | 1/5 | 1.0 |"}
    monkeypatch.setattr(cuda_parity, "families", lambda root, tok, only: {"m": default_model_dir})
    args = ["--tokenizer-from", str(default_model_dir), "--device", "cpu"]
    monkeypatch.setattr(cuda_parity, "check_family", lambda *a: [rows["bf16"]])
    assert cuda_parity.main(args) == 0
    monkeypatch.setattr(cuda_parity, "check_family", lambda *a: [rows["bf16"], rows["fp32"]])
    assert cuda_parity.main(args) == 1 and "float32 parity: FAILED" in capsys.readouterr().out

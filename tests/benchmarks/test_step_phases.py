"""The decode-step breakdown on a tiny random Llama: every phase accounted for, the kernels put back (nine
rows: past the one-call decode op's few rows, so the layer loop's kernels run); and the weight-pages
benchmark's alternating rounds."""

import pytest

import engine.models.llama as llama
import kernels
from benchmarks import step_phases
from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama


def test_breakdown_adds_up_to_the_step_and_restores_the_kernels(tmp_path):
    def ops():
        return {name: getattr(llama if name == "decode_layers_cpu" else kernels, name) for name in step_phases.KERNELS}

    before = ops()
    folder = make_tiny_llama(tmp_path / "tiny", resolve_model("default"))
    total, rows = step_phases.measure(str(folder), rows=9, steps=3, prompts=["SELECT name FROM users", "안녕"])
    phases = dict(rows)
    assert total > 0 and phases["kernel linear"] > 0 and phases["sample"] > 0
    assert phases["append tokens (detokenize, stops)"] > 0 and phases["lm head"] > 0
    assert sum(phases.values()) == pytest.approx(total, rel=1e-6)
    assert ops() == before


def test_weight_pages_times_both_layouts():
    """benchmarks/weight_pages.py on the default model: a round times each layout, and the process's
    activations are float again after its int8 run."""
    import torch

    from benchmarks import weight_pages

    rows = weight_pages.measure("default", rounds=1, max_tokens=4)
    assert len(rows) == 1 and all(v > 0 for v in rows[0])
    assert not torch.ops.sllm_cpu.int8_activations()

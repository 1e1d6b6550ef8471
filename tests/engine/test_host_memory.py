"""Memory a CPU step writes: the KV cache on huge-page-aligned fresh pages (engine/host_memory.py), and a
long prefill's MLP activations in slices small enough for glibc's heap (engine/models/llama.py)."""

import pytest
import torch

from engine.host_memory import HUGE_PAGE, zeros


def test_cpu_zeros_are_zero_writable_and_huge_page_aligned():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        t = zeros((4, 33, 16, 8), dtype, torch.device("cpu"))
        assert t.shape == (4, 33, 16, 8) and t.dtype == dtype and t.is_contiguous()
        assert t.data_ptr() % HUGE_PAGE == 0 and not t.any()
        t[1, 2, 3] = 1.5
        assert t.sum().item() == 8 * 1.5


def test_a_long_prefills_mlp_in_slices_gives_the_whole_mlps_tokens(tiny_models, monkeypatch):
    """engine/models/llama.py's `_mlp` cuts a prefill's rows into slices of MLP_SLICE_BYTES of gate_up output;
    a tiny model's prompt is cut into 7-row slices here, and its greedy tokens and logprobs are the whole MLP's."""
    import engine.models.llama as llama
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams

    llm = LLM(model=str(tiny_models["gqa"]), num_kv_blocks=64, enable_prefix_caching=False)
    prompt = list(range(5, 5 + 90))
    params = SamplingParams(max_tokens=6, temperature=0, logprobs=2, ignore_eos=True)

    def run():
        out = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
        return out.token_ids, [[p.logprob for p in step.top] for step in out.logprobs]

    whole = run()
    gate_up = llm.engine.runner.model.weights["model.layers.0.gate_up"].shape[0]
    monkeypatch.setattr(llama, "MLP_SLICE_BYTES", 7 * gate_up * 4)
    calls = []
    real = llama.LlamaForCausalLM._linear
    monkeypatch.setattr(llama.LlamaForCausalLM, "_linear",
                        lambda self, x, name, *a, **k: calls.append((name, x.shape[0])) or real(self, x, name, *a, **k))
    sliced = run()
    prefill = [rows for name, rows in calls if name == "model.layers.0.gate_up"][:13]
    assert prefill == [7] * 12 + [6]  # 90 rows
    assert sliced[0] == whole[0]
    for a, b in zip(sliced[1], whole[1], strict=True):
        assert a == pytest.approx(b, abs=1e-4)

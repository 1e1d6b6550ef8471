"""Memory a CPU step touches: the KV cache on huge-page-aligned fresh pages (engine/host_memory.py), the
quantized weights copied onto huge pages when asked (`huge_page_weights`), and a long prefill's MLP
activations in slices small enough for glibc's heap (engine/models/llama.py)."""

import pytest
import torch

from engine.host_memory import HUGE_PAGE, on_huge_pages, zeros


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


def test_on_huge_pages_copies_each_matrix_once_into_one_region():
    """Quantized matrices, a StackedWeight's parts among them, land in one huge-page region at 64-byte
    lines with their bytes unchanged; a matrix given twice (a tied head) is one copy; a float tensor
    passes as it is."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    from kernels.quantized import Q4_0, Q8_0, QuantizedWeight, StackedWeight

    def matrix(rows: int, qtype: int, gguf_type) -> QuantizedWeight:
        data = quantize(torch.randn(rows, 64).numpy(), gguf_type)
        return QuantizedWeight(torch.from_numpy(data), qtype, (rows, 64))

    embed, a, b = matrix(7, Q8_0, GGMLQuantizationType.Q8_0), matrix(3, Q8_0, GGMLQuantizationType.Q8_0), \
        matrix(5, Q4_0, GGMLQuantizationType.Q4_0)
    norm = torch.ones(64)
    out = on_huge_pages([embed, StackedWeight((a, b)), norm, embed])
    assert out[0] is out[3] and out[2] is norm
    copies = [out[0], *out[1].parts]
    base = min(m.data.data_ptr() for m in copies)
    assert base % HUGE_PAGE == 0
    for copy, orig in zip(copies, [embed, a, b], strict=True):
        assert copy.data.data_ptr() % 64 == 0 and copy.data.data_ptr() - base < HUGE_PAGE
        assert copy.qtype == orig.qtype and copy.shape == orig.shape and torch.equal(copy.data, orig.data)
        assert copy.data.data_ptr() != orig.data.data_ptr()


def test_huge_page_weights_serve_the_same_tokens_and_release_the_file(caplog):
    """The default model (a Q4_1 GGUF file, tied head) with `huge_page_weights`: its quantized matrices lie
    in one region, the tied head is still the embedding, the file's mapped pages are released, and the
    greedy tokens and logprobs are those of the model read from the file (one-call decode op and prefill)."""
    import logging

    from engine.llm import LLM
    from engine.sampling_params import SamplingParams
    from kernels.quantized import weight_tensors

    params = SamplingParams(max_tokens=8, temperature=0, logprobs=2, ignore_eos=True)
    prompts = ["The capital of France is", "SELECT name FROM users WHERE"]
    mapped = LLM(model="default", num_kv_blocks=64)
    with caplog.at_level(logging.INFO, logger="engine.loader"):
        copied = LLM(model="default", num_kv_blocks=64, huge_page_weights=True)
    w = copied.engine.runner.model.weights
    assert w["lm_head"] is w["embed"]
    blocks = {t.data_ptr(): t.numel() for v in w.values() for t in weight_tensors(v) if t.dtype == torch.uint8}
    assert min(blocks) % HUGE_PAGE == 0
    assert max(p + n for p, n in blocks.items()) - min(blocks) <= sum(blocks.values()) + 64 * len(blocks)
    released = [r.getMessage() for r in caplog.records if "of the mapped file released" in r.getMessage()]
    assert released and float(released[0].split()[1]) * 2**20 > 0.95 * sum(blocks.values()), released
    for a, b in zip(mapped.generate(prompts, params, use_tqdm=False), copied.generate(prompts, params, use_tqdm=False),
                    strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].logprobs == b.outputs[0].logprobs

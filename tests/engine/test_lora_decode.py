"""Per-row LoRA in C++ on the CPU (kernels/cpu/csrc/lora_delta.cpp): decode steps with adapters take the
one-call decode op, and give the logits of the reference, the Python layer loop with the torch grouping
(gather, matmul pair, scatter-add per adapter), for float32, int8 and GGUF base weights, on every CPU
path; the `lora_add_` op of the layer loop equals that grouping."""


import pytest
import torch

from engine import LLM, SamplingParams
from engine.lora import LoRAAdapter, LoRABatch, LoRARequest
from engine.model_runner import ModelRunner
from engine.models import llama
from integrations.text2sql.adapter import SHIPPED as SHIPPED_ADAPTER
from kernels.quantized import QuantizedWeight
from tests.cpu_paths import cpu_paths
from tests.engine.conftest import make_tiny_llama
from tests.engine.lora_helpers import make_adapter
from tests.engine.test_hf_parity import prompts_of

NAMES = ["a", None, "b", "a"]  # two adapters and none, one adapter on two rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory, default_model_dir):
    """A tiny random Llama, an adapter on every projection and one on three (of qkv, o and gate_up)."""
    root = tmp_path_factory.mktemp("lora_decode")
    base = make_tiny_llama(root / "base", default_model_dir, kv_heads=2, seed=4)
    a = make_adapter(base, root / "a", seed=20, r=4, alpha=8)
    b = make_adapter(base, root / "b", seed=21, r=8, alpha=16, modules=["k_proj", "o_proj", "up_proj"])
    return base, {"a": str(a), "b": str(b)}


def _decode_steps(llm, prompts, names, monkeypatch, max_tokens=8):
    """Runs the prompts; returns each all-decode step's logits, the tokens, and for each call of the C++
    decode op whether it carried adapters."""
    logits: list[torch.Tensor] = []
    op_calls: list[bool] = []
    execute, op = ModelRunner.execute, llama.decode_layers_cpu

    def recording(self, sched):
        out = execute(self, sched)
        if all(item.num_new_tokens == 1 for item in sched.scheduled):
            logits.append(out.clone())
        return out

    def spy(*args, lora=None, **kwargs):
        op_calls.append(lora is not None)
        return op(*args, lora=lora, **kwargs)

    monkeypatch.setattr(ModelRunner, "execute", recording)
    monkeypatch.setattr(llama, "decode_layers_cpu", spy)
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False, lora_request=names)
    monkeypatch.undo()
    llm.engine.block_manager.check_no_leak()
    return logits, [o.outputs[0].token_ids for o in outs], op_calls


def _compare(llm, prompts, names, monkeypatch):
    model, loras = llm.engine.runner.model, llm.engine.runner.loras
    assert model.decode_layers is not None and loras.cpu_kernels
    fused, fused_tokens, op_calls = _decode_steps(llm, prompts, names, monkeypatch)
    assert op_calls and all(op_calls), "decode steps with adapters must take the one-call C++ op"
    lists = model.decode_layers
    model.decode_layers, loras.cpu_kernels = None, False  # the reference: layer loop, torch grouping
    try:
        ref, ref_tokens, op_calls = _decode_steps(llm, prompts, names, monkeypatch)
    finally:
        model.decode_layers, loras.cpu_kernels = lists, True
    assert not op_calls
    assert fused_tokens == ref_tokens
    assert len(fused) == len(ref) > 0
    for got, want in zip(fused, ref, strict=True):
        torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("quantization", ["none", "int8"])
@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
def test_decode_op_with_adapters_equals_torch_grouping(setup, cpu_path, quantization, monkeypatch):
    base, adapters = setup
    llm = LLM(model=str(base), quantization=quantization, enable_lora=True, max_lora_rank=8, num_kv_blocks=64,
              lora_modules=adapters)
    _compare(llm, prompts_of(len(NAMES), seed=9, lo=3, hi=30), NAMES, monkeypatch)


@pytest.mark.default_model
def test_default_model_gguf_decode_op_with_adapters(monkeypatch):
    """The default model served from its GGUF blocks, with the shipped text-to-SQL adapter (last layers)."""
    llm = LLM(model="default", quantization="gguf", enable_lora=True, max_lora_rank=16, num_kv_blocks=32,
              lora_modules={"sql": str(SHIPPED_ADAPTER)})
    assert isinstance(llm.engine.runner.model.weights["model.layers.0.qkv"], QuantizedWeight)
    prompts = [llm.engine.tokenize(p) for p in ("SELECT name FROM", "The capital of France is")]
    _compare(llm, prompts, ["sql", None], monkeypatch)


@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
def test_lora_add_equals_torch_grouping(cpu_path):
    """Rows of three adapters and none, more than the few-row kernels take at once; one adapter leaves the
    projection alone."""
    torch.manual_seed(0)
    k, n = 48, 72
    adapters = []
    for i, r in enumerate((8, 4, 16)):
        adapter = LoRAAdapter(LoRARequest(f"x{i}", i + 1, ""), r)
        if i != 1:
            adapter.weights["p"] = (torch.randn(r, k), torch.randn(n, r))
        adapters.append(adapter)
    slots = [0, -1, 2, 0, 0, 1, 2, 0, 0, -1, 0, 2]
    x, y = torch.randn(len(slots), k), torch.randn(len(slots), n)
    got = LoRABatch(adapters, slots, torch.device("cpu"), cpu_kernels=True).apply(y.clone(), x, "p")
    want = LoRABatch(adapters, slots, torch.device("cpu"), cpu_kernels=False).apply(y.clone(), x, "p")
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert not torch.equal(got, y)

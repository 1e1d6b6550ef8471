"""The one-call C++ decode path (kernels/cpu/csrc/decode_layers.cpp) against its reference, the model's
Python layer loop: the same logits, step after step, for 1 to 4 sequences and for speculative verify steps
(a sequence's last token and its drafts as decode rows), with and without q/k/v biases, on every
instruction-set path this CPU runs, with one thread or a team that splits every op; and for the families
whose layers it also takes (Qwen3's q/k norms, Granite's multipliers, SmolLM3's layers without RoPE,
Phi-3's partial rotary and LongRoPE, Mistral's sliding window over prompts longer than it)."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import engine.models.llama as llama_module
import engine.speculative as speculative
from engine import LLM, SamplingParams
from engine.model_runner import ModelRunner
from kernels.cpu.build import cpu_kernels_available
from kernels.cpu.fused_ops import FLOAT_DECODE_MAX_ROWS
from tests.cpu_paths import cpu_paths
from tests.engine.conftest import TOKENIZER_FILES, make_tiny_llama
from tests.engine.test_model_families import FAMILIES, make_tiny

# Families the one-call op takes besides plain Llama / Qwen2, and those it leaves to the layer loop.
OP_FAMILIES = ["qwen3", "granite", "smollm3", "phi3", "mistral_window"]
LOOP_FAMILIES = ["gemma3", "gemma4", "ministral3"]


def _qwen2_with_biases(folder, tokenizer_from):
    torch.manual_seed(3)
    config = Qwen2Config(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.2, tie_word_embeddings=False,
    )
    Qwen2ForCausalLM(config).eval().save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            (folder / name).write_bytes((tokenizer_from / name).read_bytes())
    return folder


@pytest.fixture(scope="module", params=["llama", "qwen2_bias"])
def llm(request, tmp_path_factory, default_model_dir):
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "llama":
        folder = make_tiny_llama(root, default_model_dir, layers=3)
    else:
        folder = _qwen2_with_biases(root, default_model_dir)
    llm = LLM(model=str(folder), num_kv_blocks=64)
    if llm.engine.runner.model.decode_layers is None:
        pytest.skip("the one-call decode path needs the C++ kernels")
    return llm


@pytest.fixture(scope="module", params=OP_FAMILIES)
def family_llm(request, tmp_path_factory, default_model_dir):
    config = FAMILIES[request.param]()
    config.max_position_embeddings = 1024  # the 681-token prompt of the threads test
    if request.param == "phi3":  # short factors for the short prompts, the long ones for the long prompt
        config.original_max_position_embeddings = config.rope_parameters["original_max_position_embeddings"] = 256
    folder = make_tiny(tmp_path_factory.mktemp(request.param), config, default_model_dir, seed=len(request.param))
    if not cpu_kernels_available():
        pytest.skip("the one-call decode path needs the C++ kernels")
    llm = LLM(model=str(folder), num_kv_blocks=64)
    assert llm.engine.runner.model.decode_layers is not None, f"{request.param} decodes through its layer loop"
    return llm


def _logits_per_step(llm, prompts, fused: bool) -> list[torch.Tensor]:
    """Runs the prompts to 12 new tokens, recording the logits of every decode step (verify steps
    included: their rows are each sequence's last token and its drafts)."""
    model = llm.engine.runner.model
    lists = model.decode_layers
    model.decode_layers = lists if fused else None
    seen: list[torch.Tensor] = []
    execute = ModelRunner.execute

    def recording(self, sched):
        logits = execute(self, sched)
        if all(item.num_new_tokens == 1 + len(item.seq.spec_tokens) for item in sched.scheduled):
            seen.append(logits.clone())
        return logits

    ModelRunner.execute = recording
    try:
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True), use_tqdm=False)
    finally:
        ModelRunner.execute = execute
        model.decode_layers = lists
    return seen


@pytest.mark.parametrize("cpu_path", cpu_paths(64), indirect=True)
@pytest.mark.parametrize("batch", [1, 4])
def test_one_call_decode_equals_the_layer_loop(llm, batch, cpu_path):
    prompts = ["The capital of France is", "SELECT name FROM", "안녕하세요", "1, 2, 3,"][:batch]
    fused = _logits_per_step(llm, prompts, fused=True)
    loop = _logits_per_step(llm, prompts, fused=False)
    assert len(fused) == len(loop) >= 11
    for a, b in zip(fused, loop, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    llm.engine.block_manager.check_no_leak()


@pytest.mark.parametrize("cpu_path", cpu_paths(64), indirect=True)
@pytest.mark.parametrize("threads", [2, 3])
def test_one_call_decode_splits_its_work_across_threads(llm, threads, cpu_path):
    """A team of threads (3: shares of unequal size) each taking its share of every op, over a context
    long enough that attention is split into partitions that each thread merges."""
    _long_prompt_in_a_team(llm, threads)


def _long_prompt_in_a_team(llm, threads: int, prompts: tuple[str, ...] = ()) -> None:
    prompt = "SELECT name, price FROM products WHERE price > 10 ORDER BY price; " * 40
    assert len(llm.tokenizer.encode(prompt)) > 512  # four 128-token partitions per (sequence, KV head)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fused = _logits_per_step(llm, [prompt, *prompts], fused=True)
        loop = _logits_per_step(llm, [prompt, *prompts], fused=False)
    finally:
        torch.set_num_threads(before)
    assert len(fused) == len(loop) >= 11
    for a, b in zip(fused, loop, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    llm.engine.block_manager.check_no_leak()


@pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)
def test_one_call_decode_takes_the_newer_families(family_llm, cpu_path):
    """Qwen3's q/k norms, Granite's residual multiplier, SmolLM3's layer without RoPE, Phi-3's partial
    rotary and LongRoPE (the long prompt is past its original context) and Mistral's 13-token window
    (every prompt here but the first is longer): the op's logits are the layer loop's, step after step,
    for a long prompt split into partitions by a team of 3 threads beside three short ones."""
    _long_prompt_in_a_team(family_llm, 3, ("The capital of France is", "SELECT name FROM products", "1, 2, 3, 4, 5, 6"))


@pytest.fixture(scope="module")
def spec_llm(llm):
    """Quantized weights (int8 groups: GGUF's Q8_0), with which the one-call op takes up to 8 rows."""
    return LLM(model=llm.engine.config.model, num_kv_blocks=64, quantization="int8",
               speculative_config={"method": "ngram", "num_speculative_tokens": 6})


@pytest.mark.parametrize("cpu_path", cpu_paths(64), indirect=True)
def test_verify_steps_take_the_one_call_decode(spec_llm, cpu_path, monkeypatch):
    """A verify step of 7 rows (6 drafts) runs as decode rows through the one-call op, each row attending
    up to its own position, and gives the layer loop's logits."""
    spec = spec_llm
    rows: list[int] = []
    op = llama_module.decode_layers_cpu

    def counting(x, *args, **kwargs):
        rows.append(x.shape[0])
        return op(x, *args, **kwargs)

    monkeypatch.setattr(llama_module, "decode_layers_cpu", counting)
    # A random model rarely repeats itself, so drafts come from a drafter that always proposes.
    monkeypatch.setattr(speculative, "ngram_propose", lambda tokens, k, *_: tokens[-k:])
    prompt = "SELECT name FROM users WHERE id = 1;"
    fused = _logits_per_step(spec, [prompt], fused=True)
    loop = _logits_per_step(spec, [prompt], fused=False)
    assert max(rows) == 7 and max(len(a) for a in fused) == 7
    assert [len(a) for a in fused] == [len(b) for b in loop]
    for a, b in zip(fused, loop, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    spec.engine.block_manager.check_no_leak()


def test_more_sequences_than_one_call_takes_the_layer_loop(llm):
    """More rows than the one-call op takes: the Python loop runs, and still answers."""
    prompts = [chr(ord("a") + i) for i in range(FLOAT_DECODE_MAX_ROWS + 1)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == 4 for o in outs)


@pytest.mark.parametrize("name", LOOP_FAMILIES)
def test_families_the_op_leaves_to_the_layer_loop(name, tmp_path, default_model_dir):
    """Gemma's branch norms and GELU, per-layer RoPE settings and Llama 4's attention temperature are not
    in the op: these models decode through their layer loop (their HF parity is test_model_families')."""
    folder = make_tiny(tmp_path, FAMILIES[name](), default_model_dir, seed=len(name))
    model = LLM(model=str(folder), num_kv_blocks=16).engine.runner.model
    assert getattr(model, "decode_layers", None) is None


@pytest.mark.parametrize("cpu_path", cpu_paths(64), indirect=True)
def test_one_call_decode_reads_stacked_weights_part_by_part(llm, cpu_path):
    """A fused matrix of two GGUF types (a Q4_K_M file's Q4_K q and k beside a Q6_K v) stays two matrices
    (kernels.quantized.StackedWeight); the op reads the second as a tail of the first (decode_layers.cpp's
    Matrix::tail): Q8_0 q and k beside a Q4_0 v and a Q8_0 gate beside a Q4_0 up here, the qwen2 model's
    q/k/v biases split with them. Its logits are the layer loop's, step after step, on every path, in a team
    of two threads (whose q/k/v heads are split by their bytes, so here unevenly)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    from kernels.quantized import Q4_0, QuantizedWeight, StackedWeight, dequantize

    int8 = LLM(model=llm.engine.config.model, num_kv_blocks=64, quantization="int8")
    model = int8.engine.runner.model
    w = model.weights

    def stacked(name: str, split: int) -> StackedWeight:
        full = w[name]
        assert isinstance(full, QuantizedWeight)
        rows = dequantize(full)[split:].numpy()
        tail = QuantizedWeight(torch.from_numpy(quantize(rows, GGMLQuantizationType.Q4_0)), Q4_0,
                               (rows.shape[0], rows.shape[1]))
        head = QuantizedWeight(full.data[:split].contiguous(), full.qtype, (split, full.shape[1]))
        return StackedWeight((head, tail))

    d = model.head_dim
    for i in range(model.num_layers):
        p = f"model.layers.{i}."
        w[p + "qkv"] = stacked(p + "qkv", (model.num_heads + model.num_kv_heads) * d)
        w[p + "gate_up"] = stacked(p + "gate_up", w[p + "gate_up"].shape[0] // 2)
    model.decode_layers = model._decode_layer_lists()
    assert model.decode_layers["tail_slots"] == [s for i in range(model.num_layers) for s in (4 * i, 4 * i + 2)]
    prompts = ["The capital of France is", "SELECT name FROM", "1, 2, 3,"]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fused = _logits_per_step(int8, prompts, fused=True)
        loop = _logits_per_step(int8, prompts, fused=False)
    finally:
        torch.set_num_threads(before)
    assert len(fused) == len(loop) >= 11
    for a, b in zip(fused, loop, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)

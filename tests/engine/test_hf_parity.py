"""Greedy tokens equal HF transformers' generate, whatever the batch composition, chunking,
preemption or prefix-cache hits, on every instruction-set path of the C++ kernels this CPU runs."""

import random

import pytest
from transformers import LlamaForCausalLM

from engine import LLM, SamplingParams
from tests.cpu_paths import cpu_paths
from tests.engine.conftest import hf_greedy_choices, hf_greedy_with

MAX_NEW = 12
# The tiny models' head size is 16, the default model's 64: every path divides both.
per_path = pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)


def prompts_of(n: int, seed: int, vocab: int = 49152, lo: int = 1, hi: int = 70) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


class Reference:
    """HF's greedy tokens for one model, computed once per prompt: each path's run compares with the
    same answers, so the per-path runs cost only the engine's time."""

    def __init__(self, folder):
        self.model = LlamaForCausalLM.from_pretrained(folder).eval()
        self.answers: dict[tuple, list[int]] = {}
        self.choices_cache: dict[tuple, list[int]] = {}

    def __call__(self, prompts: list[list[int]], max_new: int = MAX_NEW) -> list[list[int]]:
        for p in prompts:
            if (key := (tuple(p), max_new)) not in self.answers:
                self.answers[key] = hf_greedy_with(self.model, p, max_new)
        return [self.answers[tuple(p), max_new] for p in prompts]

    def choices(self, prompts: list[list[int]], answers: list[list[int]]) -> list[list[int]]:
        """HF's greedy choices along each answer, one forward pass each (hf_greedy_choices): equal to the
        answers exactly when they are HF's greedy tokens. Cached, as each path gives the same answers."""
        for p, a in zip(prompts, answers, strict=True):
            if (key := (tuple(p), tuple(a))) not in self.choices_cache:
                self.choices_cache[key] = hf_greedy_choices(self.model, p, a)
        return [self.choices_cache[tuple(p), tuple(a)] for p, a in zip(prompts, answers, strict=True)]


@pytest.fixture(scope="module", params=["gqa", "mha_tied"])
def tiny(request, tiny_models):
    folder = tiny_models[request.param]
    return folder, Reference(folder)


def run(folder, prompts, **config) -> list[list[int]]:
    llm = LLM(model=str(folder), **config)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True), use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return [o.outputs[0].token_ids for o in outs]


@pytest.mark.parametrize("batch", [1, 5, 16])
@per_path
def test_greedy_equals_hf_mixed_batches(tiny, cpu_path, batch):
    folder, hf = tiny
    prompts = prompts_of(batch, seed=batch)
    expected = hf(prompts)
    assert run(folder, prompts, num_kv_blocks=256, max_num_seqs=16) == expected


@per_path
def test_chunked_prefill_forced_small(tiny, cpu_path):
    folder, hf = tiny
    prompts = prompts_of(4, seed=11, lo=30, hi=90)
    expected = hf(prompts)
    assert run(folder, prompts, num_kv_blocks=256, max_num_batched_tokens=7, block_size=8) == expected


@per_path
def test_preemption_by_tiny_kv_budget(tiny, cpu_path):
    folder, hf = tiny
    prompts = prompts_of(8, seed=12, lo=20, hi=40)
    expected = hf(prompts)
    llm = LLM(model=str(folder), num_kv_blocks=12, block_size=8)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True), use_tqdm=False)
    assert llm.engine.scheduler.num_preemptions > 0
    assert [o.outputs[0].token_ids for o in outs] == expected
    llm.engine.block_manager.check_no_leak()


@per_path
def test_prefix_cache_hits(tiny, cpu_path):
    folder, hf = tiny
    shared = prompts_of(1, seed=13, lo=40, hi=40)[0]
    prompts = [shared + tail for tail in prompts_of(4, seed=14, lo=1, hi=9)]
    expected = hf(prompts)
    llm = LLM(model=str(folder), num_kv_blocks=128, block_size=8)
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    first = llm.generate(prompts[:1], params, use_tqdm=False)
    rest = llm.generate(prompts[1:], params, use_tqdm=False)
    assert all(o.metrics.cached_tokens >= 32 for o in rest)
    assert llm.engine.block_manager.prefix_hits >= 3 * 32
    assert [o.outputs[0].token_ids for o in first + rest] == expected
    llm.engine.block_manager.check_no_leak()
    llm.engine.block_manager.reset_prefix_cache()
    again = llm.generate(prompts[1:2], params, use_tqdm=False)
    assert again[0].metrics.cached_tokens == 0
    assert again[0].outputs[0].token_ids == expected[1]


@per_path
def test_prompts_arriving_together_share_their_prefix(tiny, cpu_path):
    """Eight prompts over two 48-token prefixes, queued at once: the first of each computes its prefix while
    the others wait a step (in-batch prefix caching), then find it cached; decode then reads each prefix
    once for all its rows (the attention kernel's shared-prefix tasks). HF's greedy tokens all the same."""
    folder, hf = tiny
    heads = prompts_of(2, seed=18, lo=48, hi=48)
    prompts = [heads[i % 2] + tail for i, tail in enumerate(prompts_of(8, seed=19, lo=3, hi=12))]
    expected = hf(prompts)
    llm = LLM(model=str(folder), num_kv_blocks=128, block_size=8)
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert sorted(o.metrics.cached_tokens for o in outs) == [0, 0] + [48] * 6
    assert [o.outputs[0].token_ids for o in outs] == expected
    llm.engine.block_manager.check_no_leak()


@per_path
def test_requests_ending_in_their_prefill_step_are_cached(tiny, cpu_path):
    """A request finished by the step that computes its prompt (max_tokens=1) leaves its full blocks in the prefix
    cache: the same prompt again skips all but the block holding its last token."""
    folder, hf = tiny
    prompt = prompts_of(1, seed=16, lo=40, hi=40)[0]
    llm = LLM(model=str(folder), num_kv_blocks=64, block_size=8)
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    outs = [llm.generate([prompt], params, use_tqdm=False)[0] for _ in range(2)]
    assert [o.metrics.cached_tokens for o in outs] == [0, 32]
    assert llm.engine.block_manager.prefix_hits == 32
    assert [o.outputs[0].token_ids for o in outs] == hf([prompt], 1) * 2
    llm.engine.block_manager.check_no_leak()


@per_path
def test_next_turn_resumes_at_the_last_full_block(tiny, cpu_path):
    """29 prompt tokens and 12 generated: the last step computes the 40th token, filling the fifth block as the
    sequence finishes. A next turn (prompt, answer, new text) skips all 40."""
    folder, hf = tiny
    prompt = prompts_of(1, seed=17, lo=29, hi=29)[0]
    llm = LLM(model=str(folder), num_kv_blocks=64, block_size=8)
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    first = llm.generate([prompt], params, use_tqdm=False)[0]
    turn = prompt + first.outputs[0].token_ids + prompts_of(1, seed=18, lo=5, hi=5)[0]
    second = llm.generate([turn], params, use_tqdm=False)[0]
    assert second.metrics.cached_tokens == 40
    assert [first.outputs[0].token_ids, second.outputs[0].token_ids] == hf([prompt, turn])
    llm.engine.block_manager.check_no_leak()


@pytest.mark.parametrize("scheduling", ["static", "dynamic"])
def test_static_and_dynamic_policies_agree(tiny, scheduling):
    folder, hf = tiny
    prompts = prompts_of(6, seed=15)
    expected = hf(prompts)
    assert run(folder, prompts, num_kv_blocks=256, max_num_seqs=4, scheduling=scheduling) == expected


@pytest.fixture(scope="module")
def default_reference(default_model_dir):
    return Reference(default_model_dir)


@pytest.mark.default_model
@pytest.mark.parametrize("cpu_path", cpu_paths(16, best_unless_slow=True), indirect=True)
def test_default_model_matches_hf(default_reference, cpu_path):
    llm = LLM(model="default", num_kv_blocks=256)
    tok = llm.tokenizer
    texts = [
        "The capital of France is",
        "def fibonacci(n):",
        "서울은 대한민국의",
        llm.apply_chat_template([{"role": "user", "content": "한국어로 자기소개를 해 주세요."}]),
        llm.apply_chat_template([{"role": "user", "content": "List three colors."}]),
    ]
    prompts = [tok.encode(t, add_special_tokens=False) for t in texts]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True), use_tqdm=False)
    got = [o.outputs[0].token_ids for o in outs]
    assert all(len(t) == 24 for t in got)
    # HF's greedy choice after each prefix (one forward pass per answer, not 24 generate steps, each a pass
    # over the 135M weights): equal to `got` exactly when `got` is HF's greedy decoding.
    assert default_reference.choices(prompts, got) == got
    llm.engine.block_manager.check_no_leak()

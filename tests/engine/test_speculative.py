"""Speculative decoding: greedy output identical with and without it, the rejection rule keeps the
target's distribution, and no block leaks."""

import os

import pytest
import torch
from scipy import stats

from engine import LLM, SamplingParams
from engine.sampler import Sampler
from engine.sequence import Sequence
from engine.speculative import SpeculativeConfig, ngram_propose
from tests.engine.test_hf_parity import prompts_of


def repetitive_prompts(n: int, seed: int) -> list[list[int]]:
    """Prompts that repeat a phrase, so the n-gram drafter finds matches and drafts get accepted."""
    out = []
    for p in prompts_of(n, seed=seed, lo=4, hi=9):
        out.append((p * 6)[:50])
    return out


def generate(folder, prompts, params, **config):
    llm = LLM(model=str(folder), **config)
    outs = llm.generate(prompts, params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return llm, [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason) for o in outs]


def test_ngram_proposer():
    assert ngram_propose([1, 2, 3, 9, 1, 2, 3], 3, 1, 3) == [9, 1, 2]
    assert ngram_propose([5, 6, 7], 2, 1, 3) == []
    assert ngram_propose([1, 2, 1, 3, 1], 2, 1, 3) == [3, 1]  # the most recent match wins


def test_config_is_validated():
    for bad in ({"method": "magic"}, {"num_speculative_tokens": 0}, {"method": "draft"}, {"k": 3}):
        with pytest.raises(ValueError):
            SpeculativeConfig.parse(bad)


SPECS = {
    "ngram": lambda models: {"method": "ngram", "num_speculative_tokens": 4, "max_batch": 16},
    "draft": lambda models: {"method": "draft", "model": str(models["mha_tied"]), "num_speculative_tokens": 3,
                             "max_batch": 16},
}


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_greedy_identical_with_and_without_speculation(tiny_models, method):
    folder = tiny_models["gqa"]
    prompts = repetitive_prompts(6, seed=31)
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in (20, 7, 13, 1, 20, 9)]
    _, plain = generate(folder, prompts, params, num_kv_blocks=128, block_size=8)
    llm, spec = generate(folder, prompts, params, num_kv_blocks=128, block_size=8,
                         speculative_config=SPECS[method](tiny_models))
    assert spec == plain
    assert [len(t) for t, _, _ in spec] == [20, 7, 13, 1, 20, 9]  # max_tokens reached mid-run
    assert llm.engine.spec_stats["proposed"] > 0
    if method == "ngram":
        assert llm.engine.spec_stats["accepted"] > 0


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_stop_string_and_eos_inside_an_accepted_run(tiny_models, method):
    folder = tiny_models["gqa"]
    prompts = repetitive_prompts(3, seed=32)
    free = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    _, plain = generate(folder, prompts, free, num_kv_blocks=128, block_size=8)
    stops = [text[len(text) // 2 : len(text) // 2 + 2] for _, text, _ in plain]
    eos_ids = [ids[len(ids) // 2] for ids, _, _ in plain]
    params = [SamplingParams(temperature=0, max_tokens=24, stop=[s], ignore_eos=True) for s in stops]
    params += [SamplingParams(temperature=0, max_tokens=24, stop_token_ids=[e]) for e in eos_ids]
    _, expect = generate(folder, prompts + prompts, params, num_kv_blocks=128, block_size=8)
    _, got = generate(folder, prompts + prompts, params, num_kv_blocks=128, block_size=8,
                      speculative_config=SPECS[method](tiny_models))
    assert got == expect
    assert all(reason == "stop" for _, _, reason in got)


def test_speculation_with_preemption(tiny_models):
    folder = tiny_models["gqa"]
    prompts = repetitive_prompts(6, seed=33)
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    _, plain = generate(folder, prompts, params, num_kv_blocks=256, block_size=8)
    llm, spec = generate(folder, prompts, params, num_kv_blocks=14, block_size=8,
                         speculative_config={"method": "ngram", "num_speculative_tokens": 4, "max_batch": 16})
    assert llm.engine.scheduler.num_preemptions > 0
    assert spec == plain


@pytest.mark.default_model
def test_default_model_greedy_identical(tmp_path):
    """On the default model with text-to-SQL prompts (~520 tokens each): n-gram speculation by default;
    SLLM_SLOW=1 adds the draft method with the default model as its own draft, which prefills every prompt
    twice (about half the test's time; the draft method's identity, with drafts rejected too, is checked
    on the tiny models above)."""
    from integrations.text2sql.dataset import load_prompts

    prompts = load_prompts(3)
    params = SamplingParams(temperature=0, max_tokens=32)
    _, plain = generate("default", prompts, params, num_kv_blocks=256)
    specs = [{"method": "ngram", "num_speculative_tokens": 4}]
    if os.environ.get("SLLM_SLOW"):
        specs.append({"method": "draft", "model": "default", "num_speculative_tokens": 3})
    for spec in specs:
        llm, got = generate("default", prompts, params, num_kv_blocks=256, speculative_config=spec)
        assert got == plain
        assert llm.engine.spec_stats["acceptance_rate"] > 0.3


def _first_token_counts(p: torch.Tensor, q: torch.Tensor | None, draft_token: int | None, trials: int) -> torch.Tensor:
    sampler = Sampler()
    seq = Sequence("stat", [0], 1, SamplingParams(temperature=1.0, seed=0), generator=torch.Generator().manual_seed(0))
    logits = torch.log(p).repeat(3, 1)  # the same target distribution at every position
    counts = torch.zeros_like(p)
    gen = torch.Generator().manual_seed(1)
    for _ in range(trials):
        d = draft_token if q is None else int(torch.multinomial(q, 1, generator=gen))
        tokens, _ = sampler.verify(logits, seq, [d, d], None if q is None else torch.stack([q, q]))
        counts[tokens[0]] += 1
    return counts


@pytest.mark.parametrize("kind", ["draft_model", "ngram"])
def test_rejection_sampling_keeps_the_target_distribution(kind):
    p = torch.tensor([0.05, 0.4, 0.1, 0.25, 0.15, 0.05])
    q = torch.tensor([0.3, 0.1, 0.3, 0.1, 0.1, 0.1]) if kind == "draft_model" else None
    trials = 4000
    counts = _first_token_counts(p, q, draft_token=2, trials=trials)
    result = stats.chisquare(counts.numpy(), (p * trials).numpy())
    assert result.pvalue > 0.001, (counts, result)

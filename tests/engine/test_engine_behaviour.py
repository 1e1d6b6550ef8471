"""Block accounting, copy-on-write, aborts, seeds, bad input and streaming text on the engine."""

import asyncio

import pytest

from engine import LLM, AsyncEngine, EngineConfig, InvalidRequestError, LLMEngine, SamplingParams
from tests.engine.test_hf_parity import prompts_of


@pytest.fixture(scope="module")
def engine(tiny_models) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(tiny_models["gqa"]), num_kv_blocks=64, block_size=8))


def drain(engine: LLMEngine) -> dict:
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return done


def test_n4_allocates_prompt_blocks_once_and_forks_copy_on_write(engine):
    bm = engine.block_manager
    prompt = prompts_of(1, seed=21, lo=20, hi=20)[0]  # 2.5 blocks of 8: the last one is shared, partial
    engine.add_request("n4", prompt, SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=6, ignore_eos=True))
    engine.step()  # the prompt, once
    seqs = [st.seq for st in engine.requests["n4"].states]
    assert len(seqs) == 4
    assert len({tuple(s.block_table) for s in seqs}) == 1  # all four share the prompt's 3 blocks
    assert bm.num_blocks - bm.num_free_blocks == 3
    assert all(bm.blocks[b].ref_count == 4 for b in seqs[0].block_table)
    engine.step()  # each writes its first token into the shared partial block: copy-on-write
    tables = [s.block_table for s in seqs]
    assert len({t[2] for t in tables}) == 4  # the partial block was copied for three of them
    assert all(t[:2] == tables[0][:2] for t in tables)  # full prompt blocks stay shared
    assert all(bm.blocks[b].ref_count == 4 for b in tables[0][:2])
    out = drain(engine)["n4"]
    assert [len(o.token_ids) for o in out.outputs] == [6] * 4
    assert len({tuple(o.token_ids) for o in out.outputs}) > 1  # samples diverged
    bm.check_no_leak()


def test_abort_mid_prefill_and_mid_decode_frees_blocks(tiny_models):
    engine = LLMEngine(EngineConfig(model=str(tiny_models["gqa"]), num_kv_blocks=64, block_size=8,
                                    max_num_batched_tokens=16))
    long_prompt = prompts_of(1, seed=22, lo=60, hi=60)[0]
    engine.add_request("prefill", long_prompt, SamplingParams(max_tokens=5))
    engine.add_request("decode", [5, 6, 7], SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    engine.step()
    seq = engine.requests["prefill"].states[0].seq
    assert 0 < seq.num_computed_tokens < len(long_prompt)  # genuinely mid-prefill
    assert engine.abort_request("prefill").finished
    engine.step()
    out = engine.abort_request("decode")
    assert out.outputs[0].finish_reason == "abort"
    assert not engine.has_unfinished_requests()
    engine.block_manager.check_no_leak()


def test_no_leak_after_preemption_and_mixed_finishes(tiny_models):
    llm = LLM(model=str(tiny_models["gqa"]), num_kv_blocks=10, block_size=8)
    prompts = prompts_of(6, seed=23, lo=10, hi=30)
    params = [SamplingParams(max_tokens=m, temperature=0.8, seed=i, ignore_eos=True)
              for i, m in enumerate([3, 9, 1, 12, 5, 7])]
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 9, 1, 12, 5, 7]
    assert llm.engine.scheduler.num_preemptions > 0
    llm.engine.block_manager.check_no_leak()


def test_seeded_sampling_is_independent_of_the_batch(engine):
    p = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, seed=1234, max_tokens=10, ignore_eos=True)
    engine.add_request("alone", [11, 12, 13], p)
    alone = drain(engine)["alone"].outputs[0].token_ids
    for i, prompt in enumerate(prompts_of(5, seed=24)):
        engine.add_request(f"noise{i}", prompt, SamplingParams(temperature=1.0, max_tokens=8))
    engine.add_request("crowd", [11, 12, 13], p)
    crowd = drain(engine)["crowd"].outputs[0].token_ids
    assert alone == crowd
    engine.block_manager.check_no_leak()


def test_penalties_and_min_tokens(engine):
    engine.add_request("pen", [11, 12, 13], SamplingParams(temperature=0, max_tokens=12, repetition_penalty=2.0,
                                                           presence_penalty=2.0, frequency_penalty=2.0))
    ids = drain(engine)["pen"].outputs[0].token_ids
    assert len(set(ids)) == len(ids)  # strong penalties forbid repeats at greedy
    engine.add_request("min", [11, 12, 13], SamplingParams(temperature=0, max_tokens=8, min_tokens=8,
                                                           stop_token_ids=list(range(3, 49152, 2))))
    out = drain(engine)["min"].outputs[0]
    assert len(out.token_ids) == 8 and all(t % 2 == 0 or t < 3 for t in out.token_ids[:7])


def test_logit_bias_forces_and_bans_tokens(engine):
    engine.add_request("free", [11, 12, 13], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    free = drain(engine)["free"].outputs[0].token_ids
    engine.add_request("ban", [11, 12, 13], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True,
                                                           logit_bias={free[0]: -100}))
    assert drain(engine)["ban"].outputs[0].token_ids[0] != free[0]
    engine.add_request("force", [11, 12, 13], SamplingParams(temperature=0.8, seed=1, max_tokens=6, ignore_eos=True,
                                                             logit_bias={777: 100}))
    assert drain(engine)["force"].outputs[0].token_ids == [777] * 6  # sampled, but +100 leaves no other choice
    engine.block_manager.check_no_leak()


def test_logprobs_with_alternatives(engine):
    engine.add_request("lp", [11, 12, 13], SamplingParams(temperature=0, max_tokens=4, logprobs=3))
    out = drain(engine)["lp"].outputs[0]
    assert len(out.logprobs) == 4
    for lp, tok in zip(out.logprobs, out.token_ids, strict=True):
        assert lp.chosen.token_id == tok and lp.chosen.logprob <= 0
        assert len(lp.top) == 3 and lp.top[0].token_id == tok  # greedy picks the top alternative


@pytest.mark.parametrize(
    ("prompt", "params", "param"),
    [
        ("", {}, "prompt"),
        ([], {}, "prompt"),
        ([1] * 2000, {}, "prompt"),
        ([1, 2, 3], {"max_tokens": 5000}, "max_tokens"),
        ([1, 2, 3], {"stop_token_ids": [10**9]}, "stop_token_ids"),
        ([1, 2, 3], {"logit_bias": {10**9: 1.0}}, "logit_bias"),
        ([1, 2, 10**9], {}, "prompt"),
    ],
)
def test_bad_requests_are_refused_clearly(engine, prompt, params, param):
    with pytest.raises(InvalidRequestError) as err:
        engine.add_request(f"bad-{param}-{len(prompt)}", prompt, SamplingParams(**params))
    assert err.value.param == param and str(err.value)
    assert not engine.has_unfinished_requests()


@pytest.mark.parametrize(
    "params",
    [{"temperature": -1}, {"top_p": 0}, {"top_k": 0}, {"n": 0}, {"n": 10**6}, {"max_tokens": -5},
     {"logprobs": 1000}, {"presence_penalty": 9}, {"min_p": 2}, {"stop": [""]}, {"logit_bias": {5: 101}},
     {"logit_bias": {-1: 1}}, {"logit_bias": {"5": 1}}, {"seed": 2**64}, {"seed": -(2**63) - 1}],
)
def test_absurd_parameters_are_refused(params):
    with pytest.raises(InvalidRequestError):
        SamplingParams(**params)


def test_seeds_at_the_ends_of_torchs_range_sample_as_torch_wraps_them(engine):
    """A seed plus its sample's index past 2**64 - 1 wraps as torch wraps a seed (-1 seeds as 2**64 - 1);
    it was a ValueError from torch.Generator.manual_seed when the engine added the request."""
    texts = {}
    for seed in (2**64 - 1, -1):
        engine.add_request(f"seed{seed}", [11, 12, 13], SamplingParams(n=2, seed=seed, max_tokens=4, ignore_eos=True))
        texts[seed] = [o.token_ids for o in drain(engine)[f"seed{seed}"].outputs]
    assert texts[2**64 - 1] == texts[-1] and len(texts[-1]) == 2


def test_stop_string_across_token_boundaries(engine):
    engine.add_request("free", [11, 12, 13], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    text = drain(engine)["free"].outputs[0].text
    assert len(text) > 6
    stop = text[3:6]  # three characters that almost surely straddle tokens
    engine.add_request("stop", [11, 12, 13], SamplingParams(temperature=0, max_tokens=20, stop=[stop], ignore_eos=True))
    out = drain(engine)["stop"].outputs[0]
    assert out.text == text[: text.index(stop)]
    assert out.finish_reason == "stop" and out.stop_reason == stop


async def test_async_stream_of_korean_has_no_broken_characters(default_model_dir):
    engine = AsyncEngine(EngineConfig(model="default", num_kv_blocks=64))
    try:
        prompt = engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": "서울에 대해 한국어로 설명해 주세요."}],
            tokenize=False, add_generation_prompt=True,
        )
        deltas, final = [], None
        async for out in engine.generate(prompt, SamplingParams(temperature=0, max_tokens=40)):
            deltas.append(out.outputs[0].delta_text)
            final = out
        assert final is not None and final.finished
        assert all("\ufffd" not in d for d in deltas)
        text = "".join(deltas)
        assert text == final.outputs[0].text
        assert any("\uac00" <= ch <= "\ud7a3" for ch in text)  # Hangul syllables came through
        assert text == engine.tokenizer.decode(final.outputs[0].token_ids, skip_special_tokens=True)

        # A consumer that stops early aborts the request and frees its blocks.
        async for _ in engine.generate(prompt, SamplingParams(max_tokens=200, ignore_eos=True), "gone"):
            break
        for _ in range(100):
            if engine.engine.block_manager.num_free_blocks == engine.engine.block_manager.num_blocks:
                break
            await asyncio.sleep(0.02)
        engine.engine.block_manager.check_no_leak()

        with pytest.raises(InvalidRequestError):
            async for _ in engine.generate("", SamplingParams()):
                pass
    finally:
        engine.shutdown()

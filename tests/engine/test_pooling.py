"""Embedding requests in the engine (engine/pooling.py): pooled final hidden states equal transformers'
(`AutoModel(...).last_hidden_state` pooled and normalised) on a tiny random Llama, whether the prompt is
prefilled in one step or in chunks, beside generation, after a preemption or a prefix-cache hit; and an
embedding request holds no KV block once answered."""

import pytest
import torch
from transformers import AutoModel

from engine import SamplingParams
from engine.llm_engine import LLMEngine
from engine.pooling import PoolingOutput, PoolingParams
from tests.engine.conftest import hf_greedy

PROMPTS = [[1, 5, 77, 300, 9000] * k for k in (1, 3, 20, 40)] + [[42]]


@pytest.fixture(scope="module")
def folder(tiny_models):
    return tiny_models["gqa"]


@pytest.fixture(scope="module")
def reference(folder):
    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return [model(torch.tensor([p])).last_hidden_state[0] for p in PROMPTS]


def _expected(hidden: torch.Tensor, params: PoolingParams) -> torch.Tensor:
    n = hidden.shape[0]
    weights = torch.arange(1, n + 1, dtype=hidden.dtype)[:, None]
    v = {"mean": hidden.mean(0), "last": hidden[-1], "cls": hidden[0], "max": hidden.max(0).values,
         "weightedmean": (hidden * weights).sum(0) / weights.sum(), "mean_sqrt_len": hidden.sum(0) / n ** 0.5,
         }[params.pooling]
    v = v[: params.dimensions] if params.dimensions else v
    return torch.nn.functional.normalize(v, dim=0) if params.normalize else v


def _run(engine: LLMEngine, requests: dict[str, tuple[list[int], PoolingParams]],
         generate: dict[str, list[int]] | None = None) -> dict[str, object]:
    for rid, prompt in (generate or {}).items():
        engine.add_request(rid, prompt, SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    for rid, (prompt, params) in requests.items():
        engine.add_request(rid, prompt, pooling=params)
    got: dict[str, object] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                got[out.request_id] = out
    engine.block_manager.check_no_leak()
    return got


POOLINGS = [PoolingParams("mean"), PoolingParams("last"), PoolingParams("cls"),
            PoolingParams("mean", dimensions=16), PoolingParams("last", normalize=False),
            PoolingParams("max", normalize=False), PoolingParams("weightedmean", normalize=False),
            PoolingParams("mean_sqrt_len", normalize=False)]


@pytest.mark.parametrize("chunk", [2048, 48], ids=["whole", "chunked"])
def test_embeddings_equal_hf_pooled_states(folder, reference, chunk):
    engine = LLMEngine(model=str(folder), num_threads=1, max_num_batched_tokens=chunk)
    requests = {f"{k}-{i}": (p, params) for k, params in enumerate(POOLINGS) for i, p in enumerate(PROMPTS)}
    # Generation shares the steps: its tokens are HF's greedy ones all the same.
    gen = {"gen": PROMPTS[1]}
    got = _run(engine, requests, gen)
    for rid, (prompt, params) in requests.items():
        out = got[rid]
        assert isinstance(out, PoolingOutput) and out.prompt_token_ids == prompt
        want = _expected(reference[PROMPTS.index(prompt)], params)
        assert out.embedding.shape == want.shape
        torch.testing.assert_close(out.embedding, want, atol=1e-4, rtol=1e-4)
    assert got["gen"].outputs[0].token_ids == hf_greedy(folder, PROMPTS[1], 12)


def test_preemption_and_prefix_hits_give_the_same_vectors(folder, reference):
    # 14 blocks of 16 tokens: two 200-token prompts cannot both be resident, so one is preempted and recomputed.
    engine = LLMEngine(model=str(folder), num_threads=1, num_kv_blocks=14, max_num_batched_tokens=64)
    long = PROMPTS[3]
    requests = {"a": (long, PoolingParams("mean")), "b": (long, PoolingParams("last")),
                "c": (long, PoolingParams("cls")), "f": (long, PoolingParams("max")),
                "g": (long, PoolingParams("weightedmean"))}
    got = _run(engine, requests, {"gen": PROMPTS[2]})
    assert engine.scheduler.num_preemptions > 0
    for rid, (_, params) in requests.items():
        torch.testing.assert_close(got[rid].embedding, _expected(reference[3], params), atol=1e-4, rtol=1e-4)
    # The same prompt again: last-token pooling may take the cached prefix; mean computes every row.
    hits = engine.block_manager.prefix_hits
    again = _run(engine, {"d": (long, PoolingParams("last")), "e": (long, PoolingParams("mean"))})
    assert engine.block_manager.prefix_hits > hits
    torch.testing.assert_close(again["d"].embedding, got["b"].embedding, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again["e"].embedding, got["a"].embedding, atol=1e-5, rtol=1e-5)


def test_an_aborted_embedding_frees_its_blocks(folder):
    engine = LLMEngine(model=str(folder), num_threads=1, max_num_batched_tokens=32)
    engine.add_request("x", PROMPTS[3], pooling=PoolingParams())
    engine.step()  # one chunk computed, blocks held
    assert engine.block_manager.num_free_blocks < engine.block_manager.num_blocks
    engine.abort_request("x")
    assert not engine.has_unfinished_requests()
    engine.block_manager.check_no_leak()

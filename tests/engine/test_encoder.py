"""Encoder models (engine/encoder_engine.py, engine/models/bert.py, modernbert.py): tiny random BERT,
XLM-RoBERTa and ModernBERT checkpoints saved by sentence-transformers; our vectors equal
sentence-transformers' `encode` to 1e-4 for each mode of its Pooling module, with and without its
Normalize module, over inputs longer than max_seq_length (truncated as it truncates); cross-encoder scores
equal its CrossEncoder's `predict`; concurrent requests share forward passes; the legacy `pooling_mode_*`
config is read."""

import asyncio
import json

import pytest
import torch

from engine.encoder_engine import EncoderEngine
from engine.encoder_folder import read_encoder_spec
from engine.errors import InvalidRequestError
from engine.models.bert import is_encoder_folder
from engine.pooling import PoolingParams
from tests.engine.encoder_helpers import make_encoder, make_sentence_transformer

TEXTS = ["The quick brown fox jumps over the lazy dog.", "안녕하세요, 세계", "SELECT count(*) FROM users;", "a",
         "how do plants make food " * 20]
QUERY = "how do plants make food"


async def _embed_all(engine: EncoderEngine, texts: list) -> torch.Tensor:
    params = PoolingParams(engine.spec.pooling, normalize=engine.spec.normalize)
    outs = await asyncio.gather(*[engine.embed(engine.check_request(t), params) for t in texts])
    return torch.stack([o.embedding for o in outs])


@pytest.mark.parametrize(("arch", "pooling", "normalize"), [
    *[(arch, pooling, normalize) for arch in ("bert", "roberta", "modernbert")
      for pooling, normalize in (("mean", True), ("cls", False), ("lasttoken", True))],
    # the other modes of sentence-transformers' Pooling: the pooling is the same code whatever the encoder
    ("bert", "max", False), ("bert", "weightedmean", True), ("bert", "mean_sqrt_len_tokens", False)])
def test_vectors_equal_sentence_transformers(tmp_path, arch, pooling, normalize):
    from sentence_transformers import SentenceTransformer

    folder = make_sentence_transformer(tmp_path / "st", arch, pooling, normalize, seed=3)
    expected = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_tensor=True)
    engine = EncoderEngine(folder)
    try:
        assert is_encoder_folder(folder) and engine.task == "embed" and engine.max_model_len == 48
        got = asyncio.run(_embed_all(engine, TEXTS))
        torch.testing.assert_close(got, expected.cpu(), atol=1e-4, rtol=1e-4)
        assert engine.stats()["batches"] == 1  # five requests, one padded forward pass
    finally:
        engine.shutdown()


@pytest.mark.parametrize("arch", ["bert", "roberta", "modernbert"])
def test_cross_encoder_scores_equal_sentence_transformers(tmp_path, arch):
    from sentence_transformers import CrossEncoder

    folder = make_encoder(tmp_path / "ce", arch, head=True, seed=8)
    pairs = [(QUERY, t) for t in TEXTS]
    expected = torch.tensor(CrossEncoder(str(folder), device="cpu").predict(pairs))
    engine = EncoderEngine(folder)

    async def scores():
        return await asyncio.gather(*[engine.score(*engine.check_pair(q, d)) for q, d in pairs])

    try:
        assert engine.task == "score" and engine.spec.activation == "sigmoid"
        got = torch.tensor(asyncio.run(scores()))
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        assert got.std() > 0.01  # scores that differ: a mixed-up head would show
    finally:
        engine.shutdown()


def test_legacy_pooling_config_and_token_ids(tmp_path):
    folder = make_encoder(tmp_path / "legacy", "bert", seed=1)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 16, "do_lower_case": False}))
    spec = read_encoder_spec(folder)
    assert (spec.pooling, spec.normalize, spec.max_seq_length) == ("cls", False, 16)
    engine = EncoderEngine(folder)
    try:
        assert len(engine.check_request("word " * 100)) == 16
        ids = engine.check_request("the fox")
        assert engine.check_request(ids) == ids
        with pytest.raises(InvalidRequestError):
            engine.check_request([10**6])
        with pytest.raises(InvalidRequestError):
            engine.check_request([5] * 65)  # beyond the position table
    finally:
        engine.shutdown()


def test_torch_work_on_a_decoders_step_thread(tmp_path):
    """An encoder served beside a decoder does its load and forward passes on the decoder's step thread
    (one OpenMP pool in the process), with the vectors it gives on its own thread; calls queued on a step
    thread that stops fail instead of hanging."""
    import threading

    from engine import AsyncEngine, EngineConfig
    from engine.errors import EngineDeadError

    folder = make_sentence_transformer(tmp_path / "st", "bert", "mean", True, seed=5)
    alone = EncoderEngine(folder)
    try:
        expected = asyncio.run(_embed_all(alone, TEXTS))
    finally:
        alone.shutdown()
    decoder = AsyncEngine(EngineConfig(model="default", num_kv_blocks=64))
    threads = []

    def on_step_thread(fn):
        threads.append(threading.current_thread().name)
        return decoder.call_soon(lambda: (threads.append(threading.current_thread().name), fn())[1])

    try:
        engine = EncoderEngine(folder, run_torch=on_step_thread)
        try:
            got = asyncio.run(_embed_all(engine, TEXTS))
        finally:
            engine.shutdown()
        assert torch.equal(got, expected)
        assert threads[1::2] == ["sllm-engine"] * 2  # the load, then the one batch
    finally:
        decoder.shutdown()
    with pytest.raises(EngineDeadError):
        decoder.call_soon(lambda: 1)
    # A call queued as the thread stopped gets the error.
    from concurrent.futures import Future

    from engine.async_engine import Call

    fut: Future = Future()
    decoder._commands.put(Call(lambda: 1, fut))
    decoder._fail_calls()
    with pytest.raises(EngineDeadError):
        fut.result(timeout=1)

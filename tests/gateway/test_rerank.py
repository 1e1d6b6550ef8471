"""`/v1/rerank`, `/rerank` and `/v2/rerank` on a tiny random Llama: each document's score is the cosine
similarity of its mean-pooled state to the query's, as transformers computes them (1e-4); results best
first, `top_n`, `return_documents`, Jina's object documents; bad input as OpenAI-shaped 400s."""

import httpx
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server

QUERY = "How do plants make food?"
DOCS = ["Photosynthesis turns light into sugar.", "The stock market fell today.", "Plants need water.", "x"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("rerank") / "tiny-llama", resolve_model("default"), seed=5)


@pytest.fixture(scope="module")
def server(tmp_path_factory, folder):
    with run_server(tmp_path_factory.mktemp("rerank-server"), model=str(folder)) as s:
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def expected(folder) -> list[float]:
    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)

    def embed(text: str) -> torch.Tensor:
        with torch.no_grad():
            hidden = model(torch.tensor([tok.encode(text, add_special_tokens=False)])).last_hidden_state[0]
        return torch.nn.functional.normalize(hidden.mean(0), dim=0)

    q = embed(QUERY)
    return [float(q @ embed(d)) for d in DOCS]


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_scores_are_the_pooled_cosine_similarity(server, expected, path):
    r = _post(server, path, {"model": "tiny-llama-embed", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny-llama-embed" and body["id"].startswith("rerank-") and body["usage"]["total_tokens"]
    results = body["results"]
    assert [x["index"] for x in results] == sorted(range(len(DOCS)), key=lambda i: -expected[i])
    for x in results:
        assert abs(x["relevance_score"] - expected[x["index"]]) < 1e-4
        assert x["document"] == {"text": DOCS[x["index"]]}


def test_top_n_objects_and_no_documents(server, expected):
    body = {"query": QUERY, "documents": [{"text": d} for d in DOCS], "top_n": 2, "return_documents": False}
    results = _post(server, "/v1/rerank", body).json()["results"]
    best = sorted(range(len(DOCS)), key=lambda i: -expected[i])[:2]
    assert [x["index"] for x in results] == best and all("document" not in x for x in results)


@pytest.mark.parametrize(("body", "param"), [
    ({"query": QUERY, "documents": []}, "documents"), ({"query": "", "documents": DOCS}, "query"),
    ({"query": QUERY, "documents": ["ok", ""]}, "documents"),
    ({"query": QUERY, "documents": [{"txt": "a"}]}, "documents"),
    ({"query": QUERY, "documents": DOCS, "top_n": 0}, "top_n"), ({"documents": DOCS}, "query"),
])
def test_bad_input_is_an_openai_error(server, body, param):
    r = _post(server, "/v1/rerank", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].split(".")[0] == param
    server.assert_no_leak()

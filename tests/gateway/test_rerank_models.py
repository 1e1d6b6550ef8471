"""Rerank and vLLM's /score on models that score pairs: BERT and XLM-RoBERTa cross-encoders (tiny random
one-label sequence classifiers) equal sentence-transformers' CrossEncoder.predict to 1e-4; a decoder
reranker of the Qwen3-Reranker kind (a tiny random Qwen3 with SmolLM2's tokenizer) equals the softmaxed
yes/no logits of transformers' forward over the model card's prompt; /score pairs one against many and
pairwise, and on an embedding model gives sentence-transformers' cosine similarity; misuse is an
OpenAI-shaped 400."""

import shutil

import httpx
import pytest
import torch
import transformers

from engine.loader import resolve_model
from tests.engine.conftest import TOKENIZER_FILES
from tests.engine.encoder_helpers import make_encoder, make_sentence_transformer
from tests.gateway.server import run_server

QUERY = "how do plants make food"
DOCS = ["Photosynthesis turns light into sugar.", "The stock market fell today.", "plants need water", "x",
        "the quick brown fox " * 40]
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def _tiny_qwen3(folder):
    torch.manual_seed(7)
    config = transformers.Qwen3Config(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=1024, initializer_range=0.2, tie_word_embeddings=False)
    transformers.Qwen3ForCausalLM(config).eval().save_pretrained(folder)
    source = resolve_model("default")
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rerankers")
    return {"ce-bert": make_encoder(tmp / "ce-bert", "bert", head=True, seed=11),
            "ce-xlmr": make_encoder(tmp / "ce-xlmr", "roberta", head=True, seed=12),
            "tiny-Qwen3-Reranker": _tiny_qwen3(tmp / "tiny-Qwen3-Reranker"),
            "st-embed": make_sentence_transformer(tmp / "st-embed", "bert", "mean", seed=13)}


@pytest.fixture(scope="module")
def server(tmp_path_factory, folders):
    models = [{"model": str(folders[n]), "name": n} for n in ("tiny-Qwen3-Reranker", "ce-bert", "ce-xlmr")]
    with run_server(tmp_path_factory.mktemp("rerank-models"), models=models, embedding_pooling="none",
                    embedding_model=str(folders["st-embed"])) as s:
        yield s
        s.assert_no_leak()


def _cross_encoder(folder, pairs) -> list[float]:
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(folder), device="cpu").predict(pairs).tolist()


def _qwen3_reranker(folder, pairs) -> list[float]:
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    no, yes = tok.convert_tokens_to_ids("no"), tok.convert_tokens_to_ids("yes")
    scores = []
    for q, d in pairs:
        text = f"<Instruct>: {INSTRUCTION}\n<Query>: {q}\n<Document>: {d}"
        ids = (tok.encode(PREFIX, add_special_tokens=False) + tok.encode(text, add_special_tokens=False)
               + tok.encode(SUFFIX, add_special_tokens=False))
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1, [no, yes]]
        scores.append(torch.softmax(logits, 0)[1].item())
    return scores


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


@pytest.mark.parametrize("model", ["ce-bert", "ce-xlmr", "tiny-Qwen3-Reranker"])
def test_rerank_scores_equal_the_reference(server, folders, model):
    pairs = [(QUERY, d) for d in DOCS]
    reference = _qwen3_reranker if "Qwen3" in model else _cross_encoder
    expected = reference(folders[model], pairs)
    r = _post(server, "/v1/rerank", {"model": model, "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    got = {item["index"]: item["relevance_score"] for item in body["results"]}
    torch.testing.assert_close(torch.tensor([got[i] for i in range(len(DOCS))]), torch.tensor(expected),
                               atol=1e-4, rtol=1e-4)
    assert [item["index"] for item in body["results"]] == sorted(range(len(DOCS)), key=lambda i: -expected[i])
    assert body["model"] == model and body["usage"]["total_tokens"] > 0 and torch.tensor(expected).std() > 0.001
    top = _post(server, "/rerank", {"model": model, "query": QUERY, "documents": [{"text": d} for d in DOCS],
                                    "top_n": 2, "return_documents": False}).json()["results"]
    assert [t["index"] for t in top] == [item["index"] for item in body["results"][:2]] and "document" not in top[0]


def test_score_one_against_many_and_pairwise(server, folders):
    expected = _cross_encoder(folders["ce-bert"], [(QUERY, d) for d in DOCS])
    many = _post(server, "/score", {"model": "ce-bert", "text_1": QUERY, "text_2": DOCS}).json()
    assert many["object"] == "list" and many["model"] == "ce-bert"
    assert [d["index"] for d in many["data"]] == list(range(len(DOCS))) and many["data"][0]["object"] == "score"
    torch.testing.assert_close(torch.tensor([d["score"] for d in many["data"]]), torch.tensor(expected),
                               atol=1e-4, rtol=1e-4)
    firsts = [QUERY, "cats", "rain"]
    pairwise = _post(server, "/v1/score", {"model": "ce-bert", "text_1": firsts, "text_2": DOCS[:3]}).json()
    expected = _cross_encoder(folders["ce-bert"], list(zip(firsts, DOCS[:3], strict=True)))
    torch.testing.assert_close(torch.tensor([d["score"] for d in pairwise["data"]]), torch.tensor(expected),
                               atol=1e-4, rtol=1e-4)
    one = _post(server, "/score", {"model": "ce-bert", "text_1": QUERY, "text_2": DOCS[0]}).json()
    assert len(one["data"]) == 1 and one["usage"]["prompt_tokens"] == one["usage"]["total_tokens"] > 0


def test_score_on_an_embedding_model_is_the_cosine(server, folders):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folders["st-embed"]), device="cpu")
    q, d = st.encode([QUERY], convert_to_tensor=True), st.encode(DOCS, convert_to_tensor=True)
    r = _post(server, "/score", {"model": "st-embed", "text_1": QUERY, "text_2": DOCS}).json()
    torch.testing.assert_close(torch.tensor([x["score"] for x in r["data"]]), (q @ d.T)[0].cpu(), atol=1e-4,
                               rtol=1e-4)


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/score", {"model": "ce-bert", "text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, "text_2"),
    ("/score", {"model": "ce-bert", "text_1": "a", "text_2": []}, "text_2"),
    ("/score", {"model": "ce-bert", "text_1": "", "text_2": "b"}, "text_1"),
    ("/v1/rerank", {"model": "ce-xlmr", "query": "q", "documents": []}, "documents"),
    ("/v1/embeddings", {"model": "ce-bert", "input": "x"}, "model"),
    ("/v1/chat/completions", {"model": "ce-xlmr", "messages": [{"role": "user", "content": "hi"}]}, "model"),
])
def test_misuse_is_an_openai_error(server, path, body, param):
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] and set(err) == {"message", "type", "param", "code"}

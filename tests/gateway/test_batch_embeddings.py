"""Embedding lines in the Batch API (`"url": "/v1/embeddings"`, endpoint `/v1/embeddings`) through the official
openai client against a real server serving a tiny random BERT embedding model, as a database key: each
line's body equals the synchronous /v1/embeddings answer (floats, base64, token ids, no model named), a
line the endpoint refuses is in the error file with its 400, the batch's usage counts input tokens only;
another key gets a 404 for the batch and its files, the admin sees them."""

import base64
import io
from contextlib import redirect_stdout

import numpy as np
import openai
import pytest

from gateway.cli import create_key
from tests.engine.encoder_helpers import make_sentence_transformer
from tests.gateway.jobs_helpers import jsonl, output_lines, wait_batch
from tests.gateway.server import run_server

ADMIN_KEY = "sk-admin-batch-embeddings"
MODEL = "tiny-bert"


def _key(name: str, db: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        create_key(name=name, db=db, rpm=None, tpm=None)
    return out.getvalue().strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batch-embed")
    db = str(tmp / "sllm.db")
    keys = {name: _key(name, db) for name in ("alice", "bob")}
    folder = make_sentence_transformer(tmp / MODEL, "bert", "mean", normalize=True, seed=6)
    with run_server(tmp, db=db, model=str(folder), api_keys=[ADMIN_KEY], job_scan_s=0.2) as server:
        yield {name: openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
               for name, key in [*keys.items(), ("admin", ADMIN_KEY)]}


def _line(custom_id: str, **body) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": body}


LINES = [_line("texts", model=MODEL, input=["how do plants make food", "the quick brown fox", "a"]),
         _line("base64-default-model", input="SELECT count(*) FROM users;", encoding_format="base64"),
         _line("token-ids", model=MODEL, input=[[5, 6, 7, 8], [9]]),
         _line("dimensions", model=MODEL, input="x", dimensions=8)]  # not a Matryoshka model: the endpoint's 400


def _vectors(body: dict) -> np.ndarray:
    return np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") if isinstance(d["embedding"], str)
                     else d["embedding"] for d in body["data"]])


def test_embedding_lines_equal_the_synchronous_answers_and_stay_the_keys(world):
    alice, bob, admin = world["alice"], world["bob"], world["admin"]
    upload = alice.files.create(file=("embed.jsonl", jsonl(LINES)), purpose="batch")
    batch = alice.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")
    assert batch.endpoint == "/v1/embeddings" and batch.request_counts.total == len(LINES)
    done = wait_batch(alice, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 1)

    out = {o["custom_id"]: o["response"] for o in output_lines(alice, done.output_file_id)}
    assert list(out) == ["texts", "base64-default-model", "token-ids"]
    prompt_tokens = 0
    for line in LINES[:3]:
        answer, body = out[line["custom_id"]], line["body"]
        assert answer["status_code"] == 200 and answer["body"]["object"] == "list"
        assert answer["body"]["model"] == MODEL  # no model named: the default embedding model, as on the endpoint
        sync = alice.embeddings.create(**{**body, "model": body.get("model", MODEL), "encoding_format": "float"})
        np.testing.assert_allclose(_vectors(answer["body"]), np.array([d.embedding for d in sync.data]), atol=1e-6)
        assert answer["body"]["usage"] == sync.usage.model_dump()
        prompt_tokens += sync.usage.prompt_tokens
    assert done.usage.input_tokens == prompt_tokens and done.usage.output_tokens == 0

    (error,) = output_lines(alice, done.error_file_id)
    assert error["custom_id"] == "dimensions" and error["response"]["status_code"] == 400
    assert error["response"]["body"]["error"]["param"] == "dimensions"

    # Tenancy as for any batch: the batch and its files are alice's; bob sees none of them, the admin all.
    for call in (lambda c: c.batches.retrieve(batch.id), lambda c: c.files.content(done.output_file_id),
                 lambda c: c.files.retrieve(upload.id)):
        with pytest.raises(openai.NotFoundError):
            call(bob)
        call(admin)
    assert batch.id not in [b.id for b in bob.batches.list()]

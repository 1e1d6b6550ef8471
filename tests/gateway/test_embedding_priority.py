"""Embedding lines of a batch run below interactive requests, as chat lines do (gateway/limits/priority.py's
priority_batch), on both engines that embed: a tiny random BERT encoder (engine/encoder_engine.py) and a
tiny Llama's pooled states (the paged scheduler). Through the official openai client on a real server: once
a batch's inputs fill the engine's queue, an interactive /v1/embeddings request is answered while most of
them still wait, though it came last and is the longest input (the old encoder worker, which ran every
waiting input sorted by length, put it behind all of them); the batch then completes."""

import time

import openai
import pytest

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.engine.encoder_helpers import make_sentence_transformer
from tests.gateway.jobs_helpers import jsonl, wait_batch
from tests.gateway.server import run_server

LINES = 4
# Inputs a line: the encoder runs one a forward pass (below), the tiny Llama four sequences a step.
INPUTS = {"tiny-bert": 1024, "tiny-llama-embed": 256}
SHORT = [f"document {i} about {['cats', 'sql', 'rain', 'music'][i % 4]}" for i in range(max(INPUTS.values()))]
LONG = "how do plants make food from light and water " * 8  # past the encoder's 48 tokens: the longest input


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("embed-priority")
    models = [{"model": str(make_tiny_llama(tmp / "tiny-llama", resolve_model("default"), seed=4)),
               "max_num_seqs": 4},
              {"model": str(make_sentence_transformer(tmp / "tiny-bert", "bert", "mean", seed=1)),
               "name": "tiny-bert"}]
    with run_server(tmp, models=models, job_scan_s=0.2) as s:
        # One input a forward pass, so the batch below is thousands of passes for the encoder.
        s.state.models.models["tiny-bert"].engine.max_batch_size = 1
        yield s
        s.assert_no_leak()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def _engine_stats(server, model: str):
    served = server.state.models.models[model]
    engine = served.base.engine if hasattr(served, "base") else served.engine
    return engine.stats


@pytest.mark.parametrize("model", ["tiny-bert", "tiny-llama-embed"])
def test_an_interactive_embedding_is_not_stuck_behind_a_batch(server, client, model):
    stats = _engine_stats(server, model)
    lines = [{"custom_id": f"line-{n}", "method": "POST", "url": "/v1/embeddings",
              "body": {"model": model, "input": SHORT[:INPUTS[model]]}} for n in range(LINES)]
    upload = client.files.create(file=("embed.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")

    client.models.list()  # the client's connection is open before the batch starts
    deadline = time.monotonic() + 60
    while stats()["num_waiting"] < LINES * INPUTS[model] * 3 // 4:  # the batch's inputs are queued in the engine
        assert time.monotonic() < deadline, stats()
        time.sleep(0.005)
    waiting_before = stats()["num_waiting"]
    # No bearer key: the fairness key of the batch's lines (none), so only priority can put it first.
    r = client.embeddings.create(model=model, input=LONG, extra_headers={"Authorization": ""})
    waiting_after = stats()["num_waiting"]
    assert len(r.data) == 1 and r.usage.prompt_tokens > 40
    assert waiting_after > waiting_before // 2, (waiting_before, waiting_after)

    done = wait_batch(client, batch.id, timeout=180)
    assert done.status == "completed" and done.request_counts.completed == LINES, done

"""Several models in one server, and model names routed to upstream servers (issue 10).

The upstreams are real `sllm serve` processes on loopback ports; the gateway under test serves the
default model and a tiny random Llama embedded, plus upstream names: `remote` (one upstream), `pair`
(a dead port, then the live upstream), `duo` (two live upstreams) and `victim` (killed mid-stream).
Everything asked through the gateway must equal what the upstream answers when asked directly."""

import concurrent.futures
import contextlib
import json
import signal
import time

import httpx
import openai
import pytest

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.gateway.jobs_helpers import chat_line, jsonl, output_lines, wait_batch
from tests.gateway.server import MODEL, free_port, run_server, spawn_server

pytestmark = pytest.mark.default_model

UP, VICTIM = "smol-upstream", "smol-victim"  # the names the upstream processes serve
QUESTION = "Name three colours."


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory):
    """Both start at once, so the module pays for about one start; no bundled embedding model (loaded
    after /health, it would compete with the tests for the cores and nothing here asks for it)."""
    tmp = tmp_path_factory.mktemp("upstreams")
    starting = [spawn_server(tmp, "--served-model-name", name, "--embedding-model", "none") for name in (UP, VICTIM)]
    with contextlib.ExitStack() as stack:
        with concurrent.futures.ThreadPoolExecutor(len(starting)) as pool:
            up, vic = pool.map(stack.enter_context, starting)
        yield up, vic


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, upstreams):
    up, vic = upstreams
    tmp = tmp_path_factory.mktemp("gateway")
    tiny = make_tiny_llama(tmp / "tiny", resolve_model("default"))
    dead = f"http://127.0.0.1:{free_port()}/v1"
    models = [
        {"model": "default"},
        {"model": str(tiny), "name": "tiny", "num_kv_blocks": 64},
        {"name": "remote", "upstream": up.base_url, "upstream_model": UP},
        {"name": "pair", "upstream": [dead, up.base_url], "upstream_model": UP, "cooldown_s": 120},
        {"name": "duo", "upstream": [{"url": up.base_url, "model": UP}, {"url": vic.base_url, "model": VICTIM}]},
        {"name": "victim", "upstream": vic.base_url, "upstream_model": VICTIM, "retries": 0},
    ]
    # No text-to-SQL adapter: an upstream gets the grammar but not our adapter, so the local answer it is
    # compared with must come from the same base model.
    with run_server(tmp, models=models, text2sql_adapter="none") as s:
        yield s


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=120)


def _chat(base_url: str, model: str, **kw):
    return _client(base_url).chat.completions.create(
        model=model, messages=[{"role": "user", "content": QUESTION}], max_tokens=16, temperature=0, **kw)


def test_models_lists_embedded_and_upstream_models(gateway):
    cards = {m.id: m for m in _client(gateway.base_url).models.list().data}
    assert list(cards) == [MODEL, f"{MODEL}-embed", "tiny", "tiny-embed", "remote", "pair", "duo", "victim"]
    assert cards[MODEL].owned_by == "sllm" and cards["remote"].owned_by == "upstream"
    missing = httpx.post(f"{gateway.base_url}/chat/completions",
                         json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]}).json()
    assert missing["error"]["code"] == "model_not_found" and "`remote`" in missing["error"]["message"]


def test_each_embedded_model_answers_under_its_own_name(gateway):
    big, tiny = _chat(gateway.base_url, MODEL), _chat(gateway.base_url, "tiny")
    assert big.model == MODEL and tiny.model == "tiny"
    assert big.choices[0].message.content != tiny.choices[0].message.content  # two different engines
    ids = [httpx.post(f"{gateway.url}/tokenize", json={"model": m, "prompt": QUESTION}).json()["tokens"]
           for m in (MODEL, "tiny")]
    assert ids[0] == ids[1]  # the tiny model borrows the default model's tokenizer
    r = httpx.post(f"{gateway.url}/tokenize", json={"model": "remote", "prompt": QUESTION})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_for_upstream"


def test_chat_and_completions_through_an_upstream_equal_the_upstream(gateway, upstreams):
    up, _ = upstreams
    via, direct = _chat(gateway.base_url, "remote", seed=7), _chat(up.base_url, UP, seed=7)
    assert via.model == "remote" and direct.model == UP
    assert via.choices[0].message.content == direct.choices[0].message.content
    assert via.usage.completion_tokens == direct.usage.completion_tokens
    kw = dict(prompt="SELECT name FROM", max_tokens=12, temperature=0)
    via_c = _client(gateway.base_url).completions.create(model="remote", **kw)
    direct_c = _client(up.base_url).completions.create(model=UP, **kw)
    assert via_c.choices[0].text == direct_c.choices[0].text and via_c.model == "remote"


def test_streaming_is_passed_through_chunk_by_chunk(gateway, upstreams):
    up, _ = upstreams
    direct = _chat(up.base_url, UP).choices[0].message.content
    chunks = list(_chat(gateway.base_url, "remote", stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == direct
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3  # not one buffered blob
    assert all(c.model == "remote" for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    # An upstream's refusal comes back as the upstream said it, in our error shape.
    with pytest.raises(openai.BadRequestError) as err:
        _client(gateway.base_url).chat.completions.create(model="remote", messages=[], max_tokens=-1)
    assert err.value.body["message"]


def test_a_batch_runs_its_lines_on_the_upstream(gateway, upstreams):
    up, _ = upstreams
    client = _client(gateway.base_url)
    questions = ["Name a fruit.", "Name a city.", "Count to three."]
    lines = [chat_line(f"q{i}", q, 12, model="remote") for i, q in enumerate(questions)]
    lines.append(chat_line("local", questions[0], 12, model=MODEL))
    f = client.files.create(file=("lines.jsonl", jsonl(lines)), purpose="batch")
    batch = wait_batch(client, client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                                     completion_window="24h").id)
    assert batch.status == "completed" and batch.request_counts.completed == 4
    got = {o["custom_id"]: o["response"]["body"] for o in output_lines(client, batch.output_file_id)}
    for i, q in enumerate(questions):
        direct = _client(up.base_url).chat.completions.create(
            model=UP, messages=[{"role": "user", "content": q}], max_tokens=12, temperature=0)
        assert got[f"q{i}"]["choices"][0]["message"]["content"] == direct.choices[0].message.content
        assert got[f"q{i}"]["model"] == "remote"
    # The upstream serves the same weights as the embedded model: the same greedy answer.
    assert got["local"]["choices"][0]["message"]["content"] == got["q0"]["choices"][0]["message"]["content"]


def test_text2sql_on_an_upstream_is_constrained_and_validated_here(gateway):
    ask = {"source": "demo_shop", "question": "How many customers are there?", "max_rows": 5, "max_tokens": 64}
    local = httpx.post(f"{gateway.base_url}/text2sql", json=ask, timeout=120).json()
    remote = httpx.post(f"{gateway.base_url}/text2sql", json={**ask, "model": "remote"}, timeout=120).json()
    assert remote["model"] == "remote" and remote["constrained"] and remote["valid"] and remote["executed"]
    assert remote["sql"] == local["sql"] and remote["rows"] == local["rows"]  # the grammar went upstream too


def test_background_and_chained_responses_on_an_upstream(gateway, upstreams):
    client = _client(gateway.base_url)
    queued = client.responses.create(model="remote", input=QUESTION, max_output_tokens=12, background=True)
    assert queued.status == "queued"
    deadline = time.monotonic() + 120
    while (done := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert done.status in ("completed", "incomplete") and done.output_text and done.model == "remote"
    # Continued by id: the upstream never saw this id, so the gateway sends the stored conversation.
    follow = client.responses.create(model="remote", input="And three more?", previous_response_id=done.id,
                                     max_output_tokens=12)
    assert follow.output_text and follow.previous_response_id == done.id
    assert client.responses.retrieve(follow.id).output_text == follow.output_text  # stored here too
    streamed = list(client.responses.create(model="remote", input=QUESTION, max_output_tokens=8, stream=True))
    assert streamed[-1].type == "response.completed"


def test_a_dead_upstream_is_skipped_and_two_live_ones_share_load(gateway, upstreams):
    up, vic = upstreams
    for _ in range(3):
        assert _chat(gateway.base_url, "pair").choices[0].message.content
    before = {name: p.metric("sllm:request_success_total", model_name=name) for name, p in ((UP, up), (VICTIM, vic))}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: _chat(gateway.base_url, "duo"), range(8)))
    assert len({a.choices[0].message.content for a in answers}) == 1
    after = {name: p.metric("sllm:request_success_total", model_name=name) for name, p in ((UP, up), (VICTIM, vic))}
    assert all(after[n] > before[n] for n in after), (before, after)  # both upstreams served some
    assert sum(after.values()) - sum(before.values()) == 8
    metrics = httpx.get(f"{gateway.url}/metrics").text
    dead_line = next(line for line in metrics.splitlines()
                     if line.startswith('sllm:upstream_healthy{model_name="pair"') and up.base_url not in line)
    assert dead_line.endswith(" 0.0")
    assert f'sllm:upstream_requests_total{{model_name="remote",upstream="{up.base_url}"}}' in metrics
    assert f'sllm:num_requests_running{{model_name="{MODEL}"}}' in metrics
    assert 'sllm:num_requests_running{model_name="tiny"}' in metrics


def test_an_upstream_killed_mid_stream_ends_the_stream_with_an_error_event(gateway, upstreams):
    _, vic = upstreams
    body = {"model": "victim", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 400,
            "ignore_eos": True, "temperature": 0, "stream": True}
    events: list[str] = []
    started = None
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if len(events) == 3:
                vic.process.send_signal(signal.SIGKILL)
                started = time.monotonic()
    assert started is not None and time.monotonic() - started < 10
    last = json.loads(events[-1])
    assert last["error"]["code"] == "upstream_unavailable" and "victim" in last["error"]["message"]
    gone = httpx.post(f"{gateway.base_url}/chat/completions", json={**body, "stream": False, "max_tokens": 4})
    assert gone.status_code == 502 and gone.json()["error"]["code"] == "upstream_unavailable"
    assert httpx.get(f"{gateway.url}/health").status_code == 200  # the gateway itself is fine

"""The official openai client against a real server: models, completions, chat, responses."""

import sqlite3

import httpx
import openai
import pytest

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("openai")) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY")


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL, f"{MODEL}-embed"]  # its pooled states, for /v1/embeddings
    assert client.models.retrieve(MODEL).id == MODEL


def test_completion_plain(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.object == "text_completion" and len(r.choices) == 1
    assert r.choices[0].text and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_greedy_stream_matches_plain(client):
    args = dict(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0)
    plain = client.completions.create(**args).choices[0].text
    chunks = list(client.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == plain
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_logit_bias_forces_and_bans_tokens(client):
    """OpenAI's logit_bias: token ids as string keys, +100 all but forces a token, -100 bans it."""
    from engine.loader import load_tokenizer, resolve_model

    tok = load_tokenizer(resolve_model("default"))
    (x,) = tok.encode("X", add_special_tokens=False)
    forced = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4,
                                       temperature=0.7, seed=3, logit_bias={str(x): 100})
    assert forced.choices[0].text == "XXXX"
    args = dict(model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_tokens=4, temperature=0)
    free = client.chat.completions.create(**args).choices[0].message.content
    first = tok.encode(free, add_special_tokens=False)[0]
    banned = client.chat.completions.create(**args, logit_bias={str(first): -100}).choices[0].message.content
    assert tok.encode(banned, add_special_tokens=False)[0] != first


def test_completion_n2_and_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="I like", max_tokens=6, n=2, logprobs=2, seed=7,
                                  extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    for c in r.choices:
        lp = c.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
        assert "".join(lp.tokens) == c.text
        assert all(v <= 0 for v in lp.token_logprobs)
        assert all(2 <= len(t) <= 3 for t in lp.top_logprobs)
        assert lp.text_offset[0] == 0
    assert r.usage.completion_tokens == 12


def test_completion_list_of_prompts_token_ids_and_echo(server, client):
    r = client.completions.create(model=MODEL, prompt=["Hello", "Goodbye"], max_tokens=3, temperature=0, echo=True)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text.startswith("Hello") and r.choices[1].text.startswith("Goodbye")
    ids = httpx.post(f"{server.url}/tokenize", json={"prompt": "Hello"}).json()["tokens"]
    by_ids = client.completions.create(model=MODEL, prompt=[ids, ids], max_tokens=3, temperature=0)
    assert [c.text for c in by_ids.choices] == [r.choices[0].text[len("Hello"):]] * 2


def test_completion_best_of_keeps_the_likeliest(client):
    r = client.completions.create(model=MODEL, prompt="My favourite colour is", max_tokens=4, n=1, best_of=3,
                                  seed=1)
    assert len(r.choices) == 1 and r.choices[0].logprobs is None
    assert r.usage.completion_tokens <= 12


def test_completion_stop_and_engine_extras(client):
    r = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0, stop=[" 7"],
                                  extra_body={"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.0, "min_tokens": 1})
    assert r.choices[0].finish_reason == "stop" and " 7" not in r.choices[0].text


def _chat(client, **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is 2+2?"}], **kw)


def test_chat_plain(client):
    r = _chat(client, max_tokens=16, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.usage.completion_tokens <= 16


def test_chat_stream_with_usage_matches_plain(client):
    plain = _chat(client, max_completion_tokens=12, temperature=0)
    chunks = list(_chat(client, max_completion_tokens=12, temperature=0, stream=True,
                        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == plain.choices[0].finish_reason


def test_chat_stop(client):
    full = _chat(client, max_tokens=24, temperature=0).choices[0].message.content
    word = full.split()[2]
    r = _chat(client, max_tokens=24, temperature=0, stop=[word])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[: full.index(word)]


def test_chat_seed_reproducible(client):
    a = _chat(client, max_tokens=16, temperature=1.0, seed=1234).choices[0].message.content
    b = _chat(client, max_tokens=16, temperature=1.0, seed=1234).choices[0].message.content
    assert a == b


def test_chat_n_logprobs_and_content_parts(client):
    r = client.chat.completions.create(
        model=MODEL, n=2, max_tokens=5, logprobs=True, top_logprobs=3, seed=3, user="tester",
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user",
                   "content": [{"type": "text", "text": "Name"}, {"type": "text", "text": "a fruit."}]}],
    )
    assert [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        toks = c.logprobs.content
        assert "".join(t.token for t in toks) == c.message.content
        assert all(len(t.top_logprobs) == 3 and t.bytes == list(t.token.encode()) for t in toks)


def test_chat_stream_logprobs_and_tool_role(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, max_tokens=6, temperature=0, stream=True, logprobs=True,
        messages=[{"role": "user", "content": "What is the weather?"},
                  {"role": "assistant", "content": "Let me check."},
                  {"role": "tool", "content": "Sunny, 21 C", "tool_call_id": "call_1"},
                  {"role": "user", "content": "So?"}],
    ))
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert 0 < len(tokens) <= 6 and "".join(t.token for t in tokens) == text


def test_responses_plain_continue_retrieve_delete(client):
    r = client.responses.create(model=MODEL, input="Say hello.", instructions="Answer in English.",
                                max_output_tokens=12, temperature=0)
    assert r.object == "response" and r.status in ("completed", "incomplete")
    assert r.output_text and r.usage.output_tokens <= 12
    follow = client.responses.create(model=MODEL, input=[{"role": "user", "content": "Again."}],
                                     previous_response_id=r.id, max_output_tokens=8, temperature=0)
    # The follow-up's prompt holds the first turn, so it is longer than the first turn alone.
    assert follow.previous_response_id == r.id and follow.usage.input_tokens > r.usage.input_tokens
    assert client.responses.retrieve(r.id).output_text == r.output_text
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_responses_are_stored_in_sqlite_wal(server, client):
    r = client.responses.create(model=MODEL, input="Hi", max_output_tokens=4)
    path = server.state.settings.db
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        row = db.execute("SELECT model, status FROM responses WHERE id = ?", (r.id,)).fetchone()
    assert row == (MODEL, r.status)


def test_responses_streamed(client):
    plain = client.responses.create(model=MODEL, input="Count to three.", max_output_tokens=10, temperature=0,
                                    store=False)
    with client.responses.stream(model=MODEL, input="Count to three.", max_output_tokens=10, temperature=0) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == plain.output_text
    assert client.responses.retrieve(final.id).output_text == final.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(plain.id)  # store=False


def test_tokenize_detokenize(server):
    r = httpx.post(f"{server.url}/tokenize", json={"prompt": "Hello world"}).json()
    assert r["count"] == len(r["tokens"]) == 2 and r["max_model_len"] == server.engine.max_model_len
    assert httpx.post(f"{server.url}/detokenize", json={"tokens": r["tokens"]}).json()["prompt"] == "Hello world"
    chat = httpx.post(f"{server.url}/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["count"] > 5


def test_request_id_and_metrics(server, client):
    r = httpx.post(f"{server.base_url}/completions", headers={"x-request-id": "abc-123"},
                   json={"prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 200 and r.headers["x-request-id"] == "abc-123"
    assert httpx.get(f"{server.url}/health").headers["x-request-id"]
    text = httpx.get(f"{server.url}/metrics").text
    for name in ("sllm:num_requests_running", "sllm:num_requests_waiting", "sllm:kv_cache_usage_perc",
                 "sllm:prefix_cache_hits_total", "sllm:prompt_tokens_total", "sllm:generation_tokens_total",
                 "sllm:time_to_first_token_seconds_bucket", "sllm:inter_token_latency_seconds_bucket",
                 "sllm:e2e_request_latency_seconds_bucket", "sllm:request_queue_time_seconds_bucket",
                 'sllm:request_success_total{finished_reason="length"'):
        assert name in text, name
    server.assert_no_leak()


def test_embeddings_of_the_default_model(client):
    """The SDK's default (base64, decoded by it) on the default model's -embed id: unit vectors."""
    r = client.embeddings.create(model=f"{MODEL}-embed", input=["hello", "world"])
    assert [d.index for d in r.data] == [0, 1] and r.model == f"{MODEL}-embed"
    for d in r.data:
        assert len(d.embedding) == 576 and abs(sum(x * x for x in d.embedding) - 1) < 1e-4

"""The Files and Batch APIs through the official openai client against a real server: the whole
flow on 50 mixed lines equal to the synchronous answers, bad input refused cleanly, cancel,
idempotency keys, and a signed webhook; on SQLite and on a real PostgreSQL server."""

import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.gateway.jobs_helpers import (
    WEBHOOK_SECRET,
    DbReader,
    WebhookReceiver,
    chat_line,
    completion_line,
    database_for,
    jsonl,
    output_lines,
    wait_batch,
    wait_recorded,
)
from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

MAX_FILE_BYTES = 64 * 1024
TOPICS = ["the sea", "a robot", "autumn", "coffee", "a city at night", "mountains", "a cat", "the moon",
          "trains", "rain", "a library", "the desert", "friendship"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database(request, tmp_path_factory) -> str:
    return database_for(request, tmp_path_factory.mktemp("jobs-db"))


@pytest.fixture(scope="module")
def receiver(database):
    r = WebhookReceiver(fail_first=1)  # the first delivery attempt fails: it must be retried
    yield r
    r.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, receiver, database):
    tmp = tmp_path_factory.mktemp("jobs")
    with run_server(tmp, db=database, max_num_seqs=16, job_concurrency=8, max_file_bytes=MAX_FILE_BYTES,
                    webhook_secret=WEBHOOK_SECRET, webhook_allow_hosts=["127.0.0.1"], webhook_backoff_s=0.2) as s:
        s.db = database
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def _db(server) -> DbReader:
    return DbReader(server.db)


def _wait_rows(server, query: str, want: list[tuple], timeout: float = 120) -> list[tuple]:
    """The rows `query` reads once they equal `want` (polled); the last rows read after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        with _db(server) as db:
            rows = db.execute(query).fetchall()
        if rows == want or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def _mixed_lines(n: int, max_tokens: int) -> list[dict]:
    lines = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        if i % 2:
            lines.append(chat_line(f"req-{i}", f"Write one sentence about {topic}.", max_tokens, MODEL))
        else:
            lines.append(completion_line(f"req-{i}", f"Here is a short story about {topic}:", max_tokens, MODEL))
    return lines


def _sync_answer(client: openai.OpenAI, line: dict) -> dict:
    body = line["body"]
    if line["url"] == "/v1/chat/completions":
        return client.chat.completions.create(**body).model_dump()
    return client.completions.create(**body).model_dump()


def _choices(answer: dict) -> list[tuple]:
    return [(c.get("text") if "text" in c else c["message"]["content"], c["finish_reason"])
            for c in answer["choices"]]


def test_batch_of_50_mixed_lines_equals_the_synchronous_answers(server, client):
    lines = _mixed_lines(50, max_tokens=8)
    upload = client.files.create(file=("mixed.jsonl", jsonl(lines)), purpose="batch")
    assert upload.purpose == "batch" and upload.bytes == len(jsonl(lines))
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  metadata={"job": "mixed"})
    assert batch.status == "in_progress" and batch.request_counts.total == 50
    with ThreadPoolExecutor(8) as pool:  # meanwhile, the same requests synchronously
        sync = list(pool.map(lambda line: _sync_answer(client, line), lines))
    done = wait_batch(client, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed, done.request_counts.total) == (50, 0, 50)
    assert done.error_file_id is None and done.metadata == {"job": "mixed"}
    assert done.completed_at >= done.finalizing_at >= done.in_progress_at >= done.created_at
    out = output_lines(client, done.output_file_id)
    assert [o["custom_id"] for o in out] == [line["custom_id"] for line in lines]
    for o, line, expected in zip(out, lines, sync, strict=True):
        assert o["id"].startswith("batch_req_") and o["error"] is None
        assert o["response"]["status_code"] == 200 and o["response"]["request_id"]
        body = o["response"]["body"]
        assert body["object"] == ("chat.completion" if line["url"] == "/v1/chat/completions" else "text_completion")
        assert _choices(body) == _choices(expected), o["custom_id"]
        assert body["usage"]["completion_tokens"] == expected["usage"]["completion_tokens"]
    assert done.usage.output_tokens == sum(s["usage"]["completion_tokens"] for s in sync)
    output_file = client.files.retrieve(done.output_file_id)
    assert output_file.purpose == "batch_output" and output_file.filename == f"{done.id}_output.jsonl"
    assert batch.id in [b.id for b in client.batches.list()]
    server.assert_no_leak()


def test_lines_that_fail_at_run_time_go_to_the_error_file(client):
    lines = [completion_line("ok", "Hello", 2),
             completion_line("too-long", "Hello", 10**6),  # past the context: a 400 for this line only
             chat_line("ok-chat", "Hi", 2)]
    upload = client.files.create(file=("errs.jsonl", jsonl(lines)), purpose="batch")
    done = wait_batch(client, client.batches.create(input_file_id=upload.id, endpoint="/v1/completions",
                                                    completion_window="24h").id)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    assert [o["custom_id"] for o in output_lines(client, done.output_file_id)] == ["ok", "ok-chat"]
    (err,) = output_lines(client, done.error_file_id)
    assert err["custom_id"] == "too-long" and err["response"]["status_code"] == 400
    assert "maximum context length" in err["response"]["body"]["error"]["message"]


# -- bad input -------------------------------------------------------------------------------------------
def test_malformed_jsonl_and_unknown_endpoint_fail_the_batch_line_by_line(server, client):
    good = completion_line("a", "Hi", 2)
    bad = jsonl([good])[:-1] + b"\n{\"custom_id\": \"b\", \"method\": \"POST\"\n" + jsonl(
        [{**completion_line("c", "Hi", 2), "url": "/v1/moderations"}])
    upload = client.files.create(file=("bad.jsonl", bad), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h")
    assert batch.status == "failed" and batch.failed_at is not None
    assert [(e.line, e.code) for e in batch.errors.data] == [(2, "invalid_json_line"), (3, "invalid_url")]
    assert batch.errors.data[1].message.startswith("line 3: url '/v1/moderations'")
    assert client.batches.retrieve(batch.id).status == "failed"
    with _db(server) as db:  # no partial rows: the failed batch holds no lines and no results
        assert db.execute("SELECT count(*) FROM batch_lines WHERE batch_id = ?", (batch.id,)).fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM batch_results WHERE batch_id = ?", (batch.id,)).fetchone() == (0,)


def test_requests_refused_outright(server, client):
    with _db(server) as db:
        batches_before = db.execute("SELECT count(*) FROM batches").fetchone()
        files_before = db.execute("SELECT count(*) FROM files").fetchone()
    with pytest.raises(openai.BadRequestError) as e:
        client.batches.create(input_file_id="file-missing", endpoint="/v1/completions", completion_window="24h")
    assert e.value.body["code"] == "file_not_found" and e.value.body["param"] == "input_file_id"
    upload = client.files.create(file=("one.jsonl", jsonl([completion_line("a", "Hi", 2)])), purpose="batch")
    with pytest.raises(openai.BadRequestError) as e:
        client.batches.create(input_file_id=upload.id, endpoint="/v1/moderations", completion_window="24h")
    assert e.value.body["param"] == "endpoint"
    with pytest.raises(openai.BadRequestError) as e:
        client.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="1h")
    assert e.value.body["param"] == "completion_window"
    with pytest.raises(openai.APIStatusError) as e:  # over --max-file-bytes
        client.files.create(file=("big.jsonl", b"x" * (MAX_FILE_BYTES + 1)), purpose="batch")
    assert e.value.status_code == 413 and e.value.body["code"] == "file_too_large"
    with pytest.raises(openai.APIStatusError) as e:  # far over: refused before the body is read
        client.files.create(file=("huge.jsonl", b"x" * (4 * MAX_FILE_BYTES)), purpose="batch")
    assert e.value.status_code == 413
    with pytest.raises(openai.BadRequestError) as e:
        client.files.create(file=("a.jsonl", b"{}\n"), purpose="fine-tune")
    assert e.value.body["param"] == "purpose"
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_missing")
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve("file-missing")
    with _db(server) as db:
        assert db.execute("SELECT count(*) FROM batches").fetchone() == batches_before
        assert db.execute("SELECT count(*) FROM files").fetchone()[0] == files_before[0] + 1  # only "one.jsonl"


def test_files_list_retrieve_content_delete(client):
    data = jsonl([completion_line("a", "Hi", 2)])
    f = client.files.create(file=("list-me.jsonl", data), purpose="batch")
    assert client.files.retrieve(f.id).filename == "list-me.jsonl"
    assert client.files.content(f.id).content == data
    listed = client.files.list(purpose="batch")
    assert listed.data[0].id == f.id and all(x.purpose == "batch" for x in listed.data)
    page = client.files.list(limit=1)
    assert len(page.data) == 1 and page.has_more
    assert client.files.list(limit=1, after=page.data[0].id).data[0].id != page.data[0].id
    deleted = client.files.delete(f.id)
    assert deleted.deleted and deleted.id == f.id
    with pytest.raises(openai.NotFoundError):
        client.files.content(f.id)


# -- cancel ----------------------------------------------------------------------------------------------
def test_cancel_a_running_batch_and_refuse_to_cancel_a_finished_one(server, client):
    lines = [completion_line(f"c{i}", f"Count slowly from {i}:", 24, ignore_eos=True) for i in range(40)]
    upload = client.files.create(file=("cancel.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h")
    wait_recorded(client, batch.id, 3)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait_batch(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    counts = done.request_counts
    assert 0 < counts.completed < 40 and counts.failed == 0
    ok = output_lines(client, done.output_file_id)
    not_run = output_lines(client, done.error_file_id)
    assert len(ok) == counts.completed and len(ok) + len(not_run) == 40
    assert {o["custom_id"] for o in ok + not_run} == {line["custom_id"] for line in lines}
    assert all(o["error"]["code"] == "batch_cancelled" and o["response"] is None for o in not_run)
    assert client.batches.cancel(batch.id).status == "cancelled"  # cancelling twice answers the same
    server.assert_no_leak()  # the lines cut short were aborted in the engine

    tiny = client.files.create(file=("f.jsonl", jsonl([completion_line("x", "Hi", 1)])), purpose="batch")
    finished = wait_batch(client, client.batches.create(input_file_id=tiny.id, endpoint="/v1/completions",
                                                        completion_window="24h").id)
    assert finished.status == "completed"
    with pytest.raises(openai.ConflictError) as e:
        client.batches.cancel(finished.id)
    assert "already completed" in e.value.body["message"]


# -- idempotency -----------------------------------------------------------------------------------------
def test_idempotency_keys_return_the_same_object(client):
    data = jsonl([completion_line("a", "Hi", 2)])
    key = {"Idempotency-Key": "upload-42"}
    first = client.files.create(file=("idem.jsonl", data), purpose="batch", extra_headers=key)
    again = client.files.create(file=("idem.jsonl", data), purpose="batch", extra_headers=key)
    assert again.id == first.id
    with pytest.raises(openai.BadRequestError) as e:
        client.files.create(file=("idem.jsonl", data + data), purpose="batch", extra_headers=key)
    assert e.value.body["code"] == "idempotency_key_reused"
    args = dict(input_file_id=first.id, endpoint="/v1/completions", completion_window="24h")
    b1 = client.batches.create(**args, extra_headers={"Idempotency-Key": "batch-42"})
    b2 = client.batches.create(**args, extra_headers={"Idempotency-Key": "batch-42"})
    assert b1.id == b2.id
    assert client.batches.create(**args).id != b1.id  # no key, a new batch


# -- webhooks --------------------------------------------------------------------------------------------
def test_webhook_is_signed_retried_and_disallowed_urls_are_refused(server, client, receiver):
    upload = client.files.create(file=("hook.jsonl", jsonl([completion_line("a", "Hi", 2)])), purpose="batch")
    with _db(server) as db:
        batches_before = db.execute("SELECT count(*) FROM batches").fetchone()
    for url in ("http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/hook", "http://example.com/hook",
                "file:///etc/passwd"):
        with pytest.raises(openai.BadRequestError) as e:
            client.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h",
                                  metadata={"webhook_url": url})
        assert e.value.body["code"] == "invalid_webhook_url" and e.value.body["param"] == "metadata.webhook_url"
    with _db(server) as db:
        assert db.execute("SELECT count(*) FROM batches").fetchone() == batches_before

    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h",
                                  metadata={"webhook_url": f"{receiver.url}/hooks/sllm?x=1"})
    assert wait_batch(client, batch.id).status == "completed"
    (delivery,) = receiver.wait(1, timeout=120)
    assert receiver.attempts == 2  # one 500, then the retry
    assert delivery.path == "/hooks/sllm?x=1"
    event = client.webhooks.unwrap(delivery.body, delivery.headers, secret=WEBHOOK_SECRET)
    assert event.type == "batch.completed" and event.data.id == batch.id
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.verify_signature(delivery.body, delivery.headers, secret="whsec_" + "QUFBQUFBQUFBQUFB")
    # The receiver has the body before the server has read its 2xx and recorded the delivery.
    delivered = [("delivered", 2)]
    assert _wait_rows(server, "SELECT status, attempts FROM webhook_deliveries", delivered) == delivered

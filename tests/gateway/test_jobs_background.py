"""Background responses through the official openai client: queued at once, polled to the same
answer as a synchronous call, continued with previous_response_id, cancelled (aborting the engine
request), idempotent, and announced by a signed webhook; on SQLite and on a real PostgreSQL server."""

import time

import openai
import pytest

from tests.gateway.jobs_helpers import WEBHOOK_SECRET, WebhookReceiver, database_for
from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database(request, tmp_path_factory) -> str:
    return database_for(request, tmp_path_factory.mktemp("background-db"))


@pytest.fixture(scope="module")
def receiver(database):
    r = WebhookReceiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, database):
    with run_server(tmp_path_factory.mktemp("background"), db=database, max_num_seqs=8, webhook_secret=WEBHOOK_SECRET,
                    webhook_allow_hosts=["127.0.0.1"]) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)


def _wait(client: openai.OpenAI, response_id: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        r = client.responses.retrieve(response_id)
        if r.status not in ("queued", "in_progress"):
            return r
        assert time.monotonic() < deadline, f"still {r.status} after {timeout}s"
        time.sleep(0.05)


def test_background_response_polls_to_the_synchronous_answer(client, receiver):
    args = dict(model=MODEL, input="Name three colours.", max_output_tokens=12, temperature=0)
    queued = client.responses.create(**args, background=True, metadata={"webhook_url": f"{receiver.url}/r"})
    assert queued.status in ("queued", "in_progress") and queued.background and queued.output == []
    sync = client.responses.create(**args)
    done = _wait(client, queued.id)
    assert done.id == queued.id and done.created_at == queued.created_at and done.background
    assert done.status in ("completed", "incomplete") and done.output_text == sync.output_text
    assert done.usage.output_tokens == sync.usage.output_tokens

    # Stored, so it continues a conversation like any stored response.
    follow = client.responses.create(model=MODEL, input="And one more?", previous_response_id=done.id,
                                     max_output_tokens=4, temperature=0)
    assert follow.previous_response_id == done.id

    (delivery,) = receiver.wait(1)
    event = client.webhooks.unwrap(delivery.body, delivery.headers, secret=WEBHOOK_SECRET)
    assert event.type == f"response.{done.status}" and event.data.id == done.id


def test_a_running_response_holds_no_database_connection(server, client):
    first = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    long = client.responses.create(model=MODEL, input="Go on, at length.", previous_response_id=first.id,
                                   max_output_tokens=400, background=True, extra_body={"ignore_eos": True})
    deadline = time.monotonic() + 30
    while client.responses.retrieve(long.id).status == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.2)  # generating now, after reading its previous response
    # The job scheduler's and runner's periodic queries check a connection out for a moment, so one sample
    # can catch theirs (a clean-clone run on a slow machine did); a connection the response held would
    # show in every sample.
    samples = []
    for _ in range(25):
        samples.append(server.state.db.engine.pool.checkedout())
        time.sleep(0.02)
    assert min(samples) == 0, samples
    assert client.responses.cancel(long.id).status == "cancelled"


def test_cancel_a_background_response(server, client):
    queued = client.responses.create(model=MODEL, input="Tell me a very long story.", max_output_tokens=400,
                                     temperature=0, background=True, extra_body={"ignore_eos": True})
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.id == queued.id
    assert client.responses.cancel(queued.id).status == "cancelled"  # idempotent
    time.sleep(0.3)
    assert client.responses.retrieve(queued.id).status == "cancelled"  # the runner did not overwrite it
    server.assert_no_leak()  # its engine request was aborted
    with pytest.raises(openai.BadRequestError) as e:  # a cancelled response cannot be continued
        client.responses.create(model=MODEL, input="Go on", previous_response_id=queued.id, max_output_tokens=2)
    assert e.value.body["code"] == "previous_response_not_ready"


def test_cancel_refusals(client):
    finished = _wait(client, client.responses.create(model=MODEL, input="Hi", max_output_tokens=2,
                                                     background=True).id)
    with pytest.raises(openai.ConflictError):
        client.responses.cancel(finished.id)
    plain = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(plain.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_missing")


def test_background_refusals_and_idempotency(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="Hi", background=True, store=False)
    assert e.value.body["param"] == "store"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="Hi", background=True, stream=True)
    assert e.value.body["param"] == "stream"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="Hi", background=True,
                                metadata={"webhook_url": "http://169.254.169.254/latest/meta-data/"})
    assert e.value.body["code"] == "invalid_webhook_url"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-4o", input="Hi", background=True)

    key = {"Idempotency-Key": "bg-7"}
    first = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, background=True, extra_headers=key)
    again = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, background=True, extra_headers=key)
    assert again.id == first.id
    assert _wait(client, first.id).status in ("completed", "incomplete")

"""Tenancy on one server with an admin key and two database keys (alice, bob), on SQLite and on a real
PostgreSQL server: every object alice makes (files, batches and their output files, stored and
background responses, text-to-SQL sources and schedules with their runs) is a 404 to bob on retrieve,
content, cancel and delete and absent from his lists, while the admin sees and acts on it; bob cannot
build on alice's objects (a batch over her file, `previous_response_id` of her response, in a request,
a background response or a batch line; a page `after` her id; her Idempotency-Key). Text-to-SQL
sources: the server's own database under any spelling, files outside --text2sql-source-dir and
internal hosts are refused before anything connects (a listener on 127.0.0.1 records no connection).
A tiny random model keeps the server cheap to start."""

import io
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import httpx
import pytest

from engine.loader import resolve_model
from gateway.cli import create_key, revoke_key
from integrations.text2sql.dataset import demo_database
from tests.engine.conftest import make_tiny_llama
from tests.gateway.jobs_helpers import TERMINAL, WEBHOOK_SECRET, DbReader, database_for, jsonl
from tests.gateway.server import RunningServer, run_server

pytestmark = pytest.mark.default_model  # the tiny model borrows its tokenizer

ADMIN_KEY = "sk-admin-tenancy-test"
QUOTA_MB = 0.1
DAVE_RPM = 2  # requests per rate-limit window


def _new_key(name: str, db: str, rpm: int | None = None) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        create_key(name=name, db=db, rpm=rpm, tpm=None)
    return out.getvalue().strip()


class Listener:
    """A TCP listener on 127.0.0.1 that counts every connection made to it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, tmp_path_factory, listener) -> Iterator[tuple[RunningServer, dict[str, httpx.Client], Path]]:
    tmp = tmp_path_factory.mktemp("tenancy")
    db_url = database_for(request, tmp)
    keys = {name: _new_key(name, db_url) for name in ("alice", "bob", "carol")}
    keys["dave"] = _new_key("dave", db_url, rpm=DAVE_RPM)
    tiny = make_tiny_llama(tmp / "tiny", resolve_model("default"), layers=1)
    source_dir = tmp / "sources"
    source_dir.mkdir()
    (source_dir / "shop.sqlite").write_bytes(demo_database("shop").read_bytes())
    with run_server(tmp, db=db_url, model=str(tiny), served_model_name="tiny", max_num_seqs=4, api_keys=[ADMIN_KEY],
                    text2sql_user_sources=True, text2sql_source_dir=str(source_dir), job_scan_s=0.2,
                    key_storage_quota_mb=QUOTA_MB, max_batch_lines=20, max_file_bytes=64 * 1024,
                    max_request_body_bytes=256 * 1024,
                    webhook_secret=WEBHOOK_SECRET, webhook_allow_hosts=["*.example.test"]) as server:
        server.db = db_url
        clients = {name: httpx.Client(base_url=server.base_url, timeout=60, headers={"authorization": f"Bearer {key}"})
                   for name, key in [*keys.items(), ("admin", ADMIN_KEY)]}
        yield server, clients, source_dir
        for c in clients.values():
            c.close()


def _error(resp: httpx.Response, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if code is not None:
        assert error["code"] == code, error
    return error


def _upload(client: httpx.Client, lines: list[dict], headers: dict | None = None) -> str:
    resp = client.post("/files", files={"file": ("in.jsonl", jsonl(lines))}, data={"purpose": "batch"},
                       headers=headers or {})
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]


def _line(custom_id: str, **extra) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
            "body": {"model": "tiny", "prompt": "Hello", "max_tokens": 2, **extra}}


def _wait(client: httpx.Client, path: str, done, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(path).json()
        if done(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


@pytest.fixture(scope="module")
def alices(world) -> dict[str, str]:
    """One object of every kind, made by alice."""
    _, c, source_dir = world
    alice = c["alice"]
    ids = {"file": _upload(alice, [_line("a-1"), _line("a-2")])}
    batch = alice.post("/batches", json={"input_file_id": ids["file"], "endpoint": "/v1/completions",
                                         "completion_window": "24h"}).json()
    ids["batch"] = batch["id"]
    finished = _wait(alice, f"/batches/{batch['id']}", lambda b: b["status"] == "completed")
    assert finished["status"] == "completed", finished
    ids["output_file"] = finished["output_file_id"]
    stored = alice.post("/responses", json={"model": "tiny", "input": "Hi", "max_output_tokens": 2})
    assert stored.status_code == 200, stored.text
    ids["response"] = stored.json()["id"]
    queued = alice.post("/responses", json={"model": "tiny", "input": "Hi", "max_output_tokens": 2,
                                            "background": True})
    ids["background"] = queued.json()["id"]
    source = alice.post("/text2sql/sources", json={"name": "alice_shop", "url": f"sqlite:///{source_dir}/shop.sqlite"})
    assert source.status_code == 200, source.text
    schedule = alice.post("/text2sql/schedules", json={"cron": "0 0 1 1 *", "source": "alice_shop",
                                                       "question": "How many products?"})
    assert schedule.status_code == 200, schedule.text
    ids["schedule"] = schedule.json()["id"]
    return ids


# (what, the path of one object, verbs: how each is asked, and which list shows it)
OBJECTS = {
    "file": ("/files/{id}", ["GET", "GET content", "DELETE"], "/files"),
    "output_file": ("/files/{id}", ["GET", "GET content", "DELETE"], "/files"),
    "batch": ("/batches/{id}", ["GET", "POST cancel"], "/batches"),
    "response": ("/responses/{id}", ["GET", "POST cancel", "DELETE"], None),
    "background": ("/responses/{id}", ["GET", "POST cancel", "DELETE"], None),
    "schedule": ("/text2sql/schedules/{id}", ["GET", "GET runs", "DELETE"], "/text2sql/schedules"),
}


def _ask(client: httpx.Client, verb: str, path: str) -> httpx.Response:
    method, _, suffix = verb.partition(" ")
    return client.request(method, path + (f"/{suffix}" if suffix else ""))


def test_another_key_gets_404_for_every_object_and_never_sees_it_listed(world, alices):
    _, c, _ = world
    for what, (template, verbs, listing) in OBJECTS.items():
        path = template.format(id=alices[what])
        for verb in verbs:
            _error(_ask(c["bob"], verb, path), 404)
        if listing is not None:
            listed = [o["id"] for o in c["bob"].get(listing).json()["data"]]
            assert alices[what] not in listed, what
            assert alices[what] in [o["id"] for o in c["admin"].get(listing, params={"limit": 100}).json()["data"]]
            if what != "schedule":  # a page after another key's id: no such object
                _error(c["bob"].get(listing, params={"after": alices[what]}), 400)
        assert c["alice"].get(path).status_code == 200, what
        assert c["admin"].get(path).status_code == 200, what  # the admin sees everything
    assert c["alice"].get(f"/files/{alices['output_file']}/content").text.count("\n") == 2
    # Sources: bob neither sees nor uses nor deletes alice's; the admin's demo sources are everyone's.
    assert "alice_shop" not in [s["name"] for s in c["bob"].get("/text2sql/sources").json()["data"]]
    assert "demo_shop" in [s["name"] for s in c["bob"].get("/text2sql/sources").json()["data"]]
    _error(c["bob"].get("/text2sql/sources/alice_shop"), 404)
    _error(c["bob"].post("/text2sql", json={"source": "alice_shop", "sql": "SELECT 1"}), 404)
    _error(c["bob"].delete("/text2sql/sources/alice_shop"), 404)
    _error(c["bob"].post("/text2sql/schedules", json={"cron": "0 0 1 1 *", "source": "alice_shop",
                                                      "question": "q"}), 404)
    _error(c["bob"].post("/text2sql/sources", json={"name": "alice_shop", "url": "sqlite:///x", "replace": True}),
           409)
    _error(c["bob"].delete("/text2sql/sources/demo_shop"), 403)  # the admin's: seen, not bob's to delete
    assert c["admin"].get("/text2sql/sources/alice_shop").status_code == 200
    assert c["bob"].post("/text2sql", json={"source": "demo_shop", "sql": "SELECT 1"}).status_code == 200


def test_another_key_cannot_build_on_alices_objects(world, alices):
    server, c, _ = world
    bob = c["bob"]
    _error(bob.post("/batches", json={"input_file_id": alices["file"], "endpoint": "/v1/completions",
                                      "completion_window": "24h"}), 400, "file_not_found")
    for background in (False, True):
        _error(bob.post("/responses", json={"model": "tiny", "input": "Go on", "max_output_tokens": 2,
                                            "previous_response_id": alices["response"], "background": background}),
               400, "previous_response_not_found")
    # A batch line of bob's continuing alice's response fails as that request would.
    line = {"custom_id": "r", "method": "POST", "url": "/v1/responses",
            "body": {"model": "tiny", "input": "Go on", "max_output_tokens": 2,
                     "previous_response_id": alices["response"]}}
    batch = bob.post("/batches", json={"input_file_id": _upload(bob, [line]), "endpoint": "/v1/responses",
                                       "completion_window": "24h"}).json()
    done = _wait(bob, f"/batches/{batch['id']}", lambda b: b["status"] == "completed")
    assert done["request_counts"]["failed"] == 1, done
    error_line = json.loads(bob.get(f"/files/{done['error_file_id']}/content").text)
    assert error_line["response"]["status_code"] == 400
    assert error_line["response"]["body"]["error"]["code"] == "previous_response_not_found"
    # The same continuation is alice's to make.
    assert c["alice"].post("/responses", json={"model": "tiny", "input": "Go on", "max_output_tokens": 2,
                                               "previous_response_id": alices["response"]}).status_code == 200
    # One Idempotency-Key, two keys: two files, each its own.
    same = {"Idempotency-Key": "shared-key-1"}
    mine, theirs = _upload(c["alice"], [_line("x")], same), _upload(bob, [_line("x")], same)
    assert mine != theirs and bob.get(f"/files/{theirs}").status_code == 200


def test_the_admin_acts_for_any_key(world, alices):
    _, c, _ = world
    queued = c["alice"].post("/responses", json={"model": "tiny", "input": "Hi", "max_output_tokens": 2,
                                                 "background": True}).json()
    cancel = c["admin"].post(f"/responses/{queued['id']}/cancel")
    assert cancel.status_code in (200, 409)  # it may have finished already
    file_id = _upload(c["alice"], [_line("z")])
    assert c["admin"].delete(f"/files/{file_id}").json()["deleted"] is True
    _error(c["alice"].get(f"/files/{file_id}"), 404)


def test_batch_lines_count_as_the_owners_usage(world, alices):
    """Tokens only come from generations: the batch's tokens are what alice's usage grows by while it runs."""
    server, c, _ = world
    sql = ("SELECT coalesce(sum(u.prompt_tokens + u.completion_tokens), 0) FROM key_usage u "
           "JOIN api_keys k ON k.id = u.key_id WHERE k.name = 'alice'")

    def tokens() -> int:
        with DbReader(server.db) as db:
            return db.execute(sql).fetchone()[0]

    before = tokens()
    batch = c["alice"].post("/batches", json={"input_file_id": _upload(c["alice"], [_line("u-1"), _line("u-2")]),
                                              "endpoint": "/v1/completions", "completion_window": "24h"}).json()
    done = _wait(c["alice"], f"/batches/{batch['id']}", lambda b: b["status"] == "completed")
    assert done["usage"]["total_tokens"] > 0
    assert tokens() - before == done["usage"]["total_tokens"]


def test_background_responses_count_as_the_owners_usage(world):
    server, c, _ = world
    sql = ("SELECT coalesce(sum(u.prompt_tokens + u.completion_tokens), 0) FROM key_usage u "
           "JOIN api_keys k ON k.id = u.key_id WHERE k.name = 'carol'")

    def tokens() -> int:
        with DbReader(server.db) as db:
            return db.execute(sql).fetchone()[0]

    before = tokens()
    queued = c["carol"].post("/responses", json={"model": "tiny", "input": "Hi", "max_output_tokens": 3,
                                                 "background": True}).json()
    done = _wait(c["carol"], f"/responses/{queued['id']}", lambda r: r["status"] not in ("queued", "in_progress"))
    assert done["status"] in ("completed", "incomplete"), done  # incomplete: max_output_tokens reached
    deadline = time.monotonic() + 10  # charged just after the answer is stored
    while tokens() - before < done["usage"]["total_tokens"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tokens() - before == done["usage"]["total_tokens"] > 0


def test_a_keys_batch_runs_no_faster_than_its_rate_limit(world, monkeypatch):
    """dave may make DAVE_RPM requests per window (2 s here, a minute in service). His upload and his
    batch spend the first window; his lines then wait, are not failed, and run DAVE_RPM per window, as
    his requests would."""
    from gateway.limits import rate_limits

    server, c, _ = world
    window = 2.0
    monkeypatch.setattr(rate_limits, "WINDOW_S", window)
    deadline = time.monotonic() + 2 * window
    while time.time() % window > 0.3 and time.monotonic() < deadline:  # both requests early in one window
        time.sleep(0.01)
    first = int(time.time() // window)
    file_id = _upload(c["dave"], [_line(f"d-{i}") for i in range(4)])
    batch = c["dave"].post("/batches", json={"input_file_id": file_id, "endpoint": "/v1/completions",
                                             "completion_window": "24h"})
    assert batch.status_code == 200, batch.text
    _error(c["dave"].get("/batches"), 429, "rate_limit_exceeded")  # the window is spent
    done = _wait(c["admin"], f"/batches/{batch.json()['id']}", lambda b: b["status"] in TERMINAL, timeout=30)
    assert done["status"] == "completed" and done["request_counts"] == {"total": 4, "completed": 4, "failed": 0}, done
    with DbReader(server.db) as db:
        finished = [r[0] for r in db.execute("SELECT created_at FROM batch_results WHERE batch_id = ?",
                                             (done["id"],)).fetchall()]
    windows = [int(t // window) for t in finished]
    assert min(windows) > first, (first, windows)  # none ran in the window the requests had spent
    assert max(windows.count(w) for w in windows) <= DAVE_RPM, windows
    assert len(set(windows)) >= 2, windows


def test_limits_are_4xx_in_openais_shape(world):
    _, c, _ = world
    carol, admin = c["carol"], c["admin"]
    blob = [_line(f"q-{i}", prompt="x" * 2000) for i in range(20)]  # about 42 KB, 20 lines
    first = _upload(carol, blob)
    # The quota (0.1 MiB) counts what the key holds: a third such file is over it; deleting one makes room.
    _upload(carol, blob)
    assert "storage quota" in _error(carol.post("/files", files={"file": ("b.jsonl", jsonl(blob))},
                                                data={"purpose": "batch"}), 413, "storage_quota_exceeded")["message"]
    assert carol.delete(f"/files/{first}").status_code == 200
    _upload(carol, blob)
    _upload(admin, blob), _upload(admin, blob), _upload(admin, blob)  # admins have no quota
    # Lines per batch: 21 requests against --max-batch-lines 20 is a 400 when the batch is created.
    many = _upload(admin, [_line(f"m-{i}") for i in range(21)])
    _error(admin.post("/batches", json={"input_file_id": many, "endpoint": "/v1/completions",
                                        "completion_window": "24h"}), 400, "too_many_lines")
    # An upload past --max-file-bytes, and a request body past --max-request-body-bytes.
    _error(admin.post("/files", files={"file": ("big.jsonl", b"x" * (65 * 1024))}, data={"purpose": "batch"}),
           413, "file_too_large")
    _error(admin.post("/completions", json={"model": "tiny", "prompt": "x" * (300 * 1024)}), 413)


# -- revoked keys: their queued work stops at its next claim ---------------------------------------------
def _revoke(name: str, db: str) -> str:
    """Revokes the key through `sllm keys revoke`; its owner name (`key_<id>`)."""
    out = io.StringIO()
    with redirect_stdout(out):
        revoke_key(name=name, db=db)
    return out.getvalue().strip()


def _write(db: str, sql: str, params: dict) -> None:
    """Writes to the server's database behind its back, as another replica or an operator would."""
    import asyncio

    from sqlalchemy import text

    from gateway.db import Database

    async def run() -> None:
        database = Database(db)
        try:
            async with database.sessions() as session:
                await session.execute(text(sql), params)
                await session.commit()
        finally:
            await database.dispose()

    asyncio.run(run())


def _queue_background(db: str, owner: str) -> str:
    """A background response queued by `owner`, as `POST /v1/responses` stores it (the runner's scan
    claims it)."""
    import asyncio

    from gateway.db import Database
    from gateway.protocol.responses import ResponsesRequest
    from gateway.serving.responses import response_object
    from gateway.tables.responses import StoredResponse

    body = ResponsesRequest(model="tiny", input="Hi", max_output_tokens=2, background=True)
    resp = response_object(body, "tiny")
    resp.status = "queued"

    async def run() -> None:
        database = Database(db)
        try:
            async with database.sessions() as session:
                session.add(StoredResponse(id=resp.id, model="tiny", status="queued", conversation=[],
                                           body=resp.model_dump(mode="json"), background=True,
                                           request=body.model_dump(mode="json"), created_by=owner))
                await session.commit()
        finally:
            await database.dispose()

    asyncio.run(run())
    return resp.id


def test_a_revoked_keys_batch_fails_at_its_next_line(world, monkeypatch):
    """erin's batch waits for her rate-limit window (2 requests per 3 s here); she is revoked
    meanwhile. Her lines are not run: the batch is `failed` (OpenAI's status for a batch that
    cannot go on, with the reason in `errors`; `cancelled` would say someone cancelled it), every
    line in its error file says why, no message holds her key. An admin's batch queued after runs."""
    from gateway.limits import rate_limits

    server, c, _ = world
    key = _new_key("erin", server.db, rpm=2)
    erin = httpx.Client(base_url=server.base_url, timeout=60, headers={"authorization": f"Bearer {key}"})
    window = 3.0
    monkeypatch.setattr(rate_limits, "WINDOW_S", window)
    deadline = time.monotonic() + 2 * window
    while time.time() % window > 0.3 and time.monotonic() < deadline:  # both requests early in one window
        time.sleep(0.01)
    file_id = _upload(erin, [_line(f"e-{i}") for i in range(3)])
    batch = erin.post("/batches", json={"input_file_id": file_id, "endpoint": "/v1/completions",
                                        "completion_window": "24h"})
    assert batch.status_code == 200, batch.text
    owner = _revoke("erin", server.db)
    assert owner.startswith("key_"), owner
    _error(erin.get("/batches"), 401)  # her requests stop at once
    done = _wait(c["admin"], f"/batches/{batch.json()['id']}", lambda b: b["status"] in TERMINAL, timeout=30)
    assert done["status"] == "failed" and done["failed_at"], done
    assert done["request_counts"] == {"total": 3, "completed": 0, "failed": 0}, done
    [error] = done["errors"]["data"]
    assert error["code"] == "api_key_revoked" and owner in error["message"] and key not in error["message"], error
    assert done["output_file_id"] is None
    lines = [json.loads(x) for x in c["admin"].get(f"/files/{done['error_file_id']}/content").text.splitlines()]
    assert sorted(x["custom_id"] for x in lines) == ["e-0", "e-1", "e-2"]
    assert {x["error"]["code"] for x in lines} == {"api_key_revoked"}
    with DbReader(server.db) as db:
        assert db.execute("SELECT count(*) FROM batch_results WHERE batch_id = ?", (done["id"],)).fetchone()[0] == 0
    erin.close()

    admins = c["admin"].post("/batches", json={"input_file_id": _upload(c["admin"], [_line("ad-1")]),
                                               "endpoint": "/v1/completions", "completion_window": "24h"}).json()
    done = _wait(c["admin"], f"/batches/{admins['id']}", lambda b: b["status"] in TERMINAL, timeout=30)
    assert done["status"] == "completed", done


def _queue_batch(db: str, owner: str, lines: int) -> str:
    """A batch queued by `owner`, as `POST /v1/batches` stores it (the runner's scan claims it)."""
    import asyncio
    import uuid

    from gateway.db import Database
    from gateway.tables.batches import Batch, BatchLine

    batch_id = f"batch_{uuid.uuid4().hex}"
    now = time.time()

    async def run() -> None:
        database = Database(db)
        try:
            async with database.sessions() as session:
                session.add(Batch(id=batch_id, created_at=now, endpoint="/v1/completions", input_file_id="file-gone",
                                  completion_window="24h", status="in_progress", in_progress_at=now,
                                  expires_at=now + 86400, total=lines, created_by=owner))
                await session.flush()
                session.add_all([BatchLine(batch_id=batch_id, line=n, custom_id=f"q-{n}", url="/v1/completions",
                                           body=_line(f"q-{n}")["body"]) for n in range(1, lines + 1)])
                await session.commit()
        finally:
            await database.dispose()

    asyncio.run(run())
    return batch_id


def test_a_deleted_keys_batch_fails_before_its_first_line(world):
    """A batch whose key was deleted from the database before any replica claimed a line: no line
    runs, the batch fails saying so; an admin's batch queued the same way completes."""
    server, c, _ = world
    _new_key("hal", server.db)
    owner = _revoke("hal", server.db)
    _write(server.db, "DELETE FROM api_keys WHERE name = 'hal'", {})
    ids = {"deleted": _queue_batch(server.db, owner, 2), "admin": _queue_batch(server.db, "admin", 2)}
    done = {what: _wait(c["admin"], f"/batches/{bid}", lambda b: b["status"] in TERMINAL, timeout=30)
            for what, bid in ids.items()}
    assert done["deleted"]["status"] == "failed", done["deleted"]
    [error] = done["deleted"]["errors"]["data"]
    assert error["code"] == "api_key_revoked" and f"({owner}) no longer exists" in error["message"], error
    with DbReader(server.db) as db:
        assert db.execute("SELECT count(*) FROM batch_results WHERE batch_id = ?", (ids["deleted"],)).fetchone()[0] == 0
    assert done["admin"]["status"] == "completed", done["admin"]
    assert done["admin"]["request_counts"] == {"total": 2, "completed": 2, "failed": 0}, done["admin"]


def test_a_revoked_or_deleted_keys_background_response_fails(world):
    """Background responses queued by a key revoked since, or by one deleted from the database, fail
    when a replica claims them, with the reason as their error; an admin's, queued beside, runs."""
    server, c, _ = world
    _new_key("frank", server.db)
    revoked = _revoke("frank", server.db)
    ids = {"revoked": _queue_background(server.db, revoked), "deleted": _queue_background(server.db, "key_999999"),
           "admin": _queue_background(server.db, "admin")}
    done = {what: _wait(c["admin"], f"/responses/{rid}", lambda r: r["status"] not in ("queued", "in_progress"))
            for what, rid in ids.items()}
    for what, owner, words in [("revoked", revoked, "was revoked"), ("deleted", "key_999999", "no longer exists")]:
        assert done[what]["status"] == "failed" and done[what]["output"] == [], done[what]
        error = done[what]["error"]
        assert error["code"] == "api_key_revoked" and owner in error["message"] and words in error["message"], error
    assert done["admin"]["status"] in ("completed", "incomplete"), done["admin"]


def test_a_revoked_keys_schedule_is_disabled_and_its_run_failed(world):
    """gina's schedule comes due after she is revoked: its run is recorded failed with the reason,
    nothing is asked, and the schedule is disabled (it shows why, and never runs again, even due)."""
    server, c, source_dir = world
    key = _new_key("gina", server.db)
    gina = httpx.Client(base_url=server.base_url, timeout=60, headers={"authorization": f"Bearer {key}"})
    source = gina.post("/text2sql/sources", json={"name": "gina_shop", "url": f"sqlite:///{source_dir}/shop.sqlite"})
    assert source.status_code == 200, source.text
    schedule = gina.post("/text2sql/schedules", json={"cron": "0 0 1 1 *", "source": "gina_shop",
                                                      "question": "How many products?"}).json()
    assert schedule["enabled"] is True and schedule["disabled_reason"] is None, schedule
    gina.close()
    owner = _revoke("gina", server.db)
    due = {"t": time.time() - 1, "id": schedule["id"]}
    _write(server.db, "UPDATE text2sql_schedules SET next_run_at = :t WHERE id = :id", due)
    path = f"/text2sql/schedules/{schedule['id']}"
    disabled = _wait(c["admin"], path, lambda s: not s["enabled"], timeout=30)
    assert disabled["enabled"] is False and owner in disabled["disabled_reason"], disabled
    runs = _wait(c["admin"], f"{path}/runs", lambda r: r["data"] and r["data"][0]["status"] != "running")["data"]
    assert len(runs) == 1 and runs[0]["status"] == "failed" and runs[0]["result"] is None, runs
    assert runs[0]["error"]["code"] == "api_key_revoked" and owner in runs[0]["error"]["message"], runs

    # Due again, before an admin's schedule: one pass of the scheduler claims the schedules due in
    # their order, so once the admin's has run, gina's would have been claimed, were it not disabled.
    due["t"] = time.time() - 5
    _write(server.db, "UPDATE text2sql_schedules SET next_run_at = :t WHERE id = :id", due)
    admins = c["admin"].post("/text2sql/schedules", json={"cron": "0 0 1 1 *", "source": "gina_shop",
                                                          "question": "How many products?"}).json()
    _write(server.db, "UPDATE text2sql_schedules SET next_run_at = :t WHERE id = :id",
           {"t": due["t"] + 1, "id": admins["id"]})
    ran = _wait(c["admin"], f"/text2sql/schedules/{admins['id']}/runs", lambda r: r["data"], timeout=30)["data"]
    assert ran, "the admin's schedule never ran"
    assert len(c["admin"].get(f"{path}/runs").json()["data"]) == 1
    assert c["admin"].get(f"/text2sql/schedules/{admins['id']}").json()["enabled"] is True


# -- text-to-SQL sources: what no key may open -------------------------------------------------------------


def _server_db_spellings(server: RunningServer, tmp: Path) -> list[str]:
    if "://" in server.db:  # PostgreSQL: the same database by another host name and driver
        from sqlalchemy.engine import make_url

        url = make_url(server.db)
        return [f"postgresql://{url.username}@localhost:{url.port}/{url.database}",
                f"postgresql+psycopg2://{url.username}@127.0.0.1:{url.port}/{url.database}"]
    path = Path(server.db).resolve()
    link = tmp / "innocent.sqlite"
    if not link.exists():
        link.symlink_to(path)
    hard = tmp / "hard.sqlite"
    if not hard.exists():
        os.link(path, hard)
    rel = os.path.relpath(path, os.getcwd())
    return [f"sqlite:///{path}", f"sqlite:///{link}", f"sqlite:///{hard}", f"sqlite:///{rel}",
            f"sqlite:///file:{path}?mode=rw&uri=true", f"sqlite:///file://localhost{path}?mode=ro",
            f"sqlite:///file:{str(path).replace('/', '%2F')}", f"sqlite:///{path.parent}/./{path.name}",
            f"sqlite:///{path}-wal"]


def test_the_servers_own_database_is_never_a_source(world, tmp_path):
    server, c, source_dir = world
    for url in _server_db_spellings(server, source_dir):
        for who in ("admin", "alice"):
            resp = c[who].post("/text2sql/sources", json={"name": "sneaky", "url": url})
            assert resp.status_code == 400, (who, url, resp.text)
            assert "server's own database" in _error(resp, 400, "source_refused")["message"], (who, url)
    assert "sneaky" not in [s["name"] for s in c["admin"].get("/text2sql/sources").json()["data"]]


def test_sqlite_files_outside_the_source_dir_are_refused(world, tmp_path):
    _, c, source_dir = world
    outside = tmp_path / "elsewhere.sqlite"
    outside.write_bytes(demo_database("hr").read_bytes())
    link = source_dir / "link-out.sqlite"
    link.symlink_to(outside)
    for url in (f"sqlite:///{outside}", f"sqlite:///{link}", f"sqlite:///{source_dir}/../{outside.name}"):
        _error(c["alice"].post("/text2sql/sources", json={"name": "outside", "url": url}), 400, "source_refused")
    inside = c["alice"].post("/text2sql/sources", json={"name": "inside", "url": f"sqlite:///{source_dir}/shop.sqlite"})
    assert inside.status_code == 200, inside.text


def test_internal_hosts_are_refused_before_any_connection(world, listener, monkeypatch):
    _, c, _ = world
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):  # a DNS name that resolves to a private address
        if str(host).endswith(".example.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", args[0] if args else 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    port = listener.port
    for url in (f"postgresql://u@127.0.0.1:{port}/db", f"postgresql://u@localhost:{port}/db",
                f"postgresql://u@[::ffff:127.0.0.1]:{port}/db", f"mysql+pymysql://u@db.example.test:{port}/db",
                "postgresql://u@169.254.169.254/db", "postgresql://u@/db",
                f"postgresql://u@public.example.org/db?host=127.0.0.1&port={port}"):
        _error(c["alice"].post("/text2sql/sources", json={"name": "net", "url": url}), 400, "source_refused")
    # A password is never stored in clear: without SLLM_SECRET_KEY such a URL is refused before connecting.
    _error(c["admin"].post("/text2sql/sources", json={"name": "pw", "url": f"postgresql://u:pw@127.0.0.1:{port}/db"}),
           400, "secret_key_missing")
    # Webhooks: a name resolving to a private address, and a loopback address nobody listed.
    for hook in ("https://hooks.example.test/x", f"http://127.0.0.1:{port}/x"):
        _error(c["alice"].post("/text2sql/schedules", json={"cron": "0 0 1 1 *", "source": "demo_shop",
                                                            "question": "q", "webhook_url": hook}),
               400, "invalid_webhook_url")
        _error(c["alice"].post("/responses", json={"model": "tiny", "input": "Hi", "background": True,
                                                   "metadata": {"webhook_url": hook}}), 400, "invalid_webhook_url")
    assert listener.connections == 0

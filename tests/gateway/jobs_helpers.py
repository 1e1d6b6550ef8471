"""Helpers for the jobs tests: JSONL batch files, polling, reading the server's database (SQLite or
PostgreSQL), and a local webhook receiver."""

import asyncio
import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai

WEBHOOK_SECRET = "whsec_" + "dGVzdC13ZWJob29rLXNlY3JldC0xMjM0NTY3ODkw"  # base64 of a test key
TERMINAL = ("completed", "failed", "cancelled", "expired")


class DbReader:
    """Queries a server's database behind its back: a SQLite file (read-only) or a PostgreSQL URL,
    with sqlite3's `?` placeholders either way; `execute(...).fetchone()` / `.fetchall()` as sqlite3."""

    def __init__(self, db: str):
        self.db = db

    def __enter__(self) -> "DbReader":
        return self

    def __exit__(self, *_exc) -> None:
        return None

    def execute(self, sql: str, params: tuple = ()) -> "Rows":
        if "://" not in self.db:
            conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
            try:
                return Rows(conn.execute(sql, params).fetchall())
            finally:
                conn.close()
        import asyncpg

        numbered = iter(range(1, sql.count("?") + 1))
        sql = "".join(f"${next(numbered)}" if c == "?" else c for c in sql)

        async def fetch() -> list[tuple]:
            conn = await asyncpg.connect(self.db.replace("postgresql+asyncpg://", "postgresql://"))
            try:
                return [tuple(r) for r in await conn.fetch(sql, *params)]
            finally:
                await conn.close()

        return Rows(asyncio.run(fetch()))


@dataclass
class Rows:
    rows: list[tuple]

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple]:
        return self.rows


def database_for(request, tmp: Path) -> str:
    """The database a server fixture parametrized over ("sqlite", "postgresql") runs on."""
    if request.param == "sqlite":
        return str(tmp / "sllm.db")
    return request.getfixturevalue("postgres").new_database()


def jsonl(lines: list[dict]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def chat_line(custom_id: str, content: str, max_tokens: int, model: str | None = None, **body) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, **body}
    if model:
        body["model"] = model
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def completion_line(custom_id: str, prompt: str, max_tokens: int, model: str | None = None, **body) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **body}
    if model:
        body["model"] = model
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": body}


def wait_batch(client: openai.OpenAI, batch_id: str, timeout: float = 120, until=TERMINAL):
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in until:
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"batch still {batch.status} after {timeout}s: {batch.request_counts}")
        time.sleep(0.1)


def wait_recorded(client: openai.OpenAI, batch_id: str, n: int, timeout: float = 120):
    """Waits until at least `n` lines of the batch have a result."""
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        counts = batch.request_counts
        if counts.completed + counts.failed >= n or batch.status in TERMINAL:
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"{counts} after {timeout}s, wanted {n} recorded")
        time.sleep(0.05)


def output_lines(client: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: str


@dataclass
class WebhookReceiver:
    """A local HTTP server that records every POST; the first `fail_first` get a 500."""

    fail_first: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    attempts: int = 0

    def __post_init__(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                receiver.attempts += 1
                if receiver.attempts <= receiver.fail_first:
                    self.send_response(500)
                else:
                    receiver.deliveries.append(Delivery(self.path, dict(self.headers.items()), body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait(self, n: int = 1, timeout: float = 20) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.deliveries)} webhook deliveries after {timeout}s, wanted {n}")
            time.sleep(0.05)
        return self.deliveries

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""Helpers for the jobs tests: JSONL batch files, polling, and a local webhook receiver."""

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

WEBHOOK_SECRET = "whsec_" + "dGVzdC13ZWJob29rLXNlY3JldC0xMjM0NTY3ODkw"  # base64 of a test key
TERMINAL = ("completed", "failed", "cancelled", "expired")


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

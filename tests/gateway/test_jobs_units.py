"""Jobs without a model: batch input validation, the webhook allow-list and signature, and the gate
that bounds the jobs in the engine (schema migrations: test_migrations.py)."""

import asyncio
import ipaddress
import json
import time

import openai
import pytest

from gateway.jobs.batches import parse_input
from gateway.jobs.gate import JobGate
from gateway.jobs.webhooks import WebhookPolicy, WebhookRefused, sign
from gateway.settings import Settings


# -- batch input validation ---------------------------------------------------------------------------
def _line(custom_id="a", url="/v1/chat/completions", body=None, **extra) -> str:
    body = body if body is not None else {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body, **extra})


def test_parse_input_reports_each_bad_line_with_its_number():
    text = "\n".join([
        _line("a"),
        "{not json",
        _line("b", url="/v1/moderations"),
        _line("a"),  # duplicate custom_id
        _line("c", body={"messages": []}),
        _line("d", body={"prompt": "x", "stream": True}, url="/v1/completions"),
        _line("e", body={"prompt": "x", "model": "gpt-4o"}, url="/v1/completions"),
        json.dumps({"custom_id": "f", "method": "GET", "url": "/v1/completions", "body": {"prompt": "x"}}),
        json.dumps({"custom_id": "g", "url": "/v1/completions", "body": {"prompt": "x"}}),
        "",  # blank lines are skipped, and still counted
        _line("h", body={"prompt": "ok"}, url="/v1/completions"),
    ])
    rows, errors = parse_input(text.encode(), ["smol"], 1000)
    by_line = {e.line: e for e in errors}
    assert by_line[2].code == "invalid_json_line" and by_line[2].message.startswith("line 2: ")
    assert by_line[3].code == "invalid_url" and "/v1/moderations" in by_line[3].message
    assert by_line[4].code == "duplicate_custom_id" and "line 1" in by_line[4].message
    assert by_line[5].code == "invalid_body" and by_line[5].param == "body.messages"
    assert by_line[6].code == "unsupported_parameter" and by_line[6].param == "body.stream"
    assert by_line[7].code == "model_not_found"
    assert by_line[8].code == "invalid_method"
    assert by_line[9].code == "invalid_request" and by_line[9].param == "method"
    assert set(by_line) == {2, 3, 4, 5, 6, 7, 8, 9}
    assert [r["line"] for r in rows][-1] == 11


def test_parse_input_limits():
    assert parse_input(b"\n\n", "m", 10)[1][0].code == "empty_file"
    assert parse_input(b"\xff\xfe", "m", 10)[1][0].code == "invalid_file_encoding"
    many = "\n".join(_line(str(i)) for i in range(4)).encode()
    assert parse_input(many, "m", 3)[1][-1].code == "too_many_lines"
    rows, errors = parse_input(many, "m", 4)
    assert not errors and [r["custom_id"] for r in rows] == ["0", "1", "2", "3"]


# -- webhooks ------------------------------------------------------------------------------------------
def _policy(*allow: str, secret: str | None = "whsec_c2VjcmV0LWtleS0xMjM0NTY=") -> WebhookPolicy:
    return WebhookPolicy(Settings(webhook_secret=secret, webhook_allow_hosts=list(allow)))


@pytest.mark.parametrize("url, allow, reason", [
    ("http://127.0.0.1:9/x", [], "not enabled"),
    ("http://169.254.169.254/latest/meta-data", ["example.com"], "allow-list"),
    ("http://169.254.169.254/latest/meta-data", ["169.254.0.0/16"], "metadata"),
    ("http://[fe80::1]/", ["localhost"], "allow-list"),
    ("http://metadata.google.internal/", ["metadata.google.internal"], "metadata host"),
    ("http://10.0.0.5/", ["example.com"], "allow-list"),
    ("http://evil.example.org/", ["example.com", "*.example.com"], "allow-list"),
    ("ftp://example.com/", ["example.com"], "http"),
    ("http://user:pw@example.com/", ["example.com"], "credentials"),
    ("http://localhost:8080/hook", ["*.localhost"], "allow-list"),
])
async def test_webhook_urls_refused(url, allow, reason):
    policy = _policy(*allow) if allow else _policy(secret=None)
    with pytest.raises(WebhookRefused, match=reason):
        await policy.resolve(url)


async def test_webhook_urls_allowed_and_address_rules():
    host, address = await _policy("127.0.0.1").resolve("http://127.0.0.1:9/hook")
    assert str(address) == "127.0.0.1"
    host, address = await _policy("localhost").resolve("http://localhost:9/hook")  # exact name: internal ok
    assert address.is_loopback
    wildcard = _policy("*.example.com")
    wildcard.check_address("a.example.com", ipaddress.ip_address("93.184.215.14"))
    with pytest.raises(WebhookRefused, match="internal address"):  # a wildcard may not reach inside
        wildcard.check_address("a.example.com", ipaddress.ip_address("192.168.1.10"))
    with pytest.raises(WebhookRefused, match="link-local"):
        _policy("hooks.example.com").check_address("hooks.example.com",
                                                   ipaddress.ip_address("169.254.1.1"))


def test_webhook_signature_verifies_with_the_openai_sdk():
    secret = "whsec_c2VjcmV0LWtleS0xMjM0NTY="
    body = json.dumps({"id": "evt_1", "object": "event", "created_at": int(time.time()), "type": "batch.completed",
                       "data": {"id": "batch_1"}})
    ts = int(time.time())
    headers = {"webhook-id": "evt_1", "webhook-timestamp": str(ts),
               "webhook-signature": sign(secret, "evt_1", ts, body)}
    client = openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9")
    event = client.webhooks.unwrap(body, headers, secret=secret)
    assert event.type == "batch.completed" and event.data.id == "batch_1"
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.verify_signature(body + " ", headers, secret=secret)


# -- the gate --------------------------------------------------------------------------------------------
async def test_gate_bounds_jobs_in_the_engine_and_serves_better_priorities_first():
    gate = JobGate(concurrency=2)
    order: list[str] = []

    async def take(name: str, priority: int) -> None:
        await gate.acquire(priority)
        order.append(name)

    await take("b0", 10)
    await take("b1", 10)  # 2 in the engine: the bound
    waiting = {name: asyncio.create_task(take(name, prio)) for name, prio in
               (("b2", 10), ("gone", 5), ("b3", 10), ("r0", 5))}
    await asyncio.sleep(0)
    assert order == ["b0", "b1"] and gate.in_engine == 2
    waiting["gone"].cancel()  # a waiter that gives up leaves no trace
    await asyncio.gather(waiting["gone"], return_exceptions=True)
    gate.release()
    await asyncio.sleep(0)
    assert order == ["b0", "b1", "r0"]  # the better priority jumped the queue
    gate.release()
    gate.release()
    await asyncio.wait_for(asyncio.gather(waiting["b2"], waiting["b3"]), 1)
    assert order[3:] == ["b2", "b3"] and gate.in_engine == 2  # then arrival order
    gate.release()
    gate.release()
    assert gate.in_engine == 0
    await gate.close()

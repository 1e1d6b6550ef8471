"""The upstream client pool against real sllm servers as upstreams: one in this process (so its engine
can be watched) and one `sllm serve` subprocess (so it can be SIGKILLed mid-stream). Requests go out
under the upstream's model name and come back under ours; errors keep the upstream's fields; a dead
target is skipped and marked unhealthy; two live ones share the load; a killed upstream ends a stream
with one error event instead of a hang."""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.upstream import UpstreamPool, UpstreamTarget
from gateway.upstream.balance import Balancer
from gateway.upstream.sse import relay_events
from gateway.upstream.target import TargetState
from gateway.web.errors import APIError
from tests.gateway.server import MODEL, RunningServer, free_port, run_server, wait_healthy

pytestmark = pytest.mark.default_model

KEY = "sk-upstream-secret"  # the upstreams' key: must reach them, and never show in errors or snapshots
OURS = "smol-proxied"  # our served name for the upstream's MODEL
HELLO = [{"role": "user", "content": "Say hello."}]


def _serve(port: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from engine.cli import main; main()", "serve", "--port", str(port),
           "--db", str(log.with_suffix(".db")), "--api-key", KEY, "--log-level", "warning",
           # No bundled embedding model (nothing here embeds; A, run_server's, has none either).
           "--embedding-model", "none"]
    # One thread: two on two cores another test worker uses spin at each decode step's barrier.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLLM_")} | {"OMP_NUM_THREADS": "1"}
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path) -> None:
    try:
        wait_healthy(url, lambda: proc.poll() is None, lambda: log.read_text()[-3000:])
    except RuntimeError:
        proc.kill()
        raise


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory) -> Iterator[tuple[RunningServer, str, subprocess.Popen]]:
    """(A: a server in this process, B: the base URL of a `sllm serve` process, B's process). Both load
    the model at once, so the module pays for about one start."""
    tmp = tmp_path_factory.mktemp("upstream")
    port = free_port()
    log = tmp / "b.log"
    proc = _serve(port, log)
    try:
        with run_server(tmp, api_keys=[KEY], max_model_len=512) as a:
            _wait_healthy(proc, f"http://127.0.0.1:{port}", log)
            yield a, f"http://127.0.0.1:{port}/v1", proc
            a.assert_no_leak()
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def a(upstreams) -> RunningServer:
    return upstreams[0]


@pytest.fixture(scope="module")
def b_url(upstreams) -> str:
    return upstreams[1]


def _pool(*urls: str, **kwargs) -> UpstreamPool:
    return UpstreamPool(OURS, [UpstreamTarget(u, api_key=KEY, model=MODEL) for u in urls], **kwargs)


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # a free port: nothing listens


def _direct(base_url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base_url}{path}", json={**body, "model": MODEL},
                      headers={"authorization": f"Bearer {KEY}"}, timeout=60)


def _data(event: bytes) -> dict | str:
    text = event.decode()
    assert text.startswith("data: ") and text.endswith("\n\n"), text
    payload = text[len("data: "):-2]
    return payload if payload == "[DONE]" else json.loads(payload)


def _is_ping(event: bytes) -> bool:
    """An SSE comment (`: ping`): the upstream sends one every 15 s, so a stream slowed down by a busy
    host carries some."""
    return event.startswith(b":")


def _served_requests(metrics_url: str) -> int:
    """Requests the upstream itself counted as finished (its e2e latency histogram's count)."""
    text = httpx.get(metrics_url, timeout=10).text
    m = re.search(r'^sllm:e2e_request_latency_seconds_count\{[^}]*\} (\S+)$', text, re.M)
    return int(float(m.group(1))) if m else 0


async def test_post_chat_and_completion_rename_the_model_both_ways(a):
    pool = _pool(a.base_url)
    try:
        chat = {"model": OURS, "messages": HELLO, "max_tokens": 8, "temperature": 0}
        answer = await pool.post("/chat/completions", chat)
        # The upstream only knows MODEL (it answers 404 to any other name), so the request went out renamed.
        direct = _direct(a.base_url, "/chat/completions", chat).json()
        assert answer["object"] == "chat.completion" and answer["model"] == OURS and direct["model"] == MODEL
        assert answer["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"]
        assert answer["usage"]["completion_tokens"] == direct["usage"]["completion_tokens"]

        text = {"model": OURS, "prompt": "SELECT name FROM", "max_tokens": 6, "temperature": 0}
        answer = await pool.post("/completions", text)
        direct = _direct(a.base_url, "/completions", text).json()
        assert answer["object"] == "text_completion" and answer["model"] == OURS
        assert answer["choices"][0]["text"] == direct["choices"][0]["text"]

        models = await pool.get("/models")
        assert [m["id"] for m in models["data"]] == [MODEL, f"{MODEL}-embed"]
        [target] = pool.snapshot()
        assert target == {"url": a.base_url, "outstanding": 0, "healthy": True, "requests": 3, "failures": 0,
                          "retries": 0}
    finally:
        await pool.aclose()


async def _until_running(server: RunningServer, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not server.engine.engine.requests:
        assert time.monotonic() < deadline, "the first event arrived only after the upstream had finished"
        await asyncio.sleep(0.002)


async def test_stream_relays_events_as_they_are_generated(a):
    pool = _pool(a.base_url)
    body = {"model": OURS, "messages": HELLO, "max_tokens": 64, "temperature": 0, "ignore_eos": True}
    try:
        stream = await pool.open_stream("/chat/completions", body)
        events = []
        async for event in stream:
            if _is_ping(event):
                continue
            if not events:
                # The first event (the role chunk) may come before the step thread has even taken the request
                # in, so wait for the request to show up running: had the relay buffered the whole answer,
                # the upstream would have finished it already and it never would.
                await _until_running(a)
                assert pool.snapshot()[0]["outstanding"] == 1
            events.append(_data(event))
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        assert all(c["object"] == "chat.completion.chunk" and c["model"] == OURS for c in chunks)
        streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        direct = _direct(a.base_url, "/chat/completions", body).json()
        assert streamed == direct["choices"][0]["message"]["content"]
        assert pool.snapshot()[0]["outstanding"] == 0
    finally:
        await pool.aclose()


async def test_closing_a_stream_early_aborts_the_upstream_request(a):
    pool = _pool(a.base_url)
    body = {"model": OURS, "messages": HELLO, "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    try:
        stream = await pool.open_stream("/chat/completions", body)
        for _ in range(3):
            await stream.__anext__()
        await stream.aclose()
        assert pool.snapshot()[0]["outstanding"] == 0
        await asyncio.to_thread(a.assert_no_leak)  # the upstream aborted it well before 400 tokens
        # Closed before the first event was read (a client gone before the headers went out).
        stream = await pool.open_stream("/chat/completions", body)
        await stream.aclose()
        assert pool.snapshot()[0]["outstanding"] == 0
        await asyncio.to_thread(a.assert_no_leak)
    finally:
        await pool.aclose()


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/chat/completions", {"messages": HELLO, "max_tokens": -1}, 400),
    ("/chat/completions", {"messages": HELLO, "temperature": "hot"}, 400),
    ("/completions", {"prompt": "hi", "max_tokens": 100000}, 400),
    ("/nothing/here", {"prompt": "hi"}, 404),
])
async def test_upstream_errors_are_relayed_with_their_fields(a, path, body, status):
    want = _direct(a.base_url, path, body)
    assert want.status_code == status
    want = want.json()["error"]
    pool = _pool(a.base_url)
    try:
        for call in (pool.post, pool.open_stream):
            with pytest.raises(APIError) as caught:
                await call(path, {**body, "model": OURS})
            err = caught.value
            assert (err.status, err.info.model_dump()) == (status, want)
        # An error the upstream meant is no failure of the upstream: not retried, not taken out.
        assert pool.snapshot()[0] | {"url": None} == {"url": None, "outstanding": 0, "healthy": True,
                                                      "requests": 2, "failures": 0, "retries": 0}
    finally:
        await pool.aclose()


async def test_json_answer_to_a_stream_is_a_502(a):
    # /tokenize (at the server's root) answers JSON whatever `stream` says: not something to relay.
    pool = UpstreamPool(OURS, [UpstreamTarget(a.url, api_key=KEY, model=MODEL)])
    try:
        assert (await pool.post("/tokenize", {"prompt": "hi"}))["count"] > 0
        with pytest.raises(APIError) as caught:
            await pool.open_stream("/tokenize", {"prompt": "hi"})
        assert (caught.value.status, caught.value.code) == (502, "upstream_bad_response")
        assert pool.snapshot()[0]["outstanding"] == 0
    finally:
        await pool.aclose()


async def test_unknown_model_at_the_upstream_is_its_404(a):
    pool = UpstreamPool(OURS, [UpstreamTarget(a.base_url, api_key=KEY, model="no-such-model")])
    try:
        with pytest.raises(APIError) as caught:
            await pool.post("/chat/completions", {"model": OURS, "messages": HELLO, "max_tokens": 2})
        assert caught.value.status == 404 and caught.value.code == "model_not_found"
        assert "no-such-model" in caught.value.message  # the upstream's own words, kept
    finally:
        await pool.aclose()


async def test_refused_gateway_key_is_a_502_that_shows_no_key(a):
    pool = UpstreamPool(OURS, [UpstreamTarget(a.base_url, api_key="sk-wrong-key", model=MODEL)])
    try:
        with pytest.raises(APIError) as caught:
            await pool.post("/chat/completions", {"model": OURS, "messages": HELLO, "max_tokens": 2})
        err = caught.value
        assert (err.status, err.code) == (502, "upstream_auth_failed")
        assert "sk-wrong-key" not in err.message and OURS in err.message
    finally:
        await pool.aclose()


async def test_dead_target_is_skipped_and_marked_unhealthy(a):
    dead = _dead_url()
    pool = _pool(dead, a.base_url, cooldown_s=30)
    try:
        for _ in range(4):
            answer = await pool.post("/completions", {"model": OURS, "prompt": "1, 2, 3,", "max_tokens": 2})
            assert answer["model"] == OURS
        stream = await pool.open_stream("/completions", {"model": OURS, "prompt": "1, 2,", "max_tokens": 2})
        assert _data([e async for e in stream][-1]) == "[DONE]"
        dead_state, live = pool.snapshot()
        # Tried once (the round-robin's first pick), then out of service for the rest.
        assert dead_state == {"url": dead, "outstanding": 0, "healthy": False, "requests": 1, "failures": 1,
                              "retries": 0}
        assert live | {"url": None} == {"url": None, "outstanding": 0, "healthy": True, "requests": 5,
                                        "failures": 0, "retries": 1}
    finally:
        await pool.aclose()


async def test_nothing_alive_is_a_502_naming_the_model_not_the_credentials():
    port = free_port()
    url = f"http://admin:hunter2@127.0.0.1:{port}/v1?key=hunter3"
    pool = UpstreamPool(OURS, [UpstreamTarget(url, api_key=KEY)], retries=1, cooldown_s=30)
    try:
        for call in (pool.post, pool.open_stream):
            started = time.monotonic()
            with pytest.raises(APIError) as caught:
                await call("/completions", {"model": OURS, "prompt": "x"})
            err = caught.value
            assert (err.status, err.code, err.info.type) == (502, "upstream_unavailable", "server_error")
            assert OURS in err.message and "connection failed" in err.message
            assert not any(s in err.message for s in ("hunter", KEY, "127.0.0.1"))
            assert time.monotonic() - started < 3
        # Out of service from the first failure on, it was still tried each time: failing without
        # trying would never notice it came back.
        [state] = pool.snapshot()
        assert state == {"url": f"http://127.0.0.1:{port}/v1", "outstanding": 0, "healthy": False, "requests": 4,
                         "failures": 4, "retries": 2}
        assert "hunter" not in repr(pool.targets) and KEY not in repr(pool.targets)
    finally:
        await pool.aclose()


async def test_silent_target_times_out_as_504():
    # A socket that completes the TCP handshake (the kernel does, into the backlog) but never answers.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        pool = UpstreamPool(OURS, [UpstreamTarget(url)], read_timeout=0.3, retries=1)
        try:
            started = time.monotonic()
            with pytest.raises(APIError) as caught:
                await pool.open_stream("/completions", {"model": OURS, "prompt": "x"})
            assert (caught.value.status, caught.value.code) == (504, "upstream_timeout")
            assert OURS in caught.value.message and time.monotonic() - started < 3
            assert pool.snapshot()[0] | {"url": None} == {"url": None, "outstanding": 0, "healthy": False,
                                                          "requests": 2, "failures": 2, "retries": 1}
        finally:
            await pool.aclose()


async def test_two_live_targets_share_the_load(a, b_url):
    pool = _pool(a.base_url, b_url)
    a_metrics, b_metrics = f"{a.url}/metrics", b_url.removesuffix("/v1") + "/metrics"
    before = [_served_requests(a_metrics), _served_requests(b_metrics)]
    try:
        async def one(i: int) -> None:
            body = {"model": OURS, "prompt": f"Count to {i}:", "max_tokens": 4}
            if i % 2:
                stream = await pool.open_stream("/completions", body)
                assert _data([e async for e in stream][-1]) == "[DONE]"
            else:
                assert (await pool.post("/completions", body))["model"] == OURS

        await asyncio.gather(*(one(i) for i in range(8)))
        snap = pool.snapshot()
        served = [_served_requests(a_metrics) - before[0], _served_requests(b_metrics) - before[1]]
        # Least outstanding with round-robin ties: 8 concurrent requests split evenly, as each upstream saw.
        assert [s["requests"] for s in snap] == served == [4, 4]
        assert all(s["healthy"] and s["outstanding"] == 0 and s["failures"] == 0 for s in snap)
    finally:
        await pool.aclose()


async def test_upstream_killed_mid_stream_ends_with_one_error_event(a, upstreams, b_url):
    pool = _pool(b_url, a.base_url)
    body = {"model": OURS, "messages": HELLO, "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    try:
        stream = await pool.open_stream("/chat/completions", body)  # the round-robin's first pick: B
        assert pool.snapshot()[0]["outstanding"] == 1
        firsts = []
        while len(firsts) < 3:
            if not _is_ping(event := await stream.__anext__()):
                firsts.append(_data(event))
        assert all(e["model"] == OURS for e in firsts)
        os.kill(upstreams[2].pid, signal.SIGKILL)
        killed = time.monotonic()
        rest = [_data(e) async for e in stream if not _is_ping(e)]
        assert time.monotonic() - killed < 5
        errors = [e for e in rest if isinstance(e, dict) and "error" in e]
        assert len(errors) == 1 and rest[-1] is errors[0], rest[-3:]
        assert errors[0]["error"]["code"] == "upstream_unavailable" and OURS in errors[0]["error"]["message"]
        dead, live = pool.snapshot()
        assert (dead["healthy"], dead["outstanding"], dead["failures"]) == (False, 0, 1)
        # The next request goes to the live one without trying the dead one.
        assert (await pool.post("/completions", {"model": OURS, "prompt": "hi", "max_tokens": 2}))["model"] == OURS
        assert pool.snapshot()[0]["requests"] == 1 and pool.snapshot()[1]["requests"] == 1
    finally:
        await pool.aclose()


# --- the balancing and health rules on their own (no server needed) ---

def test_cooldown_doubles_while_failures_repeat_and_resets_on_success():
    state = TargetState(UpstreamTarget("http://h/v1"))
    assert state.failed(0.0, 10, 300) == 10
    assert state.failed(5.0, 10, 300) == 5  # in flight when it went out: no longer cooldown
    assert state.failed(10.0, 10, 300) == 20  # failed again after the cooldown: doubled
    assert state.failed(30.0, 10, 300) == 40
    for t in range(4):
        state.failed(1000.0 * (t + 1), 10, 300)
    assert state.down_until - 4000.0 == 300  # capped
    state.succeeded()
    assert state.healthy(4000.0) and state.failed(5000.0, 10, 300) == 10


def test_balancer_least_outstanding_round_robin_and_soonest_recovery():
    states = [TargetState(UpstreamTarget(f"http://h{i}/v1")) for i in range(3)]
    balancer = Balancer(states)
    assert [balancer.pick(0.0, set()) for _ in range(4)] == [0, 1, 2, 0]  # ties: round-robin
    states[0].outstanding = 2
    states[2].outstanding = 1
    assert balancer.pick(0.0, set()) == 1  # least outstanding
    assert balancer.pick(0.0, {1}) == 2  # a retry goes elsewhere
    states[1].down_until = 50.0
    assert balancer.pick(0.0, set()) == 2  # out of service: skipped while a healthy one remains
    states[0].down_until, states[2].down_until = 80.0, 60.0
    assert balancer.pick(0.0, set()) == 1  # all out: the soonest back
    assert balancer.pick(0.0, {1}) == 2


async def test_relay_renames_and_keeps_framing():
    async def lines():
        for line in ['data: {"model": "up", "x": "é"}', "", ": ping", "", "event: e", "data: {", 'data: "model": "up"}',
                     "", 'data: {"id": 1}', "", 'data: {"type": "response.created", "response": {"model": "up"}}', "",
                     "data: [DONE]"]:
            yield line

    events = [e async for e in relay_events(lines(), "ours")]
    assert events == ['data: {"model":"ours","x":"é"}\n\n'.encode(), b": ping\n\n",
                      b'event: e\ndata: {"model":"ours"}\n\n', b'data: {"id": 1}\n\n',
                      b'data: {"type":"response.created","response":{"model":"ours"}}\n\n', b"data: [DONE]\n\n"]

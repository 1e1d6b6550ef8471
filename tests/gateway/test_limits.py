"""API keys (flags and hashed in the database), backpressure (429 past the queue bound), and an
engine failure mid-stream reported as an error event. The last test stops this server's engine."""

import asyncio
import time

import httpx
import openai
import pytest

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

CLI_KEY = "sk-test-cli"


def _stored_key(db_path: str) -> str:
    """The key a user would create with `gateway.cli.create_key` (a `sllm keys create` to be)."""
    import io
    from contextlib import redirect_stdout

    from gateway.cli import create_key

    out = io.StringIO()
    with redirect_stdout(out):
        create_key("tests", db=db_path)
    return out.getvalue().strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("limits")
    db_key = _stored_key(str(tmp / "sllm.db"))
    with run_server(tmp, api_keys=[CLI_KEY], max_num_seqs=2, max_queued_requests=1) as s:
        s.db_key = db_key
        yield s


def _client(server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)


def test_keys_from_flags_and_database(server):
    for key in (CLI_KEY, server.db_key):
        assert _client(server, key).models.list().data[0].id == MODEL


def test_wrong_or_missing_key_is_401(server):
    with pytest.raises(openai.AuthenticationError) as exc:
        _client(server, "sk-wrong").chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["code"] == "invalid_api_key"
    for path in ("/v1/models", "/v1/responses/resp_x", "/tokenize"):
        resp = httpx.request("POST" if path == "/tokenize" else "GET", f"{server.url}{path}", json={})
        assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error", path
    # Probes stay open: orchestrators check them without credentials.
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert httpx.get(f"{server.url}/metrics").status_code == 200


LONG = {"prompt": "Count:", "max_tokens": 400, "ignore_eos": True, "stream": True}
AUTH = {"authorization": f"Bearer {CLI_KEY}"}


async def _hold(http: httpx.AsyncClient, url: str) -> None:
    async with http.stream("POST", f"{url}/completions", json=LONG) as r:
        async for _ in r.aiter_lines():
            pass


def test_past_the_queue_bound_is_429_with_retry_after(server):
    """max_num_seqs=2 plus max_queued_requests=1: three long requests fit, the fourth is refused."""
    body, headers = LONG, AUTH

    async def run():
        async with httpx.AsyncClient(timeout=60, headers=headers) as http:
            holders = [asyncio.create_task(_hold(http, server.base_url)) for _ in range(3)]
            while server.state.admission.in_flight < 3:
                await asyncio.sleep(0.01)
            refused = await http.post(f"{server.base_url}/completions", json=body)
            sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key=CLI_KEY, max_retries=0)
            with pytest.raises(openai.RateLimitError):
                await sdk.completions.create(model=MODEL, prompt="hi", max_tokens=1)
            health = await http.get(f"{server.url}/health")
            for t in holders:  # disconnecting aborts them in the engine
                t.cancel()
            await asyncio.gather(*holders, return_exceptions=True)
            return refused, health

    refused, health = asyncio.run(run())
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert health.status_code == 200
    server.wait_idle()
    assert _client(server, CLI_KEY).completions.create(model=MODEL, prompt="hi", max_tokens=2).choices
    assert server.state.admission.in_flight == 0
    server.assert_no_leak()


def test_a_queued_client_that_gives_up_frees_its_slot(server):
    async def run():
        async with httpx.AsyncClient(timeout=60, headers=AUTH) as http:
            holders = [asyncio.create_task(_hold(http, server.base_url)) for _ in range(2)]
            while server.engine.stats()["num_running"] < 2:
                await asyncio.sleep(0.01)
            # Queued behind the two: no first token, so no headers, before the client gives up.
            with pytest.raises(httpx.ReadTimeout):
                await http.post(f"{server.base_url}/completions", json=LONG, timeout=0.5)
            await asyncio.sleep(0.3)
            in_flight = server.state.admission.in_flight
            for t in holders:
                t.cancel()
            await asyncio.gather(*holders, return_exceptions=True)
            return in_flight

    assert asyncio.run(run()) == 2
    server.wait_idle()
    assert server.state.admission.in_flight == 0
    server.assert_no_leak()


def test_a_queued_stream_gets_its_headers_before_its_first_token(server):
    async def run():
        async with httpx.AsyncClient(timeout=60, headers=AUTH) as http:
            holders = [asyncio.create_task(_hold(http, server.base_url)) for _ in range(2)]
            while server.engine.stats()["num_running"] < 2:
                await asyncio.sleep(0.01)
            t0 = time.perf_counter()
            async with http.stream("POST", f"{server.base_url}/completions", json=LONG) as queued:
                waited = time.perf_counter() - t0
                # Queued in the engine, which takes it between two steps of the running pair.
                deadline, waiting = time.monotonic() + 30, 0
                while waiting != 1 and time.monotonic() < deadline:
                    waiting = server.engine.stats()["num_waiting"]
                    await asyncio.sleep(0.01)
            for t in holders:
                t.cancel()
            await asyncio.gather(*holders, return_exceptions=True)
            return queued.status_code, waited, waiting

    status, waited, waiting = asyncio.run(run())
    assert status == 200 and waiting == 1 and waited < 5
    server.wait_idle()
    assert server.state.admission.in_flight == 0
    server.assert_no_leak()


def test_engine_failure_mid_stream_is_an_error_event(server):
    """Fault injection into the real engine's step loop: the stream ends with an error object."""
    llm = server.engine.engine
    real_step, calls = llm.step, {"n": 0}

    def failing_step():
        calls["n"] += 1
        if calls["n"] > 4:
            raise RuntimeError("injected failure")
        return real_step()

    llm.step = failing_step
    client = _client(server, CLI_KEY)
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell a story"}],
                                            max_tokens=100, stream=True, extra_body={"ignore_eos": True})
    got = []
    with pytest.raises(openai.APIError) as exc:
        for chunk in stream:
            got.append(chunk)
    assert got and "stopped" in exc.value.message and exc.value.body["code"] == "engine_dead"
    assert httpx.get(f"{server.url}/health").status_code == 503
    with pytest.raises(openai.InternalServerError):  # 503 while the engine is down
        client.completions.create(model=MODEL, prompt="hi", max_tokens=1)

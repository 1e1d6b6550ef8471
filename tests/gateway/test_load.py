"""Under load: 64 concurrent streams all complete with every token; /health and /v1/models stay
fast meanwhile; a client that disconnects frees its KV blocks at once; nothing leaks."""

import asyncio
import time

import httpx
import openai
import pytest

from tests.gateway.server import MODEL, run_server

pytestmark = pytest.mark.default_model

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # A small KV pool: 64 streams need about 128 blocks, so some are preempted and resumed.
    with run_server(tmp_path_factory.mktemp("load"), num_kv_blocks=112, max_num_seqs=64) as s:
        yield s


async def _one_stream(client: openai.AsyncOpenAI, i: int) -> tuple[int, int, str | None]:
    stream = await client.completions.create(
        model=MODEL, prompt=f"Story number {i}:", max_tokens=MAX_TOKENS, temperature=0.8, seed=i, logprobs=0,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    tokens, usage, finish = 0, None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        for c in chunk.choices:
            tokens += len(c.logprobs.tokens) if c.logprobs else 0
            finish = c.finish_reason or finish
    return tokens, usage, finish


async def _latency(url: str) -> float:
    async with httpx.AsyncClient() as http:
        t0 = time.perf_counter()
        assert (await http.get(url)).status_code == 200
        return time.perf_counter() - t0


def test_64_concurrent_streams(server):
    async def run():
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)
        tasks = [asyncio.create_task(_one_stream(client, i)) for i in range(64)]
        await asyncio.sleep(0.5)
        probes = []
        while not all(t.done() for t in tasks):
            if server.engine.stats()["num_running"] > 8:
                probes.append(await _latency(f"{server.url}/health"))
                probes.append(await _latency(f"{server.base_url}/models"))
            await asyncio.sleep(0.05)
        return await asyncio.gather(*tasks), probes

    results, probes = asyncio.run(run())
    assert len(results) == 64
    assert all(r == (MAX_TOKENS, MAX_TOKENS, "length") for r in results), results
    assert probes, "the engine never looked busy"
    assert sorted(probes)[len(probes) // 2] < 0.1 and max(probes) < 0.3, probes
    server.assert_no_leak()


def _wait_freed(server, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.engine.engine.requests and server.engine.stats()["num_running"] == 0:
            server.engine.engine.block_manager.check_no_leak()
            return
        time.sleep(0.002)
    raise AssertionError(f"request not aborted: {server.engine.stats()}")


def test_disconnect_mid_stream_frees_blocks_within_a_step(server):
    body = {"prompt": "Tell me a long story.", "max_tokens": 500, "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=30) as http, http.stream("POST", f"{server.base_url}/completions", json=body) as r:
        data = (line for line in r.iter_lines() if line.startswith("data:"))
        for _ in range(6):
            next(data)
        assert server.engine.stats()["num_running"] == 1
        steps_before = server.engine.stats()["steps"]
    t0 = time.monotonic()
    _wait_freed(server)
    steps = server.engine.stats()["steps"] - steps_before
    assert steps <= 2, f"aborted after {steps} steps"  # the one in flight when the socket closed, at most
    assert time.monotonic() - t0 < 0.5


def test_disconnect_while_waiting_for_a_plain_answer(server):
    body = {"prompt": "Tell me a long story.", "max_tokens": 500, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/completions", json=body, timeout=1.0)
    _wait_freed(server)

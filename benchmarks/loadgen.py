"""A load generator for serving benchmarks: streaming requests at a fixed concurrency or as a
Poisson process, timed per request (TTFT, TPOT, latency), against any async "send one request"
function, so HTTP servers and the in-process engine are measured the same way."""

import asyncio
import json
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from benchmarks.harness import percentile


@dataclass
class RequestResult:
    ok: bool
    output_tokens: int = 0
    ttft: float | None = None
    latency: float = 0.0
    error: str | None = None

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.ttft is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


@dataclass
class Summary:
    name: str
    duration: float
    results: list[RequestResult] = field(repr=False)

    @property
    def completed(self) -> list[RequestResult]:
        return [r for r in self.results if r.ok]

    @property
    def output_throughput(self) -> float:
        return sum(r.output_tokens for r in self.completed) / self.duration if self.duration else 0.0

    @property
    def request_throughput(self) -> float:
        return len(self.completed) / self.duration if self.duration else 0.0

    def ttfts(self) -> list[float]:
        return [r.ttft for r in self.completed if r.ttft is not None]

    def tpots(self) -> list[float]:
        return [t for r in self.completed if (t := r.tpot) is not None]

    def row(self) -> dict[str, float | str | int]:
        ttft, tpot = self.ttfts(), self.tpots()
        return {
            "target": self.name,
            "ok": len(self.completed),
            "failed": len(self.results) - len(self.completed),
            "req/s": round(self.request_throughput, 3),
            "out tok/s": round(self.output_throughput, 1),
            "TTFT p50 ms": round(percentile(ttft, 50) * 1000, 1),
            "TTFT p99 ms": round(percentile(ttft, 99) * 1000, 1),
            "TPOT p50 ms": round(percentile(tpot, 50) * 1000, 1),
            "TPOT p99 ms": round(percentile(tpot, 99) * 1000, 1),
        }


Send = Callable[[str], Awaitable[RequestResult]]


async def run_load(name: str, send: Send, prompts: list[str], concurrency: int | None, request_rate: float,
                   seed: int = 0) -> Summary:
    """Sends every prompt once: arrivals are Poisson at `request_rate` per second (all at once when
    infinite), and at most `concurrency` are in flight."""
    rng = random.Random(seed)
    limit = asyncio.Semaphore(concurrency or len(prompts))

    async def one(prompt: str) -> RequestResult:
        async with limit:
            try:
                return await send(prompt)
            except Exception as exc:  # a failed request is a data point, not the end of the run
                return RequestResult(ok=False, error=repr(exc))

    start = time.perf_counter()
    tasks = []
    for prompt in prompts:
        tasks.append(asyncio.create_task(one(prompt)))
        if math.isfinite(request_rate):
            await asyncio.sleep(rng.expovariate(request_rate))
    results = await asyncio.gather(*tasks)
    return Summary(name, time.perf_counter() - start, list(results))


def http_sender(client: httpx.AsyncClient, base_url: str, model: str, max_tokens: int) -> Send:
    """Streams one `/v1/completions` request; the usage chunk gives the token count (servers that
    send none are counted by content chunks)."""

    async def send(prompt: str) -> RequestResult:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "ignore_eos": True, "stream_options": {"include_usage": True}}
        t0 = time.perf_counter()
        for attempt in range(2):
            try:
                return await _stream(body, t0)
            except httpx.RemoteProtocolError:
                # A kept-alive connection the server closed as the request went out (llama.cpp's server
                # does between requests): nothing was processed, so the request goes again, once, on a
                # new connection, still timed from its first try.
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _stream(body: dict, t0: float) -> RequestResult:
        ttft, chunks, usage = None, 0, None
        async with client.stream("POST", f"{base_url}/completions", json=body) as resp:
            if resp.status_code != 200:
                return RequestResult(ok=False, error=f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}")
            async for line in resp.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                data = json.loads(line[5:])
                if "error" in data:
                    return RequestResult(ok=False, error=str(data["error"]))
                if data.get("usage"):
                    usage = data["usage"].get("completion_tokens")
                if any(c.get("text") for c in data.get("choices") or []):
                    chunks += 1
                    ttft = ttft if ttft is not None else time.perf_counter() - t0
        return RequestResult(ok=True, output_tokens=usage or chunks, ttft=ttft, latency=time.perf_counter() - t0)

    return send


def engine_sender(engine, max_tokens: int) -> Send:
    """The same request through `AsyncEngine` in-process: the baseline for the gateway's overhead."""
    from engine import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)

    async def send(prompt: str) -> RequestResult:
        t0 = time.perf_counter()
        ttft, tokens = None, 0
        async for out in engine.generate(prompt, params):
            o = out.outputs[0]
            if o.delta_text and ttft is None:
                ttft = time.perf_counter() - t0
            tokens = len(o.token_ids)
        return RequestResult(ok=True, output_tokens=tokens, ttft=ttft, latency=time.perf_counter() - t0)

    return send

"""One stream against two servers at once (benchmarks/paired_stream.py): each prompt to both, the order
alternating, each side's throughput over its own requests' time."""

import asyncio

from benchmarks.loadgen import RequestResult
from benchmarks.paired_stream import paired_single_stream


def test_each_prompt_goes_to_both_in_alternating_order():
    calls = []

    def sender(name: str, latency: float, fail_on: str | None = None):
        async def send(prompt: str) -> RequestResult:
            calls.append((name, prompt))
            if prompt == fail_on:
                raise ConnectionError("reset")
            return RequestResult(ok=True, output_tokens=10, ttft=0.1, latency=latency)
        return send

    ours, peer = asyncio.run(paired_single_stream(
        {"sllm": sender("sllm", 1.0), "llama.cpp": sender("llama.cpp", 2.0, fail_on="c")}, ["a", "b", "c"]))
    assert calls == [("sllm", "a"), ("llama.cpp", "a"), ("llama.cpp", "b"), ("sllm", "b"),
                     ("sllm", "c"), ("llama.cpp", "c")]
    assert ours.name == "sllm c=1 paired" and ours.output_throughput == 30 / 3.0
    assert peer.name == "llama.cpp c=1 paired" and len(peer.completed) == 2 and "reset" in peer.results[2].error
    assert peer.output_throughput == 20 / 4.0

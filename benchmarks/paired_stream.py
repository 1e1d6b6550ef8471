"""One stream against two servers at once, request by request (`sllm bench serve --paired-prompts N`).

One stream reads every weight once a token, so its speed follows the machine's memory bandwidth, and on a
shared VM that moves with the host's other tenants: a 2-core Zen 5 VM read 41-76 GB/s within one idle
hour, and two servers measured one after the other can land on different sides of such a swing. Here
both servers are up together (an idle one takes no CPU) and each prompt goes to one and then the other,
the order alternating (ABBA...), so a swing meets both alike; each side's throughput is its tokens over
the sum of its requests' latencies."""

import httpx

from benchmarks.loadgen import RequestResult, Send, Summary, http_sender


async def paired_single_stream(sends: dict[str, Send], prompts: list[str]) -> list[Summary]:
    """Each prompt to every target in turn, one request in flight at a time, the order reversed for
    every other prompt. Returns one Summary per target (its name + " c=1 paired")."""
    results: dict[str, list[RequestResult]] = {name: [] for name in sends}
    names = list(sends)
    for i, prompt in enumerate(prompts):
        for name in names if i % 2 == 0 else names[::-1]:
            try:
                results[name].append(await sends[name](prompt))
            except Exception as exc:  # a failed request is a data point, not the end of the run
                results[name].append(RequestResult(ok=False, error=repr(exc)))
    return [Summary(f"{name} c=1 paired", sum(r.latency for r in rs if r.ok), rs) for name, rs in results.items()]


async def paired_over_http(targets: dict, prompts: list[str], max_tokens: int) -> list[Summary]:
    """`paired_single_stream` over streaming /v1/completions requests to each target (benchmarks/targets.py's
    Target: url, served), each warmed up first with a short request."""
    async with httpx.AsyncClient(timeout=None) as client:
        for t in targets.values():
            await http_sender(client, t.url, t.served, 4)(prompts[0])
        sends = {name: http_sender(client, t.url, t.served, max_tokens) for name, t in targets.items()}
        return await paired_single_stream(sends, prompts)

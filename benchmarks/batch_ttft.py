"""Interactive TTFT beside a running batch: `python -m benchmarks.batch_ttft`.

Starts `sllm serve` once per scenario and sends the same light interactive load (streaming
completions over the text-to-SQL prompts, Poisson arrivals) to it:
- `none`: nothing else runs;
- `priority`: a large batch runs beside it, --job-concurrency lines in the engine at once, below the
  interactive requests by engine priority (the server's defaults);
- `flat`: the same batch with every kind of work at priority 0, to show what priority buys.
Prints TTFT and TPOT p50/p99 per scenario, and how many batch lines finished meanwhile."""

import asyncio
import json
import math
import os
import time

import httpx
import typer

from benchmarks.harness import machine_header, percentile
from benchmarks.loadgen import Summary, http_sender, run_load
from benchmarks.targets import sllm_server


async def _start_batch(client: httpx.AsyncClient, url: str, model: str, prompts: list[str], lines: int,
                       max_tokens: int) -> str:
    rows = [{"custom_id": f"b{i}", "method": "POST", "url": "/v1/completions",
             "body": {"model": model, "prompt": prompts[i % len(prompts)], "max_tokens": max_tokens,
                      "temperature": 0, "ignore_eos": True}} for i in range(lines)]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    f = (await client.post(f"{url}/files", files={"file": ("bench.jsonl", data)}, data={"purpose": "batch"})).json()
    batch = (await client.post(f"{url}/batches", json={"input_file_id": f["id"], "endpoint": "/v1/completions",
                                                       "completion_window": "24h"})).json()
    while (await _counts(client, url, batch["id"]))["completed"] < 2:  # running at its steady state
        await asyncio.sleep(0.2)
    return batch["id"]


async def _counts(client: httpx.AsyncClient, url: str, batch_id: str) -> dict:
    return (await client.get(f"{url}/batches/{batch_id}")).json()["request_counts"]


async def _scenario(name: str, url: str, model: str, prompts: list[str], args: dict) -> tuple[Summary, str]:
    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as client:
        await http_sender(client, url, model, 4)(prompts[0])  # warm-up, out of the numbers
        batch_id, before = None, 0
        if name != "none":
            batch_id = await _start_batch(client, url, model, prompts, args["batch_lines"], args["batch_max_tokens"])
            before = (await _counts(client, url, batch_id))["completed"]
        t0 = time.perf_counter()
        load = [prompts[(i * 7) % len(prompts)] for i in range(args["num_requests"])]
        summary = await run_load(name, http_sender(client, url, model, args["max_tokens"]), load, None,
                                 args["request_rate"], args["seed"])
        note = ""
        if batch_id is not None:
            counts = await _counts(client, url, batch_id)
            elapsed = time.perf_counter() - t0
            done = counts["completed"] - before
            note = (f"{done} batch lines in {elapsed:.0f}s ({done / elapsed:.2f}/s); "
                    f"{counts['total'] - counts['completed']} still to run at the end")
            await client.post(f"{url}/batches/{batch_id}/cancel")
        return summary, note


def bench_jobs(
    model: str = typer.Option("default", "--model", envvar="SLLM_MODEL"),
    num_requests: int = typer.Option(60, "--num-requests", help="Interactive requests per scenario"),
    request_rate: float = typer.Option(1.0, "--request-rate", help="Interactive Poisson arrivals per second"),
    max_tokens: int = typer.Option(32, "--max-tokens", help="Output tokens per interactive request"),
    batch_lines: int = typer.Option(500, "--batch-lines"),
    batch_max_tokens: int = typer.Option(32, "--batch-max-tokens"),
    max_num_seqs: int = typer.Option(32, "--max-num-seqs"),
    job_concurrency: int = typer.Option(16, "--job-concurrency"),
    scenarios: str = typer.Option("none,priority,flat", "--scenarios"),
    repeat: int = typer.Option(1, "--repeat", help="Rounds over the scenarios, interleaved; numbers pool the rounds"),
    seed: int = typer.Option(0, "--seed"),
):
    """Interactive TTFT p50/p99 at a fixed light load, with and without a batch running beside it."""
    from integrations.text2sql.dataset import load_prompts

    prompts = load_prompts()
    print(machine_header())
    args = dict(num_requests=num_requests, request_rate=request_rate, max_tokens=max_tokens, batch_lines=batch_lines,
                batch_max_tokens=batch_max_tokens, seed=seed)
    print(f"interactive: {num_requests} streaming completions, Poisson {request_rate}/s, {max_tokens} tokens each; "
          f"batch: {batch_lines} lines of {batch_max_tokens} tokens; --max-num-seqs {max_num_seqs}, "
          f"--job-concurrency {job_concurrency}")
    names = scenarios.split(",")
    pooled: dict[str, tuple[list[float], list[float], list[str]]] = {n: ([], [], []) for n in names}
    for round_ in range(repeat):
        for name in names:
            os.environ["SLLM_JOB_CONCURRENCY"] = str(job_concurrency)
            for kind, default in (("BATCH", "10"), ("BACKGROUND", "5"), ("SCHEDULE", "5")):
                os.environ[f"SLLM_PRIORITY_{kind}"] = "0" if name == "flat" else default
            with sllm_server(model, max_num_seqs) as target:
                summary, note = asyncio.run(_scenario(name, target.url, target.served, prompts,
                                                      {**args, "seed": seed + round_}))
            ttft, tpot = summary.ttfts(), summary.tpots()
            pooled[name][0].extend(ttft)
            pooled[name][1].extend(tpot)
            pooled[name][2].append(note)
            print(f"  round {round_ + 1} {name}: {len(summary.completed)} ok, TTFT p50 "
                  f"{percentile(ttft, 50) * 1000:.0f}ms p99 {percentile(ttft, 99) * 1000:.0f}ms; {note}", flush=True)
    print(f"{'scenario':>9} {'n':>4} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9}  batch")
    for name, (ttft, tpot, notes) in pooled.items():
        values = (percentile(ttft, 50), percentile(ttft, 99), percentile(tpot, 50), percentile(tpot, 99))
        ms = [f"{v * 1000:8.0f}ms" if not math.isnan(v) else f"{'-':>10}" for v in values]
        print(f"{name:>9} {len(ttft):>4} {' '.join(ms)}  {' | '.join(n for n in notes if n)}")


if __name__ == "__main__":
    typer.run(bench_jobs)

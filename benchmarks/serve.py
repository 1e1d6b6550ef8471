"""`sllm bench serve`: the serving benchmark over the text-to-SQL prompt set, against our server,
llama.cpp's server on the same GGUF where it is installed, and `AsyncEngine` in-process (the
gateway's overhead is the throughput lost between the last two). Imports stay inside functions:
every `sllm` command imports this module."""

import math
from pathlib import Path

import typer


def bench_serve(
    base_url: str | None = typer.Option(
        None, "--base-url", help="A running server's /v1 URL; default: start `sllm serve` on a free port"),
    model: str = typer.Option("default", "--model", envvar="SLLM_MODEL"),
    num_prompts: int = typer.Option(112, "--num-prompts", help="Prompts to send (the set is cycled)"),
    single_stream_prompts: int = typer.Option(
        0, "--single-stream-prompts", help="Prompts at concurrency 1 (a long serial run); 0: --num-prompts"),
    max_concurrency: str = typer.Option(
        "16", "--max-concurrency", help="Requests in flight at most; several comma-separated (1,32) run in turn"),
    request_rate: float = typer.Option(math.inf, "--request-rate",
                                       help="Poisson arrivals per second; inf: all at once"),
    max_tokens: int = typer.Option(128, "--max-tokens"),
    max_num_seqs: int = typer.Option(32, "--max-num-seqs", envvar="SLLM_MAX_NUM_SEQS"),
    seed: int = typer.Option(0, "--seed"),
    plot: Path | None = typer.Option(None, "--plot", help="Write TTFT and TPOT distributions to this PNG"),
    compare_engine: bool = typer.Option(True, "--compare-engine/--no-compare-engine",
                                        help="Also run the load through AsyncEngine in-process"),
    via_proxy: bool = typer.Option(False, "--via-proxy/--no-via-proxy",
                                   help="Also send the load through a second sllm that forwards to the first "
                                        "(--upstream): the cost of one proxy hop"),
    llama_server: str = typer.Option(
        "llama-server", "--llama-server",
        help="llama.cpp server binary to compare (PATH, else the one scripts/build_llama_server.sh cached; "
             "its AVX2-only build, the peer of SLLM_CPU_ISA=avx2: ~/.cache/sllm/llama.cpp/bin-avx2/llama-server)"),
    gguf: Path | None = typer.Option(
        None, "--gguf", help="GGUF for llama.cpp (default: --model when it is a .gguf file, else the default model's)"),
    llama_args: str = typer.Option(
        "", "--llama-args",
        help="Extra llama-server arguments, e.g. '-fa off' (its CPU flash attention, on by default, "
             "measured 1.7x slower per token here)"),
    quantization: str = typer.Option(
        "auto", "--quantization", help="Our server's weight modes to run, comma-separated (auto, none, gguf)"),
    activations: str = typer.Option(
        "float", "--activations", help="Our server's activation modes to run with each weight mode, comma-separated "
                                       "(float, int8: llama.cpp's int8 dot products)"),
    kv_cache_dtype: str = typer.Option(
        "auto", "--kv-cache-dtype", help="Our server's KV cache types to run with each mode, comma-separated "
                                         "(auto, float16, bfloat16: llama.cpp's cache is f16)"),
    speculative_config: str | None = typer.Option(
        None, "--speculative-config",
        help='Also run our server with this speculative_config JSON, e.g. \'{"method": "ngram", '
             '"num_speculative_tokens": 4}\''),
    long_prompt_tokens: int = typer.Option(
        0, "--long-prompt-tokens", help="Also time the first token of one prompt this long (3 distinct prompts, "
                                        "median), e.g. 1000; 0: skip"),
    paired_prompts: int = typer.Option(
        0, "--paired-prompts",
        help="Also run one stream against our first server and llama.cpp's, both up, each prompt to one then "
             "the other in alternating order, so that a swing of the host's memory bandwidth meets both "
             "(benchmarks/paired_stream.py); this many prompts, 0: skip"),
    cold_start: bool = typer.Option(
        False, "--cold-start/--no-cold-start",
        help="Start each server twice, first with the model file evicted from the page cache (cold), then "
             "again (warm), and report both load times"),
):
    """Throughput, TTFT p50/p99 and TPOT p50/p99 of streaming requests over the text-to-SQL prompts, the
    servers' load time and peak RSS, and optionally a long prompt's TTFT, against llama.cpp's server."""
    import asyncio
    import statistics

    from benchmarks.harness import format_table, machine_header, percentile, pyplot, read_bandwidth_gbps
    from benchmarks.loadgen import Summary, engine_sender, http_sender, run_load
    from benchmarks.paired_stream import paired_over_http
    from benchmarks.targets import (
        evict_from_page_cache,
        find_llama_server,
        in_process_engine,
        llama_cpp_server,
        sllm_proxy,
        sllm_server,
    )
    from engine.loader import default_model_path, gguf_source
    from integrations.text2sql.dataset import load_prompts

    if plot:
        pyplot()  # a missing matplotlib stops the run now, not after it
    levels = [int(c) for c in max_concurrency.split(",") if c.strip()]
    gguf = gguf or gguf_source(model)
    model_file = gguf_source(model)
    base = load_prompts()
    prompts = [base[i % len(base)] for i in range(num_prompts)]
    mode = f"concurrency {max_concurrency}" if not math.isfinite(request_rate) else \
        f"Poisson {request_rate}/s, concurrency {max_concurrency}"
    print(f"{num_prompts} text-to-SQL prompts, {max_tokens} output tokens each (ignore_eos), {mode}; model {model}")
    print(machine_header())

    async def over_http(name: str, url: str, served: str, concurrency: int) -> Summary:
        import httpx

        sent = prompts[:single_stream_prompts] if concurrency == 1 and single_stream_prompts else prompts
        async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as client:
            warm = http_sender(client, url, served, 4)
            await warm(prompts[0])  # first-request costs (connections, caches) stay out of the numbers
            return await run_load(name, http_sender(client, url, served, max_tokens), sent, concurrency,
                                  request_rate, seed)

    async def long_ttft(url: str, served: str) -> float:
        """The median TTFT of three long prompts, each new to the server (no prefix-cache hit)."""
        import httpx

        times = []
        async with httpx.AsyncClient(timeout=None) as client:
            for i in range(3):
                r = await http_sender(client, url, served, 2)(_long_prompt(base, long_prompt_tokens, seed + i))
                if r.ok and r.ttft is not None:
                    times.append(r.ttft)
        return statistics.median(times) if times else math.nan

    summaries: list[Summary] = []
    loads: list[tuple[str, str, float, float | None]] = []  # (target, start, seconds to healthy, peak RSS MiB)
    long: dict[str, float] = {}
    bandwidth: dict[str, tuple[float, float]] = {}  # memory read GB/s before and after each target's runs
    proxied: tuple[Summary, Summary] | None = None

    def measure(name: str, start, file: Path | None) -> None:
        """Starts a target (cold then warm with --cold-start), runs every load level against it."""
        nonlocal proxied
        if cold_start and file is not None:
            evict_from_page_cache(file)
            with start() as first:
                loads.append((name, "cold", first.ready_seconds, first.peak_rss_mib()))
        with start() as target:
            loads.append((name, "warm" if cold_start else "first", target.ready_seconds, None))
            before = read_bandwidth_gbps()
            for level in levels:
                run = f"{name} c={level}"
                if via_proxy:  # both measured runs then find the same prompts in the prefix cache: a fair pair
                    asyncio.run(over_http(f"{run} (warm-up)", target.url, target.served, level))
                summaries.append(asyncio.run(over_http(run, target.url, target.served, level)))
                if via_proxy:
                    with sllm_proxy(target.url, target.served) as hop:
                        summaries.append(asyncio.run(over_http(f"{run} via proxy", hop.url, hop.served, level)))
                    proxied = (summaries[-2], summaries[-1])
            if long_prompt_tokens:
                long[name] = asyncio.run(long_ttft(target.url, target.served))
            loads[-1] = (*loads[-1][:3], target.peak_rss_mib())
            bandwidth[name] = (before, read_bandwidth_gbps())

    modes = [m.strip() for m in quantization.split(",") if m.strip()]
    acts = [a.strip() for a in activations.split(",") if a.strip()]
    kvs = [k.strip() for k in kv_cache_dtype.split(",") if k.strip()]
    runs = [(f"sllm q={m}" + ("" if a == "float" else f" a={a}") + ("" if kv == "auto" else f" kv={kv}"),
             {"SLLM_QUANTIZATION": m, "SLLM_ACTIVATIONS": a, "SLLM_KV_CACHE_DTYPE": kv})
            for m in modes for a in acts for kv in kvs]
    if speculative_config:
        runs.append((f"sllm q={modes[0]} +spec", {"SLLM_QUANTIZATION": modes[0],
                                                  "SLLM_SPECULATIVE_CONFIG": speculative_config}))
    if base_url:
        served = _served_name(base_url)
        for level in levels:
            summaries.append(asyncio.run(over_http(f"server c={level}", base_url.rstrip("/"), served, level)))
    else:
        for name, env in runs:
            measure(name, lambda env=env: sllm_server(model, max_num_seqs, env), model_file or default_model_path())
    peers: list[Summary] = []
    llama_name = f"llama.cpp {llama_args}".strip()
    peer_file = gguf or default_model_path()
    parallel = max(levels + [max_num_seqs])

    def start_llama():
        return llama_cpp_server(llama_server, gguf, parallel, llama_args.split())

    if find_llama_server(llama_server) is None:
        print(f"llama.cpp server ({llama_server}) is not installed: its comparison is skipped "
              "(scripts/build_llama_server.sh builds and caches it)")
    else:
        # Which build (scripts/build_llama_server.sh: the host's instructions, or LLAMA_CPU_ISA=avx2's).
        print(f"llama.cpp server: {find_llama_server(llama_server)}")
        before = len(summaries)
        measure(llama_name, start_llama, peer_file)
        peers = summaries[before:]
        if paired_prompts and not base_url:
            name, env = runs[0]
            with sllm_server(model, max_num_seqs, env) as ours, start_llama() as peer:
                pair = asyncio.run(paired_over_http({name: ours, llama_name: peer}, prompts[:paired_prompts],
                                                     max_tokens))
            summaries.extend(pair)
            peers.append(pair[-1])
    if compare_engine:
        async def in_process(level: int) -> Summary:
            # The settings of the first server run, which the gateway's overhead line compares it with.
            env = runs[0][1]
            with in_process_engine(model, max_num_seqs, quantization=env["SLLM_QUANTIZATION"],
                                   activations=env["SLLM_ACTIVATIONS"],
                                   kv_cache_dtype=env["SLLM_KV_CACHE_DTYPE"]) as engine:
                await engine_sender(engine, 4)(prompts[0])
                return await run_load(f"AsyncEngine (in-process) c={level}", engine_sender(engine, max_tokens),
                                      prompts, level, request_rate, seed)

        for level in levels:
            summaries.append(asyncio.run(in_process(level)))

    rows = [s.row() for s in summaries]
    print(format_table(list(rows[0]), [list(r.values()) for r in rows], align="r"))
    print(format_table(["target", "start", "healthy after s", "peak RSS MiB"],
                       [[t, k, round(sec, 2), round(rss) if rss else "-"] for t, k, sec, rss in loads], align="r"))
    if bandwidth:
        print("memory read GB/s before / after each target's runs (one stream reads every weight a token): "
              + ", ".join(f"{k} {a:.0f} / {b:.0f}" for k, (a, b) in bandwidth.items()))
    if long:
        print(f"TTFT of a {long_prompt_tokens}-token prompt (median of 3): "
              + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in long.items()))
    for peer in peers:
        level = peer.name.rsplit("c=", 1)[1]
        _print_ratios([s for s in summaries if s.name.endswith(f"c={level}")], peer)
    if llama_name in long:
        for name, value in long.items():
            if name != llama_name:
                print(f"{name} / {llama_name}: {long_prompt_tokens}-token TTFT {value / long[llama_name]:.2f}x")
    failures = [r.error for s in summaries for r in s.results if not r.ok]
    if failures:
        print(f"{len(failures)} requests failed, first: {failures[0]}")
    if compare_engine and not base_url:
        for level in levels:
            http = next(s for s in summaries if s.name == f"{runs[0][0]} c={level}")
            local = next(s for s in summaries if s.name == f"AsyncEngine (in-process) c={level}")
            overhead = 1 - http.output_throughput / local.output_throughput
            print(f"gateway overhead at c={level}: HTTP throughput is "
                  f"{http.output_throughput / local.output_throughput:.1%} of in-process AsyncEngine "
                  f"({overhead:+.1%} lost; target within 10%)")
    if proxied is not None:
        direct, hop = proxied
        d, h = direct.ttfts(), hop.ttfts()
        print(f"proxy hop: throughput {hop.output_throughput / direct.output_throughput:.1%} of direct; "
              f"TTFT p50 {1000 * (percentile(h, 50) - percentile(d, 50)):+.1f} ms, "
              f"p99 {1000 * (percentile(h, 99) - percentile(d, 99)):+.1f} ms")
    if plot:
        plot_distributions(summaries, plot)


def _long_prompt(base: list[str], tokens: int, seed: int) -> str:
    """About `tokens` tokens of text-to-SQL prompts (4 characters a token), shuffled by `seed` so each long
    prompt is new to a prefix cache, ending in a question to answer."""
    import random

    rng = random.Random(seed)
    parts, size = [f"Request {seed}:"], 0
    while size < tokens * 4:
        part = rng.choice(base)
        parts.append(part)
        size += len(part)
    return "\n\n".join(parts)[: tokens * 4]


def plot_distributions(summaries, path: Path) -> None:
    """TTFT and TPOT distributions of each target, side by side, as one PNG."""
    from benchmarks.harness import pyplot, save_figure

    plt = pyplot()
    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    for s in summaries:
        for ax, values in ((ax_ttft, s.ttfts()), (ax_tpot, s.tpots())):
            if values:
                ax.hist([v * 1000 for v in values], bins=30, alpha=0.5, label=s.name)
    ax_ttft.set(title="Time to first token", xlabel="ms", ylabel="requests")
    ax_tpot.set(title="Time per output token", xlabel="ms", ylabel="requests")
    for ax in (ax_ttft, ax_tpot):
        ax.legend()
    save_figure(fig, path, dpi=110)


def _print_ratios(summaries, peer) -> None:
    """Each of our runs against llama.cpp's, measured in this same process on this same machine."""
    from benchmarks.harness import percentile

    p_ttft, p_tpot = peer.ttfts(), peer.tpots()
    for s in summaries:
        if s is peer or not s.completed:
            continue
        print(f"{s.name} / {peer.name}: throughput {s.output_throughput / peer.output_throughput:.2f}x, "
              f"TTFT p50 {percentile(s.ttfts(), 50) / percentile(p_ttft, 50):.2f}x, "
              f"TTFT p99 {percentile(s.ttfts(), 99) / percentile(p_ttft, 99):.2f}x, "
              f"TPOT p50 {percentile(s.tpots(), 50) / percentile(p_tpot, 50):.2f}x (lower is better for times)")


def _served_name(base_url: str) -> str:
    import httpx

    return httpx.get(f"{base_url.rstrip('/')}/models", timeout=10).json()["data"][0]["id"]


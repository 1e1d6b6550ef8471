"""`sllm bench offline`: the seed chapter's experiment. The text-to-SQL prompt set through HF
transformers' static batching (`generate` with left padding) and through our engine, in one process,
printing wall time, output tokens/s and their ratio; plus the KV memory our paged cache holds against a
contiguous prompt + max_tokens reservation per sequence."""

import contextlib
import gc
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import typer


@dataclass
class Row:
    system: str
    batch: int
    prompts: int
    output_tokens: int
    seconds: float
    peak_kv_mib: float | None = None
    reserved_kv_mib: float | None = None
    extra: str = ""

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.seconds


def _prompts(chat: bool, tokenizer, limit: int | None) -> list[str]:
    from integrations.text2sql.dataset import chat_messages, load_eval, load_prompts

    if not chat:
        return load_prompts(limit)
    items = load_eval()[:limit] if limit else load_eval()
    return [tokenizer.apply_chat_template(chat_messages(it), tokenize=False,
                                          add_generation_prompt=True) for it in items]


def run_hf(folder: Path, prompts: list[str], batch: int, max_tokens: int, dtype: str = "float32") -> Row:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder), padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype)).eval()
    eos = model.config.eos_token_id
    produced = 0
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i : i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        for row in out[:, enc["input_ids"].shape[1] :].tolist():
            # Useful tokens: up to and including the first EOS; the rest is static batching's padding.
            produced += next((k + 1 for k, t in enumerate(row) if t == eos), len(row))
    return Row("hf", batch, len(prompts), produced, time.perf_counter() - t0)


def run_engine(llm, prompts: list[str], max_num_seqs: int, max_tokens: int, system: str = "sllm") -> Row:
    from engine import SamplingParams

    engine = llm.engine
    engine.config.max_num_seqs = max_num_seqs
    engine.block_manager.reset_prefix_cache()  # every row starts cold, whatever ran before it
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    bytes_per_block = engine.runner.bytes_per_block
    bytes_per_token = bytes_per_block / engine.config.block_size
    peak_used = peak_reserved = 0.0
    produced = 0
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"bench-{max_num_seqs}-{i}", p, params)
    while engine.has_unfinished_requests():
        outs = engine.step()
        bm = engine.block_manager
        used = (bm.num_blocks - bm.num_free_blocks) * bytes_per_block
        reserved = sum(s.num_prompt_tokens + max_tokens for s in engine.scheduler.running) * bytes_per_token
        peak_used, peak_reserved = max(peak_used, used), max(peak_reserved, reserved)
        produced += sum(len(o.outputs[0].delta_token_ids) for o in outs)
    seconds = time.perf_counter() - t0
    engine.block_manager.check_no_leak()
    extra = ""
    spec = engine.spec_stats
    if spec:
        extra = f"acceptance {spec.get('acceptance_rate', 0):.2f}"
    return Row(system, max_num_seqs, len(prompts), produced, seconds, peak_used / 2**20, peak_reserved / 2**20, extra)


def _activations(int8: bool):
    """int8 activations for one run (kernels/quantized.py's switch), or the process's setting as it is."""
    if not int8:
        return contextlib.nullcontext()
    from kernels.quantized import int8_activations

    return int8_activations()


def _print(rows: list[Row], title: str) -> None:
    from benchmarks.harness import format_table

    head = ["system", "batch", "prompts", "tokens", "seconds", "tok/s", "KV peak MiB", "reserved MiB", ""]
    body = [[r.system, r.batch, r.prompts, r.output_tokens, f"{r.seconds:.1f}", f"{r.tok_s:.1f}",
             "" if r.peak_kv_mib is None else f"{r.peak_kv_mib:.1f}",
             "" if r.reserved_kv_mib is None else f"{r.reserved_kv_mib:.1f}", r.extra] for r in rows]
    print(f"\n## {title}")
    print(format_table(head, body, align="lrrrrrrrl"))


def _ratios(rows: list[Row]) -> dict[str, float]:
    """Each of our engines (one per weight mode, and with speculation) against HF, best against best and
    at batch 1; speculation against the same mode without it."""
    hf = [r for r in rows if r.system == "hf"]
    out: dict[str, float] = {}
    systems = dict.fromkeys(r.system for r in rows if r.system != "hf")
    for system in systems:
        ours = [r for r in rows if r.system == system]
        if hf:
            out[f"{system}_vs_hf_best"] = max(r.tok_s for r in ours) / max(r.tok_s for r in hf)
            hf1 = [r for r in hf if r.batch == 1]
            ours1 = [r for r in ours if r.batch == 1]
            if hf1 and ours1:
                out[f"{system}_vs_hf_batch1"] = ours1[0].tok_s / hf1[0].tok_s
        if system.endswith("+spec"):
            plain = {r.batch: r.tok_s for r in rows if r.system == system.removesuffix("+spec")}
            for r in ours:
                if r.batch in plain:
                    out[f"{system}_vs_plain@{r.batch}"] = r.tok_s / plain[r.batch]
    return out


def matmul_flops_per_token(weights: dict) -> float:
    """2 x the weights a token meets in matrix products (the model's 2-D weights but the embedding table:
    projections, MLP, LM head): what the issue's ~270 MFLOP a token for SmolLM2-135M counts. Attention over
    the context is left out (a few % at these lengths)."""
    return 2.0 * sum(w.shape[0] * w.shape[1] for name, w in weights.items()
                     if name != "embed" and len(w.shape) == 2)


def peak_gflops() -> tuple[float, str]:
    """The float32 FMA peak of the cores torch uses on the kernel path taken now: 2 FMA units of 8
    (AVX2) or 16 (AVX-512) lanes each per cycle, at the clock /proc/cpuinfo reports (a VM's nominal one).
    AMD's Zen 4 and earlier (family 25 and below) run a 512-bit FMA as two halves on 256-bit units: 8 lanes."""
    import torch

    from kernels.cpu.isa import current

    info = Path("/proc/cpuinfo").read_text().splitlines()

    def field(name: str) -> str:
        return next((line.split(":", 1)[1].strip() for line in info if line.split(":")[0].strip() == name), "")

    mhz = float(field("cpu MHz") or 0.0)
    lanes = {"avx512": 16, "avx2": 8}.get(current(), 1)
    if field("vendor_id") == "AuthenticAMD" and int(field("cpu family") or 0) <= 25:
        lanes = min(lanes, 8)
    cores = torch.get_num_threads()
    return cores * mhz / 1e3 * 2 * 2 * lanes, f"{cores} cores x {mhz / 1e3:.2f} GHz x 2 FMA x {lanes} lanes"


def _print_efficiency(rows: list[Row], flops_per_token: float) -> None:
    peak, how = peak_gflops()
    for system in dict.fromkeys(r.system for r in rows if r.system != "hf"):
        best = max((r for r in rows if r.system == system), key=lambda r: r.tok_s)
        gflops = best.tok_s * flops_per_token / 1e9
        print(f"{system} at max_num_seqs {best.batch}: {gflops:.1f} GFLOP/s ({flops_per_token / 1e6:.0f} MFLOP a "
              f"token), {gflops / peak:.0%} of the path's float32 peak {peak:.0f} GFLOP/s ({how})")


def _plot(results: dict[str, list[Row]], path: Path) -> None:
    from benchmarks.harness import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (title, rows) in zip(axes[0], results.items(), strict=True):
        for system in dict.fromkeys(r.system for r in rows):
            pts = sorted((r.batch, r.tok_s) for r in rows if r.system == system)
            label = "HF transformers (static)" if system == "hf" else f"{system} (continuous)"
            style = "o--" if system == "hf" else "^-" if system.endswith("+spec") else "s-"
            ax.plot(*zip(*pts, strict=True), style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size / max_num_seqs")
        ax.set_ylabel("output tokens/s")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    save_figure(fig, path)


def bench_offline(
    model: str = typer.Option("default", help="Model for both systems"),
    hf_batch_sizes: str = typer.Option("1,8,32", help="HF static batch sizes"),
    max_num_seqs: str = typer.Option("1,16,64,128", help="Our engine's max_num_seqs values"),
    max_tokens: int = typer.Option(128),
    limit: int | None = typer.Option(None, help="Prompts for the batched runs (default: all)"),
    batch1_limit: int = typer.Option(8, help="Prompts for batch-1 runs (they are slow on both sides)"),
    variants: str = typer.Option("raw,chat", help="raw prompts, chat-template prompts, or both"),
    speculative: str | None = typer.Option(
        None, "--speculative", help="speculative_config JSON: our engine also runs with it, beside the plain engine"
    ),
    plot: Path | None = typer.Option(None, "--plot", help="Write tokens/s against batch size as a PNG"),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the rows as JSON"),
    dtype: str = typer.Option("float32", "--dtype", help="Weights and KV cache dtype for both systems: float32 or "
                              "bfloat16 (AMX / AVX512-BF16 CPUs run bf16 matmuls several times faster)"),
    quantization: str = typer.Option(
        "auto,none", "--quantization",
        help="Our engine's weight modes, comma-separated, one column each (auto: a GGUF's blocks stay quantized "
             "on the CPU; none: dequantized, the HF-exact reference)"),
    int8_activations: bool = typer.Option(
        False, "--int8-activations",
        help="Also run the first mode's engine with int8 activations (`--activations int8`), a column of its own"),
):
    """HF static batching versus our continuous batching on the text-to-SQL prompt set."""
    from benchmarks.harness import machine_header, pyplot
    from engine import LLM

    if dtype not in ("float32", "bfloat16"):
        raise typer.BadParameter("--dtype must be float32 or bfloat16")
    if plot:
        pyplot()  # a missing matplotlib stops the run now, not after it
    print(machine_header())
    modes = [m.strip() for m in quantization.split(",") if m.strip()]
    engines = {f"sllm[{m}]": LLM(model=model, dtype=dtype, quantization=m) for m in modes}
    if speculative:  # over the first mode's weights, so speculation is compared with no speculation in one run
        engines[f"sllm[{modes[0]}]+spec"] = LLM(model=model, dtype=dtype, quantization=modes[0],
                                                 speculative_config=json.loads(speculative))
    llm = next(iter(engines.values()))
    if int8_activations:  # the same engine: the setting is the kernels' (process-wide), switched per run below
        engines[f"sllm[{modes[0]}]+int8"] = llm
    from engine.loader import resolve_model

    folder = resolve_model(model)  # HF reads a folder: a GGUF file's is converted once into the cache
    results: dict[str, list[Row]] = {}
    for variant in [v.strip() for v in variants.split(",") if v.strip()]:
        prompts = _prompts(variant == "chat", llm.tokenizer, limit)
        rows: list[Row] = []
        for b in [int(x) for x in hf_batch_sizes.split(",") if x]:
            rows.append(run_hf(folder, prompts[:batch1_limit] if b == 1 else prompts, b, max_tokens, dtype))
            gc.collect()
            _print(rows[-1:], f"{variant}: HF batch {b}")
        for n in [int(x) for x in max_num_seqs.split(",") if x]:
            subset = prompts[:batch1_limit] if n == 1 else prompts
            for system, engine_llm in engines.items():
                with _activations(system.endswith("+int8")):
                    rows.append(run_engine(engine_llm, subset, n, max_tokens, system))
                _print(rows[-1:], f"{variant}: {system} max_num_seqs {n}")
        title = f"{variant} prompts, max_tokens={max_tokens}, greedy, {dtype}"
        _print(rows, title)
        r = _ratios(rows)
        if r:
            print("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in r.items()))
        _print_efficiency(rows, matmul_flops_per_token(llm.engine.runner.model.weights))
        results[title] = rows
    if plot:
        _plot(results, plot)
    if json_out:
        json_out.write_text(json.dumps({k: [asdict(r) | {"tok_s": r.tok_s} for r in v] for k, v in results.items()},
                                       indent=2))

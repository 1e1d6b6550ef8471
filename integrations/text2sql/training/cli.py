"""``sllm text2sql eval`` and ``sllm text2sql train``: the kit's commands, added to the run-time ``sllm text2sql``
group (:mod:`integrations.text2sql.cli`) when this module is imported; ``engine.cli`` imports it when present."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from integrations.text2sql import cli as runtime
from integrations.text2sql.cli import ADAPTER_OPT, TEMPERATURE_OPT, THREADS_OPT, app

__all__ = ["app"]


@app.command("eval")
def eval_cmd(
    limit: int | None = typer.Option(None, help="Only the first N questions (the file mixes schemas and languages)"),
    modes: str | None = typer.Option(None, help="Comma-separated of unconstrained, constrained, adapter, "
                                                "adapter+select, adapter+doubt (default: all that apply)"),
    model: str = typer.Option("default", envvar="SLLM_MODEL"),
    max_tokens: int = typer.Option(192),
    max_num_seqs: int = typer.Option(128),
    num_threads: int | None = THREADS_OPT,
    latency_samples: int = typer.Option(5, help="Single asks timed per mode for the p50 latency (0: skip)"),
    json_out: Path | None = typer.Option(None, "--json-out", help="Write the per-question records here"),
    text2sql_adapter: str = ADAPTER_OPT,
    candidates: int = typer.Option(5, "--candidates", "-k", min=1, max=16,
                                   help="Candidates of adapter+select and adapter+doubt"),
    temperature: float = TEMPERATURE_OPT,
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of adapter+select's sampled candidates (request n of "
                                                       "the batch samples with seed + n), so a run repeats"),
    generated: int = typer.Option(0, "--generated", min=0,
                                  help="Instead of the shipped set: N fresh schemas of the training data's generator "
                                       "(12 questions each), to compare with (0: the shipped set)"),
    generated_seed: int = typer.Option(1000, "--generated-seed", help="Seed of the --generated schemas"),
):
    """Valid-SQL rate and execution accuracy per decoding mode (base model, adapter, adapter + selection)."""
    import tempfile

    from integrations.text2sql.dataset import load_eval
    from integrations.text2sql.training.evaluate import evaluate
    from integrations.text2sql.training.train_data import held_out

    sources = None
    if generated:
        tmp = tempfile.TemporaryDirectory(prefix="sllm-held-out-")
        items, sources = held_out(generated, 12, generated_seed, Path(tmp.name))
    else:
        items = load_eval()
    if limit is not None:
        items = items[:limit]
    adapter = runtime._adapter(text2sql_adapter, model)
    default_modes = "unconstrained,constrained" + (",adapter,adapter+select,adapter+doubt" if adapter else "")
    mode_list = [m.strip() for m in (modes or default_modes).split(",") if m.strip()]
    start = time.perf_counter()
    llm = runtime._load_llm(model, max_num_seqs, num_threads,
                            adapter if any(m.startswith("adapter") for m in mode_list) else None)
    load_s = time.perf_counter() - start
    gen, _ = runtime._generators(llm, None, max_tokens, temperature)
    with_adapter, sampler = (runtime._generators(llm, adapter, max_tokens, temperature, seed) if adapter
                             else (None, None))
    try:
        report = evaluate(gen, items, mode_list, latency_samples=latency_samples,
                          progress=lambda m: typer.echo(m, err=True), adapter=with_adapter, sampler=sampler,
                          k=candidates, sources=sources)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(f"model {model}: {len(items)} questions, model load {load_s:.1f} s, eval {report.total_s:.1f} s")
    typer.echo(report.table())
    if json_out is not None:
        json_out.write_text(json.dumps(report.to_dict(), ensure_ascii=False, indent=2), encoding="utf-8")
        typer.echo(f"records written to {json_out}")
    sys.stdout.flush()


@app.command()
def train(
    out: Path = typer.Argument(...,
                               help="Folder for the PEFT adapter (adapter_config.json + adapter_model.safetensors)"),
    data: Path | None = typer.Option(None, help="Examples written by `python -m "
                                               "integrations.text2sql.training.train_data` (.jsonl or .jsonl.gz); "
                                               "generated on the fly when not given"),
    schemas: int = typer.Option(240, help="Generated schemas (without --data)"),
    per_schema: int = typer.Option(40, help="Questions per generated schema (without --data)"),
    base: str = typer.Option("default", help="HF Llama folder, or 'default' (the embedded model's GGUF, dequantized)"),
    rank: int = typer.Option(8, min=1, max=64),
    alpha: int = typer.Option(16, min=1),
    lr: float = typer.Option(5e-4),
    epochs: float = typer.Option(1.0, min=0.01),
    batch_size: int = typer.Option(8, min=1),
    max_steps: int | None = typer.Option(None, min=1, help="Stop after this many steps (overrides --epochs)"),
    max_minutes: float | None = typer.Option(None, min=0.01,
                                             help="Train for this long (a GPU lease): the learning-rate schedule "
                                                  "follows the elapsed share of it; --max-steps then only caps"),
    max_len: int = typer.Option(1024, help="Drop packed sequences longer than this many tokens"),
    warmup: float = typer.Option(0.05, min=0.0, max=0.5,
                                 help="Fraction of the steps spent warming up the learning rate"),
    save_every: int = typer.Option(0, min=0,
                                   help="Also write the adapter to OUT/step-N every N steps (0: only at the end)"),
    save_every_minutes: float = typer.Option(0.0, min=0.0, help="Also write OUT/step-N every so many minutes"),
    pack: int = typer.Option(8, min=1, help="Questions of one schema packed into one training sequence"),
    layers: int = typer.Option(12, min=0, help="LoRA on the last N decoder layers (0: all)"),
    seed: int = typer.Option(0),
    device: str = typer.Option("auto", help="auto (cuda when available, else cpu), cpu or cuda"),
    init: Path | None = typer.Option(None, help="Continue training this PEFT adapter folder (its rank, alpha, "
                                               "layers and target modules replace the options above)"),
    extend_layers: bool = typer.Option(False, "--extend-layers",
                                       help="With --init: LoRA also on the --layers the adapter lacks (from zero)"),
    precision: str = typer.Option("auto", help="auto (bfloat16 autocast on CUDA, float32 on the CPU), fp32 or bf16 "
                                               "(bf16 on a CPU is faster on some, slower on others: time a few "
                                               "--max-steps first)"),
    plot: bool = typer.Option(True, "--plot/--no-plot", help="Write loss.png beside the adapter (needs matplotlib)"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="tqdm progress bar"),
):
    """LoRA-train a text-to-SQL adapter on generated schemas disjoint from the eval set."""
    from integrations.text2sql.training import train_data
    from integrations.text2sql.training.train import PRECISIONS, TrainConfig, pack_examples, plot_losses
    from integrations.text2sql.training.train import train as train_fn

    if precision not in PRECISIONS:
        raise typer.BadParameter("auto, fp32 or bf16", param_hint="--precision")
    if extend_layers and init is None:
        raise typer.BadParameter("needs --init (the adapter to extend)", param_hint="--extend-layers")
    if data is not None:
        examples = train_data.read(data)
    else:
        typer.echo(f"generating {schemas} schemas x {per_schema} questions", err=True)
        examples = train_data.generate(schemas, per_schema, seed)
    train_data.check_disjoint(examples)
    cfg = TrainConfig(base=base, rank=rank, alpha=alpha, lr=lr, epochs=epochs, batch_size=batch_size,
                      max_steps=max_steps, max_minutes=max_minutes, save_every_minutes=save_every_minutes,
                      max_len=max_len, seed=seed, device=device, pack=pack, layers=layers or None,
                      warmup=warmup, save_every=save_every, init=str(init) if init else None,
                      extend_layers=extend_layers, precision=precision,
                      value_hints=any(ex.hints for ex in examples))
    result = train_fn(pack_examples(examples, pack), out, cfg, show_bar=progress)
    if result.too_long:
        typer.echo(f"warning: {result.too_long} packed sequences were longer than --max-len {max_len} and left out "
                   f"(a smaller --pack or a larger --max-len keeps them)", err=True)
    tail = result.losses[-20:]
    typer.echo(f"{result.steps} steps over {result.sequences} packed sequences on {result.device} in "
               f"{result.seconds:.0f} s; "
               f"final loss {sum(tail) / len(tail):.3f}; adapter in {out}")
    if plot and plot_losses(result.losses, out / "loss.png"):
        typer.echo(f"loss plot: {out / 'loss.png'}")

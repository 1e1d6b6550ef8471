"""``sllm text2sql``: ask a database questions, manage named sources, run the evaluation.

Registered on the ``sllm`` command by ``engine.cli`` (it imports ``app`` from here when present).
Named sources for the CLI live in a JSON file readable by its owner only
(``$SLLM_TEXT2SQL_SOURCES`` or ``~/.config/sllm/text2sql-sources.json``); the gateway keeps its
own in its database.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from integrations.text2sql.errors import Text2SQLError

app = typer.Typer(help="Text-to-SQL: questions in, rows out, read-only and grammar-constrained",
                  no_args_is_help=True)
sources_app = typer.Typer(help="Named data sources for `ask --source NAME`", no_args_is_help=True)
app.add_typer(sources_app, name="sources")


def _fail(exc: Text2SQLError) -> None:
    typer.echo(f"error [{exc.code}]: {exc.message}", err=True)
    raise typer.Exit(2)


def _registry():
    from integrations.text2sql.registry import JsonFileSourceStore, SourceRegistry, default_sources_path

    return SourceRegistry(JsonFileSourceStore(default_sources_path()))


def _pick_source(source: str | None, url: str | None, demo: str | None):
    from integrations.text2sql.sources import Source, demo_source

    given = [x for x in (source, url, demo) if x]
    if len(given) != 1:
        raise typer.BadParameter("give exactly one of --source NAME, --url URL or --demo SCHEMA")
    if demo:
        return demo_source(demo)
    if url:
        return Source("cli", url)
    return _registry().get(source)  # type: ignore[arg-type]


def _load_llm(model: str, max_num_seqs: int = 128, num_threads: int | None = None, adapter: Path | None = None):
    from engine import LLM
    from integrations.text2sql.adapter import LORA_NAME

    if adapter is None:
        return LLM(model=model, max_num_seqs=max_num_seqs, num_threads=num_threads)
    rank = int(json.loads((adapter / "adapter_config.json").read_text()).get("r", 8))
    return LLM(model=model, max_num_seqs=max_num_seqs, num_threads=num_threads, enable_lora=True,
               max_lora_rank=rank, lora_modules={LORA_NAME: str(adapter)})


def _adapter(value: str, model: str) -> Path | None:
    from integrations.text2sql.adapter import resolve_adapter

    try:
        return resolve_adapter(value, model)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--text2sql-adapter") from None


def _generators(llm, adapter: Path | None, max_tokens: int, temperature: float, seed: int | None = None):
    """(greedy, sampling) generators, through the adapter when there is one; ``seed`` seeds the sampler's
    batches (request n of a batch: ``seed + n``)."""
    from integrations.text2sql.adapter import LORA_NAME, adapter_style
    from integrations.text2sql.generate import SQLGenerator, llm_complete, llm_complete_batch

    lora = LORA_NAME if adapter else None
    style = adapter_style(adapter).generator_kwargs()
    greedy = SQLGenerator(llm_complete(llm, max_tokens=max_tokens, lora=lora),
                          complete_batch=llm_complete_batch(llm, max_tokens=max_tokens, lora=lora), **style)
    sampler = SQLGenerator(llm_complete(llm, max_tokens=max_tokens, temperature=temperature, lora=lora),
                           complete_batch=llm_complete_batch(llm, max_tokens=max_tokens, temperature=temperature,
                                                             lora=lora, seed=seed), **style)
    return greedy, sampler


THREADS_OPT = typer.Option(None, "--num-threads", help="torch CPU threads (1 is faster on a busy shared CPU)")
ADAPTER_OPT = typer.Option("default", "--text2sql-adapter", envvar="SLLM_TEXT2SQL_ADAPTER",
                           help="LoRA adapter for text-to-SQL: 'default' (the shipped one, on the default model "
                                "only), a PEFT folder, or 'none'")
CANDIDATES_OPT = typer.Option(1, "--candidates", "-k", min=1, max=16,
                              help="Execution-guided selection: sample K candidates, run each, keep the majority "
                                   "result (1: off)")
SAMPLE_WHEN_OPT = typer.Option("always", "--sample-when",
                               help="Selection: sample for every question ('always'), or only when the greedy "
                                    "answer did not run, holds no data or is implausible ('doubt')")
TEMPERATURE_OPT = typer.Option(0.7, "--temperature", min=0.0, help="Sampling temperature of the extra candidates")


SOURCE_OPT = typer.Option(None, "--source", "-s", help="A registered source name")
URL_OPT = typer.Option(None, "--url", help="A SQLAlchemy URL, e.g. sqlite:///shop.db")
DEMO_OPT = typer.Option(None, "--demo", help="A shipped demo schema: delivery, hr, library, school, shop")


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question, in any language the model reads"),
    source: str | None = SOURCE_OPT,
    url: str | None = URL_OPT,
    demo: str | None = DEMO_OPT,
    execute: bool = typer.Option(True, "--execute/--no-execute", help="Run the query (else only EXPLAIN it)"),
    max_rows: int = typer.Option(100, min=0, help="Row cap"),
    timeout: float = typer.Option(5.0, help="Query time limit in seconds"),
    unconstrained: bool = typer.Option(False, "--unconstrained", help="Free decoding (no SQL grammar)"),
    model: str = typer.Option("default", envvar="SLLM_MODEL"),
    max_tokens: int = typer.Option(192),
    num_threads: int | None = THREADS_OPT,
    text2sql_adapter: str = ADAPTER_OPT,
    candidates: int = CANDIDATES_OPT,
    sample_when: str = SAMPLE_WHEN_OPT,
    temperature: float = TEMPERATURE_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON"),
):
    """Generate SQL for QUESTION, validate it, and run it read-only."""
    from integrations.text2sql.ask import ask as ask_fn
    from integrations.text2sql.selection import SAMPLE_WHEN, ask_selected

    if sample_when not in SAMPLE_WHEN:
        raise typer.BadParameter(f"one of {', '.join(SAMPLE_WHEN)}", param_hint="--sample-when")
    adapter = _adapter(text2sql_adapter, model)
    try:
        src = _pick_source(source, url, demo)
        src.schema()  # fail on a broken source before loading the model
        llm = _load_llm(model, num_threads=num_threads, adapter=adapter)
        gen, sampler = _generators(llm, adapter, max_tokens, temperature)
        if candidates > 1:
            res = ask_selected(src, question, gen, sampler, candidates, constrained=not unconstrained,
                               execute=execute, max_rows=max_rows, timeout_s=timeout, when=sample_when)
        else:
            res = ask_fn(src, question, gen, constrained=not unconstrained, execute=execute,
                         max_rows=max_rows, timeout_s=timeout)
    except Text2SQLError as exc:
        _fail(exc)
        return
    if as_json:
        typer.echo(json.dumps(res.to_dict(), ensure_ascii=False, indent=2))
    else:
        _print_result(res)
    if not res.ok:
        raise typer.Exit(1)


def _print_result(res) -> None:
    from integrations.text2sql.execute import jsonable

    typer.echo(f"SQL: {res.sql}")
    if res.error:
        typer.echo(f"error [{res.error.code}]: {res.error.message}")
    elif res.executed:
        typer.echo("\t".join(res.columns))
        for row in res.rows:
            typer.echo("\t".join("NULL" if v is None else str(jsonable(v)) for v in row))
        more = " (truncated)" if res.result.truncated else ""
        typer.echo(f"({len(res.rows)} rows{more})")
    elif res.result:
        typer.echo("plan: " + "; ".join(res.result.plan))
    t = res.timings
    typer.echo("timings: " + ", ".join(f"{k}={v:.0f}" for k, v in t.items()))


@app.command("sql")
def run_sql_cmd(
    sql: str = typer.Argument(..., help="A SELECT statement"),
    source: str | None = SOURCE_OPT,
    url: str | None = URL_OPT,
    demo: str | None = DEMO_OPT,
    execute: bool = typer.Option(True, "--execute/--no-execute"),
    max_rows: int = typer.Option(100, min=0),
    timeout: float = typer.Option(5.0),
    as_json: bool = typer.Option(False, "--json"),
):
    """Validate and run SQL you wrote (the same safety checks as generated SQL)."""
    from integrations.text2sql.ask import run_sql

    try:
        res = run_sql(_pick_source(source, url, demo), sql, execute=execute, max_rows=max_rows, timeout_s=timeout)
    except Text2SQLError as exc:
        _fail(exc)
        return
    if as_json:
        typer.echo(json.dumps(res.to_dict(), ensure_ascii=False, indent=2))
    else:
        _print_result(res)
    if not res.ok:
        raise typer.Exit(1)


@app.command()
def schema(
    source: str | None = SOURCE_OPT,
    url: str | None = URL_OPT,
    demo: str | None = DEMO_OPT,
    grammar: bool = typer.Option(False, "--grammar", help="Print the SQL grammar (EBNF) instead of the DDL"),
):
    """Print a source's DDL as the prompt shows it (or its decoding grammar)."""
    try:
        src = _pick_source(source, url, demo)
        typer.echo(src.grammar() if grammar else src.ddl())
    except Text2SQLError as exc:
        _fail(exc)


@sources_app.command("add")
def sources_add(
    name: str,
    url: str,
    description: str = typer.Option("", "--description", "-d"),
    replace: bool = typer.Option(False, "--replace", help="Overwrite an existing source of that name"),
):
    """Register NAME for URL (checked by introspecting it first)."""
    try:
        src = _registry().register(name, url, description, replace=replace)
    except Text2SQLError as exc:
        _fail(exc)
        return
    typer.echo(f"added {src.name}: {src.redacted_url()} ({len(src.schema().tables)} tables)")


@sources_app.command("list")
def sources_list():
    """List registered sources (passwords redacted)."""
    reg = _registry()
    for name in reg.store.names():
        src = reg.get(name)
        typer.echo(f"{src.name}\t{src.redacted_url()}\t{src.description}")


@sources_app.command("remove")
def sources_remove(name: str):
    """Forget a registered source."""
    try:
        _registry().unregister(name)
    except Text2SQLError as exc:
        _fail(exc)


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
    from integrations.text2sql.evaluate import evaluate
    from integrations.text2sql.train_data import held_out

    sources = None
    if generated:
        tmp = tempfile.TemporaryDirectory(prefix="sllm-held-out-")
        items, sources = held_out(generated, 12, generated_seed, Path(tmp.name))
    else:
        items = load_eval()
    if limit is not None:
        items = items[:limit]
    adapter = _adapter(text2sql_adapter, model)
    default_modes = "unconstrained,constrained" + (",adapter,adapter+select,adapter+doubt" if adapter else "")
    mode_list = [m.strip() for m in (modes or default_modes).split(",") if m.strip()]
    start = time.perf_counter()
    llm = _load_llm(model, max_num_seqs, num_threads, adapter if any(m.startswith("adapter") for m in mode_list)
                    else None)
    load_s = time.perf_counter() - start
    gen, _ = _generators(llm, None, max_tokens, temperature)
    with_adapter, sampler = _generators(llm, adapter, max_tokens, temperature, seed) if adapter else (None, None)
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
    data: Path | None = typer.Option(None, help="Examples written by `python -m integrations.text2sql.train_data` "
                                               "(.jsonl or .jsonl.gz); generated on the fly when not given"),
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
    from integrations.text2sql import train_data
    from integrations.text2sql.train import PRECISIONS, TrainConfig, pack_examples, plot_losses
    from integrations.text2sql.train import train as train_fn

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

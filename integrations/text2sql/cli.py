"""``sllm text2sql``: ask a database questions, run SQL, print a schema, manage named sources.

Registered on the ``sllm`` command by ``engine.cli``, with the training kit's ``eval`` and ``train`` added by
:mod:`integrations.text2sql.training.cli` (the run time never imports the kit).
Named sources for the CLI live in a JSON file readable by its owner only
(``$SLLM_TEXT2SQL_SOURCES`` or ``~/.config/sllm/text2sql-sources.json``); the gateway keeps its
own in its database.
"""

from __future__ import annotations

import json
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

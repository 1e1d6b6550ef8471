"""`sllm serve`: flags named as `vllm serve` names them, each also an SLLM_* environment variable.
Imports stay inside the function: every `sllm` command imports this module."""

import typer


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
    host: str = typer.Option("127.0.0.1", "--host", envvar="SLLM_HOST"),
    port: int = typer.Option(8000, "--port", envvar="SLLM_PORT"),
    api_key: list[str] = typer.Option(
        [], "--api-key", envvar="SLLM_API_KEY",
        help="Accepted bearer key; repeat for several (the variable takes them space-separated)",
    ),
    max_model_len: int | None = typer.Option(None, "--max-model-len", envvar="SLLM_MAX_MODEL_LEN"),
    max_num_seqs: int = typer.Option(128, "--max-num-seqs", envvar="SLLM_MAX_NUM_SEQS"),
    block_size: int = typer.Option(16, "--block-size", envvar="SLLM_BLOCK_SIZE"),
    num_kv_blocks: int | None = typer.Option(None, "--num-kv-blocks", envvar="SLLM_NUM_KV_BLOCKS"),
    dtype: str = typer.Option("auto", "--dtype", envvar="SLLM_DTYPE",
                              help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16 or float16"),
    quantization: str = typer.Option(
        "auto", "--quantization", "-q", envvar="SLLM_QUANTIZATION",
        help="auto (a GGUF model keeps its quantized blocks on the CPU), none (GGUF dequantized to "
             "float: the HF-exact reference), gguf (the file's blocks, required) or int8 (weight-only "
             "int8 in groups of 32, for float checkpoints; CPU, float32)"),
    max_queued_requests: int = typer.Option(
        256, "--max-queued-requests", envvar="SLLM_MAX_QUEUED_REQUESTS",
        help="Requests allowed to wait beyond --max-num-seqs; past it the server answers 429",
    ),
    max_request_body_bytes: int = typer.Option(8 * 1024 * 1024, "--max-request-body-bytes",
                                               envvar="SLLM_MAX_REQUEST_BODY_BYTES"),
    db: str | None = typer.Option(None, "--db", envvar="SLLM_DB", help="SQLite file or SQLAlchemy URL"),
    log_level: str = typer.Option("info", "--log-level", envvar="SLLM_LOG_LEVEL"),
    speculative_config: str | None = typer.Option(
        None, "--speculative-config", envvar="SLLM_SPECULATIVE_CONFIG",
        help='JSON, as vLLM: \'{"method": "ngram", "num_speculative_tokens": 4}\' or a draft model',
    ),
    guided_loop_repeats: int = typer.Option(
        3, "--guided-loop-repeats", envvar="SLLM_GUIDED_LOOP_REPEATS",
        help="Structured output: close a JSON string, array or object once a token cycle repeats this "
             "many times, so a looping small model still completes its JSON; 0 turns it off"),
    tool_call_bias: float | None = typer.Option(
        None, "--tool-call-bias", envvar="SLLM_TOOL_CALL_BIAS",
        help="tool_choice auto: logit bias toward opening a tool call at the first generated token; "
             "default 3 for models whose chat template does not render tools, 0 for those that do"),
    guided_budget_close: bool = typer.Option(
        True, "--guided-budget-close/--no-guided-budget-close", envvar="SLLM_GUIDED_BUDGET_CLOSE",
        help="Structured output and tool calls: when the tokens left before max_tokens are just enough, "
             "close the JSON (missing required keys get minimal values) so it parses"),
    priority_interactive: int = typer.Option(
        0, "--priority-interactive", envvar="SLLM_PRIORITY_INTERACTIVE",
        help="Engine priority of chat, completions and responses in the foreground (lower runs first)"),
    priority_background: int = typer.Option(5, "--priority-background", envvar="SLLM_PRIORITY_BACKGROUND",
                                            help="Engine priority of background responses"),
    priority_batch: int = typer.Option(10, "--priority-batch", envvar="SLLM_PRIORITY_BATCH",
                                       help="Engine priority of batch lines"),
    priority_schedule: int = typer.Option(5, "--priority-schedule", envvar="SLLM_PRIORITY_SCHEDULE",
                                          help="Engine priority of text-to-SQL schedule runs"),
    allow_client_priority: bool = typer.Option(
        False, "--allow-client-priority/--no-allow-client-priority", envvar="SLLM_ALLOW_CLIENT_PRIORITY",
        help="Let clients set `priority` in the body of chat, completions and responses (otherwise a 400)"),
    priority_aging_s: float = typer.Option(
        10.0, "--priority-aging-s", envvar="SLLM_PRIORITY_AGING_S",
        help="A waiting request's priority improves by 1 per this many seconds waited, so none starves; "
             "0: off"),
    job_concurrency: int = typer.Option(
        16, "--job-concurrency", envvar="SLLM_JOB_CONCURRENCY",
        help="Batch lines, background responses and schedule runs in the engine at once"),
    job_lease_s: float = typer.Option(
        15.0, "--job-lease-s", envvar="SLLM_JOB_LEASE_S",
        help="Replicas on one database: how long a claim on a batch line, background response or schedule "
             "run holds without its heartbeat; a dead replica's work is taken over after this"),
    job_scan_s: float = typer.Option(
        2.0, "--job-scan-s", envvar="SLLM_JOB_SCAN_S",
        help="How often the server looks for job work nobody holds (new, or a dead replica's)"),
    max_file_bytes: int = typer.Option(100 * 1024 * 1024, "--max-file-bytes", envvar="SLLM_MAX_FILE_BYTES",
                                       help="Largest file /v1/files accepts"),
    enable_lora: bool = typer.Option(
        False, "--enable-lora/--no-enable-lora", envvar="SLLM_ENABLE_LORA",
        help="Serve LoRA adapters (PEFT folders) on the embedded model; each adapter is a model name"),
    lora_modules: list[str] = typer.Option(
        [], "--lora-modules", envvar="SLLM_LORA_MODULES",
        help="NAME=PATH: a PEFT LoRA adapter served as model NAME on the first embedded model; repeat for "
             "several (implies --enable-lora)"),
    max_loras: int = typer.Option(4, "--max-loras", envvar="SLLM_MAX_LORAS",
                                  help="LoRA adapters resident at once (least recently used evicted when idle)"),
    max_lora_rank: int = typer.Option(64, "--max-lora-rank", envvar="SLLM_MAX_LORA_RANK",
                                      help="Largest LoRA rank accepted"),
    text2sql_adapter: str = typer.Option(
        "default", "--text2sql-adapter", envvar="SLLM_TEXT2SQL_ADAPTER",
        help="LoRA adapter /v1/text2sql asks through: 'default' (the shipped one, when the default model "
             "serves), a PEFT folder, or 'none'"),
    webhook_secret: str | None = typer.Option(
        None, "--webhook-secret", envvar="SLLM_WEBHOOK_SECRET",
        help="HMAC key webhooks are signed with (whsec_<base64> or plain text); webhooks are off without it"),
    webhook_allow_host: list[str] = typer.Option(
        [], "--webhook-allow-host", envvar="SLLM_WEBHOOK_ALLOW_HOSTS",
        help="Host a webhook may call: name, *.domain, IP or CIDR; repeat for several (the variable takes "
             "them space-separated)"),
):
    """Serve the OpenAI-compatible API (under /v1) on embedded engines and upstream servers."""
    import json
    import logging

    import uvicorn
    from click.core import ParameterSource
    from pydantic import ValidationError

    from gateway.app import create_app
    from gateway.config_file import ConfigError, cli_models, load_config
    from gateway.settings import Settings

    flags = dict(
        host=host, port=port, api_keys=list(api_key),
        max_model_len=max_model_len, max_num_seqs=max_num_seqs, block_size=block_size,
        num_kv_blocks=num_kv_blocks, dtype=dtype, quantization=quantization,
        max_queued_requests=max_queued_requests,
        max_request_body_bytes=max_request_body_bytes, log_level=log_level,
        speculative_config=json.loads(speculative_config) if speculative_config else None,
        guided_loop_repeats=guided_loop_repeats, tool_call_bias=tool_call_bias,
        guided_budget_close=guided_budget_close,
        priority_interactive=priority_interactive, priority_background=priority_background,
        priority_batch=priority_batch, priority_schedule=priority_schedule,
        allow_client_priority=allow_client_priority, priority_aging_s=priority_aging_s,
        job_concurrency=job_concurrency, job_lease_s=job_lease_s, job_scan_s=job_scan_s,
        enable_lora=enable_lora, lora_modules=list(lora_modules), max_loras=max_loras, max_lora_rank=max_lora_rank,
        text2sql_adapter=text2sql_adapter,
        max_file_bytes=max_file_bytes, webhook_secret=webhook_secret, webhook_allow_hosts=list(webhook_allow_host),
        db=db,
    )
    param_of = {"api_keys": "api_key", "webhook_allow_hosts": "webhook_allow_host"}

    def given(param: str) -> bool:
        return ctx.get_parameter_source(param) not in (ParameterSource.DEFAULT, None)

    try:
        values = load_config(config) if config else {}
        # A flag given on the command line (or by its variable) wins over the file; defaults do not.
        values |= {k: v for k, v in flags.items() if (given(param_of.get(k, k)) or k not in values) and v is not None}
        if model or served_model_name or upstream:
            models = list(model) or ([] if upstream else ["default"])
            if len(models) == 1 and not upstream:
                values |= {"model": models[0], "served_model_name": (served_model_name or [None])[0], "models": []}
            else:
                values["models"] = cli_models(models, list(served_model_name), list(upstream))
        settings = Settings(**values)
    except (ConfigError, ValidationError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Our access log replaces uvicorn's: one line per request with tokens and timings.
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level,
                access_log=False)


def create_key(
    name: str = typer.Argument(..., help="Who or what the key is for"),
    db: str | None = typer.Option(None, "--db", envvar="SLLM_DB", help="SQLite file or SQLAlchemy URL"),
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
                return await create_api_key(session, name)
        finally:
            await database.dispose()

    print(asyncio.run(run()))

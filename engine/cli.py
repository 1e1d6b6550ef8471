"""The `sllm` command: generate offline, serve the API, run benchmarks."""

import json
import sys
from pathlib import Path

import typer

app = typer.Typer(help="sllm: small-LLM serving for workflow automation", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks that print numbers (ratios against a peer run in the same process)")
app.add_typer(bench_app, name="bench")
keys_app = typer.Typer(help="API keys stored hashed in the server's database")
app.add_typer(keys_app, name="keys")


@app.command()
def generate(
    prompts: list[str] = typer.Argument(None, help="Prompts; or use --file"),
    file: Path | None = typer.Option(None, "--file", "-f",
                                     help="A text file (one prompt a line) or JSONL with 'prompt'"),
    model: str = typer.Option("default", envvar="SLLM_MODEL"),
    max_tokens: int = typer.Option(64),
    temperature: float = typer.Option(0.0),
    top_p: float = typer.Option(1.0),
    seed: int | None = typer.Option(None),
    chat: bool = typer.Option(False, help="Wrap each prompt as a user message in the chat template"),
    max_num_seqs: int | None = typer.Option(None, help="Default: EngineConfig's"),
    quantization: str | None = typer.Option(
        None, "--quantization", "-q", envvar="SLLM_QUANTIZATION",
        help="auto (the default), none (GGUF dequantized to float), gguf or int8 (weight-only, groups of 32)"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per prompt"),
):
    """Offline batch generation with continuous batching and a progress bar."""
    from engine import LLM, SamplingParams

    items = list(prompts or [])
    if file is not None:
        for line in file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            items.append(json.loads(line)["prompt"] if file.suffix == ".jsonl" else line)
    if not items:
        raise typer.BadParameter("give prompts as arguments or with --file")
    given = {"max_num_seqs": max_num_seqs, "quantization": quantization}
    llm = LLM(model=model, **{k: v for k, v in given.items() if v is not None})
    if chat:
        items = [llm.apply_chat_template([{"role": "user", "content": p}]) for p in items]
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed)
    for prompt, out in zip(items, llm.generate(items, params), strict=True):
        o = out.outputs[0]
        if as_json:
            print(json.dumps({"prompt": prompt, "text": o.text, "finish_reason": o.finish_reason,
                              "tokens": len(o.token_ids)}, ensure_ascii=False))
        else:
            print(f"--- {prompt!r}\n{o.text}")
    sys.stdout.flush()


def main() -> None:
    app()


def _register_optional_commands() -> None:
    """Commands whose code lives in other packages; each registers itself when it exists."""
    import importlib

    for module, attr, target, name in (
        ("gateway.cli", "serve", app, "serve"),
        ("gateway.cli", "create_key", keys_app, "create"),
        ("gateway.cli", "key_usage", keys_app, "usage"),
        ("gateway.cli", "revoke_key", keys_app, "revoke"),
        ("benchmarks.serve", "bench_serve", bench_app, "serve"),
        ("benchmarks.offline", "bench_offline", bench_app, "offline"),
        ("benchmarks.structured_output", "bench_json", bench_app, "json"),
        ("benchmarks.kernels", "bench_kernels", bench_app, "kernels"),
        ("benchmarks.lora", "bench_lora", bench_app, "lora"),
        ("benchmarks.embed", "bench_embed", bench_app, "embed"),
        ("benchmarks.agreement", "bench_agreement", bench_app, "agreement"),
        ("benchmarks.real_shapes", "make_gguf", bench_app, "make-gguf"),
    ):
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        target.command(name, context_settings=getattr(fn, "context_settings", None))(fn)
    # text2sql: the run-time group, with the training kit's eval and train added when the kit is there.
    for module in ("integrations.text2sql.training.cli", "integrations.text2sql.cli"):
        try:
            sub = importlib.import_module(module).app
        except (ImportError, AttributeError):
            continue
        app.add_typer(sub, name="text2sql")
        break


_register_optional_commands()

"""`sllm bench agreement`: how often int8 activations (`--activations int8`, llama.cpp's arithmetic) keep
the greedy tokens of the float path, and how often llama.cpp's server keeps them, on the same GGUF file.

Every prompt is tokenized once by our tokenizer and the same token ids go to all three, so only the
arithmetic differs. Greedy answers agree token for token until the first difference and are unrelated
after it, so the measure is the common prefix: the share of the answer's tokens before the first
difference (summed over prompts), and the answers equal whole. A random-weight file gives near-uniform
logits, where any rounding flips the argmax; read these numbers on a trained model (the default one)."""

from __future__ import annotations

from pathlib import Path

import typer


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def agreement(a: list[list[int]], b: list[list[int]]) -> tuple[int, int, int, int]:
    """(tokens before the first difference, tokens compared, answers equal whole, answers)."""
    same = sum(common_prefix(x, y) for x, y in zip(a, b, strict=True))
    total = sum(max(len(x), len(y)) for x, y in zip(a, b, strict=True))
    whole = sum(x == y for x, y in zip(a, b, strict=True))
    return same, total, whole, len(a)


def _ours(model: str, texts: list[str], max_tokens: int, activations: str) -> tuple[list[list[int]], list[list[int]]]:
    """(the prompts' token ids, the greedy answers); int8 stays switched on for the process once asked for."""
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams

    # One sequence at a time, as one stream of a server: batched, a step's row count picks the kernel (the
    # few-row loop or the tiled product), whose sums differ in rounding, so an answer would depend on the
    # prompts batched beside it.
    llm = LLM(model=model, activations=activations, max_num_seqs=1)
    prompts = [llm.tokenizer.encode(t) for t in texts]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    return prompts, [list(o.outputs[0].token_ids) for o in outs]


def _llama_cpp(binary: str, gguf: Path, prompts: list[list[int]], max_tokens: int) -> list[list[int]] | None:
    import httpx

    from benchmarks.targets import llama_cpp_server

    with llama_cpp_server(binary, gguf, 1) as target:
        if target is None:
            return None
        base = target.url.removesuffix("/v1")
        answers = []
        for ids in prompts:
            r = httpx.post(f"{base}/completion", timeout=None, json={
                "prompt": ids, "n_predict": max_tokens, "temperature": 0.0, "top_k": 1, "ignore_eos": True,
                "cache_prompt": False, "return_tokens": True, "samplers": ["top_k"]})
            r.raise_for_status()
            answers.append(list(r.json()["tokens"]))
        return answers


def bench_agreement(
    model: str = typer.Option("default", "--model", help="A .gguf file (or default)"),
    num_prompts: int = typer.Option(16, "--num-prompts"),
    max_tokens: int = typer.Option(32, "--max-tokens"),
    llama_server: str = typer.Option("llama-server", "--llama-server"),
):
    """Greedy agreement of int8 activations and of llama.cpp with our float path on the same file."""
    from benchmarks.harness import format_table, machine_header
    from engine.loader import gguf_source
    from integrations.text2sql.dataset import load_prompts

    gguf = gguf_source(model)
    if gguf is None:
        raise typer.BadParameter("needs a GGUF file (llama.cpp reads the same file)", param_hint="--model")
    texts = load_prompts()[:num_prompts]
    print(machine_header())
    print(f"{len(texts)} text-to-SQL prompts, {max_tokens} greedy tokens each; model {model}")
    prompts, float_tokens = _ours(model, texts, max_tokens, "float")
    _, int8_tokens = _ours(model, texts, max_tokens, "int8")  # the same ids: the tokenizer is the file's
    llama_tokens = _llama_cpp(llama_server, gguf, prompts, max_tokens)
    pairs = [("ours int8 / ours float", int8_tokens, float_tokens)]
    if llama_tokens is None:
        print(f"llama.cpp server ({llama_server}) is not installed: its rows are skipped")
    else:
        pairs += [("llama.cpp / ours float", llama_tokens, float_tokens),
                  ("ours int8 / llama.cpp", int8_tokens, llama_tokens)]
    rows = []
    for name, a, b in pairs:
        same, total, whole, n = agreement(a, b)
        rows.append([name, f"{same}/{total} ({same / total:.0%})", f"{whole}/{n}"])
    print(format_table(["pair", "tokens before the first difference", "answers equal whole"], rows, align="lrr",
                       rule=True))

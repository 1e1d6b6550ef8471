"""Greedy parity of the engine on a CUDA GPU (issue 20's "engine end to end on CUDA"), one table.

For tiny random checkpoints of every family the engine serves (built from a `transformers` config with
a fixed seed, so no weights travel to the GPU machine), our engine's greedy tokens on the GPU against
HF transformers' `generate` on the same GPU: float32 must be equal (mixed batch, chunked prefill,
prefix-cache hits, preemption), bfloat16 reports the share of prompts whose tokens agree (two bf16
implementations may round a near-tie apart). The sliding-window families (gemma3, mistral_window, gemma4:
a 13-token window, prompts of up to 80 tokens, 7-token chunks that start past it) run their local layers
through the Triton kernels' windows. `--model` adds a real folder (the default model).
The reference is the transformers installed where it runs: the GPU image's 5.17 recomputes a Phi-3
sequence that crosses its original context during generation otherwise than the 5.24 this project pins
(the same DIFFER appears on the CPU with 5.17 and not with 5.24), so Phi-3's prefix-hit row (whose
prompts cross it) reads DIFFER there.

    python3 -m benchmarks.cuda_parity --tokenizer-from DIR [--model FOLDER] [--device cuda]

`--device cpu` is the dry run on a machine without a GPU (the C++ kernels instead of Triton)."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from engine import LLM, SamplingParams

MAX_NEW = 10


def prompts_of(n: int, seed: int, lo: int, hi: int, vocab: int = 49152) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def hf_greedy(model, prompts: list[list[int]], device: str, max_new: int = MAX_NEW) -> list[list[int]]:
    answers = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device=device)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                 min_new_tokens=max_new, do_sample=False, eos_token_id=None, pad_token_id=0)
            answers.append(out[0, len(p):].tolist())
    return answers


def ours(llm: LLM, prompts: list[list[int]], max_new: int = MAX_NEW) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=max_new, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return [o.outputs[0].token_ids for o in outs]


def families(root: Path, tokenizer_from: Path, only: set[str] | None = None) -> dict[str, Path]:
    """The test suite's tiny checkpoints (tests/engine/test_model_families.py) plus two Llamas and a
    Qwen2 (those named in `only`, when given); a family this transformers lacks is left out with a line
    saying so."""
    from tests.engine.conftest import make_tiny_llama
    from tests.engine.test_model_families import FAMILIES, TINY, make_tiny

    makers = {
        "llama_gqa": lambda d: make_tiny_llama(d, tokenizer_from, kv_heads=2, seed=1),
        "llama_mha_tied": lambda d: make_tiny_llama(d, tokenizer_from, kv_heads=4, tied=True, seed=2),
    }
    for name, config in sorted({"qwen2": lambda: transformers.Qwen2Config(**TINY), **FAMILIES}.items()):
        makers[name] = lambda d, name=name, config=config: make_tiny(d, config(), tokenizer_from, seed=len(name))
    out = {}
    for name, make in makers.items():
        if only is not None and name not in only:
            continue
        try:
            out[name] = make(root / name)
        except Exception as exc:  # an older transformers on the GPU machine may lack a family
            print(f"{name}: skipped, transformers {transformers.__version__} cannot build it ({exc!r:.120})")
    return out


def check_family(name: str, folder: Path, device: str, vocab: int) -> list[str]:
    """One table row per check: name, check, result, seconds."""
    rows = []
    hf32 = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    mixed = prompts_of(5, seed=1, lo=3, hi=80, vocab=vocab)
    shared = prompts_of(1, seed=3, lo=40, hi=40, vocab=vocab)[0]
    prefixed = [shared + tail for tail in prompts_of(3, seed=4, lo=1, hi=9, vocab=vocab)]
    want_mixed, want_prefixed = hf_greedy(hf32, mixed, device), hf_greedy(hf32, prefixed, device)

    def row(check: str, got, want, t0: float) -> None:
        same = sum(g == w for g, w in zip(got, want, strict=True))
        verdict = "equal" if same == len(want) else f"DIFFER {same}/{len(want)}"
        rows.append(f"| {name} | {check} | {verdict} | {time.perf_counter() - t0:.1f} |")

    base = dict(model=str(folder), device=device, dtype="float32", block_size=8)
    t0 = time.perf_counter()
    row("fp32 mixed batch", ours(LLM(**base, num_kv_blocks=128), mixed), want_mixed, t0)
    t0 = time.perf_counter()
    row("fp32 chunked prefill (7 tokens)", ours(LLM(**base, num_kv_blocks=128, max_num_batched_tokens=7), mixed),
        want_mixed, t0)
    t0 = time.perf_counter()
    llm = LLM(**base, num_kv_blocks=128)
    got = ours(llm, prefixed[:1]) + ours(llm, prefixed[1:])
    row(f"fp32 prefix hits ({llm.engine.block_manager.prefix_hits} tokens)", got, want_prefixed, t0)
    t0 = time.perf_counter()
    # 5 prompts of up to 80+10 tokens in 8-token blocks need up to 60 blocks at once: 24 forces preemption.
    llm = LLM(**base, num_kv_blocks=24)
    got = ours(llm, mixed)
    row(f"fp32 24 blocks ({llm.engine.scheduler.num_preemptions} preemptions)", got, want_mixed, t0)
    del hf32
    if device == "cuda":
        hf16 = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(device).eval()
        t0 = time.perf_counter()
        got = ours(LLM(**{**base, "dtype": "bfloat16"}, num_kv_blocks=128), mixed)
        want = hf_greedy(hf16, mixed, device)
        same = sum(g == w for g, w in zip(got, want, strict=True))
        rows.append(f"| {name} | bf16 mixed batch (agreement, not required) | {same}/{len(want)} | "
                    f"{time.perf_counter() - t0:.1f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer-from", type=Path, required=True)
    parser.add_argument("--model", type=Path, action="append", default=[], help="a real HF folder to check too")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", default="", help="comma-separated family names (default: all)")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("cuda_parity: no CUDA device")
        print(f"GPU {torch.cuda.get_device_name()}  torch {torch.__version__}  "
              f"transformers {transformers.__version__}  cuda {torch.version.cuda}")
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        folders = families(Path(tmp), args.tokenizer_from, set(args.only.split(",")) if args.only else None)
        folders.update({f"model:{m.name}": m for m in args.model})
        for name, folder in folders.items():
            vocab = transformers.AutoConfig.from_pretrained(folder).get_text_config().vocab_size
            try:
                new = check_family(name, folder, args.device, vocab)
            except Exception as exc:
                new = [f"| {name} | load or run | ERROR {type(exc).__name__}: {str(exc)[:160]} | - |"]
            for line in new:
                print(line, flush=True)
            rows += new
            failed |= any("DIFFER" in r or "ERROR" in r for r in new if "not required" not in r)
    print("\n| model | check | result | s |\n| --- | --- | --- | --- |")
    print("\n".join(rows))
    print("\nfloat32 parity:", "FAILED" if failed else "all equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

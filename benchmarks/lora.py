"""`sllm bench lora`: what serving LoRA adapters costs. The same requests (text-to-SQL prompts, greedy,
`ignore_eos`, so every run produces the same number of tokens) run on one engine with no adapter, with
one adapter for all of them, and spread round-robin over four adapters (three random rank-8 PEFT adapters
on every projection, written with peft to a temp folder, plus the shipped text-to-SQL adapter); runs
alternate, and each mode's median tokens/s and its ratio to no adapter are printed, with the CPU and the
kernel path. Issue 18's target: 32 requests over 4 adapters >= 0.80x of the same 32 with none."""

import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import typer

from integrations.text2sql.adapter import SHIPPED


def random_adapters(base: Path, folder: Path, count: int, rank: int) -> dict[str, Path]:
    """`count` PEFT LoRA adapters of `rank` on every projection, with non-zero B (so they change the output)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    out = {}
    for i in range(count):
        torch.manual_seed(100 + i)
        model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
        peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=modules,
                                                      lora_dropout=0.0))
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_" in name:
                    p.normal_(0, 0.02)
        peft_model.save_pretrained(folder / f"random{i}")
        out[f"random{i}"] = folder / f"random{i}"
    return out


@contextlib.contextmanager
def torch_grouping(llm, on: bool) -> Iterator[None]:
    """While on: LoRA deltas by the torch grouping, in the Python layer loop (no one-call decode op)."""
    model, loras = llm.engine.runner.model, llm.engine.runner.loras
    saved = model.decode_layers, loras.cpu_kernels
    if on:
        model.decode_layers, loras.cpu_kernels = None, False
    try:
        yield
    finally:
        model.decode_layers, loras.cpu_kernels = saved


def bench_lora(
    model: str = typer.Option("default", help="Base model (its HF config and weights are read for the adapters)"),
    num_prompts: str = typer.Option("32,4", help="Batch sizes: requests submitted at once, comma-separated (up "
                                    "to 8 on GGUF blocks, 4 on float32 weights, decode through the one-call C++ op)"),
    max_tokens: int = typer.Option(128, help="Tokens generated per request"),
    rank: int = typer.Option(8, help="Rank of the random adapters"),
    repeats: int = typer.Option(3, help="Timed runs per mode (alternating); the median is reported"),
    quantization: str = typer.Option("auto", help="Weight mode of the base model (auto: GGUF blocks stay quantized)"),
    compare_torch: bool = typer.Option(False, "--compare-torch", help="Also run the 4 adapters on the torch "
                                       "grouping in the Python layer loop (the path before the C++ deltas, and the "
                                       "one other devices take)"),
):
    """tok/s with no adapter, one adapter and four adapters for the same requests, and the ratios."""
    import torch

    from engine import LLM, SamplingParams
    from engine.loader import resolve_model
    from integrations.text2sql.dataset import load_prompts
    from kernels.cpu import isa

    with tempfile.TemporaryDirectory() as tmp:
        base = resolve_model(model)
        adapters = random_adapters(base, Path(tmp), 3, rank)
        adapters[SHIPPED.name] = SHIPPED
        # No prefix caching: its keys include the adapter, so it would favour whichever mode ran a prompt before.
        llm = LLM(model=model, quantization=quantization, enable_lora=True, max_loras=len(adapters),
                  enable_prefix_caching=False, max_lora_rank=max(rank, 64),
                  lora_modules={n: str(p) for n, p in adapters.items()})
        names = list(adapters)
        sizes = [int(x) for x in num_prompts.split(",") if x.strip()]
        head_dim = llm.engine.runner.model.head_dim
        print(f"CPU: {isa.cpu_flags_summary()}")
        print(f"kernel path: {isa.resolve(head_dim)} (ceiling {isa.current()}); torch threads: "
              f"{torch.get_num_threads()}; weights: {quantization}; {max_tokens} tokens per request, greedy")
        print(f"adapters: {', '.join(names)} (random ones: rank {rank}, all projections)")
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        prompts_all = load_prompts()
        for n in sizes:
            prompts = [prompts_all[i % len(prompts_all)] for i in range(n)]
            modes = {"no adapter": [None] * n, "1 adapter": [names[0]] * n,
                     "4 adapters": [names[i % len(names)] for i in range(n)]}
            if compare_torch:
                modes["4, torch"] = modes["4 adapters"]
            warm_up = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
            llm.generate(prompts, warm_up, use_tqdm=False, lora_request=modes["4 adapters"])
            rates: dict[str, list[float]] = {m: [] for m in modes}
            for r in range(repeats):
                order = list(modes) if r % 2 == 0 else list(reversed(modes))
                for mode in order:
                    with torch_grouping(llm, mode == "4, torch"):
                        t0 = time.perf_counter()
                        outs = llm.generate(prompts, params, use_tqdm=False, lora_request=modes[mode])
                        seconds = time.perf_counter() - t0
                    rates[mode].append(sum(len(o.outputs[0].token_ids) for o in outs) / seconds)
            base_rate = statistics.median(rates["no adapter"])
            print(f"\n{n} requests x {max_tokens} tokens, median of {repeats}:")
            print(f"{'mode':<12} {'tok/s':>8} {'ratio':>6}   runs (tok/s)")
            for mode, values in rates.items():
                med = statistics.median(values)
                runs = " ".join(f"{v:.0f}" for v in values)
                print(f"{mode:<12} {med:8.1f} {med / base_rate:6.2f}   {runs}", flush=True)


if __name__ == "__main__":
    typer.run(bench_lora)

"""Decode speed with the quantized weights on the file's pages against copies on huge pages
(`--huge-page-weights`): `python -m benchmarks.weight_pages --model FILE`.

One stream's speed follows the machine's memory bandwidth, which on a shared VM swings within minutes, so
the two layouts are timed in one process, alternating generation by generation: the model is loaded once,
its matrices copied (engine/host_memory.on_huge_pages), and each round generates the same prompt's
tokens from one layout and then the other, with the read bandwidth after each round so that rounds can be
told apart by it."""

import statistics
import time

import torch
import typer


def measure(model: str, rounds: int, max_tokens: int = 64, activations: str = "int8",
            kv_cache_dtype: str = "float16") -> list[tuple[float, float, float]]:
    """(ms a token on the file's pages, ms a token on huge pages, read GB/s after) per round."""
    from benchmarks.harness import read_bandwidth_gbps
    from engine.host_memory import on_huge_pages
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams
    from kernels.cpu import cpu_kernels_available

    cpu_kernels_available()  # registers the sllm_cpu ops
    before = torch.ops.sllm_cpu.int8_activations()  # LLM(activations="int8") sets it process-wide
    llm = LLM(model=model, activations=activations, kv_cache_dtype=kv_cache_dtype, num_kv_blocks=256)
    m = llm.engine.runner.model
    layouts = {}

    def copy_to_huge_pages(mapped: list) -> list:  # the model's own choice of matrices, both layouts kept
        layouts["mapped"], layouts["huge"] = mapped, on_huge_pages(mapped)
        return layouts["huge"]

    m.place_quantized(copy_to_huge_pages)
    mapped, huge = layouts["mapped"], layouts["huge"]
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    prompt = "SELECT name, email FROM users WHERE signup_date > '2024-01-01' ORDER BY " * 4

    def ms_per_token(weights: list) -> float:
        m.place_quantized(lambda _: weights)
        llm.generate([prompt], params, use_tqdm=False)  # the prompt cached, the layout's pages warm
        t0 = time.perf_counter()
        llm.generate([prompt], params, use_tqdm=False)
        return (time.perf_counter() - t0) / max_tokens * 1000

    try:
        return [(ms_per_token(mapped), ms_per_token(huge), read_bandwidth_gbps()) for _ in range(rounds)]
    finally:
        m.place_quantized(lambda _: mapped)
        torch.ops.sllm_cpu.set_int8_activations(before)


def main(model: str = typer.Option("default", "--model"),
         rounds: int = typer.Option(40, "--rounds", help="Alternating pairs of generations"),
         max_tokens: int = typer.Option(64, "--max-tokens"),
         threshold: float = typer.Option(60.0, "--slow-below", help="GB/s under which a round counts as slow")):
    from benchmarks.harness import machine_header

    rows = measure(model, rounds, max_tokens)
    print(machine_header())
    for label, keep in (("all", lambda bw: True), (f"read < {threshold:.0f} GB/s", lambda bw: bw < threshold),
                        (f"read >= {threshold:.0f} GB/s", lambda bw: bw >= threshold)):
        sel = [r for r in rows if keep(r[2])]
        if sel:
            a, b = statistics.mean(r[0] for r in sel), statistics.mean(r[1] for r in sel)
            print(f"{label}: {len(sel)} rounds, file pages {a:.2f} ms a token, huge pages {b:.2f} ({a / b:.3f}x)")


if __name__ == "__main__":
    typer.run(main)

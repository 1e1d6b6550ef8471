"""Where a decode step's time goes: `python -m benchmarks.step_phases`.

Fills the engine with `--rows` text-to-SQL prompts (the serving benchmark's), runs their prompts, then
times `--steps` decode steps of all rows at once, split by phase: each kernel the model calls, the lm
head, the model's own Python, input preparation, sampling, output processing (detokenizing, stops),
scheduling. With `--whole-run N`, every step of N prompts run to the end at `--rows` sequences at
once instead (prompts, chunks and decode steps together, as a server's run has them). Times are the
stepping thread's CPU time (`time.thread_time`), not wall time, so a shared machine's other load barely
moves them; with `--threads 1` (the default) that is all the step's work, so the shares are what each
phase costs; with more threads the kernels' work on the other threads is not counted. Phases are timed
by wrapping the functions the engine calls, which adds about a microsecond a call: the model's "Python
glue" includes that."""

import collections
import contextlib
import functools
import time
from collections.abc import Callable, Iterator

import typer

KERNELS = ("linear", "paged_decode_attention", "paged_attention", "rms_norm", "silu_and_mul", "rotary_embedding",
           "store_kv", "embedding", "decode_layers_cpu")


class PhaseTimer:
    """Accumulates the calling thread's CPU time per phase name."""

    def __init__(self):
        self.seconds: collections.Counter[str] = collections.Counter()

    def wrap(self, name: str | Callable[[], str], fn: Callable) -> Callable:
        """fn, timed under `name` (or the name that callable gives at each call)."""
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name if isinstance(name, str) else name()] += time.thread_time() - t0

        return timed


@contextlib.contextmanager
def instrumented(engine, timer: PhaseTimer) -> Iterator[Callable[[], list]]:
    """Wraps the engine's phases and the model's kernel calls (read from the `kernels` module at each call)
    and yields the timed `step`; the modules are put back on exit (the engine stays wrapped)."""
    import engine.models.llama as llama
    import kernels

    # Llama-family layers call the `kernels` module's ops; steps of a few rows take the one-call C++ decode
    # op (llama.decode_layers_cpu) instead, which then holds all of the layers' work.
    homes = {name: llama if name == "decode_layers_cpu" else kernels for name in KERNELS}
    originals = {name: getattr(homes[name], name) for name in KERNELS}
    in_head = [False]  # the lm head's matrix product is counted under "lm head" only
    for name, fn in originals.items():
        label = f"kernel {name}"
        setattr(homes[name], name, timer.wrap(
            (lambda label=label: "lm head linear" if in_head[0] else label) if name == "linear" else label, fn))
    model, runner, sched = engine.runner.model, engine.runner, engine.scheduler
    if model.act_and_mul is getattr(kernels.silu_and_mul, "__wrapped__", None):
        model.act_and_mul = kernels.silu_and_mul  # bound at load, not read from the module
    model.forward = timer.wrap("forward", model.forward)
    compute_logits = model.compute_logits

    def lm_head(hidden):
        in_head[0] = True
        try:
            return compute_logits(hidden)
        finally:
            in_head[0] = False

    model.compute_logits = timer.wrap("lm head", lm_head)
    runner.prepare = timer.wrap("prepare inputs", runner.prepare)
    engine.step_sampler.sample = timer.wrap("sample", engine.step_sampler.sample)
    engine._append = timer.wrap("append tokens (detokenize, stops)", engine._append)
    engine.processor.outputs = timer.wrap("outputs", engine.processor.outputs)
    sched.schedule = timer.wrap("schedule", sched.schedule)
    sched.update_from_output = timer.wrap("update from output", sched.update_from_output)
    try:
        yield timer.wrap("step", engine.step)
    finally:
        for name, fn in originals.items():
            setattr(homes[name], name, fn)


def breakdown(seconds: dict[str, float]) -> list[tuple[str, float]]:
    """(phase, seconds) rows in step order; what forward spends outside its kernels is its Python glue."""
    s = collections.Counter(seconds)
    kernel_total = sum(s[f"kernel {k}"] for k in KERNELS)
    s["model Python glue"] = s["forward"] - kernel_total
    named = ("lm head", "prepare inputs", "sample", "append tokens (detokenize, stops)", "outputs", "schedule",
             "update from output")
    s["rest of step"] = s["step"] - s["forward"] - sum(s[k] for k in named)
    order = [f"kernel {k}" for k in KERNELS] + ["model Python glue", *named, "rest of step"]
    return [(k, s[k]) for k in order]


def measure(model: str = "default", rows: int = 32, steps: int = 40, max_tokens: int = 256,
            prompts: list[str] | None = None, activations: str = "float",
            kv_cache_dtype: str = "auto") -> tuple[float, list[tuple[str, float]]]:
    """Main-thread CPU seconds per decode step of `rows` sequences, and the per-step breakdown."""
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams

    engine = LLM(model=model, max_num_seqs=rows, activations=activations, kv_cache_dtype=kv_cache_dtype).engine
    if prompts is None:
        from integrations.text2sql.dataset import load_prompts

        prompts = load_prompts()
    params = SamplingParams(max_tokens=max(max_tokens, steps + 2), temperature=0.0, ignore_eos=True)
    for i in range(rows):
        engine.add_request(f"r{i}", prompts[i % len(prompts)], params)
    sched = engine.scheduler
    while sched.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in sched.running):
        engine.step()
    timer = PhaseTimer()
    with instrumented(engine, timer) as step:
        for _ in range(steps):
            assert len(sched.running) == rows, "every row decodes in every timed step"
            step()
    per_step = {k: v / steps for k, v in timer.seconds.items()}
    return per_step["step"], breakdown(per_step)


def measure_run(model: str = "default", rows: int = 32, num_prompts: int = 112, max_tokens: int = 128,
                activations: str = "float", kv_cache_dtype: str = "auto") -> tuple[float, int, list[tuple[str, float]]]:
    """Main-thread CPU seconds of a whole run of `num_prompts` text-to-SQL prompts (greedy, `max_tokens`
    each, at most `rows` at once), its step count, and its breakdown (seconds, not per step)."""
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams
    from integrations.text2sql.dataset import load_prompts

    engine = LLM(model=model, max_num_seqs=rows, activations=activations, kv_cache_dtype=kv_cache_dtype).engine
    prompts = load_prompts()
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i in range(num_prompts):
        engine.add_request(f"r{i}", prompts[i % len(prompts)], params)
    timer = PhaseTimer()
    steps = 0
    with instrumented(engine, timer) as step:
        while engine.has_unfinished_requests():
            step()
            steps += 1
    return timer.seconds["step"], steps, breakdown(dict(timer.seconds))


def main(
    model: str = typer.Option("default", "--model"),
    rows: int = typer.Option(32, "--rows", help="Sequences decoding together (max_num_seqs)"),
    steps: int = typer.Option(40, "--steps", help="Decode steps timed"),
    threads: int = typer.Option(1, "--threads", help="torch threads; 1 counts every kernel's whole work"),
    activations: str = typer.Option("float", "--activations", help="float or int8, as sllm serve takes it"),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto, float32, float16 or bfloat16, as "
                                       "sllm serve takes it"),
    whole_run: int = typer.Option(0, "--whole-run", help="Time every step of this many prompts run to the end "
                                  "instead (0: decode steps only)"),
):
    import torch

    from benchmarks.harness import format_table, machine_header

    torch.set_num_threads(threads)
    if whole_run:
        total, steps, rows_out = measure_run(model, rows, whole_run, activations=activations,
                                             kv_cache_dtype=kv_cache_dtype)
        print(machine_header())
        print(f"{whole_run} prompts, 128 tokens each, at most {rows} at once: {total:.2f} s of main-thread CPU in "
              f"{steps} steps ({threads} torch threads, {activations} activations, KV cache {kv_cache_dtype}); "
              f"{whole_run * 128 / total:.1f} tok/s of that CPU")
        table = [[name, f"{sec:.2f}", f"{100 * sec / total:.1f}%"] for name, sec in rows_out]
        print(format_table(["phase", "s", "share"], table, align="lrr", rule=True))
        return
    total, rows_out = measure(model, rows, steps, activations=activations, kv_cache_dtype=kv_cache_dtype)
    print(machine_header())
    print(f"{rows}-row decode step: {1000 * total:.1f} ms of main-thread CPU ({threads} torch threads, "
          f"{activations} activations, KV cache {kv_cache_dtype})")
    table = [[name, f"{1000 * sec:.2f}", f"{100 * sec / total:.1f}%"] for name, sec in rows_out]
    print(format_table(["phase", "ms/step", "share"], table, align="lrr", rule=True))


if __name__ == "__main__":
    typer.run(main)

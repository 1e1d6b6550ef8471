"""`sllm bench kernels`: the Triton kernels on a CUDA GPU (benchmarks/triton_kernels.py), or with --cpu or
no GPU the C++ CPU kernels (benchmarks/cpu_kernels.py). Imports stay inside the function: `sllm` imports
this module at start-up."""


def bench_kernels(
    batch: int | None = None,
    context: int | None = None,
    num_q_heads: int | None = None,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    block_size: int = 16,
    dtype: str | None = None,
    cpu: bool = False,
) -> None:
    """`sllm bench kernels`: check and time the kernels against their torch references: the Triton
    kernels on a CUDA GPU (defaults: batch 64, context 2048, 32/8 heads of 128, float16), or with --cpu
    or no GPU the C++ CPU attention kernels (defaults: SmolLM2-135M's decode step, batch 32, context
    514, 9/3 heads of 64, float32 and bfloat16)."""
    import torch

    if cpu or not torch.cuda.is_available():
        from benchmarks.cpu_kernels import cpu_main

        cpu_main(
            batch=batch or 32, context=context or 514, num_q_heads=num_q_heads or 9,
            num_kv_heads=num_kv_heads or 3, head_dim=head_dim or 64, block_size=block_size,
            dtypes=(dtype,) if dtype else ("float32", "bfloat16"),
        )  # fmt: skip
        return
    from benchmarks.triton_kernels import main

    main(batch=batch or 64, context=context or 2048, num_q_heads=num_q_heads or 32,
         num_kv_heads=num_kv_heads or 8, head_dim=head_dim or 128, block_size=block_size,
         dtype=dtype or "float16")

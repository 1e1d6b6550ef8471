"""Linear layers on the CPU: weights packed once for oneDNN, and few-row float32 matmuls in C++.

bf16 (and fp16) matmuls on a CPU go through oneDNN, which re-lays the weight out for its AMX /
AVX512-BF16 kernels on every `F.linear` call unless the weight is packed beforehand. Packing once at
load (`torch.ops.mkldnn._reorder_linear_weight`, what torch's own inference compiler does) measured
1.3-2.2x faster at SmolLM2's shapes for 1 to 300 rows, the batch-1 decode step's main cost. fp32
and CUDA weights are left as they are.

float32 matmuls of 1 to 4 rows (a decode step with a few sequences) go to `sllm_cpu.small_linear`
on every instruction-set path (`kernels.cpu.isa`): it streams the weight once for all rows, with no
transpose-and-dispatch per call. Over SmolLM2's 120 layer weights on a 2-core AMD EPYC (Zen 4) it
took 15-19 ms at one row on each path (generic, AVX2, AVX-512) where `F.linear` (MKL, which does not
use AVX-512 on AMD CPUs) took 35-37 ms, and 22-34 ms against 46-61 ms at four rows; more rows go to
`F.linear` (MKL's GEMM)."""

import logging

import torch
import torch.nn.functional as F

from kernels.cpu.build import cpu_kernels_available
from kernels.quantized import QuantizedWeight, StackedWeight, quantized_embedding, quantized_linear, stacked_linear

log = logging.getLogger(__name__)


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight packed for `linear`, or None where packing does not apply or is unavailable."""
    if (isinstance(weight, QuantizedWeight | StackedWeight) or weight.device.type != "cpu"
            or weight.dtype not in (torch.bfloat16, torch.float16)):
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        probe = torch.zeros(1, weight.shape[1], dtype=weight.dtype)
        torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], "")
        return packed
    except (RuntimeError, AttributeError) as exc:  # a torch built without oneDNN
        log.warning("packed CPU linear unavailable (%s); plain F.linear is used", exc)
        return None


SMALL_LINEAR_MAX_ROWS = 4


def small_linear_takes(weight: torch.Tensor) -> bool:
    """The weight half of `use_small_linear`: a contiguous fp32 CPU matrix (any K: a K that the vector
    paths do not divide takes the portable one)."""
    return (isinstance(weight, torch.Tensor) and weight.dtype == torch.float32 and weight.device.type == "cpu"
            and weight.dim() == 2 and weight.is_contiguous() and cpu_kernels_available())


def use_small_linear(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (x.dim() == 2 and x.shape[0] <= SMALL_LINEAR_MAX_ROWS and x.dtype == torch.float32
            and small_linear_takes(weight))


def linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight | StackedWeight, bias: torch.Tensor | None = None,
           packed: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(weight, QuantizedWeight):
        return quantized_linear(x, weight, bias)
    if isinstance(weight, StackedWeight):
        return stacked_linear(x, weight, bias)
    if packed is not None:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    if use_small_linear(x, weight):
        return torch.ops.sllm_cpu.small_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def embedding(ids: torch.Tensor, table: torch.Tensor | QuantizedWeight) -> torch.Tensor:
    """Rows of the embedding table (which may also be the tied LM head's weight, quantized)."""
    if isinstance(table, QuantizedWeight):
        return quantized_embedding(ids, table)
    return F.embedding(ids, table)

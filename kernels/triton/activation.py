"""SiLU-and-multiply (see `kernels.activation.silu_and_mul_ref`)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(out_ptr, x_ptr, stride_x, stride_out, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    # Round silu(gate) to the input dtype before the product, as the two-op reference does.
    act = (gate / (1.0 + tl.exp(-gate))).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    """x: [..., 2I] -> silu(x[..., :I]) * x[..., I:], shape [..., I]."""
    assert x.shape[-1] % 2 == 0
    inter = x.shape[-1] // 2
    out = torch.empty((*x.shape[:-1], inter), dtype=x.dtype, device=x.device)
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out2 = out.view(-1, inter)
    rows = x2.shape[0]
    if rows == 0 or inter == 0:
        return out
    block = min(1024, triton.next_power_of_2(inter))
    grid = (rows, triton.cdiv(inter, block))
    _silu_and_mul_kernel[grid](out2, x2, x2.stride(0), out2.stride(0), inter, BLOCK=block)
    return out

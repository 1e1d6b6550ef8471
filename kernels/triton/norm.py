"""RMSNorm, optionally fused with the residual add (see `kernels.norm.rms_norm_ref`)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    out_ptr,
    res_out_ptr,
    x_ptr,
    res_ptr,
    w_ptr,
    stride_x,
    stride_res,
    stride_out,
    stride_res_out,
    hidden,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One program per row; the whole row stays in registers (hidden sizes up to a few 10k).
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_res_out + cols, s, mask=mask)
        x = s.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / hidden + eps)
    # The reference rounds the normalised row to the input dtype before applying the weight.
    if HAS_RESIDUAL:
        h = (x * rstd).to(res_out_ptr.dtype.element_ty).to(tl.float32)
    else:
        h = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (w * h).to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def rms_norm_triton(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """norm(x) or, with `residual`, (norm(x + residual), x + residual); statistics in float32."""
    hidden = x.shape[-1]
    assert weight.shape == (hidden,)
    weight = weight if weight.stride(0) == 1 else weight.contiguous()
    x2 = _rows(x)
    if residual is not None:
        assert residual.shape == x.shape
        res2 = _rows(residual)
        res_dtype = torch.promote_types(x.dtype, residual.dtype)
        res_out = torch.empty(x.shape, dtype=res_dtype, device=x.device)
        res_out2 = res_out.view(-1, hidden)
    else:
        res2 = res_out2 = x2  # unused placeholders
        res_dtype = x.dtype
    out = torch.empty(x.shape, dtype=torch.promote_types(weight.dtype, res_dtype), device=x.device)
    out2 = out.view(-1, hidden)
    if x2.shape[0] > 0:
        _rms_norm_kernel[(x2.shape[0],)](
            out2,
            res_out2,
            x2,
            res2,
            weight,
            x2.stride(0),
            res2.stride(0),
            out2.stride(0),
            res_out2.stride(0),
            hidden,
            eps,
            HAS_RESIDUAL=residual is not None,
            BLOCK=triton.next_power_of_2(hidden),
            num_warps=_num_warps(hidden),
        )
    return out if residual is None else (out, res_out)


def _num_warps(hidden: int) -> int:
    return min(16, max(1, triton.next_power_of_2(hidden) // 512))

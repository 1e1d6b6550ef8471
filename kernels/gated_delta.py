"""The gated delta rule (Gated DeltaNet, Qwen3.5's linear-attention layers), in torch: a recurrent state
S [heads, k_dim, v_dim] per sequence that each token decays by exp(g), corrects towards its value along its
key with rate beta (the delta rule: S += k (beta (v - S^T k))^T), and reads with its query (o = S^T q).

`chunked_gated_delta` runs a prompt (or a chunk of one) in chunks of `chunk_size` tokens: the updates within a
chunk are condensed with a triangular solve (the UT transform of the DeltaNet paper), and the state crosses
chunks once per chunk. `recurrent_gated_delta` runs one token per sequence for a batch of sequences (decode).
Both take q and k already L2-normalised per head and return float32; q is scaled by k_dim ** -0.5 here. The
formulas follow transformers' torch fallbacks (torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule),
our correctness oracle, in the same float32 order."""

import torch
import torch.nn.functional as F


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dimension, as the FLA library and transformers compute it."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def chunked_gated_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        state: torch.Tensor, chunk_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's tokens. q, k: [T, H, Dk]; v: [T, H, Dv]; g, beta: [T, H]; state: [H, Dk, Dv] (float32).
    Returns (output [T, H, Dv], new state), both float32."""
    n = q.shape[0]
    q, k, v = (x.transpose(0, 1).float() for x in (q, k, v))  # [H, T, D]
    beta, g = beta.transpose(0, 1).float(), g.transpose(0, 1).float()  # [H, T]
    q = q * q.shape[-1] ** -0.5
    pad = (chunk_size - n % chunk_size) % chunk_size
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    heads, chunks = q.shape[0], (n + pad) // chunk_size
    v_beta, k_beta = v * beta.unsqueeze(-1), k * beta.unsqueeze(-1)
    q, k, k_beta, v_beta = (x.reshape(heads, chunks, chunk_size, x.shape[-1]) for x in (q, k, k_beta, v_beta))
    g = g.reshape(heads, chunks, chunk_size).cumsum(dim=-1)  # the log-decay from each chunk's start
    upper = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).triu(1)
    decay = (g.unsqueeze(-1) - g.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()  # [H, C, i, j]
    system = (k_beta @ k.transpose(-1, -2)) * decay
    within = (q @ k.transpose(-1, -2)) * decay
    values = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)
    k_decayed = torch.linalg.solve_triangular(system, k_beta * g.exp().unsqueeze(-1), upper=False,
                                              unitriangular=True)
    q = q * g.exp().unsqueeze(-1)
    k = k * (g[..., -1:] - g).exp().unsqueeze(-1)
    chunk_decay = g[..., -1].exp()[..., None, None]
    out = torch.zeros_like(values)
    s = state.float()
    for c in range(chunks):
        v_new = values[:, c] - k_decayed[:, c] @ s
        out[:, c] = q[:, c] @ s + within[:, c] @ v_new
        s = s * chunk_decay[:, c] + k[:, c].transpose(-1, -2) @ v_new
    return out.reshape(heads, -1, out.shape[-1])[:, :n].transpose(0, 1), s


def recurrent_gated_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                          state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of each of B sequences. q, k: [B, H, Dk]; v: [B, H, Dv]; g, beta: [B, H]; state: [B, H, Dk, Dv].
    Returns (output [B, H, Dv], new state), both float32."""
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    q = q / (q.shape[-1] ** 0.5)
    s = state.float() * g.exp()[..., None, None]
    remembered = (s * k.unsqueeze(-1)).sum(dim=-2)
    delta = (v - remembered) * beta.unsqueeze(-1)
    s = s + k.unsqueeze(-1) * delta.unsqueeze(-2)
    return (s * q.unsqueeze(-1)).sum(dim=-2), s

"""Attention and fused ops. Every op has a plain torch reference (the contract) and a Triton kernel
(the CUDA path); on the CPU, attention, RMSNorm, rotary, the KV store and few-row fp32 matmuls run
C++ kernels (`kernels.cpu`, built at first use). `kernels.dispatch` picks one per call."""

from kernels.activation import gelu_tanh_and_mul, silu_and_mul
from kernels.attention import paged_attention, paged_decode_attention
from kernels.cache import copy_blocks, store_kv
from kernels.linear import embedding, linear
from kernels.linear import pack as pack_linear
from kernels.norm import rms_norm
from kernels.rotary import rotary_embedding

__all__ = [
    "copy_blocks",
    "embedding",
    "gelu_tanh_and_mul",
    "linear",
    "pack_linear",
    "paged_attention",
    "paged_decode_attention",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "store_kv",
]

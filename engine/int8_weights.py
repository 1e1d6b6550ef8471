"""Weight-only int8 for float checkpoints (`--quantization int8`), as vLLM's W8A16 and CTranslate2's
int8 offer: every projection matrix, the token embedding and the LM head become int8 with one fp16 scale
per group of 32 weights, in GGUF's Q8_0 block layout (kernels/quantized.py: `quantize_q8_0`), so the
C++ kernels that serve a GGUF file's Q8_0 tensors serve these too and the activations stay float32.
Norms and biases stay float. A quarter of fp32's bytes per decoded token (34 bytes per 32 weights)."""

import logging

import torch

from kernels.quantized import QuantizedWeight, quantize_q8_0

log = logging.getLogger(__name__)

_MATRICES = ("_proj.weight", "embed_tokens.weight", "lm_head.weight")


def quantize_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | QuantizedWeight]:
    """The HF-named state dict with its matrices as int8 groups; a matrix whose in_features is not a
    multiple of 32 stays float (logged)."""
    out: dict[str, torch.Tensor | QuantizedWeight] = {}
    kept = []
    for name, tensor in state.items():
        if tensor.dim() == 2 and name.endswith(_MATRICES):
            if tensor.shape[1] % 32 == 0:
                out[name] = quantize_q8_0(tensor)
                continue
            kept.append(name)
        out[name] = tensor
    if kept:
        log.warning("int8: %d matrices keep float weights (in_features not a multiple of 32), e.g. %s",
                    len(kept), kept[0])
    return out

"""GGUF weights served as they are (engine/gguf_weights.py): the default model's file read straight into
quantized blocks gives, once dequantized, exactly the weights of the converted fp32 folder that is
the HF-exact reference (names, q/k row order, values)."""

import numpy as np
import pytest
import torch

from engine.gguf_weights import hf_name, read_gguf_weights, unpermute_rows
from engine.loader import default_model_path, load_model_config, load_state_dict
from kernels.quantized import Q4_1, Q8_0, QuantizedWeight, dequantize

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def both(default_model_dir):
    config = load_model_config(default_model_dir)
    return read_gguf_weights(default_model_path(), config), load_state_dict(default_model_dir)


def test_every_tensor_has_its_hf_name_and_the_reference_values(both):
    quantized, reference = both
    assert set(quantized) - {"lm_head.weight"} == set(reference) - {"lm_head.weight"}
    types = {}
    for name, want in reference.items():
        got = quantized[name]
        if isinstance(got, QuantizedWeight):
            types[got.qtype] = types.get(got.qtype, 0) + 1
            assert got.shape == tuple(want.shape), name
            got = dequantize(got)
        assert torch.equal(got, want), name
    assert types == {Q4_1: 210, Q8_0: 1}  # the file's 210 Q4_1 matrices and its Q8_0 embedding


def test_quantized_blocks_stay_small(both):
    quantized, _ = both
    blocks = sum(w.data.numel() for w in quantized.values() if isinstance(w, QuantizedWeight))
    assert 90e6 < blocks < 100e6  # 66 MB of Q4_1 and 30 MB of Q8_0, against 538 MB dequantized


def test_names_and_row_order():
    assert hf_name("blk.3.attn_q.weight") == "model.layers.3.self_attn.q_proj.weight"
    assert hf_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("rope_freqs.weight") is None
    # Two heads of four rows: llama.cpp's order (pairs interleaved) back to HF's (halves).
    rows = np.arange(8)[:, None].repeat(3, 1)
    assert unpermute_rows(rows, heads=2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]

"""The sampler's greedy fast path gives torch's argmax exactly, and a decode step's logits are not copied."""

import torch

from engine.sampler import argmax_rows


def test_argmax_rows_equals_torch_with_ties_infinities_and_nan():
    g = torch.Generator().manual_seed(0)
    for trial in range(300):
        x = torch.randint(-3, 3, (7, 50), generator=g).float()  # small integers: many ties
        if trial % 5 == 0:
            x[trial % 7] = float("-inf")
        if trial % 7 == 0:
            x[1, 3] = x[1, 9] = float("nan")
        if trial % 11 == 0:
            x[2] = float("nan")
        if trial % 13 == 0:
            x[3, -1] = float("inf")
        assert argmax_rows(x) == x.argmax(-1).tolist(), trial
        strided = x.t().contiguous().t()  # the same values, column-major
        assert argmax_rows(strided) == x.argmax(-1).tolist()


def test_argmax_rows_under_inference_mode_and_other_dtypes():
    x = torch.randn(4, 1000)
    with torch.inference_mode():
        y = x * 2
        assert argmax_rows(y) == y.argmax(-1).tolist()
        assert argmax_rows(y[[0, 2]]) == y[[0, 2]].argmax(-1).tolist()
    assert argmax_rows(x.bfloat16()) == x.bfloat16().argmax(-1).tolist()

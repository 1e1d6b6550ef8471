"""Weights are prepared with torch on one thread (engine/model_runner.py `_one_thread`), and the engine's
thread count is back as it was for the steps that follow."""

import torch

from engine.config import EngineConfig
from engine.loader import open_model
from engine.model_runner import ModelRunner


def test_weights_load_on_one_thread_and_the_count_comes_back(tiny_models, monkeypatch):
    source = open_model(str(tiny_models["gqa"]))
    seen = []
    real = type(source).weights

    def weights(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(source), "weights", weights)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ModelRunner(EngineConfig(model=str(tiny_models["gqa"]), num_kv_blocks=4), source, 64)
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)

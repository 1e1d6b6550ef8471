"""`sllm serve` freezes its start-up heap once the models have loaded (gateway/app.py's freeze_gc), so a full
garbage collection walks what serving made, not every module and engine object; and gives it back when it stops,
so a process that outlives the app collects them again."""

import gc
import time

import httpx

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server


def test_heap_frozen_after_load_and_unfrozen_at_stop(tmp_path):
    folder = make_tiny_llama(tmp_path / "tiny-llama", resolve_model("default"), seed=5)
    assert gc.get_freeze_count() == 0
    with run_server(tmp_path, model=str(folder), freeze_gc=True) as s:
        deadline = time.monotonic() + 30
        while gc.get_freeze_count() == 0:
            assert time.monotonic() < deadline, "the heap was not frozen after the model loaded"
            time.sleep(0.05)
        engine = s.engine
        # Loaded before the freeze, so out of the collected generations (get_objects lists only those).
        assert not any(o is engine for o in gc.get_objects())
        r = httpx.post(f"{s.base_url}/completions", json={"prompt": "hello", "max_tokens": 3}, timeout=60)
        assert r.status_code == 200, r.text
    assert gc.get_freeze_count() == 0

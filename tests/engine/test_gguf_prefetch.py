"""`prefetch` (engine/gguf_file.py): a .gguf file's read-ahead is asked for on a thread of its own; anything
else (a folder, a hub id, a missing file) is left alone."""

import threading
import time

from engine.gguf_file import prefetch


def _prefetching() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gguf-prefetch"]


def test_a_gguf_file_is_read_ahead_on_a_thread(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(1 << 20))
    prefetch(path)
    deadline = time.monotonic() + 10
    while _prefetching():
        assert time.monotonic() < deadline, "the read-ahead hint never returned"
        time.sleep(0.01)


def test_other_models_are_left_alone(tmp_path):
    (tmp_path / "folder.gguf").mkdir()
    for path in (tmp_path / "folder.gguf", tmp_path / "missing.gguf", tmp_path, tmp_path / "x.safetensors"):
        prefetch(path)
    assert not _prefetching()

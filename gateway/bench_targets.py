"""What `sllm bench serve` runs its load against, each started and stopped around its run so the
targets never compete for the CPU: our server in a subprocess, llama.cpp's server, the engine."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy in {timeout}s")


@contextmanager
def _process(cmd: list[str], health_url: str, env: dict | None = None) -> Iterator[None]:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(health_url, proc)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def sllm_server(model: str, max_num_seqs: int) -> Iterator[tuple[str, str]]:
    """`sllm serve` on a free loopback port, with a throwaway database; yields (/v1 URL, model name)."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from engine.cli import main; main()", "serve", "--model", model,
               "--port", str(port), "--max-num-seqs", str(max_num_seqs), "--db", str(Path(tmp) / "bench.db"),
               "--log-level", "warning"]
        env = {k: v for k, v in os.environ.items() if k != "SLLM_API_KEY"}
        with _process(cmd, f"http://127.0.0.1:{port}/health", env):
            url = f"http://127.0.0.1:{port}/v1"
            yield url, httpx.get(f"{url}/models").json()["data"][0]["id"]


@contextmanager
def sllm_proxy(upstream_url: str, served: str) -> Iterator[tuple[str, str]]:
    """A second `sllm serve` with no embedded model, forwarding `served` to `upstream_url`: one proxy hop."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from engine.cli import main; main()", "serve", "--upstream",
               f"{served}={upstream_url}", "--port", str(port), "--db", str(Path(tmp) / "proxy.db"),
               "--log-level", "warning"]
        env = {k: v for k, v in os.environ.items() if k not in ("SLLM_API_KEY", "SLLM_MODEL", "SLLM_CONFIG")}
        with _process(cmd, f"http://127.0.0.1:{port}/health", env):
            yield f"http://127.0.0.1:{port}/v1", served


@contextmanager
def llama_cpp_server(binary: str, gguf: Path | None, parallel: int) -> Iterator[tuple[str, str] | None]:
    """llama.cpp's server on the same GGUF, or None when it is not installed."""
    exe = shutil.which(binary)
    if exe is None:
        yield None
        return
    from engine.loader import default_model_path

    model_file = gguf or default_model_path()
    port = _free_port()
    cmd = [exe, "-m", str(model_file), "--host", "127.0.0.1", "--port", str(port), "-np", str(parallel),
           "-c", str(4096 * parallel)]
    with _process(cmd, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}/v1", model_file.stem


@contextmanager
def in_process_engine(model: str, max_num_seqs: int):
    from engine import AsyncEngine, EngineConfig

    engine = AsyncEngine(EngineConfig(model=model, max_num_seqs=max_num_seqs))
    try:
        yield engine
    finally:
        engine.shutdown()

"""What the serving benchmarks run their load against, each started and stopped around its run so the
targets never compete for the CPU: our server in a subprocess, llama.cpp's server, the engine."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


def _wait_loaded(url: str, timeout: float = 300) -> None:
    """Until /health names no model still loading (the embedding model served beside the others loads after
    /health turns 200), so no load competes with the benchmark for the cores."""
    deadline = time.monotonic() + timeout
    while httpx.get(url, timeout=2).json().get("loading"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} still names models loading after {timeout}s")
        time.sleep(0.2)


@dataclass
class Target:
    """A server under test: its /v1 URL, the model name it serves, and its process."""

    url: str
    served: str
    proc: subprocess.Popen
    ready_seconds: float = 0.0  # from the process's start to its first healthy answer: the load time users see

    def peak_rss_mib(self) -> float | None:
        """The process's peak resident memory so far (VmHWM), the number `ps` users compare."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None


@contextmanager
def _process(cmd: list[str], health_url: str, env: dict | None = None) -> Iterator[subprocess.Popen]:
    """The process, healthy; its `ready_seconds` attribute holds how long that took."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(health_url, proc)
        proc.ready_seconds = time.monotonic() - t0
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def sllm_server(model: str, max_num_seqs: int, env: dict[str, str] | None = None) -> Iterator[Target]:
    """`sllm serve` on a free loopback port, with a throwaway database; `env` adds `SLLM_*` settings
    (e.g. SLLM_QUANTIZATION, SLLM_SPECULATIVE_CONFIG) to this process's environment."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from engine.cli import main; main()", "serve", "--model", model,
               "--port", str(port), "--max-num-seqs", str(max_num_seqs), "--db", str(Path(tmp) / "bench.db"),
               "--log-level", "warning"]
        full_env = {k: v for k, v in os.environ.items() if k != "SLLM_API_KEY"} | (env or {})
        with _process(cmd, f"http://127.0.0.1:{port}/health", full_env) as proc:
            _wait_loaded(f"http://127.0.0.1:{port}/health")
            url = f"http://127.0.0.1:{port}/v1"
            yield Target(url, httpx.get(f"{url}/models").json()["data"][0]["id"], proc, proc.ready_seconds)


@contextmanager
def sllm_proxy(upstream_url: str, served: str) -> Iterator[Target]:
    """A second `sllm serve` with no embedded model, forwarding `served` to `upstream_url`: one proxy hop."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from engine.cli import main; main()", "serve", "--upstream",
               f"{served}={upstream_url}", "--port", str(port), "--db", str(Path(tmp) / "proxy.db"),
               "--log-level", "warning"]
        env = {k: v for k, v in os.environ.items() if k not in ("SLLM_API_KEY", "SLLM_MODEL", "SLLM_CONFIG")}
        with _process(cmd, f"http://127.0.0.1:{port}/health", env) as proc:
            yield Target(f"http://127.0.0.1:{port}/v1", served, proc)


def evict_from_page_cache(path: Path) -> None:
    """Drops the file's pages from the OS page cache (clean pages of a file no process maps), so the next
    start reads it from disk: a cold start, as after a reboot or a fresh download."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def llama_cpp_cache_dir() -> Path:
    """Where scripts/build_llama_server.sh puts llama.cpp's server, outside the repo and kept between runs."""
    root = Path(os.environ.get("SLLM_CACHE_DIR") or Path.home() / ".cache" / "sllm")
    return root / "llama.cpp"


def find_llama_server(binary: str) -> str | None:
    """`binary` on PATH (or a path), else the one scripts/build_llama_server.sh built into the cache."""
    found = shutil.which(binary)
    if found is None and binary == "llama-server":
        cached = llama_cpp_cache_dir() / "bin" / "llama-server"
        found = str(cached) if os.access(cached, os.X_OK) else None
    return found


@contextmanager
def llama_cpp_server(binary: str, gguf: Path | None, parallel: int,
                     extra_args: list[str] | None = None) -> Iterator[Target | None]:
    """llama.cpp's server on the same GGUF, or None when it is not installed."""
    exe = find_llama_server(binary)
    if exe is None:
        yield None
        return
    from engine.loader import default_model_path

    model_file = gguf or default_model_path()
    port = _free_port()
    cmd = [exe, "-m", str(model_file), "--host", "127.0.0.1", "--port", str(port), "-np", str(parallel),
           "-c", str(4096 * parallel), *(extra_args or [])]
    # Its shared ggml libraries sit beside the binary when built from source.
    lib_dir = str(Path(exe).resolve().parent)
    env = os.environ | {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [lib_dir, os.environ.get("LD_LIBRARY_PATH")]))}
    with _process(cmd, f"http://127.0.0.1:{port}/health", env) as proc:
        yield Target(f"http://127.0.0.1:{port}/v1", model_file.stem, proc, proc.ready_seconds)


@contextmanager
def in_process_engine(model: str, max_num_seqs: int, **config):
    """AsyncEngine in this process; `config`: more EngineConfig fields (those the server run had)."""
    from engine import AsyncEngine, EngineConfig

    engine = AsyncEngine(EngineConfig(model=model, max_num_seqs=max_num_seqs, **config))
    try:
        yield engine
    finally:
        engine.shutdown()

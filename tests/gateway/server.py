"""A real sllm server on a free loopback port, run by uvicorn on a thread of the test process so
tests can look inside its engine (KV blocks) while talking to it over HTTP; or `sllm serve` in a
process of its own (an upstream a test can kill)."""

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from engine import AsyncEngine
from gateway.app import create_app
from gateway.settings import Settings
from gateway.state import ServerState

MODEL = "SmolLM2-135M-Instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, alive: Callable[[], bool], why: Callable[[], str] = str, timeout: float = 180,
                 loaded: bool = True) -> None:
    """Polls `url`/health until it answers 200 and, with `loaded`, names no model still loading (the embedding
    model served beside the others loads after /health turns 200); fails with `why()` as soon as the server is
    gone (`alive()` false) or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = httpx.get(f"{url}/health", timeout=2)
            if r.status_code == 200 and not (loaded and r.json().get("loading")):
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not alive():
            raise RuntimeError(f"the server at {url} did not become healthy. {why()}")
        time.sleep(0.1)


def read_metric(url: str, name: str, **labels: str) -> float:
    """The sum of one metric's samples whose labels include `labels`, read from /metrics."""
    total = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


@dataclass
class RunningServer:
    url: str  # http://127.0.0.1:PORT
    state: ServerState

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def engine(self) -> AsyncEngine:
        assert self.state.engine is not None
        return self.state.engine

    def metric(self, name: str, **labels: str) -> float:
        return read_metric(self.url, name, **labels)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Waits until the engine holds no request; then every KV block must be free."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.engine.stats()
            if s["num_running"] == 0 and s["num_waiting"] == 0 and not self.engine.engine.requests:
                return
            time.sleep(0.01)
        raise AssertionError(f"engine still busy after {timeout}s: {self.engine.stats()}")

    def assert_no_leak(self) -> None:
        self.wait_idle()
        self.engine.engine.block_manager.check_no_leak()


@contextmanager
def run_server(tmp_dir: Path, wait_loaded: bool = True, freeze_gc: bool = False, **settings) -> Iterator[RunningServer]:
    """`wait_loaded`: yield once every model has loaded, else as soon as /health is 200. `freeze_gc`: as
    `sllm serve` runs (create_app's), for the test of it; the collector is the whole test process's."""
    port = free_port()
    settings.setdefault("db", str(tmp_dir / "sllm.db"))  # or a PostgreSQL URL
    # The bundled embedding model only where a test asks for it: it lists one more model and loads 90 MB.
    settings.setdefault("embedding_model", "none")
    config = Settings(port=port, **settings)
    app = create_app(config, freeze_gc=freeze_gc)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, thread.is_alive, loaded=wait_loaded)
        yield RunningServer(url=url, state=app.state.sllm)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclass
class ServerProcess:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def metric(self, name: str, **labels: str) -> float:
        return read_metric(self.url, name, **labels)


@contextmanager
def spawn_server(tmp_dir: Path, *args: str) -> Iterator[ServerProcess]:
    """`sllm serve ARGS` in a process of its own (one a test can kill), on a free loopback port."""
    port = free_port()
    cmd = [sys.executable, "-c", "from engine.cli import app; app()", "serve", "--port", str(port),
           "--db", str(tmp_dir / f"sllm-{port}.db"), "--log-level", "warning", *args]
    log = open(tmp_dir / f"server-{port}.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, lambda: proc.poll() is None,
                     lambda: f"sllm serve {' '.join(args)}: {(tmp_dir / f'server-{port}.log').read_text()[-2000:]}")
        yield ServerProcess(url=url, process=proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()

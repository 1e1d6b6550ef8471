"""`sllm serve` as users start it: flags from SLLM_* variables, 503 while loading, then serving."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.server import free_port

pytestmark = pytest.mark.default_model


def _sllm() -> str:
    return shutil.which("sllm") or str(Path(sys.executable).with_name("sllm"))


def test_sllm_serve_from_environment(tmp_path):
    port = free_port()
    env = {**os.environ, "SLLM_PORT": str(port), "SLLM_SERVED_MODEL_NAME": "smol", "SLLM_API_KEY": "sk-env",
           "SLLM_DB": str(tmp_path / "db.sqlite"), "SLLM_MAX_MODEL_LEN": "512", "SLLM_LOG_LEVEL": "info"}
    proc = subprocess.Popen([_sllm(), "serve", "--max-num-seqs", "4"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    statuses = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and 200 not in statuses:
            try:
                statuses.append(httpx.get(f"{url}/health", timeout=1).status_code)
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.05)
        assert statuses[0] == 503 and statuses[-1] == 200, statuses
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-env")
        model = client.models.list().data[0]
        assert model.id == "smol" and model.max_model_len == 512
        r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                           extra_headers={"x-request-id": "cli-test-1"})
        assert r.usage.completion_tokens <= 3
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    # One access line per request, with tokens and timings, and no key in the log.
    line = next(line for line in out.splitlines() if "cli-test-1" in line)
    assert "POST /v1/chat/completions 200" in line and "prompt_tokens=" in line and "ttft=" in line
    assert "sk-env" not in out

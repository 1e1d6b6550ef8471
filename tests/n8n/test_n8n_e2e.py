"""Opt-in: a real n8n 1.123.81 runs the n8n-nodes-sllm workflows against a real `sllm serve`.

    SLLM_N8N_E2E=1 pytest tests/n8n

Wraps n8n-nodes/e2e/run.sh (see n8n-nodes/README.md): the first run installs n8n into
~/.cache/sllm-n8n-e2e (~3 min, ~1.8 GB) and needs Node 20 and npm. SLLM_N8N_E2E_WORKFLOWS picks the
workflows (default: all of them: chat, chat-model, agent, openai-chat, openai-responses, the RAG
workflows rag (n8n's Embeddings OpenAI, in-memory vector store, Question and Answer chain) and rag-sllm
(the same with this package's embeddings, reranker and chat model sub-nodes), and the shipped examples).
Set SLLM_BASE_URL to test a server that is already running instead of starting one.
"""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.server import wait_healthy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.default_model,
    pytest.mark.skipif(os.environ.get("SLLM_N8N_E2E") != "1", reason="opt-in: set SLLM_N8N_E2E=1"),
    pytest.mark.skipif(shutil.which("npm") is None, reason="needs Node and npm"),
]

RUN_SH = Path(__file__).resolve().parents[2] / "n8n-nodes" / "e2e" / "run.sh"
WORKFLOWS = os.environ.get("SLLM_N8N_E2E_WORKFLOWS",
                           "chat,chat-model,agent,openai-chat,openai-responses,rag,rag-sllm,examples")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    if os.environ.get("SLLM_BASE_URL"):
        yield os.environ["SLLM_BASE_URL"]
        return
    port = _free_port()
    db = tmp_path_factory.mktemp("sllm-n8n") / "db.sqlite"
    env = {**os.environ, "SLLM_PORT": str(port), "SLLM_DB": str(db), "SLLM_MAX_MODEL_LEN": "2048"}
    sllm = shutil.which("sllm") or str(Path(sys.executable).with_name("sllm"))
    proc = subprocess.Popen([sllm, "serve", "--max-num-seqs", "4"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, lambda: proc.poll() is None, lambda: "sllm serve exited")
        yield f"{url}/v1"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_n8n_workflows_against_sllm(base_url):
    env = {**os.environ, "SLLM_BASE_URL": base_url, "E2E_WORKFLOWS": WORKFLOWS}
    result = subprocess.run(["bash", str(RUN_SH)], env=env, capture_output=True, text=True, timeout=1800)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "FAIL" not in result.stdout, report
    print(report[-4000:])  # the per-workflow lines, shown with `pytest -s`

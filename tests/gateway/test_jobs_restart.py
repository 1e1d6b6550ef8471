"""A batch survives SIGKILL: `sllm serve` is killed while an 80-line batch is about half done,
started again on the same database, and the batch completes with exactly 80 results, none
duplicated, none missing, and the lines recorded before the kill kept as they were. Ten times the job
concurrency is enough lines for the kill to land mid-batch with many lines in flight; more only add time."""

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tests.gateway.jobs_helpers import completion_line, jsonl, output_lines, wait_batch, wait_recorded
from tests.gateway.server import free_port, wait_healthy

pytestmark = pytest.mark.default_model

LINES = 80


def _serve(db: Path, port: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from engine.cli import main; main()", "serve", "--port", str(port), "--db", str(db),
           "--max-num-seqs", "16", "--job-concurrency", "8", "--log-level", "info",
           # The killed process's lines wait out their leases before the new one takes them.
           "--job-lease-s", "3",
           # No bundled embedding model: it loads after /health, competing with the batch for the cores.
           "--embedding-model", "none"]
    # One thread, as the replicas tests' servers: two threads on two cores another test worker uses spin at
    # each decode step's barrier while the OS runs the other job.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLLM_")} | {"OMP_NUM_THREADS": "1"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", lambda: proc.poll() is None, lambda: log.read_text()[-3000:])
    except RuntimeError:
        proc.kill()
        raise
    return proc


def _recorded(db: Path, batch_id: str) -> dict[int, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT line, id FROM batch_results WHERE batch_id = ?", (batch_id,)).fetchall())


def test_batch_survives_sigkill_and_completes_exactly_once(tmp_path):
    db, log, port = tmp_path / "jobs.db", tmp_path / "server.log", free_port()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0)
    lines = [completion_line(f"line-{i:03d}", f"Item {i}: the", 6, ignore_eos=True) for i in range(LINES)]

    proc = _serve(db, port, log)
    try:
        upload = client.files.create(file=("lines.jsonl", jsonl(lines)), purpose="batch")
        batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h")
        wait_recorded(client, batch.id, LINES * 2 // 5)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    before = _recorded(db, batch.id)
    assert 0 < len(before) < LINES, f"the kill should land mid-batch, {len(before)} lines were recorded"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # The counters moved in the same transactions as the results.
        assert conn.execute("SELECT completed + failed, status FROM batches WHERE id = ?",
                            (batch.id,)).fetchone() == (len(before), "in_progress")

    proc = _serve(db, port, log)
    try:
        done = wait_batch(client, batch.id, timeout=240)
        assert done.status == "completed", done
        counts = done.request_counts
        assert (counts.total, counts.completed, counts.failed) == (LINES, LINES, 0)
        out = output_lines(client, done.output_file_id)
        assert done.error_file_id is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    custom_ids = [o["custom_id"] for o in out]
    assert len(out) == LINES and len(set(custom_ids)) == LINES
    assert set(custom_ids) == {line["custom_id"] for line in lines}
    assert all(o["response"]["body"]["usage"]["completion_tokens"] == 6 for o in out)
    after = _recorded(db, batch.id)
    assert len(after) == LINES
    assert all(after[n] == result_id for n, result_id in before.items())  # recorded once, never redone
    assert "resuming 1 batches" in log.read_text()

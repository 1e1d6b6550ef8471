"""Property-based fuzzing of the whole API from its own OpenAPI document (schemathesis, its CLI as a
user runs it) against a live server on a tiny model: no request may get a 5xx, and no request that
breaks the document's schema may be accepted. Bounded (about 1,700 cases, under a minute on 2 cores),
so it stays in the default run; `SLLM_FUZZ_EXAMPLES` raises the bound for a longer hunt, and
`SLLM_FUZZ_STATEFUL=1` adds the stateful phase, which follows the document's links from the operations
that create files, batches, responses, sources and schedules to those that take their ids (about 8
minutes here)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server

EXAMPLES = int(os.environ.get("SLLM_FUZZ_EXAMPLES", "8"))
PHASES = "examples,coverage,fuzzing" + (",stateful" if os.environ.get("SLLM_FUZZ_STATEFUL") else "")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    model = make_tiny_llama(tmp / "tiny", resolve_model("default"))
    with run_server(tmp, model=str(model), max_model_len=256, max_file_bytes=1 << 20) as s:
        yield s


def test_no_5xx_and_no_invalid_body_accepted(server, tmp_path):
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    if exe is None:
        pytest.skip("schemathesis is not installed (the `test` extra installs it)")
    cmd = [exe, "run", f"{server.url}/openapi.json", "--checks", "not_a_server_error,negative_data_rejection",
           "--phases", PHASES, "--max-examples", str(EXAMPLES), "--workers", "1",
           "--seed", "20261124", "--request-timeout", "60", "--suppress-health-check", "all",
           "--report-dir", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path,  # its cache folder
                         env={**os.environ, "NO_COLOR": "1"})
    out = run.stdout + run.stderr
    cases = re.search(r"(\d+) generated", out)
    print(f"schemathesis: {cases.group(1) if cases else '?'} cases generated\n" + out[-1500:])
    assert run.returncode == 0, out[-6000:]
    assert cases and int(cases.group(1)) > 300, out[-3000:]
    server.wait_idle(timeout=60)

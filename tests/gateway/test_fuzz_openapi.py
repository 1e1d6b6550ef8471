"""Property-based fuzzing of the whole API from its own OpenAPI document (schemathesis, its CLI as a
user runs it) against a live server on a tiny model: no request may get a 5xx, and no request that
breaks the document's schema may be accepted. The document's examples (from the request models) run
first; a config binds the body fields that name server-side objects (a batch's input file, a
text-to-SQL source, a source's database URL) to real ones, so generated requests reach the logic
behind them. The default run is the examples and fuzzing phases (a few hundred cases, random valid and
invalid data for every operation); `SLLM_FUZZ_COVERAGE=1` adds the coverage phase, schemathesis's
deterministic sweep of every field's boundary and invalid values (about 2,800 more cases, nine tenths
of the full run's time). `SLLM_FUZZ_EXAMPLES` raises the fuzzing bound for a longer hunt, and
`SLLM_FUZZ_STATEFUL=1` adds the stateful phase, which follows the document's links from the operations
that create files, batches, responses, sources and schedules to those that take their ids (about 8
minutes here)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from engine.loader import resolve_model
from integrations.text2sql.dataset import demo_database
from tests.engine.conftest import make_tiny_llama
from tests.gateway.server import run_server

EXAMPLES = int(os.environ.get("SLLM_FUZZ_EXAMPLES", "8"))
PHASES = ",".join(["examples", *(["coverage"] if os.environ.get("SLLM_FUZZ_COVERAGE") else []), "fuzzing",
                    *(["stateful"] if os.environ.get("SLLM_FUZZ_STATEFUL") else [])])
# A floor on the cases schemathesis reports, so a run that silently generated almost nothing fails: the
# examples and fuzzing phases give about 300 at the default bound, the coverage phase about 2,800 more.
MIN_CASES = 2000 if "coverage" in PHASES else 200


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    model = make_tiny_llama(tmp / "tiny", resolve_model("default"))
    with run_server(tmp, model=str(model), max_model_len=256, max_file_bytes=1 << 20) as s:
        yield s


def _config(server, folder: Path) -> Path:
    """A schemathesis config binding body fields that name server-side objects to real ones, which no
    document can give: an uploaded batch input file, the demo text-to-SQL sources and a copy of a demo
    database. Schemathesis sends the file's id in every batch it creates, and draws the sources and the
    database URL from their dictionaries for most requests, generating the rest."""
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Hi", "max_tokens": 2}}
    upload = httpx.post(f"{server.base_url}/files", data={"purpose": "batch"},
                        files={"file": ("fuzz.jsonl", json.dumps(line).encode())})
    upload.raise_for_status()
    db = folder / "shop.sqlite"
    shutil.copy(demo_database("shop"), db)
    config = folder / "schemathesis.toml"
    config.write_text(f"""
[dictionaries.sources]
values = ["demo_shop", "demo_hr", "demo_school"]
[dictionaries.urls]
values = [{json.dumps(f"sqlite:///{db}")}]

[parameters]
"body.input_file_id" = {json.dumps(upload.json()["id"])}
"body.source" = {{ dictionary = "sources", probability = 0.8 }}
"body.url" = {{ dictionary = "urls", probability = 0.8 }}
""")
    return config


def test_no_5xx_and_no_invalid_body_accepted(server, tmp_path):
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    if exe is None:
        pytest.skip("schemathesis is not installed (the `test` extra installs it)")
    cmd = [exe, "--config-file", str(_config(server, tmp_path)), "run", f"{server.url}/openapi.json",
           "--checks", "not_a_server_error,negative_data_rejection",
           "--phases", PHASES, "--max-examples", str(EXAMPLES), "--workers", "1",
           "--seed", "20261124", "--request-timeout", "60", "--suppress-health-check", "all",
           "--report-dir", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path,  # its cache folder
                         env={**os.environ, "NO_COLOR": "1"})
    out = run.stdout + run.stderr
    cases = re.search(r"(\d+) generated", out)
    print(f"schemathesis: {cases.group(1) if cases else '?'} cases generated\n" + out[-4000:])
    assert run.returncode == 0, out[-6000:]
    assert cases and int(cases.group(1)) > MIN_CASES, out[-3000:]
    server.wait_idle(timeout=60)

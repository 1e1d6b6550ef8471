#!/usr/bin/env bash
# The one test command: README, `make test` and .ci/run all call this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
ruff check .
export TRITON_INTERPRET=1
python -m pytest -q -ra "$@"

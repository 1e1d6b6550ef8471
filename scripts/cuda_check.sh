#!/usr/bin/env bash
# The CUDA path on a lent GPU machine (the `device` tool), in one call of about three minutes: versions,
# `sllm bench kernels` (every Triton kernel against its torch reference in float16, bfloat16 and float32,
# then timed, with bandwidth against the measured copy rate) and benchmarks/cuda_parity.py (the engine's
# greedy tokens on the GPU against HF transformers' on the same GPU, every family, tiny random checkpoints
# built there). Logs go to $OUT. It needs the default model's tokenizer files: .gpu/a/tok.tar.xz, made by
# `scripts/text2sql_gpu_train.sh pack` (carry .gpu/a), or TOKENIZER_FROM=DIR.
#
#   device call: bash scripts/cuda_check.sh            (carry .gpu/a)
#   after a train call, the default model too: KERNELS=0 ONLY=none MODEL=FOLDER bash scripts/cuda_check.sh
#   here (dry run, no GPU): DEVICE=cpu ONLY=llama_gqa bash scripts/cuda_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda_check}
mkdir -p "$out"
tok=${TOKENIZER_FROM:-}
if [ -z "$tok" ]; then tok=/tmp/cuda_check_tok && mkdir -p "$tok" && tar -xJf .gpu/a/tok.tar.xz -C "$tok"; fi
py=${PYTHON:-python3}
unset TRITON_INTERPRET
# The C++ CPU kernels would be compiled at first use (minutes): nothing here needs them on the GPU machine.
export SLLM_CPU_KERNELS=${SLLM_CPU_KERNELS:-0}
# The wheels `text2sql_gpu_train.sh stash` installed (gguf, sqlglot), when it ran first on this machine.
[ -d /root/t2s/site ] && export PYTHONPATH="/root/t2s/site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
$py -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)
import importlib.util as u; print('triton', __import__('triton').__version__ if u.find_spec('triton') else None)"
if [ "${DEVICE:-cuda}" = cuda ] && [ "${KERNELS:-1}" = 1 ]; then
  timeout "${KERNELS_S:-120}" $py -c "from benchmarks.triton_kernels import main; main()" 2>&1 | tee "$out/kernels.txt"
fi
timeout "${PARITY_S:-150}" $py -m benchmarks.cuda_parity --tokenizer-from "$tok" --device "${DEVICE:-cuda}" \
  ${ONLY:+--only "$ONLY"} ${MODEL:+--model "$MODEL"} 2>&1 | tee "$out/parity.txt"

#!/usr/bin/env bash
# Issue 58: host RSS of each step of QLoRA's base load on a GPU (benchmarks/qlora_host_probe.py), one fresh
# process per case. On the device machine, from the repository root, carrying .whl and .bnb
# (.whl/t524: transformers 5.24.0 and peft 0.21.2 wheels for the constrained-versions case):
#   bash benchmarks/qlora_host_gpu.sh [DEADLINE_S]
# Results: $OUT/results.jsonl (one JSON line per step and a summary per case), $OUT/log.txt.
set -u
DEADLINE_S=${1:-470}
START=$(date +%s)
OUT=${OUT:-/tmp/qlora-host-out}
mkdir -p "$OUT"
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
RES=$OUT/results.jsonl
LOG=$OUT/log.txt
LLAMA=${LLAMA:-benchmarks/model_configs/llama3.2-1b.json}
QWEN=${QWEN:-benchmarks/model_configs/qwen2.5-0.5b.json}
{
  date -u; nproc; free -g; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -m pip show torch transformers peft accelerate safetensors bitsandbytes 2>/dev/null | grep -E '^(Name|Version|Location)'
  echo "OMP_NUM_THREADS=${OMP_NUM_THREADS-unset} MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-unset}"
  ldd --version | head -1
  cat /proc/sys/vm/overcommit_memory
} 2>&1 | tee -a "$LOG"

run_case() {  # NAME TIMEOUT_S ENV... -- ARGS...
  local name=$1 limit=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local left=$((DEADLINE_S - ($(date +%s) - START)))
  if [ "$left" -lt 40 ]; then echo "== $name: skipped, ${left}s left" | tee -a "$LOG"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (timeout ${limit}s) ${envs[*]}" | tee -a "$LOG"
  env "${envs[@]}" timeout "$limit" python3 benchmarks/qlora_host_probe.py --case "$name" --out "$RES" "$@" 2>&1 \
    | grep -v -E '^Loading weights|it/s\]$' | tee -a "$LOG"
  echo "== $name: rc ${PIPESTATUS[0]} at $(($(date +%s) - START))s" | tee -a "$LOG"
}

run_case llama1b-steps 150 X=1 -- --model-config $LLAMA
run_case llama1b-e2e 150 X=1 -- --model-config $LLAMA --mode e2e
run_case llama1b-arena2 150 MALLOC_ARENA_MAX=2 -- --model-config $LLAMA
run_case qwen05-steps 120 X=1 -- --model-config $QWEN
if ls .whl/t524/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site524 .whl/t524/*.whl; then
  run_case llama1b-tf524-steps 150 PYTHONPATH=/tmp/site524:$PYTHONPATH -- --model-config $LLAMA
fi
run_case llama1b-lowcpu-true 150 X=1 -- --model-config $LLAMA --low-cpu-mem-usage true
echo "done at $(($(date +%s) - START))s" | tee -a "$LOG"

#!/usr/bin/env bash
# Runs harness suites on a lent GPU machine (the device tool), writing results under $OUT.
# usage: bash benchmarks/device_run.sh DEADLINE_S SUITE|CASES.jsonl [...]   (carry .whl, and .dsext if present)
# SPLIT_GPUS=1 on a machine of several GPUs runs one harness per GPU on every n-th single-GPU case, each pinned to
# its own equal share of the cores (recorded in the results' provenance: cpu_cores, host_note), results in
# $OUT/results-gN.jsonl: single-GPU cases in parallel, each still alone on its GPU. Their memory figures are as
# good as alone; their step times are not: a neighbour's CPU Adam and pinned copies slowed offload and ZeRO-1/2
# steps by up to 45% (H200 x2, 2026-11-23), so throughput_check reports host-shared rows apart. Run suites
# whose timings matter (offload above all) without SPLIT_GPUS.
set -u
HARNESS_ARGS=${HARNESS_ARGS:-}
deadline=$1; shift
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
df -h /tmp | tee -a $OUT/gpu.txt; nproc | tee -a $OUT/gpu.txt
python3 -c "import peft, bitsandbytes, transformers, torch; print('peft', peft.__version__, 'bitsandbytes', bitsandbytes.__version__)" 2>&1 | tail -1 | tee -a $OUT/gpu.txt
# Build the fused ops once, in the background, while the first cases start (they wait on the lock).
python3 -c "from deepspeed.ops.op_builder import FusedAdamBuilder as F, CPUAdamBuilder as C; F().load(); C().load()" \
  > $OUT/build.log 2>&1 &
builder=$!
start=$(date +%s)
for suite in "$@"; do
  left=$(( deadline - ($(date +%s) - start) ))
  if [ $left -le 30 ]; then echo "device_run.sh: ${left}s left of DEADLINE_S=$deadline, too little to start $suite (give more than 30)"; break; fi
  if [ -f "$suite" ]; then which="--cases $suite"; else which="--suite $suite"; fi  # a JSONL of cases, or a suite name
  if [ -n "${SPLIT_GPUS:-}" ]; then
    n=$(nvidia-smi -L | wc -l); per=$(( $(nproc) / n ))
    for g in $(seq 0 $((n - 1))); do
      HARNESS_HOST_NOTE="one of $n harnesses on this host, GPU $g, cores $((g * per))-$((g * per + per - 1))" \
        taskset -c $((g * per))-$((g * per + per - 1)) python3 benchmarks/gpu_harness.py $which --gpus $g \
        --shard $g/$n --out $OUT/results-g$g.jsonl --deadline-s $left $HARNESS_ARGS > $OUT/harness-g$g.log 2>&1 &
    done
    wait $(jobs -p | grep -v "^$builder$")
    tail -n 40 $OUT/harness-g*.log
  else
    python3 benchmarks/gpu_harness.py $which --out $OUT/results.jsonl --deadline-s $left $HARNESS_ARGS
  fi
done
wait $builder
if [ ! -f .dsext/dsext.tgz.aa ]; then tar -cz -C $TORCH_EXTENSIONS_DIR . | split -b 15M - $OUT/dsext.tgz. ; fi
ls -la $OUT

#!/usr/bin/env bash
# Runs harness suites on a lent GPU machine (the device tool), writing results under $OUT.
# usage: bash benchmarks/device_run.sh DEADLINE_S SUITE|CASES.jsonl [...]   (carry .whl, and .dsext if present)
set -u
HARNESS_ARGS=${HARNESS_ARGS:-}
deadline=$1; shift
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
python3 -c "import peft, bitsandbytes, transformers, torch; print('peft', peft.__version__, 'bitsandbytes', bitsandbytes.__version__)" 2>&1 | tail -1 | tee -a $OUT/gpu.txt
# Build the fused ops once, in the background, while the first cases start (they wait on the lock).
python3 -c "from deepspeed.ops.op_builder import FusedAdamBuilder as F, CPUAdamBuilder as C; F().load(); C().load()" \
  > $OUT/build.log 2>&1 &
builder=$!
start=$(date +%s)
for suite in "$@"; do
  left=$(( deadline - ($(date +%s) - start) ))
  [ $left -gt 30 ] || break
  if [ -f "$suite" ]; then which="--cases $suite"; else which="--suite $suite"; fi  # a JSONL of cases, or a suite name
  python3 benchmarks/gpu_harness.py $which --out $OUT/results.jsonl --deadline-s $left $HARNESS_ARGS
done
wait $builder
if [ ! -f .dsext/dsext.tgz.aa ]; then tar -cz -C $TORCH_EXTENSIONS_DIR . | split -b 15M - $OUT/dsext.tgz. ; fi
ls -la $OUT

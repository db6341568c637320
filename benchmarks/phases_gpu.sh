#!/usr/bin/env bash
# The phases suite on a lent GPU (device tool; carry .whl and .bnb, and .dsext when present):
#   bash benchmarks/phases_gpu.sh DEADLINE_S SUITE.jsonl [CENSUS_DIR]
# Builds DeepSpeed's fused ops in the background (their cache comes back as $OUT/dsext.tgz.* to carry next time),
# runs benchmarks/phase_census.py on each case of CENSUS_DIR beside the harness (GPU memory reserved for it), and
# the harness on the suite's zero-run cases until DEADLINE_S. Results: $OUT/results.jsonl, $OUT/census.json.
set -u
deadline=$1; suite=$2; census_dir=${3:-}
start=$(date +%s)
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; df -h /tmp; nproc; free -g; } > $OUT/gpu.txt 2>&1
if [ ! -f .dsext/dsext.tgz.aa ]; then
  ( python3 -c "from deepspeed.ops.op_builder import FusedAdamBuilder as F, CPUAdamBuilder as C; F().load(); C().load()" \
      > /tmp/build.log 2>&1; tar -cz -C $TORCH_EXTENSIONS_DIR . | split -b 15M - $OUT/dsext.tgz. ) &
fi
reserve=0
if [ -n "$census_dir" ]; then
  reserve=12
  ( mkdir -p /tmp/census; i=0
    for c in $census_dir/*.json; do i=$((i+1))
      timeout 200 python3 -m deepspeed.launcher.runner --num_gpus 1 --master_port $((29650 + i)) \
        benchmarks/phase_census.py --case $c --out /tmp/census/$(basename $c) 2>&1 | grep -v "INFO\|WARNING" | tail -8
    done
    python3 -c "import json, glob, sys; json.dump({p.split('/')[-1]: json.load(open(p)) for p in sorted(glob.glob('/tmp/census/*.json'))}, sys.stdout)" > $OUT/census.json
  ) > $OUT/census.log 2>&1 &
fi
left=$(( deadline - ($(date +%s) - start) ))
python3 benchmarks/gpu_harness.py --cases $suite --out $OUT/results.jsonl --deadline-s $left --prestart 4 \
  --reserve-gib $reserve 2>&1 | grep --line-buffered -v "INFO\|WARNING" | tee $OUT/harness.log | tail -40
wait
ls -la $OUT

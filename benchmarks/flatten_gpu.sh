#!/usr/bin/env bash
# Issue 58, on one lent GPU (device tool; carry .whl): which branch ZeRO-1/2's weight flattening takes and what each
# branch holds, for zero-plan's Phi-3-mini 2-offload plan on a T4 (emulated by ZERO_RUN_MEMORY_LIMIT_BYTES), one fresh
# zero-run per case, 4 steps, the final export kept (--save final). benchmarks/flatten_probe/sitecustomize.py logs each
# free-memory answer DeepSpeed reads in DeepSpeedZeroOptimizer, and the live allocations at an out-of-memory.
# CASES: name:limit_bytes:force (limit 0 = the whole card; force "host" answers 0 to DeepSpeed's free-memory query).
set -u
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0 HF_HUB_OFFLINE=1
export PYTHONPATH=$PWD/benchmarks/flatten_probe:$PYTHONPATH
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch, transformers, deepspeed; print(torch.__version__, transformers.__version__, deepspeed.__version__)"; date -u; } 2>&1 | tee $OUT/env.txt
# The plan as zero-plan wrote it before it counted the flat buffer on every card (fd072c6: "fits", 13.24 of 14.75 GiB,
# initialize 7.30 GiB); today's zero-plan says it does not fit and writes none.
cp benchmarks/flatten_probe/phi3-t4-2offload.plan.json $OUT/plan.json
for case in ${CASES:-capped:14439795917: capped-host:14439795917:host whole:0: t4ctx:15416229888:}; do
  IFS=: read -r name limit force <<< "$case"
  mkdir -p $OUT/$name
  echo "== $name limit=$limit force=$force $(date -u +%T)" | tee -a $OUT/log.txt
  ( [ "$limit" != 0 ] && export ZERO_RUN_MEMORY_LIMIT_BYTES=$limit
    export FLATTEN_PROBE_OUT=$OUT/$name FLATTEN_PROBE_FORCE=$force
    timeout ${CASE_TIMEOUT:-240} python3 -m zero_planner.launch $OUT/plan.json --max-steps 4 --output-dir /tmp/run-$name ) \
    > $OUT/$name/run.log 2>&1
  echo "rc=$? $(date -u +%T)" | tee -a $OUT/log.txt
  grep -h "Flattening\|OutOfMemory\|out of memory\|phase\|initialize" $OUT/$name/run.log | grep -v Warning | tail -12 | tee -a $OUT/log.txt
  cp /tmp/run-$name/run_report.json $OUT/$name/ 2>/dev/null
  rm -rf /tmp/run-$name
done

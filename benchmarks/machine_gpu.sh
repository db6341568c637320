#!/usr/bin/env bash
# One lent GPU machine's speed and the same host-bound ZeRO-3 cases, twice, between probes (issue 26: do probes
# taken on a machine tell its host-bound steps' speed?). Run on the device machine, carrying .whl (and .dsext):
#   bash benchmarks/machine_gpu.sh [SUITE]     (default i26-machine-h200)
# Writes $OUT/probe.jsonl (machine_probe.py before, between and after the passes), $OUT/host_probe.jsonl
# (host_probe.py before and after) and $OUT/results-1.jsonl, results-2.jsonl (the two passes).
set -u
suite=benchmarks/suites/${1:-i26-machine-h200}.jsonl
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee $OUT/gpu.txt
nproc | tee -a $OUT/gpu.txt; uptime | tee -a $OUT/gpu.txt
python3 -c "from deepspeed.ops.op_builder import FusedAdamBuilder as F; F().load()" > $OUT/build.log 2>&1 &
probe() { CUDA_VISIBLE_DEVICES=0 timeout 60 python3 benchmarks/machine_probe.py --label "$1" >> $OUT/probe.jsonl; }
host() { CUDA_VISIBLE_DEVICES=0 timeout 120 python3 benchmarks/host_probe.py --json >> $OUT/host_probe.jsonl 2>> $OUT/host_probe.log; }
probe before
wait  # the fused op is built before anything is timed, so the build does not share the host with a probe or a case
host
python3 benchmarks/gpu_harness.py --cases $suite --out $OUT/results-1.jsonl --deadline-s 200
probe between
python3 benchmarks/gpu_harness.py --cases $suite --out $OUT/results-2.jsonl --deadline-s 200
probe after
host
tail -n 3 $OUT/host_probe.log
ls -la $OUT

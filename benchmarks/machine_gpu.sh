#!/usr/bin/env bash
# One lent GPU machine's speed and the same host-bound ZeRO-3 cases, twice, between probes (issue 26: do probes
# taken on a machine tell its host-bound steps' speed?). Run on the device machine, carrying .whl (and .dsext):
#   bash benchmarks/machine_gpu.sh [SUITE]     (default i26-machine-h200)
# Writes $OUT/probe.jsonl (machine_probe.py before, between and after the passes), $OUT/host_probe.jsonl
# (host_probe.py before), $OUT/sampler.jsonl (the host's figures every 2 s throughout, one core of the 16, while
# the cases run: does the host's speed move within a call, and do the steps follow it) and $OUT/results-1.jsonl,
# results-2.jsonl (the two passes). HOST_PROBE=0 skips host_probe.py (about 60 s), SAMPLER=0 the sampler, PASSES=1
# the second pass.
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
[ "${SAMPLER:-1}" = 0 ] || { CUDA_VISIBLE_DEVICES= python3 benchmarks/machine_probe.py --sample-every 2 --for 560 > $OUT/sampler.jsonl 2>&1 & }
wait $(jobs -p | head -1)  # the fused op is built before anything is timed, so the build does not share the host with a probe or a case
[ "${HOST_PROBE:-1}" = 0 ] || host
python3 benchmarks/gpu_harness.py --cases $suite --out $OUT/results-1.jsonl --deadline-s 200
if [ "${PASSES:-2}" = 2 ]; then
  probe between
  python3 benchmarks/gpu_harness.py --cases $suite --out $OUT/results-2.jsonl --deadline-s 200
fi
probe after
ls -la $OUT

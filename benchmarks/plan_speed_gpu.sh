#!/usr/bin/env bash
# Times `zero-plan --gpus auto` on a lent GPU machine (device tool; carry .whl): benchmarks/plan_speed.py --auto-only,
# 5 fresh processes per case, every run and its provenance written to $OUT/plan_speed_auto.json.
# usage: bash benchmarks/plan_speed_gpu.sh [RUNS]
set -u
source benchmarks/device_env.sh
python3 benchmarks/plan_speed.py --auto-only --runs "${1:-5}" --json "${OUT:-/tmp}/plan_speed_auto.json"

#!/usr/bin/env bash
# On a lent GPU (device tool; carry .whl, and .dsext if present): zero-run vs a bare DeepSpeed loop vs HF
# Trainer, one GPU, Llama-3.2-1B from its committed config (random init), synthetic data, 50 steps each.
# Result: $OUT/zero_run_vs_trainer.json. Extra arguments go to benchmarks/zero_run_vs_trainer.py.
set -u
source benchmarks/device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
python3 benchmarks/zero_run_vs_trainer.py --gpus auto --steps 50 --work-dir /tmp/zrvt --out $OUT/zero_run_vs_trainer.json "$@" 2>&1 \
  | grep -v "WARNING\|INFO\|FutureWarning\|return func"

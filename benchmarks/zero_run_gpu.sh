#!/usr/bin/env bash
# zero-plan, then zero-run, on a lent GPU (device tool): Llama-3.2-1B from its config (random init), one GPU,
# 40 steps per run; the run reports land in $OUT. Carry .whl (and .dsext; .bnb for qlora).
# RUNS lists method:stage pairs (default "full:2 full:3"), e.g. RUNS="qlora:0 lora:2".
set -u
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
for run in ${RUNS:-full:2 full:3}; do
  method=${run%%:*} stage=${run##*:} name="${run/:/-s}"
  extra=""; [ "$method" = full ] && extra="--no-grad-checkpointing" || extra="--grad-checkpointing"
  python3 -m zero_planner --model meta-llama/Llama-3.2-1B --gpus auto --method "$method" --stage "$stage" \
    --micro-batch 4 --seq-len 1024 $extra --init random --tokenizer bytes -o "$OUT/plan-$name.json" | tail -12
  python3 -m zero_planner.launch "$OUT/plan-$name.json" --max-steps 40 --output-dir "/tmp/run-$name" 2>&1 \
    | grep -v "WARNING\|INFO\|FutureWarning\|return func" | tail -30
  cp "/tmp/run-$name/run_report.json" "$OUT/report-$name.json"; rm -rf "/tmp/run-$name"
done

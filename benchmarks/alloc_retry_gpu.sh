#!/usr/bin/env bash
# zero-run at the memory edge, on a lent GPU (device tool): Llama-3.2-1B from its config (random init), ZeRO-2 at
# 4 x 1,024 on one GPU, its allocator capped (ZERO_RUN_MEMORY_LIMIT_BYTES) at HEADROOMS times the plan's predicted
# peak allocated, so that PyTorch must flush its cache to stay under the cap. Shows whether zero-run warns once and
# records alloc_retry_steps per rank. Carry .whl (and .dsext where built). Plan, logs and reports land in $OUT.
set -u
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
python3 -m zero_planner --model meta-llama/Llama-3.2-1B --gpus 1xH100 --stage 2 --micro-batch 4 --seq-len 1024 \
  --no-grad-checkpointing --init random --tokenizer bytes -o "$OUT/plan.json" | tail -4
peak=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['estimate']['per_gpu']['peak_allocated'])" "$OUT/plan.json")
for headroom in ${HEADROOMS:-1.01 1.03}; do
  limit=$(python3 -c "print(int($peak * $headroom))")
  ZERO_RUN_MEMORY_LIMIT_BYTES=$limit python3 -m zero_planner.launch "$OUT/plan.json" --max-steps "${STEPS:-8}" \
    --save none --output-dir "/tmp/run-$headroom" > "$OUT/run-$headroom.log" 2>&1
  echo "headroom $headroom: cap $limit bytes, predicted peak $peak, exit $?"
  cp "/tmp/run-$headroom/run_report.json" "$OUT/report-$headroom.json" 2>/dev/null
  grep -a "allocator\|flushed\|out of GPU memory" "$OUT/run-$headroom.log" | head -5
done

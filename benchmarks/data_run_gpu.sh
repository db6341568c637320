#!/usr/bin/env bash
# A user's larger dataset through zero-run on a lent GPU machine (device tool): ROWS rows (default 20,000: 75 MB) of
# prompt/response JSONL and the same as text rows (data_rss.write_rows), each planned with zero-plan --dataset
# (the host figures count each rank's tokenized data) and trained 6 steps, nothing saved, MODEL from its config
# (random init) on every GPU at micro-batch 4. Plans and run reports land in $OUT. Carry .whl and .whl/data.
set -u
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
MODEL=${MODEL:-benchmarks/model_configs/llama3.2-1b.json}
ROWS=${ROWS:-20000}
python3 -c "from benchmarks.data_rss import write_rows; from pathlib import Path; write_rows(Path('$OUT'), $ROWS)"
for fmt in instructions text; do
  python3 -m zero_planner --model "$MODEL" --gpus auto --seq-len 2048 --micro-batch 4 --stage 1 --no-grad-checkpointing \
    --dataset "$OUT/$fmt.jsonl" --tokenizer bytes --init random --save none --max-steps 6 -o "$OUT/plan-$fmt.json" \
    > "$OUT/plan-$fmt.txt" 2>&1 || { tail -5 "$OUT/plan-$fmt.txt"; continue; }
  grep "tokenized" -A1 "$OUT/plan-$fmt.txt"
  python3 -m zero_planner.launch "$OUT/plan-$fmt.json" --output-dir "/tmp/data-run-$fmt" 2>&1 \
    | grep -v "WARNING\|INFO\|FutureWarning\|return func" | tail -22
  cp "/tmp/data-run-$fmt/run_report.json" "$OUT/report-$fmt.json"; rm -rf "/tmp/data-run-$fmt"
done
rm -f "$OUT"/*.jsonl

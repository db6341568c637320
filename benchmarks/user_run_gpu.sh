#!/usr/bin/env bash
# A user's run on a lent GPU machine (device tool): their own DeepSpeed JSON (CONFIG, default LLaMA-Factory's
# ds_z2.json: ZeRO-2 with DeepSpeed's overlap_comm false and 5e8-element buckets, "auto" for the rest), their own
# instruction JSONL (data_rss.write_rows: 4,000 prompt/response rows of 100-1,400 words; chat rows need a tokenizer's
# template, and the machine has no hub), MODEL from its config (random init; Gemma 2
# 2B by default, eager attention as zero-run runs it) on every GPU of the machine, at the largest micro-batch that
# zero-plan says fits the JSON (MB_MAX down to 1). Checkpoints every 4 steps (newest 1 kept) with eval at each,
# 8 steps, then `--resume` to step 12 and the final export. The plan, both run reports and the checkpoint folder's
# listing land in $OUT. Carry .whl (and .whl/data for datasets).
set -u
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
MODEL=${MODEL:-benchmarks/model_configs/gemma2-2b.json}
CONFIG=${CONFIG:-benchmarks/user_configs/llamafactory-ds_z2.json}
SEQ=${SEQ:-2048}
MB_MAX=${MB_MAX:-12}
RUN=/tmp/user-run
# the same rows, byte for byte, as the inline generator the committed runs used (15,057,090 bytes)
python3 -c "from benchmarks.data_rss import write_rows; from pathlib import Path; write_rows(Path('$OUT'), 4000)"
rm -f "$OUT/text.jsonl"
for mb in $(seq "$MB_MAX" -1 1); do
  if python3 -m zero_planner --model "$MODEL" --gpus auto --seq-len "$SEQ" --micro-batch "$mb" --ds-config "$CONFIG" \
      --dataset "$OUT/instructions.jsonl" --eval-split 0.02 --tokenizer bytes --init random --save steps --save-steps 4 \
      --save-total-limit 1 --max-steps 8 -o "$OUT/plan.json" > "$OUT/plan.txt" 2>&1; then
    break
  fi
done
tail -25 "$OUT/plan.txt"
python3 -m zero_planner.launch "$OUT/plan.json" --output-dir "$RUN" 2>&1 | grep -v "WARNING\|INFO\|FutureWarning\|return func" | tail -40
cp "$RUN/run_report.json" "$OUT/report-1.json"
python3 -m zero_planner.launch "$OUT/plan.json" --output-dir "$RUN" --resume --max-steps 12 2>&1 \
  | grep -v "WARNING\|INFO\|FutureWarning\|return func" | tail -40
cp "$RUN/run_report.json" "$OUT/report-2.json"
(cd "$RUN" && find . -maxdepth 3 | sort && du -sh . ./*) > "$OUT/files.txt" 2>&1
rm -rf "$RUN"

#!/usr/bin/env bash
# One lent H200 (device tool; carry .whl, .bnb, .dsext): the phases cases of SUITE until PHASES_DEADLINE_S, then
# issue 25's target run: a full fine-tune of a 7B-class model at 2048 tokens planned by `zero-plan --gpus auto`,
# `--save final` (no optimizer checkpoints: the 64 GiB disk holds the export), TensorBoard logging, 20 steps.
#   bash benchmarks/final_gpu.sh SUITE.jsonl PHASES_DEADLINE_S FT_TIMEOUT_S
# Results: $OUT/results.jsonl (harness), $OUT/ft7b.tgz (plan, run_report.json, run_report.html, event files,
# the export's file list and the log tail).
set -u
suite=$1; phases_deadline=$2; ft_timeout=$3
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; df -h /tmp; nproc; free -g; } > $OUT/gpu.txt 2>&1
python3 -u benchmarks/gpu_harness.py --cases $suite --out $OUT/results.jsonl --deadline-s $phases_deadline \
  --prestart 5 2>&1 | grep --line-buffered -v "INFO\|WARNING" > $OUT/harness.log
R=/tmp/ft7b; mkdir -p $R
start=$(date +%s)
python3 -m zero_planner --model benchmarks/model_configs/mistral-7b.json --gpus auto --seq-len 2048 --init random \
  --tokenizer bytes --save final --report-to tensorboard --max-steps 20 --eval-split 0.02 -o $R/plan.json \
  > $R/plan.txt 2>&1
timeout $ft_timeout python3 -m zero_planner.launch $R/plan.json --output-dir $R/run > $R/run.log 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >> $R/run.log
{ ls -la $R/run $R/run/final 2>&1; du -sh $R/run/final 2>&1; df -h /tmp; } > $R/files.txt
tail -c 20000 $R/run.log > $R/run-tail.log; rm -f $R/run.log
tar -czf $OUT/ft7b.tgz -C $R plan.json plan.txt run-tail.log files.txt $(cd $R && ls run/run_report.json run/run_report.html 2>/dev/null) \
  $(cd $R && find run -name 'events.out.tfevents*' -type f 2>/dev/null | head -20)  # DeepSpeed writes them to run/logs/zero-run/
tail -5 $OUT/harness.log; tail -3 $R/run-tail.log; cat $R/files.txt | head -20

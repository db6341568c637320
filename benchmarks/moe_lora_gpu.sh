#!/usr/bin/env bash
# LoRA on fused 3-D expert weights, measured on a lent GPU (device tool; carry .whl, with .whl/hf for the constrained
# transformers and peft): benchmarks/moe_lora_probe.py, one process per case, appending to $OUT/probe.jsonl and
# logging to $OUT/log.txt as it goes. CASES: "config:layers:targets:gc:mb:seq" items (default below).
set -u
source benchmarks/device_env.sh
export TORCH_CUDA_ARCH_LIST=9.0
python3 -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)" | tee $OUT/log.txt
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $OUT/log.txt
Q=benchmarks/model_configs/qwen3-30b-a3b.json O=benchmarks/model_configs/olmoe-1b-7b.json
DEFAULT="$Q:4:all-linear:0:1:1024 $Q:4:attention:0:1:1024 $Q:4:all-linear:1:1:1024 $Q:4:attention:1:1:1024
$Q:4:all-linear:0:2:1024 $Q:4:all-linear:1:2:1024 $Q:4:all-linear:0:1:2048 $Q:4:attention:0:2:1024
$Q:2:all-linear:0:1:1024 $Q:2:all-linear:1:1:1024 $O:4:all-linear:0:1:1024 $O:4:attention:0:1:1024 $O:4:all-linear:1:1:1024"
for case in ${CASES:-$DEFAULT}; do
  IFS=: read -r cfg layers targets gc mb seq <<< "$case"
  flag=""; [ "$gc" = 1 ] && flag="--gc"
  timeout 240 python3 benchmarks/moe_lora_probe.py --config $cfg --layers $layers --targets $targets $flag --mb $mb \
    --seq $seq --out /tmp/one.json >> $OUT/log.txt 2>&1 && cat /tmp/one.json | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" >> $OUT/probe.jsonl \
    || echo "{\"case\": \"$case\", \"failed\": true}" >> $OUT/probe.jsonl
  echo "done $case" | tee -a $OUT/log.txt
done

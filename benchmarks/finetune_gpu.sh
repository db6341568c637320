#!/usr/bin/env bash
# Issue 12/13/11 targets as a user meets them, on a lent GPU (device tool; carry .whl (with .whl/data: datasets,
# dill, multiprocess, xxhash) and .dsext). Stages, each under its own time limit, results in $OUT/results.tgz
# (refreshed after every stage) and the log in $OUT/finetune.log:
#   plan-auto  `zero-plan --model meta-llama/Llama-3.2-1B --gpus auto`, 3 fresh processes, wall time + stderr lines
#   finetune   Llama-3.2-1B by hub id from a local HF cache (benchmarks/hub_cache.py: random weights saved as a
#              checkpoint, BPE tokenizer with a chat template), offline, chat JSONL, zero-plan --gpus auto at
#              seq 2048 (the planner's own operating point), zero-run 30 steps; TORCH_CUDA_ARCH_LIST left as the
#              machine sets it (9.0a: zero-run must replace it)
#   vs-trainer benchmarks/zero_run_vs_trainer.py: zero-run vs a bare DeepSpeed loop vs HF Trainer, 50 steps
#   probe      zero-run --probe 3 --probe-only on Llama-3.2-1B (config, random init) at seq 2048, timed
#   vs-alloc   zero-run and the bare loop, with the default allocator and with expandable segments for both
#   vs-bare    zero-run (as a user runs it) and the bare loop alternated twice at a GPU-bound shape
#   zr-only    the vs-trainer benchmark's zero-run alone (the other two runs' results kept from an earlier call)
#   phases     zero-run by hub id at --stage 0 and --stage 3 (auto micro-batch, seq 2048), 10 steps, a checkpoint
#              and the final export: host RSS per phase (run_report ranks[].host_rss_marks)
#   op:FILE    the GPU harness on a case file (benchmarks/device_run.sh) until DEADLINE_S from the start
# STAGES="plan-auto finetune vs-trainer probe" by default.
set -u
begin=$(date +%s)
R=/tmp/res; mkdir -p $R
exec > >(tee $OUT/finetune.log) 2>&1
source benchmarks/device_env.sh  # TORCH_CUDA_ARCH_LIST stays the machine's
echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $R/gpu.txt
python3 -c "import torch, transformers, datasets, deepspeed, pyarrow, huggingface_hub as h; print('torch', torch.__version__,
 'transformers', transformers.__version__, 'datasets', datasets.__version__, 'deepspeed', deepspeed.__version__,
 'pyarrow', pyarrow.__version__, 'huggingface_hub', h.__version__)" 2>&1 | tail -1 | tee -a $R/gpu.txt
nproc >> $R/gpu.txt; free -g >> $R/gpu.txt
save() { tar -czf $OUT/results.tgz -C $R . ; }
filter() { grep -v "WARNING\|INFO\|FutureWarning\|return func\|warnings.warn" ; }
# The fused Adam build (cached in .dsext when carried), in the background while plans run.
TORCH_CUDA_ARCH_LIST=9.0 python3 -c "from deepspeed.ops.op_builder import FusedAdamBuilder as F; F().load()" > $R/build.log 2>&1 &
export HF_HUB_CACHE=/tmp/hf/hub HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE=/tmp/hfds
python3 benchmarks/hub_cache.py --hub-id meta-llama/Llama-3.2-1B --model-config benchmarks/model_configs/llama3.2-1b.json \
  --cache $HF_HUB_CACHE --chat-data /tmp/chat.jsonl --conversations 12000
for stage in ${STAGES:-plan-auto finetune vs-trainer probe}; do
  echo "=== $stage $(date +%T)"; t0=$(date +%s.%N)
  case $stage in
  plan-auto)
    for i in 1 2 3; do
      /usr/bin/time -f "wall %e s" -o $R/plan-auto-$i.time python3 -m zero_planner --model meta-llama/Llama-3.2-1B \
        --gpus auto > $R/plan-auto-$i.out 2> $R/plan-auto-$i.err
      echo "plan $i: $(cat $R/plan-auto-$i.time | tail -1), stderr lines $(wc -l < $R/plan-auto-$i.err)"
    done
    cat $R/plan-auto-1.out ;;
  finetune)
    python3 -m zero_planner --model meta-llama/Llama-3.2-1B --gpus auto --seq-len 2048 --dataset /tmp/chat.jsonl \
      --lr 2e-5 --lr-scheduler cosine --warmup 3 --max-steps 30 --save-steps 1000 -o $R/ft-plan.json
    timeout 300 python3 -m zero_planner.launch $R/ft-plan.json --output-dir /tmp/ft 2>&1 | filter | tail -45
    cp /tmp/ft/run_report.json $R/ft-report.json ;;
  vs-trainer)
    unset HF_HUB_OFFLINE
    timeout 330 python3 benchmarks/zero_run_vs_trainer.py --gpus auto --steps 50 --work-dir /tmp/zrvt \
      --out $R/zero_run_vs_trainer.json 2>&1 | filter | tail -30 ;;
  probe)
    python3 -m zero_planner --model benchmarks/model_configs/llama3.2-1b.json --gpus auto --seq-len 2048 \
      --init random --tokenizer bytes -o /tmp/probe/plan.json | tail -14
    /usr/bin/time -f "probe wall %e s" timeout 300 python3 -m zero_planner.launch /tmp/probe/plan.json --probe 3 \
      --probe-only 2>&1 | filter | tail -30
    cp /tmp/probe/plan.probed.json $R/ ;;
  vs-alloc)
    # zero-run and the bare loop on one machine, each allocator setting for both: is the per-step gap the loop's
    # or expandable segments'? (zero-run keeps a PYTORCH_CUDA_ALLOC_CONF the user exported)
    unset HF_HUB_OFFLINE
    for conf in default expandable; do
      ( export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:$([ $conf = expandable ] && echo True || echo False)
        timeout 240 python3 benchmarks/zero_run_vs_trainer.py --gpus auto --steps 50 --work-dir /tmp/zrvt \
          --only zero-run,deepspeed --out $R/vs-alloc-$conf.json 2>&1 | filter | tail -8 )
      rm -rf /tmp/zrvt
    done ;;
  vs-bare)
    # zero-run as a user runs it (its own allocator setting) vs the bare loop, alternated twice (A B A B) at a
    # GPU-bound shape (Llama-3.2-1B, stage 2, 8 x 2048), so drift of the machine shows as a difference between rounds
    unset HF_HUB_OFFLINE PYTORCH_CUDA_ALLOC_CONF
    for round in 1 2; do
      timeout 200 python3 benchmarks/zero_run_vs_trainer.py --gpus auto --steps 50 --micro-batch 8 --seq-len 2048 \
        --work-dir /tmp/zrvt --only zero-run,deepspeed --out $R/vs-bare-$round.json 2>&1 | filter | tail -7
      rm -rf /tmp/zrvt
    done ;;
  zr-only)
    unset HF_HUB_OFFLINE
    timeout 200 python3 benchmarks/zero_run_vs_trainer.py --gpus auto --steps 50 --work-dir /tmp/zrvt --only zero-run \
      --out $R/zero_run_only.json 2>&1 | filter | tail -20
    rm -rf /tmp/zrvt ;;
  phases)
    for st in 0 3; do
      python3 -m zero_planner --model meta-llama/Llama-3.2-1B --gpus auto --seq-len 2048 --stage $st \
        --dataset /tmp/chat.jsonl --max-steps 10 --save-steps 1000 -o $R/ph-$st.json | tail -4
      timeout 240 python3 -m zero_planner.launch $R/ph-$st.json --output-dir /tmp/ph 2>&1 | filter | tail -12
      cp /tmp/ph/run_report.json $R/ph-report-$st.json; ls -la /tmp/ph/final; rm -rf /tmp/ph
    done ;;
  op:*)
    save
    bash benchmarks/device_run.sh $(( ${DEADLINE_S:-540} - ($(date +%s) - begin) )) ${stage#op:} ;;
  esac
  echo "=== $stage done in $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  save
done

#!/usr/bin/env bash
# zero-plan, then zero-run, on a lent GPU (device tool): Llama-3.2-1B from its config (random init) under
# ZeRO stages 2 and 3, one GPU, 40 steps each; the run reports land in $OUT. Carry .whl (and .dsext).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_EXTENSIONS_DIR=/tmp/dsext
mkdir -p $TORCH_EXTENSIONS_DIR; if [ -f .dsext/dsext.tgz.aa ]; then cat .dsext/dsext.tgz.* | tar -xz -C $TORCH_EXTENSIONS_DIR; fi
for stage in ${STAGES:-2 3}; do
  python3 -m zero_planner --model meta-llama/Llama-3.2-1B --gpus auto --stage "$stage" --micro-batch 4 \
    --seq-len 1024 --no-grad-checkpointing -o "$OUT/plan-s$stage.json" | tail -25
  python3 -m zero_planner.launch "$OUT/plan-s$stage.json" --max-steps 40 --output-dir "/tmp/run-s$stage" 2>&1 \
    | grep -v "WARNING\|INFO\|FutureWarning\|return func" | tail -30
  cp "/tmp/run-s$stage/run_report.json" "$OUT/report-s$stage.json"; rm -rf "/tmp/run-s$stage"
done

#!/usr/bin/env bash
# zero-planner in one go, with no network beyond the package index and no GPU:
#   1. plan Llama-3-8B full fine-tuning on two T4s (catalog model: only pydantic and rich needed, so it comes
#      first, while torch and DeepSpeed install in the background);
#   2. the same with --method auto (LoRA/QLoRA when full fine-tuning does not fit);
#   3. plan a tiny Llama on two CPU processes, then train it 10 steps with zero-run under the real deepspeed
#      launcher (the two DeepSpeed ops it JIT-compiles are built beforehand, while pip installs the rest);
#   4. a summary: what was planned, what ran, measured against predicted, and how long each phase took.
# Full logs (pip, DeepSpeed) go to $OUT/logs/. Environment: VENV (default .venv), DEMO_DIR (default runs/demo).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
OUT="${DEMO_DIR:-runs/demo}"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
T0=$(date +%s.%N)
TIMES=()
mark() { TIMES+=("$1=$(python3 -c "print(f'{$(date +%s.%N) - $T0:.0f}')")"); }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; }
fail_with_log() { echo "demo: $1 failed; see $2" >&2; tail -20 "$2" >&2; exit 1; }

# --- a venv with only what planning needs (seconds), then the heavy install in the background ----------------
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
# DeepSpeed's JIT ops are built per venv: a shared ~/.cache/torch_extensions would be rebuilt back and forth
# by every venv on the machine (the build flags name the venv's paths).
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$(cd "$VENV" && pwd)/torch_extensions}"
mark venv
python -m pip install --quiet -c constraints.txt pydantic rich psutil >"$LOGS/pip-light.log" 2>&1 || fail_with_log "pip install (planning)" "$LOGS/pip-light.log"
mark light_install
# torch first, the CPU build pinned (pip would otherwise pick whatever torch satisfies deepspeed), then
# deepspeed, in the background while steps 1 and 2 plan. No [dev]: the demo runs no tests.
( python -m pip install --quiet -c constraints.txt torch==2.13.0 && python -m pip install --quiet -c constraints.txt deepspeed ) \
    >"$LOGS/pip-torch-deepspeed.log" 2>&1 &
INSTALL_PID=$!

step "1. Will full fine-tuning of Llama-3-8B fit on two T4s (Kaggle: 29 GiB host memory)?"
show zero-plan --model meta-llama/Meta-Llama-3-8B --gpus 2xT4 --cpu-mem 29GiB --grad-checkpointing
status=0
python -m zero_planner --model meta-llama/Meta-Llama-3-8B --gpus 2xT4 --cpu-mem 29GiB --grad-checkpointing || status=$?
mark first_plan
[ "$status" -le 1 ] || exit "$status"  # 0: a plan fits, 1: nothing fits (the output says what would)
echo "(--grad-checkpointing keeps the table to one screen; without it zero-plan tries both settings)"

step "2. Then let zero-plan pick the method: full, LoRA or QLoRA, whichever fits and runs fastest"
show zero-plan --model meta-llama/Meta-Llama-3-8B --gpus 2xT4 --cpu-mem 29GiB --grad-checkpointing --method auto -o "$OUT/llama3-8b-2xT4.json"
python -m zero_planner --model meta-llama/Meta-Llama-3-8B --gpus 2xT4 --cpu-mem 29GiB --grad-checkpointing \
    --method auto -o "$OUT/llama3-8b-2xT4.json"

step "Installing torch and deepspeed, then transformers and datasets (logs: $LOGS/pip-*.log)"
wait "$INSTALL_PID" || fail_with_log "pip install (torch, deepspeed)" "$LOGS/pip-torch-deepspeed.log"
mark torch_deepspeed_install

# DeepSpeed's CPU accelerator JIT-compiles two ops at the first run, the shared-memory collectives and the
# optimizer (FusedAdam; the demo's plan offloads nothing): compiled here while pip installs the rest, instead
# of inside zero-run.
export DS_ACCELERATOR=cpu
build_op() { python -c "from deepspeed.accelerator import get_accelerator; get_accelerator().create_op_builder('$1').load()"; }
build_op ShareMemCommBuilder >"$LOGS/op-shm.log" 2>&1 &
SHM_PID=$!
build_op FusedAdamBuilder >"$LOGS/op-fused-adam.log" 2>&1 &
ADAM_PID=$!
python -m pip install --quiet -c constraints.txt -e . >"$LOGS/pip-package.log" 2>&1 || fail_with_log "pip install -e ." "$LOGS/pip-package.log"
mark package_install

step "3. Plan a tiny Llama (from its config.json) on two CPU processes"
show zero-plan --model benchmarks/model_configs/llama-tiny.json --gpus cpu:2 --cpu-mem 8GiB --seq-len 128 --micro-batch 4 --global-batch 16 --tokenizer bytes -o "$OUT/plan.json"
zero-plan --model benchmarks/model_configs/llama-tiny.json --gpus cpu:2 --cpu-mem 8GiB --seq-len 128 \
    --micro-batch 4 --global-batch 16 --tokenizer bytes -o "$OUT/plan.json"   # a bare config: byte-level tokens
mark cpu_plan
echo "(waiting for the two DeepSpeed ops to compile: logs $LOGS/op-*.log)"
wait "$SHM_PID" || fail_with_log "building ShareMemCommBuilder" "$LOGS/op-shm.log"
wait "$ADAM_PID" || fail_with_log "building FusedAdamBuilder" "$LOGS/op-fused-adam.log"
mark op_builds

step "4. Train it: zero-run under the deepspeed launcher (DeepSpeed's INFO lines: $LOGS/zero-run.log)"
show zero-run "$OUT/plan.json" --max-steps 10 --output-dir "$OUT/run"
zero-run "$OUT/plan.json" --max-steps 10 --output-dir "$OUT/run" 2>&1 | tee "$LOGS/zero-run.log" \
    | grep --line-buffered -v -E '^\[[0-9-]+ [0-9:,]+\] \[INFO\]'
mark training

step "Summary"
python - "$OUT" "${TIMES[@]}" <<'EOF'
import json
import sys
from pathlib import Path

GIB = 2**30
out = Path(sys.argv[1])
times = dict(t.split("=") for t in sys.argv[2:])
big = json.loads((out / "llama3-8b-2xT4.json").read_text())
plan = json.loads((out / "plan.json").read_text())
report = json.loads((out / "run" / "run_report.json").read_text())


def strategy(p):
    t, s = p["training"], p["strategy"]
    ckpt = "with" if t["gradient_checkpointing"] else "without"
    method = "full fine-tuning" if t["method"] == "full" else f"{t['method']} r={t['lora']['r']}"
    return (f"{method}, ZeRO stage {s['name'] or s['stage']}, micro-batch {t['micro_batch_size']} x accumulation "
            f"{t['gradient_accumulation_steps']}, {ckpt} checkpointing")


e = big["estimate"]["per_gpu"]
print(f"planned  Llama-3-8B on 2x T4: full fine-tuning does not fit; chosen {strategy(big)}:")
print(f"         {e['total'] / GIB:.2f} GiB per GPU predicted (peak allocated {e['peak_allocated'] / GIB:.2f} GiB)")
losses = report["losses"]
print(f"ran      llama-tiny (random init) on {report['world_size']} CPU processes, {strategy(plan)},")
print(f"         {report['steps']} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
ranks = report["ranks"]
measured = [r["peak_allocated_bytes"] for r in ranks if r["peak_allocated_bytes"] is not None]
predicted = plan["estimate"]["per_gpu"]["peak_allocated"]
if measured:
    print(f"memory   peak allocated: measured {max(measured) / GIB:.3f} GiB, predicted {predicted / GIB:.3f} GiB")
else:
    print(f"memory   peak allocated: predicted {predicted / GIB:.3f} GiB per rank; not measured on CPU "
          f"(torch tracks CUDA allocations only; GPU accuracy: docs/accuracy.md)")
rss = sum(r["host_rss_bytes"] or 0 for r in ranks)
print(f"         host: measured RSS {rss / GIB:.2f} GiB over {len(ranks)} ranks, predicted "
      f"{plan['estimate']['cpu']['total'] / GIB:.2f} GiB per node")
tps, pred = report["tokens_per_second"], report.get("predicted_tokens_per_second")
print(f"speed    measured {tps:,.0f} tokens/s; predicted "
      + (f"{pred:,.0f}" if pred else "n/a (the step-time model is not applied to CPU processes)"))
t = {k: int(v) for k, v in times.items()}
print(f"time     first plan on screen at {t['first_plan']} s (venv {t['venv']} s, planning deps "
      f"{t['light_install'] - t['venv']} s); torch + deepspeed installed at {t['torch_deepspeed_install']} s, "
      f"the rest at {t['package_install']} s; ops compiled at {t['op_builds']} s; training "
      f"{t['training'] - t['op_builds']} s; total {t['training']} s")
EOF

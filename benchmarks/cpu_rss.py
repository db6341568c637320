"""Host memory of zero-run's CPU processes (--gpus cpu:N), measured against the plan's host figure.

    python benchmarks/cpu_rss.py [--model CONFIG|llama-58m] [--stages 0,1,2,...] [--seq-len 128] [--micro-batch 4]
                                 [--global-batch 16] [--steps 4] [--out FILE]

For each strategy: `zero-plan --model CONFIG --gpus cpu:2 --stage S --tokenizer bytes -o PLAN`, then
`zero-run PLAN --max-steps N` (under the real deepspeed launcher, DS_ACCELERATOR=cpu); one JSON line per run
appended to --out: every rank's peak RSS (run_report.json host_rss_bytes) and their sum per node, the plan's
estimate.cpu.total (host memory per node) and per_gpu.peak_allocated, the error, versions, date and machine.
memory.CPU_PROCESS_RSS_BYTES cites what this wrote for llama-tiny.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
STRATEGIES = ("0", "1", "2", "2-offload", "3", "3-offload", "3-offload-all")
LLAMA_58M = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 512, "intermediate_size": 1376,
             "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64,
             "tie_word_embeddings": False, "rope_theta": 10000.0, "max_position_embeddings": 1024,
             "rms_norm_eps": 1e-05, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip
"""--model llama-58m: 58.1M parameters, whose fp32 states (0.87 GiB at stage 0) outweigh the process itself."""


def record(plan_path: Path, run_dir: Path, **extra) -> dict:
    """Returns one result line from a plan file and the output folder zero-run wrote for it."""
    plan = json.loads(plan_path.read_text())
    report = json.loads((run_dir / "run_report.json").read_text())
    ranks = [r["host_rss_bytes"] for r in report["ranks"]]
    predicted = plan["estimate"]["cpu"]["total"]
    return {
        **extra,
        "model": _relative(plan["model"]["name"]), "params": plan["model"]["params"], "strategy": plan["strategy"]["name"],
        "world_size": report["world_size"], "micro_batch_size": report["micro_batch_size"],
        "gradient_accumulation_steps": report["gradient_accumulation_steps"], "seq_len": report["seq_len"],
        "steps": report["steps"], "rss_per_rank_bytes": ranks, "rss_per_node_bytes": sum(ranks),
        "predicted_host_per_node_bytes": predicted,
        "predicted_peak_allocated_bytes": plan["estimate"]["per_gpu"]["peak_allocated"],
        "error_pct": round(100 * (predicted - sum(ranks)) / sum(ranks), 1),
        "host_rss_marks": report["ranks"][0].get("host_rss_marks"), "versions": report.get("versions"),
    }  # fmt: skip


def _relative(name: str) -> str:
    path = Path(name)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model", default=str(ROOT / "benchmarks" / "model_configs" / "llama-tiny.json"),
                        help="a config.json, or llama-58m (LLAMA_58M)")  # fmt: skip
    parser.add_argument("--stages", default=",".join(STRATEGIES))
    parser.add_argument("--seq-len", default="128")
    parser.add_argument("--micro-batch", default="4")
    parser.add_argument("--global-batch", default="16")
    parser.add_argument("--steps", default="4")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON lines appended here (default benchmarks/results/cpu-rss-DATE.jsonl)")  # fmt: skip
    args = parser.parse_args(argv)
    date = datetime.now(timezone.utc).date().isoformat()
    out = args.out or ROOT / "benchmarks" / "results" / f"cpu-rss-{date}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    with tempfile.TemporaryDirectory(prefix="cpu-rss-") as tmp:
        if args.model == "llama-58m":
            args.model = str(Path(tmp) / "llama-58m.json")
            Path(args.model).write_text(json.dumps(LLAMA_58M))
        for stage in args.stages.split(","):
            plan_path, run_dir = Path(tmp) / f"plan-{stage}.json", Path(tmp) / f"run-{stage}"
            subprocess.run([sys.executable, "-m", "zero_planner", "--model", args.model, "--gpus", "cpu:2",
                            "--cpu-mem", "16GiB", "--stage", stage, "--seq-len", args.seq_len, "--micro-batch",
                            args.micro_batch, "--global-batch", args.global_batch, "--tokenizer", "bytes",
                            "-o", str(plan_path)], env=env, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            subprocess.run([sys.executable, "-m", "zero_planner.launch", str(plan_path), "--max-steps", args.steps,
                            "--output-dir", str(run_dir)], env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
            line = record(plan_path, run_dir, date=date, machine=machine)
            with open(out, "a") as f:
                f.write(json.dumps(line) + "\n")
            print(f"stage {stage:<13} measured {line['rss_per_node_bytes'] / GIB:.3f} GiB per node, predicted "
                  f"{line['predicted_host_per_node_bytes'] / GIB:.3f} ({line['error_pct']:+.1f}%)", flush=True)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

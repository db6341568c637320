"""How long zero-plan takes for a catalog model: end to end in a fresh process, and the planning call alone.

    python benchmarks/plan_speed.py [--runs 5]

Prints the median wall time of `zero-plan --model meta-llama/Meta-Llama-3-8B --gpus 2xT4` in a subprocess
(interpreter start, imports, catalog, planning, table) and of the in-process `planner.plan` call. Exits 1 when
the end-to-end median is above TARGET_S (a torch or deepspeed import on the catalog path costs several
seconds and fails this), or when zero-plan itself fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--model", "meta-llama/Meta-Llama-3-8B", "--gpus", "2xT4"]
TARGET_S = 1.0


def zero_plan_command() -> list[str]:
    """Returns the installed console script when there is one, else `python -m zero_planner.cli`."""
    script = Path(sys.executable).with_name("zero-plan")
    return [str(script)] if script.exists() else [sys.executable, "-m", "zero_planner.cli"]


def end_to_end(runs: int) -> tuple[list[float], int]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    times, rc = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([*zero_plan_command(), *ARGS], capture_output=True, text=True, env=env, cwd=ROOT)
        times.append(time.perf_counter() - start)
        rc = done.returncode
        if rc not in (0, 1) or "Traceback" in done.stderr:
            print(done.stdout[-2000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
            raise SystemExit(f"zero-plan {' '.join(ARGS)} failed with exit status {rc}")
    return times, rc


def in_process(runs: int) -> tuple[float, list[float]]:
    sys.path.insert(0, str(ROOT))
    from zero_planner.hardware import parse_gpus
    from zero_planner.models.spec import load_model_spec
    from zero_planner.planner import plan

    start = time.perf_counter()
    spec = load_model_spec(ARGS[1])
    cluster = parse_gpus(ARGS[3])
    load_s = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        plan(spec, cluster, seq_len=2048)
        times.append(time.perf_counter() - start)
    return load_s, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="subprocess runs (median reported)")
    args = parser.parse_args(argv)

    e2e, rc = end_to_end(args.runs)
    load_s, planning = in_process(max(args.runs, 20))
    median = statistics.median(e2e)
    machine = platform.processor() or platform.machine()
    print(f"machine: {machine}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"zero-plan {' '.join(ARGS)}  (exit {rc})")
    print(f"  end to end, fresh process: median {median:.3f} s of {len(e2e)} (min {min(e2e):.3f}, max {max(e2e):.3f})")
    print(
        f"  in process: model spec + --gpus {load_s * 1000:.1f} ms; "
        f"planning median {statistics.median(planning) * 1000:.1f} ms of {len(planning)}"
    )
    verdict = "ok" if median < TARGET_S else "TOO SLOW"
    print(f"  target < {TARGET_S:.1f} s end to end: {verdict}")
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

"""One phases case for the GPU harness: a real zero-run of a plan, then a resume of it, every phase measured.

The case (benchmarks/phases.py writes them) holds a plan file's content. This runs, as a user would:
    zero-run PLAN --output-dir DIR --max-steps N            load, initialize, N steps, eval, save, export
    zero-run PLAN --output-dir DIR --max-steps N+1 --resume  load, initialize, resume, one step, eval, save, export
with ZERO_RUN_MEMORY_LIMIT_BYTES set where the case emulates a smaller GPU (zero_planner/run/meter.py), and writes
OUT_DIR/rank0.json: the status (ok, or oom with the phase that ran out, from zero-run's oom_rank*.json), both
runs' per-phase peaks of the busiest rank (run_report.json ranks[].phases), step times and the exit codes.
The output folder is removed afterwards (checkpoints of several cases would not fit a lent machine's disk).

    python benchmarks/phase_case.py --case case.json --out-dir DIR [--go-file FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def zero_run(plan_path: Path, output_dir: Path, args: list[str], env: dict[str, str], log: Path,
             timeout_s: float) -> int:  # fmt: skip
    """Runs zero-run (python -m zero_planner.launch) as a user would; returns its exit status."""
    cmd = [sys.executable, "-m", "zero_planner.launch", str(plan_path), "--output-dir", str(output_dir), *args]
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        try:
            return subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s,
                                  cwd=ROOT).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            return 124


def read_run(output_dir: Path, rc: int) -> dict:
    """Returns what one zero-run left: status, the busiest rank's phases and step peaks, or the OOM record."""
    run: dict = {"exit": rc}
    ooms = sorted(output_dir.glob("oom_rank*.json"))
    report_path = output_dir / "run_report.json"
    if ooms:
        record = json.loads(ooms[0].read_text())
        run.update(status="oom", oom_phase=record.get("phase"), error=record.get("error", "")[:300])
    elif rc == 0 and report_path.exists():
        run["status"] = "ok"
    else:
        run["status"] = "error"
    if run["status"] != "ok":  # why, for the results file (the harness's folder is gone afterwards)
        log = output_dir.parent / f"{output_dir.name}.log"
        run["log_tail"] = log.read_text()[-3000:] if log.exists() else None
    if report_path.exists():
        report = json.loads(report_path.read_text())
        busiest = max(report["ranks"], key=lambda r: r.get("peak_allocated_bytes") or 0)
        run.update(phases=rank_phases(report["ranks"]), step_peak_allocated_bytes=busiest.get("step_peak_allocated_bytes"),
                   peak_allocated_bytes=busiest.get("peak_allocated_bytes"), host_rss_bytes=busiest.get("host_rss_bytes"),
                   step_times_s=report.get("step_times_s"), losses=report.get("losses"),
                   tokens_per_second=report.get("tokens_per_second"), versions=report.get("versions"),
                   # each rank's allocator retries per step ([step, retries]): a whole run at the memory edge
                   alloc_retry_steps=[r.get("alloc_retry_steps") or [] for r in report["ranks"]])  # fmt: skip
    return run


def keep_largest(kept: dict, figures: dict) -> dict:
    """Returns `kept` with each numeric figure of `figures` (the error percentage apart) raised to the larger of the
    two: one phase's peaks over ranks or over runs."""
    for key, value in figures.items():
        if isinstance(value, (int, float)) and key != "error_pct":
            kept[key] = max(kept.get(key) or 0, value)
    return kept


def rank_phases(ranks: list[dict]) -> dict[str, dict]:
    """Returns each phase's figures over the ranks: the busiest rank's GPU figures in that phase (rank 0 consolidates
    an export, another rank may peak in training), and with several ranks `node_host_rss_peak_bytes`, the sum of the
    first node's ranks' host peaks in the phase (an upper bound of the node's: the ranks peak about together), which
    is what the host model predicts per node."""
    phases: dict[str, dict] = {}
    for rank in ranks:
        for name, figures in (rank.get("phases") or {}).items():
            kept = keep_largest(phases.setdefault(name, {}), figures)
            if len(ranks) > 1 and rank.get("node", 0) == 0 and figures.get("host_rss_peak_bytes"):
                kept["node_host_rss_peak_bytes"] = kept.get("node_host_rss_peak_bytes", 0) + figures["host_rss_peak_bytes"]
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--case", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--go-file", default=None, help="wait for this file before touching the GPU")
    args = parser.parse_args()
    case = json.loads(Path(args.case).read_text())
    out_dir = Path(args.out_dir)
    (out_dir / "ready0").touch()
    if args.go_file:
        while not Path(args.go_file).exists():
            time.sleep(0.1)
    plan_path = out_dir / "plan.json"
    plan_path.write_text(json.dumps(case["plan"], indent=1))
    work = Path(case.get("work_root", "/tmp")) / f"zp-phase-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if case.get("memory_limit_bytes"):
        env["ZERO_RUN_MEMORY_LIMIT_BYTES"] = str(case["memory_limit_bytes"])
    if case.get("gpus"):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, case["gpus"]))
    log = work.parent / f"{work.name}.log"  # read_run keeps its tail when a run fails
    steps = case.get("max_steps", 3)
    record: dict = {"rank": 0, "status": "ok", "runs": {}}
    started = time.time()
    try:
        rc = zero_run(plan_path, work, ["--max-steps", str(steps), *case.get("run_args", [])], env, log,
                      case.get("run_timeout_s", 300))  # fmt: skip
        record["runs"]["train"] = read_run(work, rc)
        if record["runs"]["train"]["status"] == "ok" and case.get("resume", True):
            (work / "run_report.json").rename(work / "run_report.train.json")
            rc = zero_run(plan_path, work, ["--max-steps", str(steps + 1), "--resume", *case.get("run_args", [])], env,
                          log, case.get("run_timeout_s", 300))  # fmt: skip
            record["runs"]["resume"] = read_run(work, rc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if log.exists():
            shutil.copy(log, out_dir / "log.txt")
            log.unlink()
    statuses = [run["status"] for run in record["runs"].values()]
    record["status"] = "oom" if "oom" in statuses else "error" if "error" in statuses else "ok"
    record["oom_phase"] = next((r.get("oom_phase") for r in record["runs"].values() if r["status"] == "oom"), None)
    phases: dict[str, dict] = {}
    for run in record["runs"].values():  # the largest figure of each phase over both runs
        for name, figures in (run.get("phases") or {}).items():
            keep_largest(phases.setdefault(name, {}), figures)
    record["phases"] = phases
    record["peak_allocated_bytes"] = max((p.get("peak_allocated_bytes") or 0 for p in phases.values()), default=None)
    record["peak_reserved_bytes"] = max((p.get("peak_reserved_bytes") or 0 for p in phases.values()), default=None)
    record["host_rss_peak_bytes"] = max((p.get("host_rss_peak_bytes") or 0 for p in phases.values()), default=None)
    record["wall_s"] = round(time.time() - started, 1)
    (out_dir / "rank0.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()

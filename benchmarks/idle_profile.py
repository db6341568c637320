"""Where a whole DeepSpeed step leaves its GPU idle: the gaps between kernels in a torch.profiler trace, each put
down to the step's phase and to the host work that launched the kernel after it.

The harness (gpu_step.profile_steps) runs it for cases with `idle_trace`: two more steps profiled with the CPU's
ops beside the GPU's kernels (and, in a second pass, with Python stacks), each phase inside a record_function
mark. `idle_breakdown` reads the exported Chrome trace:
- the GPU's busy time is the union of every kernel, copy and memset on any stream; a gap is the time between two
  busy stretches;
- a gap whose next kernel was launched after the gap began waited for the host ("launch"); one whose next kernel
  was already queued waited on something else (an event, another stream: "queued");
- each gap is charged to the phase mark (zp:forward, zp:backward, zp:step) its next launch fell in, to the innermost
  and outermost CPU op that launched it, to the innermost Python frame of deepspeed/transformers/torch.nn where the
  trace has stacks, and to the last host synchronisation (cudaStreamSynchronize, cudaDeviceSynchronize,
  cudaEventSynchronize, a blocking cudaMemcpy) that ended inside it, if any.

    python benchmarks/idle_profile.py --report benchmarks/results/h200x2-i26-idle-*.jsonl
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections import defaultdict
from pathlib import Path

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy ")
PHASE_PREFIX = "zp:"
FRAME_MARKS = ("deepspeed/", "transformers/", "torch/nn/", "zero_planner/", "benchmarks/")
SIZE_BINS = ((10.0, "<10us"), (100.0, "10-100us"), (1000.0, "0.1-1ms"), (float("inf"), ">1ms"))


def _top(table: dict[str, float], n: int, steps: int) -> dict[str, float]:
    """Returns the `n` largest entries of `table` (microseconds) as milliseconds per step."""
    return {k: round(v / 1000 / steps, 3) for k, v in sorted(table.items(), key=lambda kv: -kv[1])[:n]}


def _enclosing(events: list[dict], starts: list[float], ts: float) -> list[dict]:
    """Returns the events of `events` (sorted by start, `starts` their starts) whose span holds `ts`."""
    i = bisect.bisect_right(starts, ts)
    return [e for e in events[max(0, i - 400):i] if e["ts"] <= ts <= e["ts"] + e.get("dur", 0)]


def idle_breakdown(trace: dict, steps: int, min_gap_us: float = 0.0) -> dict:
    """Returns the idle GPU time of `steps` profiled steps in a Chrome trace (torch.profiler's export), in ms per
    step: in all, by cause (launch / queued), by phase, by gap size, and the top CPU ops, Python frames and
    synchronisations charged with it (module docstring). Gaps shorter than `min_gap_us` are counted in the total
    and the size bins only."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    gpu = sorted((e for e in events if e.get("cat") in GPU_CATEGORIES), key=lambda e: e["ts"])
    runtime = {}
    syncs = []
    for e in events:
        if e.get("cat") == "cuda_runtime":
            corr = e.get("args", {}).get("correlation")
            if corr is not None:
                runtime[corr] = e
            if e.get("name", "").startswith(SYNC_CALLS) or e.get("name") == "cudaMemcpy":
                syncs.append(e)
    syncs.sort(key=lambda e: e["ts"] + e.get("dur", 0))
    sync_ends = [e["ts"] + e.get("dur", 0) for e in syncs]
    cpu_ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    cpu_starts = [e["ts"] for e in cpu_ops]
    frames = sorted((e for e in events if e.get("cat") == "python_function"), key=lambda e: e["ts"])
    frame_starts = [e["ts"] for e in frames]
    marks = sorted((e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith(PHASE_PREFIX)),
                   key=lambda e: e["ts"])  # fmt: skip
    mark_starts = [e["ts"] for e in marks]

    busy_us = 0.0
    idle = defaultdict(float)
    by_phase, by_size, by_inner, by_outer, by_frame, by_sync = (defaultdict(float) for _ in range(6))
    count = 0
    end = None
    for e in gpu:
        s, d = e["ts"], e.get("dur", 0)
        if end is None:
            busy_us, end = d, s + d
            continue
        if s > end:
            gap = s - end
            count += 1
            by_size[next(label for bound, label in SIZE_BINS if gap < bound)] += gap
            launch = runtime.get(e.get("args", {}).get("correlation"))
            cause = "launch" if launch is not None and launch["ts"] > end else "queued"
            idle[cause] += gap
            if gap >= min_gap_us:
                at = launch["ts"] if launch is not None else s
                phase = next((m["name"][len(PHASE_PREFIX):] for m in reversed(_enclosing(marks, mark_starts, at))), "none")
                by_phase[phase] += gap
                if launch is not None:
                    tid = launch.get("tid")
                    ops = [o for o in _enclosing(cpu_ops, cpu_starts, at) if o.get("tid") == tid]
                    if ops:
                        by_inner[min(ops, key=lambda o: o.get("dur", 0))["name"]] += gap
                        by_outer[max(ops, key=lambda o: o.get("dur", 0))["name"]] += gap
                    stack = [f for f in _enclosing(frames, frame_starts, at)
                             if f.get("tid") == tid and any(m in f.get("name", "") for m in FRAME_MARKS)]
                    if stack:
                        by_frame[min(stack, key=lambda f: f.get("dur", 0))["name"][:120]] += gap
                i = bisect.bisect_left(sync_ends, end)
                inside = [x for x in syncs[i:bisect.bisect_right(sync_ends, s)]]
                if inside:
                    last = inside[-1]
                    host = [o for o in _enclosing(cpu_ops, cpu_starts, last["ts"]) if o.get("tid") == last.get("tid")]
                    where = max(host, key=lambda o: o.get("dur", 0))["name"] if host else "?"
                    by_sync[f"{last['name']} in {where}"] += gap
        busy_us += max(0.0, s + d - max(s, end))
        end = max(end, s + d)
    total = sum(idle.values())
    return {
        "steps": steps,
        "gpu_busy_ms": round(busy_us / 1000 / steps, 3),
        "idle_ms": round(total / 1000 / steps, 3),
        "gaps_per_step": round(count / steps, 1),
        "idle_by_cause_ms": _top(idle, 5, steps),
        "idle_by_phase_ms": _top(by_phase, 10, steps),
        "idle_by_gap_size_ms": _top(by_size, 5, steps),
        "idle_by_launching_op_ms": _top(by_inner, 20, steps),
        "idle_by_outer_op_ms": _top(by_outer, 20, steps),
        "idle_by_frame_ms": _top(by_frame, 25, steps),
        "idle_after_sync_ms": _top(by_sync, 15, steps),
    }


def profile_idle(engine, batches, steps: int, with_stack: bool) -> dict:
    """Profiles `steps` steps of `engine` (CPU ops and CUDA kernels; Python stacks if `with_stack`), each phase in a
    record_function mark, one wait per step as zero-run's loop, and returns idle_breakdown of them with the wall
    seconds per step. `batches` yields micro-batches."""
    import os
    import tempfile
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=with_stack) as prof:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            batch = next(batches)
            with record_function(PHASE_PREFIX + "forward"):
                loss = engine(**batch).loss
            with record_function(PHASE_PREFIX + "backward"):
                engine.backward(loss)
            with record_function(PHASE_PREFIX + "step"):
                engine.step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / steps
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        trace = json.loads(Path(path).read_text())
    finally:
        os.unlink(path)
    return {"wall_ms": round(wall * 1000, 3), "with_stack": with_stack, **idle_breakdown(trace, steps, min_gap_us=2.0)}


def report(paths: list[str]) -> None:
    """Prints each committed case's idle breakdown on rank 0."""
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            for rank in row.get("ranks", [])[:1]:
                for idle in rank.get("profile", {}).get("idle", []):
                    print(f"{row['id']}  stack={idle['with_stack']}  wall {idle['wall_ms']:.1f} ms, busy "
                          f"{idle['gpu_busy_ms']:.1f}, idle {idle['idle_ms']:.1f} in {idle['gaps_per_step']:.0f} gaps")
                    for key in ("idle_by_cause_ms", "idle_by_phase_ms", "idle_by_gap_size_ms", "idle_after_sync_ms",
                                "idle_by_outer_op_ms", "idle_by_launching_op_ms", "idle_by_frame_ms"):
                        print(f"  {key}: {json.dumps(idle[key])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--report", nargs="+", required=True, metavar="RESULTS", help="harness results (JSONL)")
    report(parser.parse_args(argv).report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Which CUDA stream's pool holds what, at the edge of memory: the cases behind the allocator's retries.

Stages 0, 1 and 2 of Qwen2-MoE at 10 x 2,048 with checkpointing on an H100 have one peak allocation (73.3 GiB) and
their allocators retried 2, 0 and 12 times (docs/speed.md, "The memory edge"); Qwen2.5-7B at 19 x 2,048 on two H200s
retried once under ZeRO-1 and 13-19 times under ZeRO-2 and 3. The caching allocator keeps one pool per stream, and
DeepSpeed's ZeRO-2 with overlap_comm builds its gradient partition on its reduction stream (stage_1_and_2.py
copy_grads_in_partition, inside `with stream(reduction_stream)`) and drops it every step: pages that stream frees
serve no request of the compute stream until a retry unmaps them. These cases record every pool at each phase's end
(gpu_step.py `stream_pools`), with overlap_comm on and off:

    python benchmarks/stream_pools.py --write           # benchmarks/suites/pools-*.jsonl
    python benchmarks/stream_pools.py --report [FILE ...]  # each case's pools per phase (default: the committed runs)

On a lent machine of two GPUs (device tool; carry .whl):
    bash benchmarks/device_run.sh 500 benchmarks/suites/pools-2gpu.jsonl benchmarks/suites/pools-1gpu.jsonl
    bash benchmarks/device_run.sh 500 benchmarks/suites/pools-open-2gpu.jsonl benchmarks/suites/pools-open-1gpu.jsonl
    bash benchmarks/device_run.sh 500 benchmarks/suites/pools-picks-2gpu.jsonl benchmarks/suites/pools-picks-1gpu.jsonl
    bash benchmarks/device_run.sh 400 benchmarks/suites/pools-zero3-2gpu.jsonl
    bash benchmarks/device_run.sh 400 benchmarks/suites/pools-zero3-8b-2gpu.jsonl
On one GPU:
    bash benchmarks/device_run.sh 300 benchmarks/suites/pools-phi3-1gpu.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.memory_regression import predict, run_capacity, workload_of  # noqa: E402
from benchmarks.timing_suite import _ladder_case  # noqa: E402
from zero_planner.plan.memory import CUDA_CONTEXT_BYTES, GiB  # noqa: E402

STEPS = 5
NO_OVERLAP = {"overlap_comm": False}

POOL_CASES = {
    # (model, seq, strategy, checkpointing, micro-batch, GPUs, card it is capped to or None, zero_optimization over ours)
    "pools-1gpu": [("qwen2-moe-a2.7b-4l", 2048, "1", True, 10, 1, "H100", None),
                   ("qwen2-moe-a2.7b-4l", 2048, "2", True, 10, 1, "H100", None),
                   ("qwen2-moe-a2.7b-4l", 2048, "2", True, 10, 1, "H100", NO_OVERLAP),
                   ("qwen2-moe-a2.7b-4l", 2048, "3", True, 9, 1, "H100", None)],
    "pools-2gpu": [("qwen2.5-7b", 2048, "1", True, 19, 2, None, None),
                   ("qwen2.5-7b", 2048, "2", True, 19, 2, None, None),
                   ("qwen2.5-7b", 2048, "2", True, 19, 2, None, NO_OVERLAP),
                   ("qwen2.5-7b", 2048, "3", True, 19, 2, None, None)],
    # the same stages uncapped, away from the edge: how much more ZeRO-2 reserves than ZeRO-1 when nothing forces a
    # retry (a whole H200 for the MoE's 73 GiB; Qwen2.5-7B three sequences below its pick)
    "pools-open-1gpu": [("qwen2-moe-a2.7b-4l", 2048, "1", True, 10, 1, None, None),
                        ("qwen2-moe-a2.7b-4l", 2048, "2", True, 10, 1, None, None),
                        ("llama3.2-1b", 2048, "1", False, 8, 1, None, None),
                        ("llama3.2-1b", 2048, "2", False, 8, 1, None, None)],
    "pools-open-2gpu": [("qwen2.5-7b", 2048, "1", True, 16, 2, None, None),
                        ("qwen2.5-7b", 2048, "2", True, 16, 2, None, None),
                        ("llama3.2-1b", 2048, "1", False, 8, 2, None, None),
                        ("llama3.2-1b", 2048, "2", False, 8, 2, None, None)],
    # the planner's ZeRO-2 picks once the reduction stream's pool counts (memory.reduction_stream_bytes), beside the
    # ZeRO-1 pick of the same setting on the same machine: 9 sequences where 10 retried every step, 17 where 19 did
    "pools-picks-1gpu": [("qwen2-moe-a2.7b-4l", 2048, "2", True, 9, 1, "H100", None),
                         ("qwen2-moe-a2.7b-4l", 2048, "1", True, 10, 1, "H100", None)],
    "pools-picks-2gpu": [("qwen2.5-7b", 2048, "2", True, 17, 2, None, None),
                         ("qwen2.5-7b", 2048, "1", True, 19, 2, None, None)],
    # ZeRO-3 on two GPUs, uncapped: its fetch stream kept a pool of its own (3.8-4.8 GiB, Qwen2.5-7B at 19, retrying);
    # how large where nothing forces a retry, against the gathered parameters the model counts
    "pools-zero3-2gpu": [("qwen2.5-7b", 2048, "3", True, 16, 2, None, None),
                         ("llama3.2-1b", 2048, "3", False, 8, 2, None, None),
                         ("qwen3-1.7b", 2048, "3", False, 6, 2, None, None),
                         ("llama3.2-3b", 2048, "3", False, 4, 2, None, None)],
    # Phi-3-mini at 8 x 2,048 on one H200 (2026-11-27): ZeRO-0 and ZeRO-1 peak at the same 129.2 GiB, but ZeRO-1 (no
    # overlap_comm) retried in every optimizer step (5 in 6 steps, its step 0.33 s against ZeRO-0's 0.10) where ZeRO-0
    # did not: which pool holds what at each phase
    "pools-phi3-1gpu": [("phi3-mini", 2048, "1", False, 8, 1, None, None),
                        ("phi3-mini", 2048, "0", False, 8, 1, None, None)],
    # Meta-Llama-3-8B's ZeRO-3 candidates on two H200s (2026-11-28, sixteenth session): at 20 with checkpointing it
    # retried 9 times in 6 steps, reserving 137.97 GiB where its total was predicted 133.64; the fetch stream's pool of
    # a fifth model (untied 128k-token embeddings), at the pick and at 4 without checkpointing
    "pools-zero3-8b-2gpu": [("llama3-8b", 2048, "3", True, 20, 2, None, None),
                            ("llama3-8b", 2048, "3", False, 4, 2, None, None)],
}


def pool_cases(name: str) -> list[dict]:
    """Returns the cases of one pools suite: each with stream_pools on and, where capped, the allocator limited to
    that card's capacity less the CUDA context (as operating_point.py emulates a smaller card)."""
    cases = []
    for model, seq, strategy, gc, micro, gpus, cap, zero in POOL_CASES[name]:
        c = _ladder_case(model, seq, strategy, gc, micro, cap or "H200", gpus)
        if cap:
            c["memory_limit_bytes"] = c["planned"]["gpu_capacity_bytes"] - CUDA_CONTEXT_BYTES
        if zero:
            c["deepspeed_config"]["zero_optimization"].update(zero)
            c["id"] += "|no-overlap"
            c["variant"] = "no-overlap"
        c.update(steps=STEPS, stream_pools=True, suite=name)
        c["id"] += "|pools"
        cases.append(c)
    return cases


COMMITTED = sorted((ROOT / "benchmarks" / "results").glob("h200x2-i26-pools*-2026-11-28.jsonl"))
"""The pools runs (two H200s, torch 2.11.0+cu130, deepspeed 0.19.8, transformers 5.17.0)."""


def committed_rows() -> list[dict]:
    return [json.loads(line) for path in COMMITTED for line in path.read_text().splitlines()]


def side_pools_bytes(row: dict) -> int:
    """Returns what rank 0's streams other than the default one held reserved at the end of its last backward."""
    phases = row["ranks"][0]["phases"]
    last = [p for p in phases if p["phase"] == "backward"][-1]
    return sum(pool["reserved"] for stream, pool in last["pools"].items() if stream != "0")


def retries_per_step(row: dict) -> float:
    """Returns rank 0's allocator retries per step after the first (the first fills the cache)."""
    phases = row["ranks"][0]["phases"]
    first_end = [p for p in phases if p["step"] == 0][-1]["alloc_retries"]
    steps = max(p["step"] for p in phases)
    return (phases[-1]["alloc_retries"] - first_end) / steps


def predicted(row: dict) -> tuple[int, int]:
    """Returns (the reduction stream's pool, total) that memory.py predicts for the case as it ran."""
    from zero_planner.plan.memory import ZeroBuffers, reduction_stream_bytes, trainable_params
    from zero_planner.strategies import STRATEGIES

    spec, estimate = predict(row, {})
    workload = workload_of(row, spec)
    buffers = ZeroBuffers.from_ds_config(row["case"]["deepspeed_config"], spec.hidden_size)
    pool = reduction_stream_bytes(STRATEGIES[row["case"]["strategy"]], buffers, workload, trainable_params(spec, workload))
    return pool, estimate.total_bytes


def report(rows: list[dict]) -> None:
    """Prints, per case and rank 0, the allocator's retries, the side streams' pools against the predicted reduction
    stream's, the predicted total against the capacity, and each stream's reserved / allocated GiB at the end of
    every phase of the last step, with the step's median seconds."""
    for row in rows:
        rank = row["ranks"][0]
        phases = rank.get("phases") or []
        last = max((p["step"] for p in phases), default=-1)
        steps = sorted(rank.get("step_times_s") or [0])
        times = steps[len(steps) // 2]
        print(f"{row['id']}: {row['status']}, {rank.get('num_alloc_retries')} retries, peak allocated "
              f"{(rank.get('peak_allocated_bytes') or 0) / GiB:.2f} GiB, reserved {(rank.get('peak_reserved_bytes') or 0) / GiB:.2f}, "
              f"median step {times:.3f} s")
        if row["status"] == "ok":
            pool, total = predicted(row)
            print(f"  side pools {side_pools_bytes(row) / GiB:.2f} GiB (reduction stream predicted {pool / GiB:.2f}); "
                  f"{retries_per_step(row):.1f} retries a step after the first; predicted total {total / GiB:.2f} of "
                  f"{run_capacity(row) / GiB:.2f} GiB")
        for p in phases:
            if p["step"] != last:
                continue
            pools = "  ".join(f"{stream}: {pool['reserved'] / GiB:.2f}/{pool['allocated'] / GiB:.2f}"
                              for stream, pool in sorted(p.get("pools", {}).items(), key=lambda kv: -kv[1]["reserved"]))
            print(f"  {p['phase']:9s} retries {p.get('alloc_retries')}  pools reserved/allocated GiB  {pools}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write benchmarks/suites/<name>.jsonl")
    parser.add_argument("--report", nargs="*", type=Path, help="results JSONL files to print (none: the committed)")
    args = parser.parse_args(argv)
    if args.report is not None:
        rows = [json.loads(line) for path in args.report for line in path.read_text().splitlines()] or committed_rows()
        report([row for row in rows if row.get("case", {}).get("stream_pools")])
        return 0
    for name in POOL_CASES:
        cases = pool_cases(name)
        print(f"{name}: {len(cases)} cases")
        if args.write:
            path = ROOT / "benchmarks" / "suites" / f"{name}.jsonl"
            path.write_text("".join(json.dumps(c) + "\n" for c in cases))
            print(f"  -> {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

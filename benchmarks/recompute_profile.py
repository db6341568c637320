"""Where gradient checkpointing's time goes: one GPU's kernel time per micro-step, by kind, with and without it.

    python benchmarks/recompute_profile.py --out $OUT/recompute.json [--models gemma2-2b,llama3.2-1b] [--mb 2]
    python benchmarks/recompute_profile.py --report benchmarks/results/recompute-*.json
    python benchmarks/recompute_profile.py --deepspeed-steps benchmarks/results/h200x2-i26-step-profile*.jsonl

--report prints committed profiles beside the model's figures as the code computes them now (no GPU needed).
--deepspeed-steps does the same for whole DeepSpeed steps: harness cases run with `profile_steps` (gpu_step.py profile_steps),
each rank's kernel seconds by kind (NCCL's collectives and the fused optimizer apart) beside the model's parts.

For each model (benchmarks/model_configs), builds it as zero-run does (modeling.build_model, random weights, bf16,
SDPA where transformers accepts it) and runs forward + loss + backward at micro-batch `--mb` x `--seq` tokens, no
optimizer and no DeepSpeed: the step-time model's compute term (throughput.micro_step_gpu_seconds) alone. Each
micro-step is timed with CUDA events, then profiled (torch.profiler) and every kernel's device time summed by
kind: GEMMs (cuBLAS/CUTLASS/nvjet), attention (flash / memory-efficient SDPA kernels) and the rest (elementwise,
reductions, copies: the memory-bound kernels of throughput.device_traffic_bytes). Beside each, the model's own
figure for the same micro-step with the committed constants. The difference between the checkpointed and the
plain micro-step is the recompute, by kind, against what the model charges for it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("gemma2-2b", "llama3.2-1b", "qwen3-1.7b")
GEMM_MARKS = ("gemm", "xmma", "cutlass", "nvjet", "cublas", "matmul", "sm90_", "sm100_")
ATTENTION_MARKS = ("flash", "fmha", "attention", "mem_eff", "efficient_attention")
COLLECTIVE_MARKS = ("nccl",)
OPTIMIZER_MARKS = ("multi_tensor_apply", "adam")


def kind_of(name: str) -> str:
    """Returns the kernel's kind from its name: "collective" (NCCL), "optimizer" (fused Adam's multi-tensor
    kernels), "attention", "gemm" or "other" (memory-bound: elementwise, reductions, copies)."""
    lower = name.lower()
    for kind, marks in (("collective", COLLECTIVE_MARKS), ("optimizer", OPTIMIZER_MARKS),
                        ("attention", ATTENTION_MARKS), ("gemm", GEMM_MARKS)):  # fmt: skip
        if any(mark in lower for mark in marks):
            return kind
    return "other"


def kernel_seconds(prof, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """Returns the device seconds per step of a torch.profiler run over `steps` steps: by kind (kind_of) and
    the 25 kernels that took longest, by name."""
    import torch

    by_kind: dict[str, float] = defaultdict(float)
    top: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            seconds = event.time_range.elapsed_us() / 1e6 / steps
            by_kind[kind_of(event.name)] += seconds
            top[event.name[:90]] += seconds
    return dict(by_kind), dict(sorted(top.items(), key=lambda kv: -kv[1])[:25])


def predicted(config: dict, name: str, mb: int, seq: int, gc: bool, gpu_name: str) -> dict:
    """Returns the step-time model's seconds of one micro-step's parts (committed constants)."""
    from zero_planner.hardware import find_gpu
    from zero_planner.models.spec import spec_from_config
    from zero_planner.plan import throughput
    from zero_planner.plan.memory import Workload

    spec = spec_from_config(config, name)
    gpu = find_gpu(gpu_name)
    workload = Workload(micro_batch_size=mb, seq_len=seq, gradient_checkpointing=gc, precision="bf16")
    return {
        "gemm_s": throughput.gemm_seconds(spec, gpu, workload),
        "attention_s": throughput.attention_seconds(spec, gpu, workload),
        "other_s": (throughput.traffic_seconds(spec, gpu, workload)
                    + throughput.eager_attention_seconds(spec, gpu, workload)),
        "other_bytes": throughput.device_traffic_bytes(spec, workload) + throughput.eager_attention_bytes(spec, workload),
        "total_s": throughput.micro_step_gpu_seconds(spec, gpu, workload),
    }


def measure(config: dict, mb: int, seq: int, gc: bool, steps: int) -> dict:
    """Returns the micro-step's measured seconds (CUDA events, median of `steps`) and its kernel seconds by kind
    (torch.profiler over `steps` more, per micro-step)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from zero_planner.run.modeling import build_model

    model, attn = build_model(config, precision="bf16", device="cuda", gradient_checkpointing=gc)
    model.train()
    ids = torch.randint(0, int(config["vocab_size"]), (mb, seq), device="cuda")

    def micro_step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        for p in model.parameters():
            p.grad = None

    for _ in range(3):
        micro_step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        micro_step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            micro_step()
        torch.cuda.synchronize()
    by_kind, top = kernel_seconds(prof, steps)
    peak = torch.cuda.max_memory_allocated()
    del model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return {
        "attn_implementation": attn,
        "seconds": statistics.median(times),
        "kernel_s": by_kind,
        "top_kernels": top,
        "peak_allocated_bytes": peak,
    }


def report(paths: list[str]) -> list[dict]:
    """Prints each profiled micro-step's kernel seconds by kind beside the step-time model's (recomputed now, so
    a change to the model shows here), and returns the rows: file, model, mb, gc, and per kind measured /
    predicted (and the GEMMs' seconds, measured and predicted)."""
    rows = []
    print(f"{'profile':34s} {'model':12s} {'mb':>3s} {'gc':>3s} {'wall ms':>8s} {'kernels':>8s}   measured / predicted: "
          f"{'gemm':>5s} {'attention':>9s} {'memory-bound':>12s} {'micro-step':>10s}")  # fmt: skip
    for path in paths:
        data = json.loads(Path(path).read_text())
        gpu = data["gpu"].replace("NVIDIA ", "").split()[0]
        for row in data["rows"]:
            config = json.loads((ROOT / "benchmarks" / "model_configs" / f"{row['model']}.json").read_text())
            p = predicted(config, row["model"], row["micro_batch_size"], row["seq_len"], row["gradient_checkpointing"], gpu)
            m = row["measured"]
            kernels = sum(m["kernel_s"].values())
            ratios = {
                "gemm": m["kernel_s"].get("gemm", 0.0) / p["gemm_s"],
                "attention": m["kernel_s"].get("attention", 0.0) / p["attention_s"],
                "memory": m["kernel_s"].get("other", 0.0) / p["other_s"],
                "total": m["seconds"] / p["total_s"],
            }
            rows.append({"file": Path(path).name, "model": row["model"], "mb": row["micro_batch_size"],
                         "gc": row["gradient_checkpointing"], "wall_s": m["seconds"], "kernel_s": kernels,
                         "predicted_s": p["total_s"], "gemm_s": m["kernel_s"].get("gemm", 0.0),
                         "gemm_predicted_s": p["gemm_s"], **ratios})  # fmt: skip
            print(f"{Path(path).name[:34]:34s} {row['model']:12s} {row['micro_batch_size']:3d} "
                  f"{'yes' if row['gradient_checkpointing'] else 'no':>3s} {m['seconds'] * 1e3:8.1f} {kernels * 1e3:8.1f}   "
                  f"{'':22s}{ratios['gemm']:5.2f} {ratios['attention']:9.2f} {ratios['memory']:12.2f} {ratios['total']:10.2f}")  # fmt: skip
    return rows


def step_report(paths: list[str]) -> list[dict]:
    """Prints each profiled DeepSpeed step (harness rows whose ranks carry `profile`): per rank the median timed step
    (unprofiled, after two), the wall seconds of the profiled steps (the profiler's own host time included: tens of
    ms at small micro-batches), their kernel seconds by kind, and the step-time model's parts for the case; returns
    one dict per rank."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from throughput_check import measured_cases

    from zero_planner.plan.throughput import estimate_step_time
    from zero_planner.strategies import STRATEGIES

    names = {Path(path).name for path in paths}
    rows = []
    kinds = ("gemm", "attention", "other", "optimizer", "collective")
    print(f"{'case':52s} {'rank':>4s} {'timed':>6s} {'wall':>6s} {'kernels':>7s}  " + " ".join(f"{k:>10s}" for k in kinds)
          + "   model: compute optimizer communication step (ms)")
    every = measured_cases(min_tokens=1, gpus=None) + measured_cases(min_tokens=1, gpus=None, one_sync=True)
    for case in every:
        if case.row["file"] not in names:
            continue
        model = estimate_step_time(case.spec, STRATEGIES[case.strategy], case.gpu, case.workload)
        for rank in case.row["ranks"]:
            profile = rank.get("profile")
            if not profile:
                continue
            seconds = profile["kernel_s"]
            timed = statistics.median(rank["step_times_s"][2:])  # unprofiled: the profiler's own host time is not in it
            rows.append({"case": case.name, "rank": rank["rank"], "timed_s": timed, "wall_s": profile["wall_s"], **seconds,
                         "model_compute_s": model.compute_s, "model_optimizer_s": model.optimizer_s,
                         "model_communication_s": model.communication_s, "model_step_s": model.step_s})  # fmt: skip
            print(f"{case.name[:52]:52s} {rank['rank']:4d} {timed * 1e3:6.0f} {profile['wall_s'] * 1e3:6.0f} {sum(seconds.values()) * 1e3:7.0f}  "
                  + " ".join(f"{seconds.get(k, 0.0) * 1e3:10.1f}" for k in kinds)
                  + f"   {model.compute_s * 1e3:13.0f} {model.optimizer_s * 1e3:9.0f} {model.communication_s * 1e3:13.0f} "
                  f"{model.step_s * 1e3:4.0f}")  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--report", nargs="+", metavar="FILE", help="print committed profiles against the model")
    parser.add_argument("--deepspeed-steps", nargs="+", metavar="FILE", help="print profiled DeepSpeed steps (harness results)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--mb", type=int, default=2)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    if args.report or args.deepspeed_steps:
        if args.report:
            report(args.report)
        if args.deepspeed_steps:
            step_report(args.deepspeed_steps)
        return 0
    if not args.out:
        parser.error("--out is required to profile (or give --report FILE ...)")

    import torch
    import transformers

    gpu_name = torch.cuda.get_device_name(0).replace("NVIDIA ", "").split()[0]
    rows = []
    for name in args.models.split(","):
        config = json.loads((ROOT / "benchmarks" / "model_configs" / f"{name}.json").read_text())
        for gc in (False, True):
            row = {"model": name, "micro_batch_size": args.mb, "seq_len": args.seq, "gradient_checkpointing": gc}
            row["measured"] = measure(config, args.mb, args.seq, gc, args.steps)
            row["predicted"] = predicted(config, name, args.mb, args.seq, gc, gpu_name)
            rows.append(row)
            m, p = row["measured"], row["predicted"]
            print(f"{name:14s} gc={gc!s:5s} measured {m['seconds'] * 1e3:7.1f} ms "
                  f"(gemm {m['kernel_s'].get('gemm', 0) * 1e3:6.1f}, attention {m['kernel_s'].get('attention', 0) * 1e3:5.1f}, "
                  f"other {m['kernel_s'].get('other', 0) * 1e3:6.1f})   predicted {p['total_s'] * 1e3:7.1f} ms "
                  f"(gemm {p['gemm_s'] * 1e3:6.1f}, attention {p['attention_s'] * 1e3:5.1f}, other {p['other_s'] * 1e3:6.1f})",
                  flush=True)  # fmt: skip
    out = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": dt.date.today().isoformat(),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

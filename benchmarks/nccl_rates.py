"""NCCL's achieved bandwidth for ZeRO's collectives at the message sizes DeepSpeed sends, on this machine's GPUs.

    torchrun --nproc_per_node N benchmarks/nccl_rates.py --out $OUT/nccl-N.json     (~20 s per N on H100s)

The step-time model's communication term is each ZeRO stage's volume over the catalog's intra-node bandwidth
(throughput.communication_bytes / link_bandwidth_bytes_per_s: NVLink 4's 450 GB/s each way on H100 and H200). DeepSpeed
does not send one message: ZeRO-1 and 2 reduce a gradient bucket at a time (reduce_bucket_size elements: ours hidden^2,
10-30 MB in bf16) and gather the updated parameters in allgather_bucket_size pieces; ZeRO-0 all-reduces in 500M-element
buffers; ZeRO-3 gathers each module's parameters and reduce-scatters per bucket. This times all_reduce, reduce,
all_gather_into_tensor and reduce_scatter_tensor of bf16 tensors from 256 KiB to 1 GiB (total message per rank), WARMUP
then ITERS launches back to back on the default stream between two CUDA events, and reports each size's seconds per
call and its bus bandwidth (nccl-tests' convention: the whole tensor's algorithm bandwidth x 2(n-1)/n for all-reduce,
x (n-1)/n for all-gather and reduce-scatter, x 1 for reduce), to hold beside the catalog's figure.

    python benchmarks/nccl_rates.py --fit benchmarks/results/nccl-*.json

fits every timing of >= MIN_FIT_BYTES per rank to seconds = latency + bus bytes / bandwidth (least squares on relative
error) and prints both, the bandwidth as a share of the catalog's link: Calibration.link_fraction.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zero_planner.hardware import find_gpu  # noqa: E402

SIZES = [2**k for k in range(18, 31)]
"""Bytes per rank's message: 256 KiB .. 1 GiB."""
WARMUP, ITERS, REPEATS = 5, 20, 3
MIN_FIT_BYTES = 2**22
"""Smaller messages are latency alone (and a reduce-scatter of 256 KiB took 0.36 ms once): left out of the fit."""


def bus_factor(op: str, n: int) -> float:
    """Returns bus bytes per byte of a rank's message (nccl-tests' busBw over our per-rank size): all-reduce moves
    2(n-1)/n of it, reduce all of it, an all-gather or reduce-scatter n-1 times it (its whole tensor is n of them)."""
    return {"all_reduce": 2 * (n - 1) / n, "reduce": 1.0}.get(op, n - 1)


def time_op(op: str, size: int, n: int) -> float:
    """Returns the median seconds of one call of `op` on a message of `size` bytes per rank (bf16)."""
    elements = size // 2
    x = torch.ones(elements, dtype=torch.bfloat16, device="cuda")
    if op == "all_gather":
        out = torch.empty(elements * n, dtype=torch.bfloat16, device="cuda")
        call = lambda: dist.all_gather_into_tensor(out, x)  # noqa: E731
    elif op == "reduce_scatter":
        big = torch.ones(elements * n, dtype=torch.bfloat16, device="cuda")
        call = lambda: dist.reduce_scatter_tensor(x, big)  # noqa: E731
    elif op == "reduce":
        call = lambda: dist.reduce(x, dst=0)  # noqa: E731
    else:
        call = lambda: dist.all_reduce(x)  # noqa: E731
    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()
    runs = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        start.record()
        for _ in range(ITERS):
            call()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) / 1e3 / ITERS)
    return statistics.median(runs)


def fit(paths: list[str]) -> tuple[float, float, float, float]:
    """Returns (seconds per call, bus bytes per second, that bandwidth's share of the catalog GPU's intra-node link,
    median |relative error|) fitted to every timing in `paths` (this script's JSON, one GPU model) of at least
    MIN_FIT_BYTES per rank."""
    rows, gpus = [], set()
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        gpus.add(find_gpu(data["gpu"].replace("NVIDIA ", "").split()[0]).name)
        n = data["world_size"]
        rows += [(r["bytes"] * bus_factor(r["op"], n), r["seconds"]) for r in data["rows"] if r["bytes"] >= MIN_FIT_BYTES]
    if len(gpus) != 1:
        raise SystemExit(f"nccl_rates.py --fit: give timings of one GPU model, not {sorted(gpus)}")
    a = np.array([[1 / t, size / t] for size, t in rows])
    (latency, per_byte), *_ = np.linalg.lstsq(a, np.ones(len(rows)), rcond=None)
    error = statistics.median(abs((latency + size * per_byte) / t - 1) for size, t in rows)
    link = find_gpu(gpus.pop()).intra_node_bandwidth_bytes_per_s
    return float(latency), float(1 / per_byte), float(1 / per_byte / link), float(error)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="measure (under torchrun) and write this JSON")
    parser.add_argument("--fit", nargs="+", help="fit latency and bandwidth to these JSONs instead")
    args = parser.parse_args()
    if args.fit:
        latency, bandwidth, share, error = fit(args.fit)
        print(f"{latency * 1e6:.1f} us per call, {bandwidth / 1e9:.0f} GB/s bus bandwidth "
              f"({share:.2f} of the catalog's link: link_fraction), "
              f"median |error| {error:.1%}")
        return 0
    if not args.out:
        parser.error("give --out (measure) or --fit (fit committed measurements)")
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    rows = []
    for op in ("all_reduce", "reduce", "all_gather", "reduce_scatter"):
        for size in SIZES:
            seconds = time_op(op, size, n)
            bus = size / seconds * bus_factor(op, n)
            rows.append({"op": op, "bytes": size, "seconds": seconds, "bus_bytes_per_s": bus})
            if rank == 0:
                print(f"{op:14s} {size / 2**20:9.2f} MiB  {seconds * 1e6:9.1f} us  bus {bus / 1e9:6.1f} GB/s", flush=True)
    if rank == 0:
        result = {"gpu": torch.cuda.get_device_name(0), "world_size": n, "torch": torch.__version__,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())), "date": dt.date.today().isoformat(),
                  "dtype": "bfloat16", "rows": rows}  # fmt: skip
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

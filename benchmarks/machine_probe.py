"""How fast this machine's host and GPU are right now, in a few seconds: the figures that might tell two lent machines
of one kind apart before a run (issue 26: the same host-bound ZeRO-3 steps ran a median 37% longer on one H200
machine than on another, 2026-12-02, and the harness's provenance, CPU model and cores, was the same for both).

    python benchmarks/machine_probe.py [--repeats 5] [--label before]   one JSON line on stdout
    python benchmarks/machine_probe.py --sample-every 2 --for 600        the host figures alone, one line per
                                                                        sample with its unix time, while cases run

Each figure is the median of `repeats` timings (with the fastest and slowest beside it):
  python_loop_s      a fixed pure-Python workload (attribute lookups, calls, small dicts: what DeepSpeed's hooks do)
  cpu_dispatch_us    one tiny torch op on the CPU, through the dispatcher (a ZeRO-3 hook's bookkeeping ops)
  cuda_launch_us     one tiny CUDA kernel launched from Python, not waited for (the host's cost of a launch)
  cuda_sync_us       torch.cuda.synchronize() on an idle stream (a round trip to the device)
  matmul_tflops      an 8192^3 bf16 matmul (the GPU's compute, clocks and power included)
  copy_tb_per_s      a 4 GiB device-to-device copy, bytes read and written (the GPU's memory)
plus the CPU's model and MHz from /proc/cpuinfo, the cores this process may use and the load average.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time


def _python_workload() -> float:
    """Returns the seconds of a fixed pure-Python workload: method calls, attribute reads and dict updates, the
    shape of DeepSpeed's per-parameter hook bookkeeping."""
    class Param:
        def __init__(self, i: int):
            self.ds_id, self.ds_status, self.numel = i, "NOT_AVAILABLE", i * 7

        def fetch(self, book: dict) -> int:
            book[self.ds_id] = self.ds_status
            return self.numel

    params = [Param(i) for i in range(1000)]
    start = time.perf_counter()
    total = 0
    for _ in range(1500):
        book: dict = {}
        for p in params:
            total += p.fetch(book)
    assert total > 0
    return time.perf_counter() - start


def _timed(fn, repeats: int) -> dict:
    times = [fn() for _ in range(repeats)]
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def _cpu_info() -> dict:
    model, mhz = None, []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model is None:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("cpu MHz"):
                mhz.append(float(line.split(":", 1)[1]))
    except OSError:
        pass
    return {"cpu_model": model, "cpu_mhz_median": statistics.median(mhz) if mhz else None,
            "cpu_cores": len(os.sched_getaffinity(0)), "load_average": list(os.getloadavg())}


def measure(repeats: int) -> dict:
    """Returns every figure of the module's docstring; the GPU ones only where CUDA is available."""
    import torch

    result = {"python_loop_s": _timed(_python_workload, repeats)}
    ops = 20_000
    a, b = torch.ones(1), torch.ones(1)

    def dispatch() -> float:
        start = time.perf_counter()
        for _ in range(ops):
            torch.add(a, b)
        return (time.perf_counter() - start) / ops * 1e6

    result["cpu_dispatch_us"] = _timed(dispatch, repeats)
    if torch.cuda.is_available():
        x = torch.ones(1, device="cuda")
        torch.cuda.synchronize()

        def launch() -> float:
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(ops):
                x.add_(1)
            elapsed = time.perf_counter() - start  # launches only: the queue is far from full at 20k tiny kernels
            torch.cuda.synchronize()
            return elapsed / ops * 1e6

        def sync() -> float:
            start = time.perf_counter()
            for _ in range(1000):
                torch.cuda.synchronize()
            return (time.perf_counter() - start) / 1000 * 1e6

        m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def matmul() -> float:
            m @ m
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(10):
                m @ m
            torch.cuda.synchronize()
            return 10 * 2 * 8192**3 / (time.perf_counter() - start) / 1e12

        src = torch.empty(2**31, device="cuda", dtype=torch.int16)  # 4 GiB
        dst = torch.empty_like(src)

        def copy() -> float:
            dst.copy_(src)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(5):
                dst.copy_(src)
            torch.cuda.synchronize()
            return 5 * 2 * src.numel() * 2 / (time.perf_counter() - start) / 1e12

        for name, fn in (("cuda_launch_us", launch), ("cuda_sync_us", sync), ("matmul_tflops", matmul),
                         ("copy_tb_per_s", copy)):
            result[name] = _timed(fn, repeats)
        result["gpu"] = torch.cuda.get_device_name(0)
        del m, src, dst
        torch.cuda.empty_cache()
    result.update(_cpu_info(), torch=torch.__version__, date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    return result


def sample(every_s: float, for_s: float) -> None:
    """Prints, every `every_s` seconds for `for_s`, one JSON line: the unix time, python_loop_s and cpu_dispatch_us
    (one timing each, no GPU touched): how the host's speed moves while a run's cases share it."""
    import torch

    a, b = torch.ones(1), torch.ones(1)
    end = time.time() + for_s
    while time.time() < end:
        at = time.time()
        loop = _python_workload()
        start = time.perf_counter()
        for _ in range(20_000):
            torch.add(a, b)
        dispatch_us = (time.perf_counter() - start) / 20_000 * 1e6
        print(json.dumps({"unix": round(at, 2), "python_loop_s": round(loop, 4), "cpu_dispatch_us": round(dispatch_us, 3),
                          "load_average": os.getloadavg()[0]}), flush=True)
        time.sleep(max(0.0, every_s - (time.time() - at)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timings per figure (the median is kept)")
    parser.add_argument("--label", default="", help="a word recorded with the figures (before, between, after)")
    parser.add_argument("--sample-every", type=float, default=None, metavar="S",
                        help="sample the host figures every S seconds instead (see --for)")
    parser.add_argument("--for", dest="for_s", type=float, default=600, help="seconds to sample, with --sample-every")
    args = parser.parse_args(argv)
    if args.sample_every:
        sample(args.sample_every, args.for_s)
        return 0
    print(json.dumps({"label": args.label, **measure(args.repeats)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

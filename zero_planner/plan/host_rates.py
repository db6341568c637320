"""This machine's CPU Adam rate for the step-time model: measured once, in a child process, and cached.

    cpu_adam_rate(say) -> HostRate | None      the cached figure, or a measurement now (about a minute the first
                                               time: DeepSpeed may compile its CPU Adam op), None if it cannot run
    python -m zero_planner.plan.host_rates [--json]  measure now (no cache read), print, and cache

With optimizer offload, every optimizer step waits for DeepSpeed's CPUAdam over the node's parameters; its rate
is a property of the host's cores and memory (the H100 and H200 machines we measured differ by 1.6x:
catalog/step_time.json keeps the H100 host's). zero-plan measures it where the plan is made on the training
machine (`--gpus auto`): the work ZeRO-Offload does per parameter on the host in one step, on
BENCH_PARAMS fp32 parameters: the bf16 gradient converted into the fp32 buffer Adam reads, DeepSpeedCPUAdam's
step (AdamW), and the updated parameters converted back to bf16 for the upload (the PCIe copies themselves are
throughput.pcie_seconds). The child process keeps torch and deepspeed out of the planner's own process.

Cache: models/trace_cache.cache_dir() / host_rates.json, keyed by the CPU model, logical cores, memory and the
torch and deepspeed versions. ZERO_PLANNER_MEASURE_HOST=0 turns the measurement off (the catalog's rate is used).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from zero_planner.models.trace_cache import cache_dir

BENCH_PARAMS = 64 * 2**20
"""Parameters in the measurement: 67M fp32 (1 GiB of parameter, gradient and two moments, 0.25 GiB of bf16
copies): large enough to stream from memory as a real partition does, small enough for any training host."""
BENCH_STEPS = 6
"""Steps timed; the first two are left out (page faults, thread start-up), the median of the rest is kept."""
MEASURE_TIMEOUT_S = 600
"""A child that takes longer (a stuck compile) is abandoned; the plan then uses the catalog's rate."""
CACHE_FILE = "host_rates.json"
MEASURE_ENV = "ZERO_PLANNER_MEASURE_HOST"


@dataclass(frozen=True)
class HostRate:
    """DeepSpeed CPU Adam on this machine: parameters updated per second with all its cores."""

    cpu_adam_params_per_s: float
    cpu_model: str
    cores: int
    threads: int
    """torch's intra-op threads in the measuring process (DeepSpeed's op uses OpenMP over the same cores)."""
    params: int
    torch: str
    deepspeed: str
    date: str


def cpu_model() -> str:
    """Returns the CPU's model name (/proc/cpuinfo; platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "none"


def host_key() -> str:
    """Returns this machine's cache key: CPU model, logical cores, memory, torch and deepspeed versions."""
    parts = [cpu_model(), str(os.cpu_count()), str(_memory_bytes()), _version("torch"), _version("deepspeed")]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def measure_here(params: int = BENCH_PARAMS, steps: int = BENCH_STEPS) -> HostRate:
    """Returns the CPU Adam rate measured in this process (imports torch and deepspeed; may compile the op)."""
    import datetime as dt
    import statistics
    import time

    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    master = torch.zeros(params, dtype=torch.float32)
    master.grad = torch.zeros_like(master)
    gradient16 = torch.full((params,), 1e-3, dtype=torch.bfloat16)  # as it arrives from the GPU
    upload16 = torch.empty(params, dtype=torch.bfloat16)  # what goes back up
    optimizer = DeepSpeedCPUAdam([master], lr=1e-5, adamw_mode=True)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        master.grad.copy_(gradient16)
        optimizer.step()
        upload16.copy_(master)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times[2:]) if len(times) > 2 else times[-1]
    return HostRate(
        cpu_adam_params_per_s=params / seconds, cpu_model=cpu_model(), cores=os.cpu_count() or 0,
        threads=torch.get_num_threads(), params=params, torch=torch.__version__,
        deepspeed=_version("deepspeed"), date=dt.date.today().isoformat(),
    )  # fmt: skip


def _cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def cached_rate() -> HostRate | None:
    """Returns this machine's cached measurement, or None."""
    try:
        entry = json.loads(_cache_path().read_text()).get(host_key())
        return HostRate(**entry) if entry else None
    except (OSError, ValueError, TypeError):
        return None


def store(rate: HostRate) -> None:
    """Adds `rate` to the cache under this machine's key (a cache that cannot be written is skipped)."""
    path = _cache_path()
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        data = {}
    data[host_key()] = asdict(rate)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as tmp:
            json.dump(data, tmp, indent=1)
        os.replace(tmp.name, path)
    except OSError:
        pass


def measure_in_child(timeout_s: float = MEASURE_TIMEOUT_S) -> HostRate | None:
    """Returns a measurement taken by `python -m zero_planner.plan.host_rates --json --no-cache` in a child process,
    or None when it fails or times out (no deepspeed, no compiler for its CPU op, ...)."""
    command = [sys.executable, "-m", "zero_planner.plan.host_rates", "--json", "--no-cache"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        return HostRate(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, TypeError, IndexError):
        return None


def cpu_adam_rate(say: Callable[[str], None] = lambda _: None,
                  measure: Callable[[], HostRate | None] | None = None) -> HostRate | None:
    """Returns this machine's CPU Adam rate: cached, else measured now by `measure` (default measure_in_child)
    and cached, else None. `say` is told before a measurement (it takes up to a minute, more when DeepSpeed
    compiles its op the first time)."""
    if os.environ.get(MEASURE_ENV, "1") == "0":
        return None
    rate = cached_rate()
    if rate is not None:
        return rate
    say(f"measuring this machine's CPU Adam rate once (DeepSpeed CPUAdam on {BENCH_PARAMS / 1e6:.0f}M parameters, "
        f"up to a minute; DeepSpeed may first compile its CPU op); cached in {_cache_path()}")  # fmt: skip
    rate = (measure or measure_in_child)()
    if rate is not None:
        store(rate)
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description="Measure DeepSpeed CPU Adam's rate on this machine and cache it.")
    parser.add_argument("--json", action="store_true", help="print the measurement as one JSON line")
    parser.add_argument("--no-cache", action="store_true", help="do not write the cache")
    parser.add_argument("--params", type=int, default=BENCH_PARAMS)
    args = parser.parse_args(argv)
    rate = measure_here(args.params)
    if not args.no_cache:
        store(rate)
    if args.json:
        print(json.dumps(asdict(rate)))
    else:
        print(f"CPU Adam: {rate.cpu_adam_params_per_s:.3g} parameters/s ({rate.cpu_model}, {rate.cores} cores, "
              f"{rate.threads} threads, {rate.params / 1e6:.0f}M parameters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

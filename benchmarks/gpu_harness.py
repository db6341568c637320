"""GPU harness: runs measured cases (benchmarks/cases.py) under the real `deepspeed` launcher.

One fresh launcher (so one fresh process group) per case. A case with `memory_limit_bytes` runs on an
emulated smaller GPU (the caching allocator capped at that limit) beside others on the same GPU, as long as
their limits fit in it; a case without one has its GPUs to itself. The next cases are started early and wait,
imports done and the GPU untouched, until their GPUs have room. Each finished case is appended at once to the JSONL output with its
full case (model config, DeepSpeed JSON, shapes) and provenance, so a batch cut short keeps what it ran.

    python benchmarks/gpu_harness.py --suite core --out results.jsonl [--deadline-s 540]
    python benchmarks/gpu_harness.py --cases op-cases.jsonl --out results.jsonl
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cases import SUITES, expand_case  # noqa: E402
from benchmarks.phases import emulated_limit  # noqa: E402
from zero_planner.plan.host_rates import cpu_model  # noqa: E402

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def provenance() -> dict:
    """Returns the GPU, library versions and date every measured figure is recorded with."""
    import deepspeed
    import torch
    import transformers

    adapters = {}
    for name in ("peft", "bitsandbytes"):  # LoRA / QLoRA cases
        try:
            adapters[name] = __import__(name).__version__
        except ImportError:
            adapters[name] = None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    total = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
    return {
        "gpu": gpu,
        "gpu_memory_bytes": total,
        "gpus_on_machine": torch.cuda.device_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "deepspeed": deepspeed.__version__,
        "transformers": transformers.__version__,
        **adapters,
        "python": platform.python_version(),
        "cpu_cores": len(os.sched_getaffinity(0)),  # the cores this harness and its cases may use
        "cpu_model": cpu_model(),  # the host's key for its CPU Adam and ZeRO-3 hook rates (throughput_fit.host_of)
        "date": dt.date.today().isoformat(),
        # Set by device_run.sh when another harness shares the host (one harness per GPU, cores split).
        **({"host_note": os.environ["HARNESS_HOST_NOTE"]} if os.environ.get("HARNESS_HOST_NOTE") else {}),
    }


_next_port = 20000


def free_port() -> int:
    """Returns a port for a case's rendezvous, below Linux's ephemeral range (32768-60999): a port the kernel
    hands out (bind to 0) may be taken by another case's outgoing connection before this case's launcher
    listens on it (2026-11-26, 4 x H100: EADDRINUSE on 60969 with ten cases starting at once)."""
    global _next_port
    while True:
        port, _next_port = _next_port, 20000 + (_next_port - 20000 + 1) % 10000
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


# Device memory kept free beside each memory-limited case: its CUDA context (1.3 GiB measured) and what
# lives outside the caching allocator.
SLICE_OVERHEAD_BYTES = 2 * 2**30


class Running:
    """One case under its own `deepspeed` launcher. Started early ("warm": imports done, nothing on the GPU,
    waiting for its go file) so that the imports of the next case overlap the steps of the current one."""

    def __init__(self, case: dict, gpus: list[int], workdir: Path, need_bytes: int):
        self.case, self.gpus, self.workdir, self.need_bytes = case, gpus, workdir, need_bytes
        self.host_bytes = host_need_bytes(case)
        self.disk_bytes = (case.get("planned") or {}).get("disk_bytes", 0)
        self.state, self.shared = "warm", False
        self.host_shared = False
        """Another case ran on this host (on any GPU) while this one did: its step times may include the
        neighbour's host load (CPU Adam, pinned copies), as under device_run.sh's SPLIT_GPUS."""
        (workdir / "case.json").write_text(json.dumps(case))
        self.go_file = workdir / "go"
        env = {**os.environ, **SAFE_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if case.get("kind") == "zero-run":
            # A whole zero-run and its resume (phase_case.py); zero-run launches its own ranks, on these GPUs, with
            # its own allocator setting.
            cmd = [sys.executable, "-u", str(ROOT / "benchmarks" / "phase_case.py"), "--case", str(workdir / "case.json"),
                   "--out-dir", str(workdir), "--go-file", str(self.go_file)]  # fmt: skip
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        else:
            cmd = [
                sys.executable, "-u", "-m", "deepspeed.launcher.runner",
                "--include", "localhost:" + ",".join(map(str, gpus)),
                "--master_port", str(free_port()),
                str(ROOT / "benchmarks" / "gpu_step.py"),
                "--case", str(workdir / "case.json"), "--out-dir", str(workdir), "--go-file", str(self.go_file),
            ]  # fmt: skip
        if case.get("alloc_conf"):  # the allocator setting zero-run launches with (memory.ALLOC_CONF)
            env["PYTORCH_CUDA_ALLOC_CONF"] = case["alloc_conf"]
        self.log = open(workdir / "log.txt", "w")
        self.start = time.time()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def ready(self) -> bool:
        ranks = 1 if self.case.get("kind") == "zero-run" else len(self.gpus)  # phase_case.py waits as one process
        return all((self.workdir / f"ready{rank}").exists() for rank in range(ranks))

    def go(self) -> None:
        self.state, self.start = "run", time.time()
        self.go_file.touch()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def result(self, status_override: str | None = None) -> dict:
        self.log.close()
        ranks = []
        for rank in range(1 if self.case.get("kind") == "zero-run" else len(self.gpus)):
            path = self.workdir / f"rank{rank}.json"
            if path.exists():
                ranks.append(json.loads(path.read_text()))
        statuses = {r["status"] for r in ranks}
        if "oom" in statuses:  # a rank out of memory leaves its peers waiting: that is the case's outcome
            status = "oom"
        elif status_override:
            status = status_override
        elif len(ranks) < (1 if self.case.get("kind") == "zero-run" else len(self.gpus)):
            status = "crash"
        else:
            status = "error" if "error" in statuses else "ok"
        line = {"id": self.case["id"], "status": status, "case": self.case, "ranks": ranks,
                "wall_s": round(time.time() - self.start, 1),
                # When it ran, to line it up with cases of another harness on the same host (SPLIT_GPUS).
                "started_unix": round(self.start, 1), "ended_unix": round(time.time(), 1)}  # fmt: skip
        if status in ("crash", "timeout"):
            line["log_tail"] = (self.workdir / "log.txt").read_text()[-3000:]
        return line


def host_need_bytes(case: dict) -> int:
    """Returns the host bytes to keep for a case while it runs: the planner's host figure for it (recorded by
    operating_point.py) with a tenth and 1 GiB to spare, or 0 where none was recorded (such cases have a GPU to
    themselves, as before). Several memory-limited cases share one GPU, and offloaded ones need their states in
    host memory at once: their sum must fit the host, or the kernel's OOM killer ends a case mid-step."""
    predicted = (case.get("planned") or {}).get("predicted_host_bytes")
    return int(predicted * 1.1) + 2**30 if predicted else 0


def host_budget_bytes(reserve: int = 16 * 2**30) -> int:
    """Returns the host memory the harness may hand to its cases: HARNESS_HOST_BYTES where set (the lent
    multi-GPU hosts grow their memory as it is used, so MemTotal starts far below the machine's limit: KINDS.md),
    else what /proc/meminfo says is available; less `reserve` for the harness, its warm cases and page cache."""
    if os.environ.get("HARNESS_HOST_BYTES"):
        return int(float(os.environ["HARNESS_HOST_BYTES"])) - reserve
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 - reserve
    return 2**62  # not Linux: no host packing


def disk_budget_bytes(reserve: int = 4 * 2**30) -> int:
    """Returns the disk the harness may hand to zero-run cases (their checkpoints and exports, under /tmp):
    what is free there less `reserve`."""
    import shutil

    return shutil.disk_usage(tempfile.gettempdir()).free - reserve


def cap_smaller_cards(cases: list[dict], gpu_total: int) -> None:
    """Gives each whole zero-run case planned for a smaller card than this GPU (torch's total_memory) and written
    without an allocator limit the limit phases.py gives it for that card (phases.emulated_limit), noted in the
    case: a suite written for another harness GPU (phases.py --harness-gpu, H100 by default) would otherwise run
    uncapped here, and prove nothing about fitting its card (2026-11-28: two H100 plans on H200s)."""
    for case in cases:
        capacity = (case.get("planned") or {}).get("gpu_capacity_bytes")
        if case.get("kind") == "zero-run" and capacity and not case.get("memory_limit_bytes"):
            if limit := emulated_limit(capacity, gpu_total):
                case.update(memory_limit_bytes=limit, memory_limit_source="gpu_harness: planned card smaller than its GPU")


def need_bytes(case: dict, budget: int) -> int:
    """Returns the device bytes a case takes from each of its GPUs: its allocator limit plus context, or the
    whole GPU (cases without a limit run alone, as the planner's GPU)."""
    limit = case.get("memory_limit_bytes")
    return min(budget, limit + SLICE_OVERHEAD_BYTES) if limit else budget


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--suite", choices=sorted(SUITES), help="a suite of benchmarks/cases.py")
    parser.add_argument("--cases", type=Path, help="or a JSONL of cases (benchmarks/operating_point.py writes them)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--gpus", default=None, help="comma list of GPU ids to use (default: all)")
    parser.add_argument("--case-timeout-s", type=float, default=240)
    parser.add_argument("--deadline-s", type=float, default=540, help="launch no case after this many seconds")
    parser.add_argument("--skip-done", type=Path, default=None, help="JSONL of results whose ids to skip")
    parser.add_argument("--shard", default=None, help="i/n: run every n-th case starting at i")
    parser.add_argument("--prestart", type=int, default=2, help="cases started ahead (imports done, GPU untouched)")
    parser.add_argument("--reserve-gib", type=float, default=0, help="GPU memory left to other work on each GPU")
    args = parser.parse_args(argv)
    if not (args.suite or args.cases):
        parser.error("give --suite or --cases")

    import torch

    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(torch.cuda.device_count()))
    prov = provenance()
    if args.cases:
        cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    else:
        cases = [expand_case(c) for c in SUITES[args.suite]()]
    cap_smaller_cards(cases, prov["gpu_memory_bytes"])
    if args.shard:
        i, n = map(int, args.shard.split("/"))
        cases = cases[i::n]
    done = set()
    if args.skip_done and args.skip_done.exists():
        done = {json.loads(line)["id"] for line in args.skip_done.read_text().splitlines() if line.strip()}
    queue = [c for c in cases if c["id"] not in done and c["num_gpus"] <= len(gpus)]
    print(f"{len(queue)} cases on GPUs {gpus} ({prov['gpu']})", flush=True)

    t0 = time.time()
    budget = {g: torch.cuda.get_device_properties(g).total_memory - 2**30 - int(args.reserve_gib * 2**30) for g in gpus}
    free = dict(budget)
    host_free = host_budget_bytes()
    disk_free = disk_budget_bytes()
    jobs: list[Running] = []
    tmp = Path(tempfile.mkdtemp(prefix="zp-harness-"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        while queue or jobs:
            for job in list(jobs):
                if job.state == "warm" and job.proc.poll() is None:
                    continue
                timed_out = job.state == "run" and time.time() - job.start > job.case.get("timeout_s", args.case_timeout_s)
                if job.proc.poll() is None and not timed_out:
                    continue
                if timed_out and job.proc.poll() is None:
                    job.kill()
                    job.proc.wait()
                line = job.result("timeout" if timed_out else None)
                line["provenance"] = {**prov, "num_gpus": len(job.gpus)}
                # Another case ran on the same GPU meanwhile: its timings (and mem_get_info) are not its own.
                line["gpu_shared"] = job.shared
                line["host_shared"] = job.host_shared
                out.write(json.dumps(line) + "\n")
                out.flush()
                peak = max((r.get("peak_allocated_bytes") or 0 for r in line["ranks"]), default=0)
                print(f"[{time.time() - t0:6.0f}s] {line['id']:70s} {line['status']:7s} "
                      f"peak {peak / 2**30:7.2f} GiB  {line['wall_s']:5.1f}s", flush=True)  # fmt: skip
                jobs.remove(job)
                if job.state == "run":
                    host_free += job.host_bytes
                    disk_free += job.disk_bytes
                    for g in job.gpus:
                        free[g] += job.need_bytes
            # Go, strictly in launch order, when the case's GPUs and the host have room (a case alone goes anyway).
            for job in [j for j in jobs if j.state == "warm"]:
                if not job.ready() or any(free[g] < job.need_bytes for g in job.gpus):
                    break
                if host_free < job.host_bytes and any(j.state == "run" for j in jobs):
                    break
                if disk_free < job.disk_bytes and any(j.state == "run" for j in jobs):
                    break
                host_free -= job.host_bytes
                disk_free -= job.disk_bytes
                for g in job.gpus:
                    free[g] -= job.need_bytes
                others = [j for j in jobs if j.state == "run" and set(j.gpus) & set(job.gpus)]
                job.shared = bool(others)
                for other in others:
                    other.shared = True
                running = [j for j in jobs if j.state == "run"]
                job.host_shared = bool(running)  # later neighbours mark it below, when they go
                for other in running:
                    other.host_shared = True
                job.go()
            if time.time() - t0 > args.deadline_s and queue:
                print(f"deadline: {len(queue)} cases left unlaunched", flush=True)
                queue = []
            while queue and sum(j.state == "warm" for j in jobs) < args.prestart:
                case = queue.pop(0)
                need = need_bytes(case, min(budget.values()))
                claimed = {g: sum(j.need_bytes for j in jobs if g in j.gpus) for g in gpus}
                take = sorted(sorted(gpus, key=lambda g: (claimed[g], g))[: case["num_gpus"]])
                # one folder per queued case: a case listed twice (repeats) must not find the first one's go file
                workdir = tmp / f"{len(cases) - len(queue):03d}-{case['id'].replace('|', '_')}"
                workdir.mkdir(parents=True, exist_ok=True)
                jobs.append(Running(case, take, workdir, need))
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU harness: runs measured cases (benchmarks/cases.py) under the real `deepspeed` launcher.

One fresh launcher (so one fresh process group) per case; cases needing fewer GPUs than the machine has
run side by side on disjoint GPUs. Each finished case is appended at once to the JSONL output with its
full case (model config, DeepSpeed JSON, shapes) and provenance, so a batch cut short keeps what it ran.

    python benchmarks/gpu_harness.py --suite core --out results.jsonl [--deadline-s 540]
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
        "date": dt.date.today().isoformat(),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Running:
    def __init__(self, case: dict, gpus: list[int], workdir: Path):
        self.case, self.gpus, self.workdir = case, gpus, workdir
        (workdir / "case.json").write_text(json.dumps(case))
        cmd = [
            sys.executable, "-u", "-m", "deepspeed.launcher.runner",
            "--include", "localhost:" + ",".join(map(str, gpus)),
            "--master_port", str(free_port()),
            str(ROOT / "benchmarks" / "gpu_step.py"),
            "--case", str(workdir / "case.json"), "--out-dir", str(workdir),
        ]  # fmt: skip
        env = {**os.environ, **SAFE_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.log = open(workdir / "log.txt", "w")
        self.start = time.time()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def result(self, status_override: str | None = None) -> dict:
        self.log.close()
        ranks = []
        for rank in range(len(self.gpus)):
            path = self.workdir / f"rank{rank}.json"
            if path.exists():
                ranks.append(json.loads(path.read_text()))
        statuses = {r["status"] for r in ranks}
        if status_override:
            status = status_override
        elif len(ranks) < len(self.gpus):
            status = "oom" if "oom" in statuses else "crash"
        else:
            status = "oom" if "oom" in statuses else "error" if "error" in statuses else "ok"
        line = {"id": self.case["id"], "status": status, "case": self.case, "ranks": ranks,
                "wall_s": round(time.time() - self.start, 1)}  # fmt: skip
        if status in ("crash", "timeout"):
            line["log_tail"] = (self.workdir / "log.txt").read_text()[-3000:]
        return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", required=True, choices=sorted(SUITES))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--gpus", default=None, help="comma list of GPU ids to use (default: all)")
    parser.add_argument("--case-timeout-s", type=float, default=240)
    parser.add_argument("--deadline-s", type=float, default=540, help="launch no case after this many seconds")
    parser.add_argument("--skip-done", type=Path, default=None, help="JSONL of results whose ids to skip")
    parser.add_argument("--shard", default=None, help="i/n: run every n-th case starting at i")
    parser.add_argument("--slots", type=int, default=1,
                        help="cases sharing one GPU (per-process peak counters stay exact; a shared case that runs "
                             "out of memory is run again alone; limit ladders always run alone)")
    args = parser.parse_args(argv)

    import torch

    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(torch.cuda.device_count()))
    prov = provenance()
    cases = [expand_case(c) for c in SUITES[args.suite]()]
    if args.shard:
        i, n = map(int, args.shard.split("/"))
        cases = cases[i::n]
    done = set()
    if args.skip_done and args.skip_done.exists():
        done = {json.loads(line)["id"] for line in args.skip_done.read_text().splitlines() if line.strip()}
    queue = [c for c in cases if c["id"] not in done and c["num_gpus"] <= len(gpus)]
    # Larger cases first, so small ones fill the gaps they leave.
    queue.sort(key=lambda c: -c["num_gpus"])
    print(f"{len(queue)} cases on GPUs {gpus} ({prov['gpu']})", flush=True)

    t0 = time.time()
    free = {g: args.slots for g in gpus}
    running: list[Running] = []
    tmp = Path(tempfile.mkdtemp(prefix="zp-harness-"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        while queue or running:
            for job in list(running):
                timed_out = time.time() - job.start > args.case_timeout_s
                if job.proc.poll() is None and not timed_out:
                    continue
                if timed_out and job.proc.poll() is None:
                    job.kill()
                    job.proc.wait()
                line = job.result("timeout" if timed_out else None)
                line["provenance"] = {**prov, "num_gpus": len(job.gpus)}
                # Another case ran on the same GPU: device-wide readings (mem_get_info) include it.
                line["gpu_shared"] = job.slots < args.slots
                out.write(json.dumps(line) + "\n")
                out.flush()
                peak = max((r.get("peak_allocated_bytes") or 0 for r in line["ranks"]), default=0)
                print(f"[{time.time() - t0:6.0f}s] {line['id']:60s} {line['status']:7s} "
                      f"peak {peak / 2**30:7.2f} GiB  {line['wall_s']:5.1f}s", flush=True)  # fmt: skip
                running.remove(job)
                for g in job.gpus:
                    free[g] += job.slots
                if line["status"] == "oom" and job.slots < args.slots:
                    queue.insert(0, {**job.case, "exclusive": True})  # run alone: the neighbour may have caused it
                    continue
            if time.time() - t0 > args.deadline_s:
                if queue:
                    print(f"deadline: {len(queue)} cases left unlaunched", flush=True)
                queue = []
            for case in list(queue):
                need = args.slots if case.get("exclusive") else 1
                usable = sorted((g for g in gpus if free[g] >= need), key=lambda g: (-free[g], g))
                if case["num_gpus"] <= len(usable):
                    take = sorted(usable[: case["num_gpus"]])
                    for g in take:
                        free[g] -= need
                    workdir = tmp / (case["id"].replace("|", "_") + ("_x" if need > 1 else ""))
                    workdir.mkdir(parents=True, exist_ok=True)
                    job = Running(case, take, workdir)
                    job.slots = need
                    running.append(job)
                    queue.remove(case)
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())

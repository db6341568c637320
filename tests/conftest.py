"""Shared fixtures: Plan objects built directly (llama-tiny + build_ds_config + placeholder estimates)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from zero_planner.plan.dsconfig import build_ds_config
from zero_planner.planfile import Plan, save_plan
from zero_planner.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
# zero-plan's width is the terminal's or COLUMNS, else 100 on a pipe (render.output_width); pytest-xdist's workers
# inherit a COLUMNS of their own, which rewrapped the tables some CLI tests read. Every test sees a pipe's width.
os.environ.pop("COLUMNS", None)
LLAMA_TINY = json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text())
GIB = 2**30


def _estimate(peak_bytes: int, total_bytes: int, cpu_bytes: int) -> dict:
    # Placeholder figures: these tests exercise zero-run, not the memory model.
    return {
        "per_gpu": {
            "params": peak_bytes // 8,
            "gradients": peak_bytes // 8,
            "optimizer": peak_bytes // 4,
            "activations": peak_bytes // 4,
            "buffers": peak_bytes // 8,
            "overhead": total_bytes - peak_bytes,
            "peak_allocated": peak_bytes,
            "total": total_bytes,
        },
        "cpu": {"total": cpu_bytes},
    }


def make_plan(
    strategy: str = "2",
    *,
    gpu: str = "cpu",
    nodes: int = 1,
    gpus_per_node: int = 2,
    gpu_memory_bytes: int = 16 * GIB,
    cpu_memory_bytes: int = 64 * GIB,
    micro_batch_size: int = 4,
    gradient_accumulation_steps: int = 1,
    seq_len: int = 64,
    precision: str = "fp32",
    learning_rate: float = 3e-3,
    max_steps: int = 20,
    save_every: int = 10,
    log_every: int = 5,
    output_dir: str = "runs/test",
    dataset: str = "synthetic",
    peak_bytes: int = 1 * GIB,
    total_bytes: int = 2 * GIB,
    cpu_bytes: int = 1 * GIB,
    params: int = 500_000,
    candidates: list[dict] | None = None,
    **training,
) -> Plan:
    """Returns a valid Plan for llama-tiny with the given strategy and shapes (estimates are placeholders)."""
    s = STRATEGIES[strategy]
    world = nodes * gpus_per_node
    ds = build_ds_config(
        s,
        micro_batch_size=micro_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        world_size=world,
        precision=precision,
        hidden_size=LLAMA_TINY["hidden_size"],
        lr=learning_rate,
    )
    strategy_info = {
        "stage": s.stage,
        "offload_optimizer": s.offload_optimizer,
        "offload_param": s.offload_param,
        "name": s.name,
    }
    plan = Plan.model_validate(
        {
            "model": {
                "name": "llama-tiny",
                "source": "file",
                "params": params,
                "trainable_params": params,
                "init": "random",
                "config": LLAMA_TINY,
            },
            "hardware": {
                "gpu": gpu,
                "nodes": nodes,
                "gpus_per_node": gpus_per_node,
                "gpu_memory_bytes": gpu_memory_bytes,
                "cpu_memory_bytes": cpu_memory_bytes,
            },
            "training": {
                "micro_batch_size": micro_batch_size,
                "gradient_accumulation_steps": gradient_accumulation_steps,
                "seq_len": seq_len,
                "gradient_checkpointing": False,
                "precision": precision,
                "learning_rate": learning_rate,
                "max_steps": max_steps,
                "save_every": save_every,
                "log_every": log_every,
                "output_dir": output_dir,
                "dataset": dataset,
                "tokenizer": "bytes",  # llama-tiny is a bare config: byte-level, as zero-plan --tokenizer bytes
                **training,
            },
            "strategy": strategy_info,
            "estimate": _estimate(peak_bytes, total_bytes, cpu_bytes),
            "candidates": candidates or [],
            "deepspeed_config": ds,
            "launch": {"command": []},
        }
    )
    return plan


def make_candidate(strategy: str, *, micro_batch_size: int, checkpointing: bool, fits: bool, peak_bytes: int,
                   tokens_per_second: float, chosen: bool = False) -> dict:  # fmt: skip
    s = STRATEGIES[strategy]
    return {
        "strategy": {"stage": s.stage, "offload_optimizer": s.offload_optimizer, "offload_param": s.offload_param,
                     "name": s.name},  # fmt: skip
        "micro_batch_size": micro_batch_size,
        "gradient_checkpointing": checkpointing,
        "fits": fits,
        "estimate": _estimate(peak_bytes, peak_bytes + GIB, GIB),
        "tokens_per_second": tokens_per_second,
        "reason": "test",
        "chosen": chosen,
    }


@pytest.fixture
def plan_file(tmp_path):
    """Returns a function writing make_plan(**kw) to tmp_path/NAME and returning its path."""

    def write(name: str = "plan.json", **kw) -> Path:
        kw.setdefault("output_dir", str(tmp_path / "run"))
        path = tmp_path / name
        save_plan(make_plan(**kw), path)
        return path

    return write


HEAVY_MODULES = ("torch", "deepspeed", "transformers", "datasets", "huggingface_hub", "accelerate", "peft", "bitsandbytes")


def heavy_modules_after(code: str) -> list[str]:
    """Returns which heavy libraries a fresh Python process has imported after running `code`.

    The planner's import path must stay light (docs/design.md: zero-plan starts fast); every module that promises
    so is checked through this one helper. `code` may raise: the answer is printed in a finally block.
    """
    import subprocess
    import sys
    from pathlib import Path

    program = (
        "import sys\n"
        "try:\n" + "".join(f"    {line}\n" for line in code.splitlines()) +
        f"finally:\n    print('HEAVY', sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))\n"
    )  # fmt: skip
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout  # fmt: skip
    line = next(line for line in out.splitlines() if line.startswith("HEAVY "))
    return eval(line[len("HEAVY "):])  # a list literal printed by the child above



def pytest_collection_modifyitems(config, items):
    """Orders the tests for pytest-xdist's --dist loadscope --no-loadscope-reorder (pyproject's addopts).

    A unit of work is what loadscope makes one: a test file's functions, or one class's methods. So a file's module
    fixtures are built once per unit, and a file whose real launches would queue on one worker splits itself into
    classes (test_faults_cpu, whose classes share one clean run through shared_once). Units with real launches
    (slow) go first, the most first: one started last would leave the other worker idle at the end. (xdist 3.8's
    --dist loadgroup groups nothing under pytest 9, which keeps a node's id elsewhere than xdist writes it.)"""
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(item.nodeid.rsplit("::", 1)[0], []).append(item)  # xdist's LoadScopeScheduling._split_scope
    slow = {name: sum(1 for item in members if item.get_closest_marker("slow")) for name, members in units.items()}
    items[:] = [item for name in sorted(units, key=lambda name: -slow[name]) for item in units[name]]


def shared_once(tmp_path_factory, name: str, build):
    """Returns build(folder)'s JSON-able result, built once per pytest session whichever xdist worker asks first
    (the others wait on a file lock and read it): for a run several units of work compare against."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, not pytest-of-<user>
    folder = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        done = folder / "shared_once.json"
        if done.exists():
            return json.loads(done.read_text())
        folder.mkdir(exist_ok=True)
        result = build(folder)
        done.write_text(json.dumps(result))
        return result


@pytest.fixture(scope="session", autouse=True)
def _remove_leaked_deepspeed_shm_buffers():
    """Removes DeepSpeed CPU all-reduce buffers left in /dev/shm by ranks this session killed.

    Ranks that finish remove their own (train.release_shm_buffer); a rank killed by a test (SIGINT, OOM
    paths, the harness) cannot, and each leaked file holds 66 MB of RAM until reboot.
    """
    import time
    from pathlib import Path

    start = time.time()
    yield
    in_use = _shm_files_in_use()  # under pytest-xdist another worker's ranks may still be using theirs
    for path in Path("/dev/shm").glob("deepspeed_allreduce_buffer_*"):
        try:
            if path.stat().st_mtime >= start - 1 and str(path) not in in_use:
                path.unlink()
        except OSError:
            pass


def _shm_files_in_use() -> set[str]:
    """Returns the /dev/shm paths some process on this machine holds open or mapped (Linux /proc)."""
    paths = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            paths.update(line.split(maxsplit=5)[5].strip() for line in (proc / "maps").read_text().splitlines()
                         if "/dev/shm/" in line)
            paths.update(str(fd.readlink()) for fd in (proc / "fd").iterdir())
        except (OSError, IndexError):
            continue
    return {p for p in paths if p.startswith("/dev/shm/")}


@pytest.fixture(autouse=True)
def _no_host_measurement(monkeypatch):
    """zero-plan --gpus auto measures the host's CPU Adam rate in a child process (host_rates.py); tests that
    want it patch the measurement instead."""
    monkeypatch.setenv("ZERO_PLANNER_MEASURE_HOST", "0")

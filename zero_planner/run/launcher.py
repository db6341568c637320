"""The `deepspeed` launcher as a process: the command zero-run actually spawns, and the one place anything is spawned.

    runnable(argv)                    -> a leading `deepspeed` replaced by this interpreter's launcher module
    spawn(argv, env, multi_node=...)  -> (exit status, signals forwarded): zero-run's run, each --probe candidate,
                                         sbatch --submit
    free_port()                       -> a free TCP port for a one-node rendezvous

The command itself is plan/command.py's (pure data); what is checked before spawning is preflight.py's.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

LAUNCHER_MODULE = "deepspeed.launcher.runner"
"""What the `deepspeed` console script runs. zero-run runs it as a module of its own interpreter, so a
`deepspeed` script missing from PATH (a venv not activated) or another environment's one never matters."""


def runnable(argv: Sequence[str], python: str | None = None) -> list[str]:
    """Returns the command zero-run actually spawns: a leading `deepspeed` replaced by `python -m
    deepspeed.launcher.runner`, a leading `python` by the interpreter (the one running zero-run by default). On
    one node, where the installed runner takes it, with `--log_level error`: the runner's WARNING that it found no
    hostfile (there is none to find on one node) and its INFO lines (the command zero-run prints itself, each rank
    spawned and exiting) are left out; its errors still show."""
    if argv and argv[0] == "deepspeed":
        quiet = ["--log_level", "error"] if "--hostfile" not in argv and launcher_takes_log_level() else []
        return [python or sys.executable, "-m", LAUNCHER_MODULE, *quiet, *argv[1:]]
    if argv and argv[0] == "python":
        return [python or sys.executable, *argv[1:]]
    return list(argv)


@functools.lru_cache(maxsize=1)
def launcher_takes_log_level() -> bool:
    """Returns True when the installed DeepSpeed's runner has --log_level (a recent option: 0.19.8 has it, and a
    runner without it refuses the launch). Reads the runner's source rather than importing deepspeed (torch)."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.origin:
        return False
    try:
        return '"--log_level"' in (Path(spec.origin).parent / "launcher" / "runner.py").read_text()
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def spawn(argv: list[str], env: dict[str, str], *, multi_node: bool, node_launcher: bool = False,
           log=None, heartbeat=None, heartbeat_s: float = 30.0) -> tuple[int, int]:  # fmt: skip
    """Runs the launcher (the only spawn in zero-planner; sbatch too); returns (exit status, signals forwarded).
    `log`: an open file taking the launcher's stdout and stderr (zero-run --probe reads it for OOM messages).
    `heartbeat`: called every `heartbeat_s` while the launcher runs (zero-run touches its output folder's lock).

    The launcher gets its own session, so a terminal's Ctrl-C reaches zero-run alone, which passes it on:
    on one node straight to the ranks (each finishes its step and saves; the launcher then exits by itself,
    so waiting on it covers the save), on several through a hostfile to DeepSpeed's runner, which relays it to
    the remote nodes; with `node_launcher` (--node-rank) to this node's ranks, the per-node launcher's children.
    A second signal kills the whole process group.
    """
    import subprocess

    full_env = {**os.environ, **env}
    theirs = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if "PYTORCH_CUDA_ALLOC_CONF" in env and theirs is not None and theirs != env["PYTORCH_CUDA_ALLOC_CONF"]:
        full_env["PYTORCH_CUDA_ALLOC_CONF"] = theirs
        print(f"zero-run: keeping your PYTORCH_CUDA_ALLOC_CONF={theirs}; the memory plan assumes "
              f"{env['PYTORCH_CUDA_ALLOC_CONF']} (without expandable segments the cache can fragment)", file=sys.stderr)
    if full_env.get("TORCH_CUDA_ARCH_LIST") == "":
        del full_env["TORCH_CUDA_ARCH_LIST"]
    # Ranks run `python -m zero_planner.train`: make this copy of the package importable there too.
    package_root = str(Path(__file__).resolve().parents[2])
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    cmd = runnable(argv)
    proc = subprocess.Popen(cmd, env=full_env, start_new_session=True, stdout=log,
                            stderr=None if log is None else subprocess.STDOUT)  # fmt: skip
    received = 0

    def forward(signum, frame):
        nonlocal received
        received += 1
        if received == 1:
            _forward_signal(proc.pid, signum, multi_node=multi_node, node_launcher=node_launcher)
        else:
            _killpg(proc.pid, signal.SIGKILL)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                rc = proc.wait(timeout=heartbeat_s if heartbeat is not None else None)
                break
            except subprocess.TimeoutExpired:
                heartbeat()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return rc, received


def _forward_signal(pid: int, signum: int, *, multi_node: bool, node_launcher: bool = False) -> None:
    import psutil

    try:
        runner = psutil.Process(pid)
        targets = [runner] if multi_node else []
        if node_launcher:
            targets = runner.children()  # deepspeed.launcher.launch -> ranks
        elif not multi_node:
            # runner -> deepspeed.launcher.launch -> ranks: the ranks are the launcher's children.
            for child in runner.children():
                targets += child.children() or [child]
        for proc in targets or [runner]:
            proc.send_signal(signum)
    except psutil.Error:
        _killpg(pid, signum)


def _killpg(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass

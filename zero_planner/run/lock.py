"""One zero-run per output folder: a lock file that names the run holding it.

    acquire(output_dir, command=..., say=...) -> OutputLock   raises InputError while another live run holds it
    OutputLock.refresh()                                       keeps the heartbeat fresh (zero-run, while it waits)
    OutputLock.release()

Two runs on one folder would each write checkpoints, final/ and run_report.json over the other's, and both report
success. The lock (OUTPUT_DIR/.zero_run.lock, JSON: pid, host, the process's start time, the command, heartbeat)
is created with O_EXCL, so only one of two runs started together gets it. A lock is stale, and taken over with a
word, when its process is gone (this host: no such pid, or a pid reused by another process since) or, held from
another host, when its heartbeat is older than STALE_AFTER_S (zero-run touches it every REFRESH_S while its
ranks run; a host that crashed stops touching it). No torch import here.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zero_planner.errors import InputError

LOCK_NAME = ".zero_run.lock"
REFRESH_S = 30.0
"""How often zero-run touches its lock while the launcher runs."""
STALE_AFTER_S = 300.0
"""A lock held from another host whose heartbeat is older than this is taken over (10 missed refreshes)."""


def lock_name(node_rank: int | None = None) -> str:
    """Returns the lock's file name: one per node with --node-rank (every node runs its own zero-run on a folder
    the nodes may share), else one per folder."""
    return LOCK_NAME if node_rank is None else f".zero_run.node{node_rank}.lock"


def _process_start(pid: int) -> float | None:
    """Returns the start time of process `pid` on this host (psutil), None when there is no such process."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.Error:
        return 0.0  # exists, but not ours to inspect: treat it as alive


def holder_alive(record: dict[str, Any], *, heartbeat_age_s: float, host: str | None = None) -> bool:
    """Returns True when the run recorded in a lock may still be running (the lock must be respected)."""
    host = host or socket.gethostname()
    if record.get("host") != host:
        return heartbeat_age_s < STALE_AFTER_S
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    started = _process_start(pid)
    if started is None:
        return False
    recorded = record.get("pid_started")
    # A pid the kernel gave to another process since: its start time is not the recorded one.
    return not (isinstance(recorded, (int, float)) and started and abs(started - recorded) > 1.0)


def describe(record: dict[str, Any]) -> str:
    """Returns the holder in words: 'pid 1234 on host-a since 2026-12-06 12:01:02 UTC (zero-run plan.json)'."""
    since = record.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if isinstance(since, (int, float)) else "?"
    command = record.get("command")
    what = f" ({command})" if command else ""
    return f"pid {record.get('pid')} on {record.get('host')} since {when}{what}"


@dataclass
class OutputLock:
    path: Path
    record: dict[str, Any]

    def refresh(self) -> None:
        """Touches the lock (its mtime is the heartbeat); a lock removed under the run is left removed."""
        try:
            os.utime(self.path)
        except OSError:
            pass

    def release(self) -> None:
        """Removes the lock if it is still this run's."""
        try:
            if json.loads(self.path.read_text()).get("token") == self.record["token"]:
                self.path.unlink()
        except (OSError, json.JSONDecodeError):
            pass


def _read(path: Path) -> tuple[dict[str, Any] | None, float]:
    """Returns (the lock's record, None when unreadable or half-written; seconds since its heartbeat)."""
    try:
        age = time.time() - path.stat().st_mtime
        return json.loads(path.read_text()), age
    except FileNotFoundError:
        return None, 0.0
    except (OSError, json.JSONDecodeError):
        return None, time.time() - path.stat().st_mtime if path.exists() else 0.0


def acquire(output_dir: str | Path, *, command: Sequence[str], node_rank: int | None = None,
            say: Callable[[str], None] = lambda line: None) -> OutputLock:  # fmt: skip
    """Returns this run's lock on `output_dir` (created if missing). Raises InputError naming the holder when a
    live run holds it; a stale one is taken over, and `say` hears which."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / lock_name(node_rank)
    me = os.getpid()
    record = {"pid": me, "host": socket.gethostname(), "pid_started": _process_start(me), "started": time.time(),
              "command": shlex.join(command), "token": f"{socket.gethostname()}:{me}:{time.time_ns()}"}  # fmt: skip
    text = json.dumps(record, indent=2) + "\n"
    for _attempt in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            held, age = _read(path)
            if held is None and age < 5.0:
                time.sleep(0.5)  # another run is writing its record this instant: read it again
                continue
            if held is not None and holder_alive(held, heartbeat_age_s=age):
                raise InputError(f"{folder} is in use by another zero-run: {describe(held)}; wait for it, stop it, "
                                 f"or choose another --output-dir (its lock: {path})")  # fmt: skip
            why = "its process is gone" if held is None or held.get("host") == record["host"] else (
                f"no heartbeat from {held.get('host')} for {age:.0f} s")  # fmt: skip
            say(f"taking over the stale lock on {folder} ({describe(held) if held else 'unreadable'}: {why})")
            tmp = path.with_name(f"{path.name}.{me}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        else:
            with os.fdopen(fd, "w") as f:
                f.write(text)
        # Two runs taking over one stale lock at once: the last rename wins, and only its run goes on.
        time.sleep(0.05)
        now, _ = _read(path)
        if now is not None and now.get("token") == record["token"]:
            return OutputLock(path, record)
        if now is not None:
            raise InputError(f"{folder} is in use by another zero-run: {describe(now)}; wait for it, stop it, or "
                             f"choose another --output-dir (its lock: {path})")  # fmt: skip
    raise InputError(f"could not take the lock {path} (it keeps changing); is another zero-run starting there?")

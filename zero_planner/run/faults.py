"""A rank's fault in one line: what happened, what survived, and the command that continues.

    classify(error, phase=..., step=..., output_dir=..., next_save_bytes=...) -> message or None
    record_fault(output_dir, rank=..., ...)      OUTPUT_DIR/fault_rank{N}.json, read by zero-run after the launcher
    read_fault(output_dir) -> record or None     the cause first: a disk or export fault before a lost peer
    kept_text(output_dir, save=...)              "checkpoints intact up to step 40 (...)"

Faults that are not bad input and not out of GPU memory (plan/advice.py's) but that a run meets: the disk fills
during a save or the export, the output folder turns read-only, an export does not read back, a peer rank dies
(the survivors' collectives then fail with gloo's or NCCL's error). Each rank records what it met and leaves;
zero-run prints one line from the records instead of each rank's traceback. torch's save raises RuntimeError,
not OSError, when the disk fills ("basic_ios::clear: iostream error", "PytorchStreamWriter failed writing file"),
so a failed save or export is told apart by the state of the disk it wrote to (free space, writability). No torch
import at module level.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from zero_planner.plan.saves import size_text
from zero_planner.run import checkpoint as ckpt

FAULT_PREFIX = "fault_rank"
PEER_LOST = "peer-lost"
EXIT_FAULT = 4
"""A rank's exit status after a recorded fault (1 is any other error, 2 bad input, 3 out of GPU memory: train.EXIT_OOM)."""


class ExportBroken(RuntimeError):
    """The export written does not read back (a file cut, a key missing, a config or tokenizer that does not load)."""


_PEER_WORDS = ("connection closed by peer", "connection reset by peer", "broken pipe", "nccl communicator",
               "ncclremoteerror", "socket timeout", "gloo", "ncclsystemerror")  # fmt: skip


def _is_peer_error(error: BaseException) -> bool:
    """True for the error a collective raises when another rank has gone (torch.distributed's DistError, or
    gloo's / NCCL's RuntimeError text)."""
    try:
        import torch.distributed as dist

        if isinstance(error, getattr(dist, "DistError", ())):
            return True
    except ImportError:
        pass
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(word in text for word in _PEER_WORDS)


def disk_state(output_dir: Path) -> tuple[int, str | None]:
    """Returns (free bytes under output_dir, why nothing can be written there or None)."""
    from zero_planner.run.preflight import existing_parent, write_problem

    free = shutil.disk_usage(existing_parent(output_dir)).free
    return free, write_problem(output_dir)


def newest_checkpoint_bytes(output_dir: Path) -> int | None:
    """Returns the bytes of the newest complete checkpoint (what the next save writes again), None without one."""
    usable = ckpt.usable_checkpoints(Path(output_dir) / ckpt.CHECKPOINTS_DIR)
    if not usable:
        return None
    return sum(p.stat().st_size for p in usable[0][1].rglob("*") if p.is_file())


def classify(error: BaseException, *, phase: str, step: int, output_dir: Path, rank: int,
             next_save_bytes: int | None = None) -> tuple[str, str] | None:  # fmt: skip
    """Returns (kind, one-line message) for a fault a run can meet, None for an error that is a bug or bad input
    (its traceback is kept). kind: disk-full, read-only, export-broken, write-failed, peer-lost."""
    if _is_peer_error(error):
        return PEER_LOST, (f"rank {rank} lost contact with another rank during {phase} of step {step} (that rank "
                           "stopped first: its error, if any, is above)")  # fmt: skip
    if isinstance(error, ExportBroken):
        return "export-broken", f"the export at step {step} does not read back: {error}"
    writing = phase in ("save", "export", "report")
    os_errno = error.errno if isinstance(error, OSError) else None
    if not writing and os_errno is None:
        return None
    free, not_writable = disk_state(Path(output_dir))
    where = {"save": "saving the checkpoint", "export": "exporting the model",
             "report": "writing run_report.json"}.get(phase, f"the {phase} phase")  # fmt: skip
    need = next_save_bytes if phase == "save" else None
    if os_errno in (errno.EROFS, errno.EACCES, errno.EPERM) or (not_writable and os_errno != errno.ENOSPC):
        why = not_writable or os.strerror(os_errno)
        return "read-only", f"could not write while {where} at step {step}: {why}"
    full = os_errno in (errno.ENOSPC, errno.EDQUOT) or (writing and free < max(need or 0, 64 * 2**20))
    if full:
        room = f"; the next save needs about {size_text(need)}" if need else ""
        return "disk-full", (f"the disk under {output_dir} filled while {where} at step {step} "
                             f"({size_text(free)} free{room})")  # fmt: skip
    if os_errno is not None:
        return "write-failed", f"could not write while {where} at step {step}: {os.strerror(os_errno)}"
    return None


KILL_AT_ENV = "ZERO_RUN_KILL_AT"
"""Fault injection for the fault tests: a phase name ("export"), at whose first file written the writing rank kills
itself (SIGKILL, as kill -9 would), at a point a watcher from outside cannot hit reliably. Unset in every real run."""


def kill_here_if_asked(phase: str) -> None:
    """SIGKILLs this process when $ZERO_RUN_KILL_AT names `phase` (KILL_AT_ENV)."""
    if os.environ.get(KILL_AT_ENV) == phase:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


FAULT_DIR_ENV = "ZERO_RUN_FAULT_DIR"
"""A folder on zero-run's own host (its temp dir) where ranks there also look to record a fault: the output folder
may be the full disk that the fault is about."""


def record_fault(output_dir: Path, *, rank: int, kind: str, message: str, phase: str, step: int) -> bool:
    """Writes fault_rank{N}.json under output_dir or, where that cannot be written (a full disk, a read-only
    folder), under $ZERO_RUN_FAULT_DIR; returns whether either was written (failing both, the rank's stderr line
    is the only record)."""
    record = {"rank": rank, "kind": kind, "message": message, "phase": phase, "step": step, "time": time.time()}
    fallback = os.environ.get(FAULT_DIR_ENV)
    for folder in [Path(output_dir), *([Path(fallback)] if fallback else [])]:
        try:
            ckpt.write_json_atomic(folder / f"{FAULT_PREFIX}{rank}.json", record)
            return True
        except OSError:
            continue
    return False


def zero_run_reports(recorded: bool) -> bool:
    """Returns whether zero-run, which launched this rank, prints the fault's line itself (from the record, with
    what was kept and the command that continues): then the rank says nothing, and the fault ends in one line,
    not one per rank and zero-run's. Under another launcher ($ZERO_RUN_FAULT_DIR unset), or with no record
    written, the rank's own line is the record."""
    return recorded and bool(os.environ.get(FAULT_DIR_ENV))


def read_fault(*folders: Path) -> dict[str, Any] | None:
    """Returns the fault that explains the run's end, from the records under `folders`: a rank's own fault before a
    peer's loss of it, then the earliest."""
    records = []
    for path in (p for folder in folders for p in Path(folder).glob(f"{FAULT_PREFIX}*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    if not records:
        return None
    return min(records, key=lambda r: (r.get("kind") == PEER_LOST, r.get("time", 0)))


def kept_text(output_dir: Path, *, save: str, adapters: bool = False) -> str:
    """Returns what survived, in words: the newest complete checkpoint, and the final export if one is whole."""
    final = Path(output_dir) / ("final-adapter" if adapters else "final")
    exported = f"; {final} is complete" if ckpt.export_problem(final) is None else ""
    if save != "steps":
        return f"no checkpoint is kept with --save {save}{exported}"
    usable = ckpt.usable_checkpoints(Path(output_dir) / ckpt.CHECKPOINTS_DIR)
    if not usable:
        return f"no complete checkpoint yet{exported}"
    step, path = usable[0]
    return f"checkpoints intact up to step {step} ({path}){exported}"

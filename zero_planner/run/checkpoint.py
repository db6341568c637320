"""zero-run checkpoints: layout, completion markers, picking the checkpoint to resume from, pruning.

Layout under OUTPUT_DIR/checkpoints/: one DeepSpeed checkpoint per tag `step{N}` (engine.save_checkpoint),
and inside it `zero_run_complete.json`, written by rank 0 only after every rank finished writing. The marker
holds the training state (step, rank 0's losses so far, world size) and a manifest of every file's size, so
a checkpoint cut short (no marker) or damaged later (a file missing or of another size) is detected and
the previous one used. No torch import here. When checkpoints are due and how large they are is the save
policy's (plan/saves.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from zero_planner.plan.saves import KEEP_CHECKPOINTS

CHECKPOINTS_DIR = "checkpoints"
MARKER = "zero_run_complete.json"

_TAG = re.compile(r"^step(\d+)$")


def tag_for(step: int) -> str:
    return f"step{step}"


def step_of(tag: str) -> int | None:
    match = _TAG.match(tag)
    return int(match.group(1)) if match else None


def manifest(tag_dir: Path) -> dict[str, int]:
    """Returns {relative path: size in bytes} of every file under `tag_dir` except the marker."""
    out = {}
    for path in sorted(tag_dir.rglob("*")):
        if path.is_file() and path.name != MARKER:
            out[str(path.relative_to(tag_dir))] = path.stat().st_size
    return out


def write_marker(tag_dir: Path, state: dict[str, Any]) -> None:
    """Writes the completion marker (state + manifest) atomically; call once all ranks have saved."""
    record = {**state, "manifest": manifest(tag_dir)}
    write_json_atomic(tag_dir / MARKER, record)


def clear_marker(tag_dir: Path) -> None:
    """Removes a marker before a tag is (re)written, so a save cut short can never look complete."""
    try:
        (tag_dir / MARKER).unlink()
    except FileNotFoundError:
        pass


def problem(tag_dir: Path) -> str | None:
    """Returns why the checkpoint in `tag_dir` cannot be used, or None when it is complete and intact."""
    marker = tag_dir / MARKER
    if not marker.exists():
        return "incomplete (no completion marker: the save was cut short)"
    try:
        record = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return "corrupt completion marker"
    for name, size in record.get("manifest", {}).items():
        path = tag_dir / name
        if not path.exists():
            return f"corrupt ({name} is missing)"
        if path.stat().st_size != size:
            return f"corrupt ({name} has {path.stat().st_size} bytes, {size} were written)"
    return None


def read_state(tag_dir: Path) -> dict[str, Any]:
    """Returns the training state stored in a complete checkpoint's marker."""
    record = json.loads((tag_dir / MARKER).read_text())
    record.pop("manifest", None)
    return record


def tags_by_step(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Returns (step, folder) of every `step{N}` folder under `ckpt_dir`, newest first."""
    if not ckpt_dir.is_dir():
        return []
    found = [(step_of(p.name), p) for p in ckpt_dir.iterdir() if p.is_dir()]
    return sorted(((s, p) for s, p in found if s is not None), key=lambda sp: -sp[0])


def usable_checkpoints(ckpt_dir: Path, warn: Callable[[str], None] = lambda message: None) -> list[tuple[int, Path]]:
    """Returns the complete, intact checkpoints, newest first; `warn` hears about each one skipped before them."""
    good = []
    for step, path in tags_by_step(ckpt_dir):
        why = problem(path)
        if why is None:
            good.append((step, path))
        elif not good:
            warn(f"checkpoint {path} is {why}; using an earlier one")
    return good


def prune(ckpt_dir: Path, keep: int = KEEP_CHECKPOINTS, protect: Collection[Path] = ()) -> list[Path]:
    """Deletes complete checkpoints beyond the newest `keep`, and any broken one older than those; returns them.

    protect: folders never deleted (the checkpoint just written, the one this run resumed from); they count
    towards `keep` like the others. Call only after the newest checkpoint is marked complete."""
    protected = {Path(p).absolute() for p in protect}
    removed = []
    kept = 0
    for _step, path in tags_by_step(ckpt_dir):
        if problem(path) is None and kept < keep:
            kept += 1
            continue
        if kept == 0:
            continue  # a broken folder newer than every complete one may be a save in progress
        if path.absolute() in protected:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes JSON through a temp file and rename, so readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)

"""zero-run checkpoints: layout, completion markers, picking the checkpoint to resume from, pruning.

Layout under OUTPUT_DIR/checkpoints/: one DeepSpeed checkpoint per tag `step{N}` (engine.save_checkpoint),
and inside it `zero_run_complete.json`, written by rank 0 only after every rank finished writing. The marker
holds the training state (step, rank 0's losses so far, world size) and a manifest of every file's size and
content checksum (xxh3-128), so a checkpoint cut short (no marker) or damaged later (a file missing, of another
size, or with other bytes of the same size) is detected and the previous one used. No torch import here. When checkpoints are due and how large they are is the save
policy's (plan/saves.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
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


CHECKSUM = "xxh3_128"
"""The manifest's content checksum: xxhash's XXH3 128-bit, about 12 GB/s on one core of a 2-core CPU host (sha256
1.4 GB/s there), so hashing reads the files about as fast as the disk gives them back (measured 2026-12-06)."""
_CHUNK_BYTES = 16 * 2**20


def file_checksum(path: Path) -> str:
    """Returns the hex XXH3-128 of the file's bytes, read in 16 MiB chunks."""
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def manifest(tag_dir: Path, *, checksums: bool = True) -> dict[str, Any]:
    """Returns {relative path: {"bytes": size, CHECKSUM: hex}} of every file under `tag_dir` except the marker
    (without `checksums`: sizes only, {"bytes": size})."""
    out = {}
    for path in sorted(tag_dir.rglob("*")):
        if path.is_file() and path.name != MARKER:
            entry: dict[str, Any] = {"bytes": path.stat().st_size}
            if checksums:
                entry[CHECKSUM] = file_checksum(path)
            out[str(path.relative_to(tag_dir))] = entry
    return out


def write_marker(tag_dir: Path, state: dict[str, Any]) -> None:
    """Writes the completion marker (state + manifest with checksums) atomically; call once all ranks have saved.
    The seconds the checksums took are recorded as checksum_s: their cost beside the save."""
    start = time.perf_counter()
    files = manifest(tag_dir)
    seconds = time.perf_counter() - start
    write_json_atomic(tag_dir / MARKER, {**state, "checksum": CHECKSUM, "checksum_s": round(seconds, 3),
                                         "manifest": files})  # fmt: skip


def clear_marker(tag_dir: Path) -> None:
    """Removes a marker before a tag is (re)written, so a save cut short can never look complete."""
    try:
        (tag_dir / MARKER).unlink()
    except FileNotFoundError:
        pass


def problem(tag_dir: Path, *, checksums: bool = True) -> str | None:
    """Returns why the checkpoint in `tag_dir` cannot be used, or None when it is complete and intact.

    Markers written before checksums (a manifest of plain sizes) are checked by size. `checksums` False: sizes
    only (listing checkpoints, pruning); the content is read where a checkpoint is about to be resumed from."""
    return _marked_problem(tag_dir, MARKER, "incomplete (no completion marker: the save was cut short)",
                           "corrupt completion marker", checksums=checksums)  # fmt: skip


def _marked_problem(folder: Path, marker_name: str, unmarked: str, unreadable: str, *,
                    checksums: bool) -> str | None:  # fmt: skip
    """Returns why `folder` does not hold what its marker's manifest lists (`unmarked` without a marker,
    `unreadable` for a marker that does not parse), else None; checksums compared where recorded and asked."""
    marker = folder / marker_name
    if not marker.exists():
        return unmarked
    try:
        record = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return unreadable
    for name, entry in record.get("manifest", {}).items():
        size, digest = (entry, None) if isinstance(entry, int) else (entry.get("bytes"), entry.get(CHECKSUM))
        path = folder / name
        if not path.is_file():
            return f"corrupt ({name} is missing)"
        if path.stat().st_size != size:
            return f"corrupt ({name} has {path.stat().st_size} bytes, {size} were written)"
        if checksums and digest is not None and file_checksum(path) != digest:
            return f"corrupt ({name} does not have the content that was written: its checksum differs)"
    return None


def read_state(tag_dir: Path) -> dict[str, Any]:
    """Returns the training state stored in a complete checkpoint's marker."""
    record = json.loads((tag_dir / MARKER).read_text())
    for key in ("manifest", "checksum", "checksum_s"):
        record.pop(key, None)
    return record


def tags_by_step(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Returns (step, folder) of every `step{N}` folder under `ckpt_dir`, newest first."""
    if not ckpt_dir.is_dir():
        return []
    found = [(step_of(p.name), p) for p in ckpt_dir.iterdir() if p.is_dir()]
    return sorted(((s, p) for s, p in found if s is not None), key=lambda sp: -sp[0])


def usable_checkpoints(ckpt_dir: Path, warn: Callable[[str], None] = lambda message: None, *,
                       checksums: bool = False) -> list[tuple[int, Path]]:  # fmt: skip
    """Returns the complete, intact checkpoints, newest first; `warn` hears about each one skipped before them.

    `checksums`: read every file of the newest complete-looking ones until one matches its marker (what --resume
    loads); without, sizes only (the others stay unread: pruning and listing need no pass over the bytes)."""
    good = []
    for step, path in tags_by_step(ckpt_dir):
        why = problem(path, checksums=checksums and not good)
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
        if problem(path, checksums=False) is None and kept < keep:
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
    """Writes JSON through a temp file and rename, so readers never see half a file; a write that fails (disk
    full) leaves the previous file as it was and no temp file behind, and raises the OSError."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


EXPORT_MARKER = "zero_run_export.json"
"""Written last inside final/ (and final-adapter/): the step exported and a manifest of the folder's files. An
export is written into a hidden folder beside its place, verified, marked, then renamed into place, so final/
is either the previous complete export or the new one, never half of one."""


def staging_dir(final_dir: Path) -> Path:
    """Returns where an export of `final_dir` is written before it is renamed into place."""
    return final_dir.with_name(f".{final_dir.name}.partial")


def start_export(final_dir: Path) -> Path:
    """Returns an empty staging folder for an export of `final_dir` (what an earlier cut-short export left there
    is removed first)."""
    staging = staging_dir(final_dir)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def finish_export(staging: Path, final_dir: Path, state: dict[str, Any]) -> None:
    """Marks the verified export in `staging` complete and renames it into place; a previous final_dir is moved
    aside first and removed after, so at every instant one complete export (or none) is at final_dir."""
    write_json_atomic(staging / EXPORT_MARKER, {**state, "manifest": manifest(staging, checksums=False)})
    old = final_dir.with_name(f".{final_dir.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final_dir.exists():
        os.replace(final_dir, old)
    os.replace(staging, final_dir)
    shutil.rmtree(old, ignore_errors=True)


def export_problem(final_dir: Path) -> str | None:
    """Returns why `final_dir` is not a complete export (missing, unmarked, a file missing or cut), else None.
    An export written before markers existed counts as unmarked (a --resume writes it again)."""
    if not final_dir.is_dir():
        return "missing"
    return _marked_problem(final_dir, EXPORT_MARKER,
                           "incomplete (no export marker: the export was cut short or predates markers)",
                           "corrupt export marker", checksums=False)  # fmt: skip


def safetensors_keys(path: Path) -> list[str]:
    """Returns the tensor names of a safetensors file after checking that its header parses and that the file
    holds every byte the header promises; raises ValueError saying what is wrong. Reads the header only."""
    import struct

    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path.name} is {size} bytes: no safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            raise ValueError(f"{path.name}: header of {length} bytes in a {size}-byte file (cut short)")
        try:
            header = json.loads(f.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{path.name}: its header is not valid JSON (damaged)") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
    if 8 + length + end != size:
        raise ValueError(f"{path.name} is {size} bytes; its header describes {8 + length + end} (cut short)")
    return list(tensors)

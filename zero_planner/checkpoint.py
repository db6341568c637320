"""zero-run checkpoints: layout, completion markers, picking the checkpoint to resume from, disk sizing.

Layout under OUTPUT_DIR/checkpoints/: one DeepSpeed checkpoint per tag `step{N}` (engine.save_checkpoint),
and inside it `zero_run_complete.json`, written by rank 0 only after every rank finished writing. The marker
holds the training state (step, rank 0's losses so far, world size) and a manifest of every file's size, so
a checkpoint cut short (no marker) or damaged later (a file missing or of another size) is detected and
the previous one used. No torch import here: the launcher sizes checkpoints too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHECKPOINTS_DIR = "checkpoints"
MARKER = "zero_run_complete.json"
KEEP_CHECKPOINTS = 2
"""Complete checkpoints kept on disk by default (training.save_total_limit): the newest, plus one to fall back on
if the newest is damaged."""

_TAG = re.compile(r"^step(\d+)$")

SAVE_POLICIES = ("none", "final", "steps")
"""training.save: nothing but run_report.json; the final export only; DeepSpeed checkpoints and the final export."""

# One DeepSpeed checkpoint, measured file by file on CPU (llama-tiny, 494,208 parameters, two ranks, deepspeed
# 0.19.8; per-file pickling adds about 10 KB): the module's weights in mp_rank_00_model_states.pt, written by
# rank 0, plus every rank's optimizer partition. Stage 0-2: 2 B (fp32: 4 B) per weight; stage 3 keeps no weights
# there (they are partitioned; the fp32 copy in the optimizer states is the only one). Optimizer: Adam's exp_avg +
# exp_avg_sq, 8 B per trainable parameter, plus a 4 B fp32 master copy, except fp32 at stage 0, where the fp32
# module weights are the master (measured: stage 0 14.0 B/param in bf16, 12.0 in fp32; stage 2 14.0 and 16.0;
# stage 3 12.0 in both). LoRA/QLoRA save with exclude_frozen_parameters: only the trainable weights.
ADAM_MOMENT_BYTES_PER_PARAM = 8
FP32_MASTER_BYTES_PER_PARAM = 4
OPTIMIZER_CHECKPOINT_BYTES_PER_PARAM = ADAM_MOMENT_BYTES_PER_PARAM + FP32_MASTER_BYTES_PER_PARAM
WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def tag_for(step: int) -> str:
    return f"step{step}"


def step_of(tag: str) -> int | None:
    match = _TAG.match(tag)
    return int(match.group(1)) if match else None


def checkpoint_bytes(num_params: int, num_trainable_params: int, precision: str, *, frozen_excluded: bool = False,
                     stage: int | None = None) -> int:  # fmt: skip
    """Returns the size in bytes of one DeepSpeed checkpoint (module weights + optimizer states).

    frozen_excluded: LoRA/QLoRA runs save with exclude_frozen_parameters, so only the trainable weights.
    stage: the ZeRO stage (see the measurements above); None: the largest any stage writes (module weights and an
    fp32 master copy)."""
    weights = num_trainable_params if frozen_excluded else num_params
    module = 0 if stage == 3 else weights * WEIGHT_BYTES[precision]
    master = 0 if stage == 0 and precision == "fp32" else FP32_MASTER_BYTES_PER_PARAM
    return module + num_trainable_params * (ADAM_MOMENT_BYTES_PER_PARAM + master)


def exports_merged_model(method: str, stage: int) -> bool:
    """Returns whether zero-run also exports the adapter merged into its base: LoRA below stage 3 only. There
    every rank holds the whole base already; under ZeRO-3 it would gather the full model on rank 0, and QLoRA's
    4-bit base cannot merge losslessly."""
    return method == "lora" and stage < 3


def export_bytes(num_params: int, num_trainable_params: int, precision: str, *, adapters: bool = False,
                 merged_export: bool = False) -> int:  # fmt: skip
    """Returns the size in bytes of the final export: the model's weights in its training precision, or for
    LoRA/QLoRA the adapter (the trainable parameters), plus the merged model where zero-run writes one."""
    w = WEIGHT_BYTES[precision]
    if not adapters:
        return num_params * w
    return num_trainable_params * w + (num_params * w if merged_export else 0)


def checkpoint_due(save: str, step: int, max_steps: int, save_every: int, *, stopping: bool = False) -> bool:
    """Returns whether zero-run writes a DeepSpeed checkpoint after optimizer step `step`: with save "steps" every
    `save_every` steps, at the last step (so a longer run can --resume from it, as HF Trainer saves at its end)
    and when interrupted; never with "final" or "none"."""
    if save != "steps":
        return False
    return stopping or step == max_steps or (save_every > 0 and step % save_every == 0)


def exports_model(save: str, *, interrupted: bool) -> bool:
    """Returns whether zero-run writes the final export (16-bit model or adapter) when the loop ends.

    steps: when the run completes (an interrupted one has its checkpoint to resume from). final: also when it is
    interrupted, the model as trained so far: it is all this policy keeps, and the disk check counted exactly it
    (a DeepSpeed checkpoint, 7x the export for a full fine-tune in bf16, could fill a disk sized for the export
    alone), as Axolotl saves the model on Ctrl-C. none: never."""
    return save == "final" or (save == "steps" and not interrupted)


def checkpoint_saves(max_steps: int, save_every: int, start_step: int = 0) -> int | None:
    """Returns how many checkpoints a save-"steps" run from `start_step` to `max_steps` writes (every `save_every`
    steps and the last; an interruption replaces the remaining ones by one); None when the length is unknown
    (max_steps 0: the epochs decide)."""
    if max_steps <= 0:
        return None
    if start_step >= max_steps:
        return 0
    every = save_every if save_every > 0 else max_steps  # 0: the last step's only
    due = max_steps // every - start_step // every
    return due + (1 if max_steps % every else 0)


@dataclass(frozen=True)
class DiskNeed:
    """What one run writes under its output folder at most at once, in bytes."""

    checkpoint_bytes: int
    """One DeepSpeed checkpoint."""
    checkpoints: int
    """Checkpoints of this run on disk at once: the total limit, plus the one being written before the oldest is
    pruned (never more than the run writes)."""
    export_bytes: int
    """The final export (0 with save none)."""
    scratch_bytes: int = 0
    """Other files: QLoRA's random 16-bit base, written before quantising (modeling.build_qlora_base)."""

    @property
    def total_bytes(self) -> int:
        return self.checkpoints * self.checkpoint_bytes + self.export_bytes + self.scratch_bytes


def disk_need(num_params: int, num_trainable_params: int, precision: str, *, stage: int | None = None,
              adapters: bool = False, merged_export: bool = False, save: str = "steps", save_every: int = 25,
              save_total_limit: int = KEEP_CHECKPOINTS, max_steps: int = 0, start_step: int = 0,
              scratch_bytes: int = 0) -> DiskNeed:  # fmt: skip
    """Returns what a run writes at most: its checkpoints (how many at once: checkpoint_saves, capped by the limit
    + 1 being written), their size for this stage and method (checkpoint_bytes) and the export (export_bytes).
    Pruning happens only after a new checkpoint is complete, hence the + 1; checkpoints an earlier run left
    (a --resume) already take their space and are not counted."""
    one = checkpoint_bytes(num_params, num_trainable_params, precision, frozen_excluded=adapters, stage=stage)
    count = 0
    if save == "steps":
        saves = checkpoint_saves(max_steps, save_every, start_step)
        count = save_total_limit + 1 if saves is None else min(saves, save_total_limit + 1)
    export = export_bytes(num_params, num_trainable_params, precision, adapters=adapters, merged_export=merged_export)
    return DiskNeed(one, count, export if save != "none" else 0, scratch_bytes)


def run_disk_bytes(num_params: int, num_trainable_params: int, precision: str, *, adapters: bool = False,
                   merged_export: bool = False, checkpoints: bool = True) -> int:  # fmt: skip
    """Returns the disk a run with the default save policy needs at most, whatever its length: KEEP_CHECKPOINTS +
    1 being written (checkpoints False: none), plus the exported model. disk_need counts a given run."""
    need = disk_need(num_params, num_trainable_params, precision, adapters=adapters, merged_export=merged_export,
                     save="steps" if checkpoints else "final")  # fmt: skip
    return need.total_bytes


def save_summary(save: str, save_every: int, save_total_limit: int, *, adapters: bool = False) -> str:
    """Returns what a run keeps, in words: 'a checkpoint every 25 steps (newest 2 kept) and the final model'."""
    final = "the final adapter" if adapters else "the final model"
    if save == "none":
        return "nothing: no checkpoint and no final model (--save none; run_report.json only)"
    if save == "final":
        return f"{final} only (--save final: no checkpoint, so an interrupted run cannot --resume)"
    kept = "newest kept" if save_total_limit == 1 else f"newest {save_total_limit} kept"
    return f"a checkpoint every {save_every} steps and at the end ({kept}), then {final}"


def after_interruption(save: str, output_dir: str | Path, *, adapters: bool = False, resume: str = "--resume") -> str:
    """Returns what an interrupted run kept and how to go on, by save policy (exports_model): `resume` is the
    command that continues a save-"steps" run."""
    if save == "steps":
        return f"continue with {resume}"
    if save == "final":
        folder = Path(output_dir) / ("final-adapter" if adapters else "final")
        return (f"the model as trained so far is in {folder} (--save final keeps no optimizer states: a new run "
                f"starts from step 0; --save steps could --resume)")  # fmt: skip
    return "nothing was kept (--save none)"


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

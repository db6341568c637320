"""The save policy (training.save, save_every, save_total_limit) and what it writes: when a run writes a DeepSpeed
checkpoint and its final model, how large each is, how much disk a run needs at once, and what it keeps, in words.

    checkpoint_bytes / export_bytes      -> bytes of one checkpoint / of the final export, measured per stage
    disk_need(...) -> DiskNeed           -> what one run writes at most at once (zero-run checks it before launch)
    checkpoint_due / exports_model       -> the policy, step by step (zero-run's ranks follow it)
    save_summary / after_interruption    -> what a run keeps, for the plan's output and zero-run's

Pure functions of numbers (no torch): zero-plan prints the policy, zero-run's preflight sizes it and its ranks
follow it. The checkpoints themselves (layout, completion markers, resume, pruning) are run/checkpoint.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KEEP_CHECKPOINTS = 2
"""Complete checkpoints kept on disk by default (training.save_total_limit): the newest, plus one to fall back on
if the newest is damaged."""

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
              scratch_bytes: int = 0, existing_checkpoints: int = 0) -> DiskNeed:  # fmt: skip
    """Returns what a run writes at most: its checkpoints (how many at once: checkpoint_saves, capped by the limit
    + 1 being written), their size for this stage and method (checkpoint_bytes) and the export (export_bytes).
    Pruning happens only after a new checkpoint is complete, hence the + 1. `existing_checkpoints`: complete ones an
    earlier run left (a --resume); they already take their space and count towards the limit, so the new ones
    that must find room are those beyond them: min(existing + saves, max(limit, existing) + 1) - existing (the
    one resumed from is never pruned, and counts as kept)."""
    one = checkpoint_bytes(num_params, num_trainable_params, precision, frozen_excluded=adapters, stage=stage)
    count = 0
    if save == "steps":
        saves = checkpoint_saves(max_steps, save_every, start_step)
        at_once = max(save_total_limit, existing_checkpoints) + 1
        total = at_once if saves is None else min(existing_checkpoints + saves, at_once)
        count = max(0, total - existing_checkpoints)
    export = export_bytes(num_params, num_trainable_params, precision, adapters=adapters, merged_export=merged_export)
    return DiskNeed(one, count, export if save != "none" else 0, scratch_bytes)


def run_disk_bytes(num_params: int, num_trainable_params: int, precision: str, *, adapters: bool = False,
                   merged_export: bool = False, checkpoints: bool = True) -> int:  # fmt: skip
    """Returns the disk a run with the default save policy needs at most, whatever its length: KEEP_CHECKPOINTS +
    1 being written (checkpoints False: none), plus the exported model. disk_need counts a given run."""
    need = disk_need(num_params, num_trainable_params, precision, adapters=adapters, merged_export=merged_export,
                     save="steps" if checkpoints else "final")  # fmt: skip
    return need.total_bytes


def size_text(num_bytes: int | float) -> str:
    """Returns a size in the unit that shows it: '640 MiB' below 1 GiB (where '0.6 GiB' reads as nothing and
    '0.0 GiB' as empty), '12.3 GiB' above. 2**20 is MiB, 2**30 GiB."""
    if num_bytes >= 2**30:
        return f"{num_bytes / 2**30:.1f} GiB"
    mib = max(num_bytes, 0) / 2**20
    return f"{mib:.0f} MiB" if mib >= 1 else f"{mib:.2f} MiB"


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

"""The DeepSpeed JSON for a plan: built in exactly one function, checked by DeepSpeed's own parser."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zero_planner.strategies import Strategy

# Adam hyper-parameters written into every config; the planner does not tune them.
DEFAULT_LR = 2e-5
DEFAULT_WEIGHT_DECAY = 0.0
DEFAULT_GRADIENT_CLIPPING = 1.0

# Smallest bucket we emit, in elements. Hugging Face's "auto" rule (hidden_size**2) gives buckets of a
# few thousand elements for toy models, which turns every reduction into hundreds of tiny collectives.
MIN_BUCKET_NUMEL = 2**20

# DeepSpeed's defaults for the stage-3 live-parameter window (deepspeed/runtime/zero/config.py).
STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000
STAGE3_MAX_REUSE_DISTANCE = 1_000_000_000


REPORT_TO = {"tensorboard": "tensorboard", "csv": "csv_monitor", "wandb": "wandb"}
"""--report-to name -> its section of DeepSpeed's config (deepspeed/monitor/config.py, get_monitor_config)."""
LOG_DIR = "logs"
"""tensorboard and csv write under OUTPUT_DIR/logs/JOB_NAME (DeepSpeed joins output_path and job_name)."""
MONITOR_JOB_NAME = "zero-run"
WANDB_PROJECT = "zero-run"


def monitor_sections(report_to: Sequence[str], output_dir: str) -> dict[str, Any]:
    """Returns DeepSpeed's monitor sections for `report_to` (names of REPORT_TO): TensorBoard event files and CSV
    files under `output_dir`/logs/zero-run, W&B runs in project zero-run. Empty for no names."""
    sections: dict[str, Any] = {}
    for name in report_to:
        key = REPORT_TO[name]
        if key == "wandb":
            sections[key] = {"enabled": True, "project": WANDB_PROJECT}
        else:
            sections[key] = {"enabled": True, "output_path": str(Path(output_dir) / LOG_DIR),
                             "job_name": MONITOR_JOB_NAME}  # fmt: skip
    return sections


def with_monitor(config: dict[str, Any], report_to: Sequence[str], output_dir: str) -> dict[str, Any]:
    """Returns a copy of `config` whose monitor sections are exactly monitor_sections(report_to, output_dir)
    (report_to empty: none; a section the config had for another monitor, comet, stays)."""
    out = {k: v for k, v in config.items() if k not in REPORT_TO.values()}
    out.update(monitor_sections(report_to, output_dir))
    return out


def monitors_enabled(config: dict[str, Any]) -> list[str]:
    """Returns the --report-to names whose DeepSpeed section is enabled in `config`."""
    return [name for name, key in REPORT_TO.items() if isinstance(config.get(key), dict) and config[key].get("enabled")]


def bucket_sizes(hidden_size: int) -> dict[str, int]:
    """Returns bucket sizes in elements, derived from the hidden size as HF Trainer's "auto" does.

    transformers/integrations/deepspeed.py: reduce_bucket_size = h*h, stage3_prefetch_bucket_size = 0.9*h*h,
    stage3_param_persistence_threshold = 10*h.
    """
    h2 = max(hidden_size * hidden_size, MIN_BUCKET_NUMEL)
    return {
        "reduce_bucket_size": h2,
        "allgather_bucket_size": h2,
        "stage3_prefetch_bucket_size": int(0.9 * h2),
        "stage3_param_persistence_threshold": 10 * hidden_size,
    }


def default_optimizer(lr: float = DEFAULT_LR) -> dict[str, Any]:
    """Returns the optimizer section zero-run trains with: DeepSpeed's AdamW (two fp32 moments per parameter)."""
    return {"type": "AdamW", "params": {"lr": lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": DEFAULT_WEIGHT_DECAY}}


def build_ds_config(
    strategy: Strategy,
    *,
    micro_batch_size: int,
    gradient_accumulation_steps: int,
    world_size: int,
    precision: str,
    hidden_size: int,
    lr: float = DEFAULT_LR,
    gradient_clipping: float = DEFAULT_GRADIENT_CLIPPING,
    report_to: Sequence[str] = (),
    output_dir: str = ".",
) -> dict[str, Any]:
    """Returns the DeepSpeed config dict for one strategy, with concrete values (no "auto").

    report_to: also the monitor sections (monitor_sections) logging under `output_dir`; none by default."""
    buckets = bucket_sizes(hidden_size)
    zero: dict[str, Any] = {"stage": strategy.stage}
    if strategy.stage in (1, 2):
        zero.update(
            overlap_comm=strategy.stage == 2,
            contiguous_gradients=strategy.stage == 2,
            reduce_scatter=True,
            reduce_bucket_size=buckets["reduce_bucket_size"],
            allgather_bucket_size=buckets["allgather_bucket_size"],
        )
    elif strategy.stage == 3:
        zero.update(
            overlap_comm=True,
            contiguous_gradients=True,
            reduce_bucket_size=buckets["reduce_bucket_size"],
            stage3_prefetch_bucket_size=buckets["stage3_prefetch_bucket_size"],
            stage3_param_persistence_threshold=buckets["stage3_param_persistence_threshold"],
            stage3_max_live_parameters=STAGE3_MAX_LIVE_PARAMETERS,
            stage3_max_reuse_distance=STAGE3_MAX_REUSE_DISTANCE,
            stage3_gather_16bit_weights_on_model_save=True,
        )
    if strategy.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": strategy.offload_optimizer, "pin_memory": True}
    if strategy.offload_param != "none":
        zero["offload_param"] = {"device": strategy.offload_param, "pin_memory": True}

    config: dict[str, Any] = {
        "train_batch_size": micro_batch_size * gradient_accumulation_steps * world_size,
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "gradient_clipping": gradient_clipping,
        "optimizer": default_optimizer(lr),
        "zero_optimization": zero,
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif precision == "fp16":
        # Dynamic loss scaling (loss_scale 0) starting at 2**16: DeepSpeed's recommended fp16 setting.
        config["fp16"] = {
            "enabled": True,
            "loss_scale": 0,
            "initial_scale_power": 16,
            "loss_scale_window": 1000,
            "hysteresis": 2,
            "min_loss_scale": 1,
        }
    elif precision != "fp32":
        raise ValueError(f"precision {precision!r} is not one of bf16, fp16, fp32")
    config.update(monitor_sections(report_to, output_dir))
    return config


def validate_ds_config(config: dict[str, Any]) -> None:
    """Raises ValueError when DeepSpeed's own config parser rejects `config` (imports deepspeed)."""
    micro = config.get("train_micro_batch_size_per_gpu")
    accum = config.get("gradient_accumulation_steps", 1)
    total = config.get("train_batch_size")
    if isinstance(micro, int) and isinstance(accum, int) and isinstance(total, int):
        if total % (micro * accum):
            raise ValueError(
                f"train_batch_size({total}) is not micro_batch({micro}) * grad_accum({accum}) * world_size"
            )
    # DeepSpeedConfig checks train_batch_size against the live world size (1 outside a launcher), so it
    # sees a copy without it and derives the batch from micro-batch and accumulation instead.
    checked = copy.deepcopy(config)
    checked.pop("train_batch_size", None)
    try:
        from deepspeed.runtime.config import DeepSpeedConfig

        DeepSpeedConfig(checked)
    except Exception as error:  # DeepSpeed raises assertion, pydantic and value errors alike
        raise ValueError(f"DeepSpeed rejects this config: {error}") from error

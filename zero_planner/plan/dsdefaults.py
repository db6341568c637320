"""What DeepSpeed does with the memory-relevant keys a user's JSON leaves out: its own defaults.

A minimal JSON (`{"zero_optimization": {"stage": 3}}`, as tutorials show) runs with DeepSpeed's default bucket
sizes and windows, which are large (a 5e8-element reduce bucket is 0.93 GiB of bf16 on every GPU at stage 3), so
an estimate must use them. The defaults are read from DeepSpeed's own config model, not copied by hand:
scripts/deepspeed_defaults.py writes catalog/deepspeed_defaults.json from it, a test checks the file against the
installed DeepSpeed, and where the installed version differs from the file's, its model is asked directly
(that imports DeepSpeed, and torch with it: seconds).

    zero_settings(zero_section) -> {field: value} for MEMORY_KEYS, DeepSpeed's field names
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any

CATALOG = Path(str(resources.files("zero_planner").joinpath("catalog/deepspeed_defaults.json")))

MEMORY_KEYS = (
    "reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients", "sub_group_size",
    "prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters", "max_reuse_distance",
    "round_robin_gradients", "gather_16bit_weights_on_model_save",
)  # fmt: skip
"""zero_optimization fields (DeepSpeedZeroConfig's names) that size GPU or host buffers."""
OFFLOAD_KEYS = ("pin_memory", "buffer_count")
"""Fields of offload_optimizer / offload_param that size host buffers."""


def read_installed_defaults() -> dict[str, Any]:
    """Returns the installed DeepSpeed's defaults for MEMORY_KEYS per stage, its aliases and offload defaults,
    by constructing its config models (imports DeepSpeed)."""
    import deepspeed
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig,
        DeepSpeedZeroOffloadParamConfig,
    )

    per_stage = {}
    for stage in range(4):
        dumped = DeepSpeedZeroConfig(stage=stage).model_dump()
        per_stage[str(stage)] = {key: dumped[key] for key in MEMORY_KEYS}
    aliases = {f.alias: name for name, f in DeepSpeedZeroConfig.model_fields.items() if f.alias and name in MEMORY_KEYS}
    optimizer = DeepSpeedZeroOffloadOptimizerConfig(device="cpu").model_dump()
    param = DeepSpeedZeroOffloadParamConfig(device="cpu").model_dump()
    return {
        "deepspeed": deepspeed.__version__,
        "zero_optimization": per_stage,
        "aliases": dict(sorted(aliases.items())),
        "offload_optimizer": {key: optimizer[key] for key in OFFLOAD_KEYS},
        "offload_param": {key: param[key] for key in OFFLOAD_KEYS},
    }


def installed_deepspeed_version() -> str | None:
    """Returns the installed DeepSpeed's version without importing it (None when it is not installed)."""
    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def defaults() -> dict[str, Any]:
    """Returns the defaults: the catalog's, or the installed DeepSpeed's own where its version differs."""
    catalog = json.loads(CATALOG.read_text())
    installed = installed_deepspeed_version()
    if installed is None or installed == catalog["deepspeed"]:
        return catalog
    try:
        return read_installed_defaults()
    except Exception:  # an installed DeepSpeed that cannot be imported here: the catalog's version is what we know
        return catalog


def zero_settings(zero: dict[str, Any]) -> dict[str, Any]:
    """Returns MEMORY_KEYS for a zero_optimization section: its own values (under DeepSpeed's field names or their
    stage3_ aliases) where it sets them, DeepSpeed's defaults for its stage where it does not. "auto" values are
    left as "auto" (Hugging Face fills them; the caller decides). Also `offload_optimizer` / `offload_param`:
    the OFFLOAD_KEYS of each offload section present, DeepSpeed's defaults filled in."""
    known = defaults()
    stage = str(zero.get("stage", 0)) if zero.get("stage", 0) in (0, 1, 2, 3) else "0"
    names = {**{key: key for key in MEMORY_KEYS}, **known["aliases"]}
    out = dict(known["zero_optimization"][stage])
    for key, value in zero.items():
        if key in names and value is not None:
            out[names[key]] = value
    for section in ("offload_optimizer", "offload_param"):
        given = zero.get(section)
        if isinstance(given, dict) and given.get("device", "none") != "none":
            out[section] = {**known[section], **{k: v for k, v in given.items() if k in OFFLOAD_KEYS}}
    return out

"""Reading other tools' training configs: `zero-plan --from-axolotl config.yml` / `--from-llamafactory config.yaml`.

"Will my Axolotl / LLaMA-Factory config fit?" without translating it: the YAML's model, sequence length,
micro-batch, accumulation, precision, checkpointing, adapter settings and DeepSpeed JSON are read with each
tool's own key names and defaults (the values each tool's schema gives an absent key, cited beside them), the
JSON's HF-style "auto" values are filled as HF Trainer fills them from the YAML, and the result is estimated
like `--ds-config`: fit against the full capacity, headroom printed.

Key names and the presets each tool ships come from zero_planner/catalog/tool_keys.json (rebuilt from the
tools' sources by scripts/tool_keys.py). A key neither tool knows is an InputError naming the key and the
closest valid ones; so is a value zero-plan cannot estimate (8-bit, FSDP, DPO...), naming the valid choices.
No torch import; PyYAML only when a file is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from zero_planner.errors import InputError, closest, read_mapping
from zero_planner.planfile import LoraInfo

TOOL_KEYS_FILE = Path(__file__).parent.parent / "catalog" / "tool_keys.json"
FLAGS = {"axolotl": "--from-axolotl", "llamafactory": "--from-llamafactory"}
NAMES = {"axolotl": "Axolotl", "llamafactory": "LLaMA-Factory"}


NOT_MODELLED = {
    "axolotl": {
        "optimizer": "the estimate assumes AdamW with fp32 states (8-bit or paged optimizers take less)",
        "context_parallel_size": "sequence sharded over GPUs is not modelled: activations are for the whole sequence",
        "sequence_parallel_degree": "sequence sharded over GPUs is not modelled: activations are for the whole sequence",
        "tiled_mlp": "tiled MLP is not modelled: MLP activations are for the whole sequence",
        "activation_offloading": "offloaded activations are counted on the GPU",
        "liger_fused_linear_cross_entropy": "the fused loss is not modelled: fp32 logits are counted",
        "cut_cross_entropy": "the fused loss is not modelled: fp32 logits are counted",
        "attn_implementation": "activations are estimated for SDPA, what zero-run measures",
        "flash_attention": "activations are estimated for SDPA, what zero-run measures",
    },
    "llamafactory": {
        "optim": "the estimate assumes AdamW with fp32 states (8-bit or paged optimizers take less)",
        "sequence_parallel_size": "sequence sharded over GPUs is not modelled: activations are for the whole sequence",
        "enable_liger_kernel": "the fused loss is not modelled: fp32 logits are counted",
        "use_unsloth": "Unsloth's kernels are not modelled",
        "use_galore": "GaLore's projected optimizer states are not modelled",
        "use_apollo": "APOLLO's optimizer states are not modelled",
        "use_badam": "BAdam's block-wise updates are not modelled",
        "flash_attn": "activations are estimated for SDPA, what zero-run measures",
    },
}
"""Keys that change memory in ways zero-plan does not model: when set (to anything but the default or the
modelled value), the output says so beside the estimate, which is then an upper bound or approximate."""
MODELLED_VALUES = {"optimizer": ("adamw_torch", "adamw_torch_fused", "adamw_hf"), "optim": ("adamw_torch",
                   "adamw_torch_fused"), "attn_implementation": ("sdpa",), "flash_attn": ("auto", "sdpa"),
                   "context_parallel_size": (1,), "sequence_parallel_degree": (1,), "sequence_parallel_size": (1,)}  # fmt: skip


@dataclass(frozen=True)
class ImportedConfig:
    """What a tool's training YAML asks for, in zero-plan's terms."""

    tool: str
    """axolotl | llamafactory"""
    path: str
    model: str | None
    """base_model / model_name_or_path (None when absent: --model must say it)."""
    seq_len: int
    micro_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    precision: str
    """bf16 | fp16 | fp32, or axolotl-auto (bf16 where the GPU has it, else fp16 unless fp16: false)."""
    method: str
    """full | lora | qlora"""
    lora: LoraInfo | None
    ds_config: dict[str, Any]
    """The DeepSpeed JSON as read (its "auto" values still in place)."""
    ds_config_source: str
    """The file read, or `TOOL preset NAME` when the named file is absent and its name is a known preset."""
    notes: list[str] = field(default_factory=list)


@cache
def tool_catalog() -> dict[str, Any]:
    """Returns tool_keys.json: per tool, its source commit, valid keys and DeepSpeed presets."""
    return json.loads(TOOL_KEYS_FILE.read_text(encoding="utf-8"))


def read_config(tool: str, path: str | Path) -> ImportedConfig:
    """Returns the ImportedConfig of the `tool` YAML at `path`. Raises InputError for anything it cannot read."""
    data = _load_yaml(tool, path)
    _check_keys(tool, path, data)
    imported = _axolotl(path, data) if tool == "axolotl" else _llamafactory(path, data)
    for key, why in NOT_MODELLED[tool].items():
        value = data.get(key)
        if value not in (None, False, "", *MODELLED_VALUES.get(key, ())):
            imported.notes.append(f"{key}: {value}: {why}")
    return imported


# --- shared parsing -------------------------------------------------------------------------------------------


def _load_yaml(tool: str, path: str | Path) -> dict[str, Any]:
    import yaml

    return read_mapping(path, f"{FLAGS[tool]} {str(path)!r}", yaml.safe_load, (yaml.YAMLError,), "YAML",
                        f"a {NAMES[tool]} config (a YAML mapping of keys expected)")


def _check_keys(tool: str, path: str | Path, data: dict[str, Any]) -> None:
    valid = tool_catalog()[tool]["keys"]
    known = set(valid)
    for key in data:
        if str(key) not in known:
            near = closest(str(key), valid)
            hint = f"did you mean {', '.join(near)}?" if near else "see its documented keys"
            raise InputError(
                f"{FLAGS[tool]} {str(path)!r}: unknown {NAMES[tool]} key {key!r} ({hint}; the valid keys are listed "
                f"in zero_planner/catalog/tool_keys.json from {tool_catalog()[tool]['source']})"
            )


def _where(tool: str, path: str | Path, key: str) -> str:
    return f"{FLAGS[tool]} {str(path)!r}: {key}"


def _int(tool: str, path: str | Path, data: dict, key: str, default: int) -> int:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{_where(tool, path, key)} must be a positive integer, got {value!r}")
    return value


def _number(tool: str, path: str | Path, data: dict, key: str, default: float, low: float, high: float) -> float:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < high:
        raise InputError(f"{_where(tool, path, key)} must be a number in [{low:g}, {high:g}), got {value!r}")
    return float(value)


def _bool(tool: str, path: str | Path, data: dict, key: str, default: bool, extra: tuple = ()) -> Any:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or value in extra:
        return value
    choices = ", ".join(["true", "false", *map(str, extra)])
    raise InputError(f"{_where(tool, path, key)} {value!r} is not one of {choices}")


def _choice(tool: str, path: str | Path, data: dict, key: str, default: Any, choices: tuple, why: str = "") -> Any:
    value = data.get(key, default)
    if value not in choices:
        shown = ", ".join("none" if c is None else str(c) for c in choices if c != "")
        raise InputError(f"{_where(tool, path, key)} {value!r} is not one of {shown}{why}")
    return value


def _deepspeed(tool: str, path: str | Path, value: Any) -> tuple[dict[str, Any], str]:
    """Returns (the DeepSpeed JSON, where it came from) for the YAML's `deepspeed` value: a dict inline, or a
    path relative to the YAML's folder (then the working directory, where the tools resolve it), or, when
    neither file exists, a preset the tool ships named by its file name."""
    key = "deepspeed"
    if value is None:
        raise InputError(
            f"{_where(tool, path, key)} is not set: zero-plan estimates DeepSpeed ZeRO; add deepspeed: "
            f"{_example_preset(tool)} (or another JSON) to estimate this config under ZeRO"
        )
    if isinstance(value, dict):
        return value, "inline"
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{_where(tool, path, key)} must be a path to a DeepSpeed JSON, got {value!r}")
    named = Path(value)
    tries = [named] if named.is_absolute() else [Path(path).parent / named, Path.cwd() / named]
    for candidate in tries:
        if candidate.is_file():
            try:
                config = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
                raise InputError(f"{_where(tool, path, key)} {str(candidate)!r} is not readable JSON: "
                                 f"{' '.join(str(error).split())}") from None  # fmt: skip
            if not isinstance(config, dict):
                raise InputError(f"{_where(tool, path, key)} {str(candidate)!r} is not a JSON object")
            return config, str(candidate)
    presets = tool_catalog()[tool]["presets"]
    if named.name in presets:
        return json.loads(json.dumps(presets[named.name])), f"{NAMES[tool]} preset {named.name}"
    raise InputError(
        f"{_where(tool, path, key)} {value!r}: no such file (looked in {str(tries[0].parent)!r}"
        + (f" and {str(tries[1].parent)!r}" if len(tries) > 1 else "")
        + f") and not one of {NAMES[tool]}'s presets: {', '.join(sorted(presets))}"
    )


def _example_preset(tool: str) -> str:
    return "deepspeed_configs/zero2.json" if tool == "axolotl" else "examples/deepspeed/ds_z2_config.json"


# --- Axolotl --------------------------------------------------------------------------------------------------


def _axolotl(path: str | Path, data: dict[str, Any]) -> ImportedConfig:
    """Axolotl's defaults (src/axolotl/utils/schemas): sequence_len 512, micro_batch_size 1,
    gradient_accumulation_steps 1, bf16 "auto", lora_dropout 0.0; gradient checkpointing off."""
    tool, notes = "axolotl", []
    for key in ("fsdp", "fsdp_config"):
        if data.get(key):
            raise InputError(f"{_where(tool, path, key)} is set: zero-plan estimates DeepSpeed, not FSDP; remove it "
                             f"or estimate the DeepSpeed variant")  # fmt: skip
    seq_len = _int(tool, path, data, "sequence_len", 512)
    micro = _int(tool, path, data, "micro_batch_size", 1)
    accum = data.get("gradient_accumulation_steps")
    if accum is None and data.get("batch_size") is not None:  # Axolotl's older per-GPU total batch
        accum = max(1, _int(tool, path, data, "batch_size", 1) // micro)
    accum = _int(tool, path, {"gradient_accumulation_steps": accum}, "gradient_accumulation_steps", 1)
    ckpt = _bool(tool, path, data, "gradient_checkpointing", False, extra=("offload", "offload_disk"))
    if ckpt in ("offload", "offload_disk"):
        notes.append(f"gradient_checkpointing {ckpt}: estimated as checkpointing with the checkpoints on the GPU "
                     f"(an upper bound)")  # fmt: skip
    bf16 = _bool(tool, path, data, "bf16", "auto", extra=("auto", "full"))
    fp16 = _bool(tool, path, data, "fp16", None)
    if bf16 in (True, "full") and fp16:
        raise InputError(f"{_where(tool, path, 'bf16')} and fp16 are both true; set one")
    precision = "bf16" if bf16 in (True, "full") else "fp16" if fp16 else "axolotl-auto" if bf16 == "auto" else "fp32"
    if precision == "axolotl-auto" and fp16 is False:
        precision = "axolotl-auto-no-fp16"
    adapter = _choice(tool, path, data, "adapter", None, (None, "", "lora", "qlora"),
                      " (none: full fine-tuning; other adapters are not estimated)")  # fmt: skip
    if data.get("load_in_8bit"):
        raise InputError(f"{_where(tool, path, 'load_in_8bit')} true: 8-bit bases are not estimated; "
                         f"use adapter: qlora with load_in_4bit or a 16-bit base")  # fmt: skip
    method, lora = "full", None
    if adapter:
        method = "qlora" if adapter == "qlora" or data.get("load_in_4bit") else "lora"
        if adapter == "qlora" and not data.get("load_in_4bit"):
            notes.append("adapter qlora without load_in_4bit: Axolotl requires load_in_4bit: true; estimated as 4-bit")
        if data.get("lora_r") is None:
            raise InputError(f"{_where(tool, path, 'lora_r')} is not set; adapter {adapter} needs a LoRA rank")
        r = _int(tool, path, data, "lora_r", 8)
        lora = LoraInfo(
            r=r,
            alpha=_int(tool, path, data, "lora_alpha", r),
            dropout=_number(tool, path, data, "lora_dropout", 0.0, 0.0, 1.0),
            target_modules=_targets(tool, path, data, notes),
            quantization="nf4" if method == "qlora" else "none",
        )
    elif data.get("load_in_4bit"):
        raise InputError(f"{_where(tool, path, 'load_in_4bit')} true needs adapter: qlora (a 4-bit base cannot be "
                         f"fully fine-tuned)")  # fmt: skip
    ds, source = _deepspeed(tool, path, data.get("deepspeed"))
    return ImportedConfig(tool, str(path), _model(tool, path, data, "base_model"), seq_len, micro, accum, bool(ckpt),
                          precision, method, lora, ds, source, notes)  # fmt: skip


def _targets(tool: str, path: str | Path, data: dict, notes: list[str]) -> str | list[str]:
    if data.get("lora_target_linear"):
        return "all-linear"
    modules = data.get("lora_target_modules")
    if isinstance(modules, str) and modules.strip():
        return "all-linear" if modules.strip() == "all-linear" else [m.strip() for m in modules.split(",") if m.strip()]
    if isinstance(modules, list) and modules and all(isinstance(m, str) for m in modules):
        return modules
    if modules is not None:
        raise InputError(f"{_where(tool, path, 'lora_target_modules')} must be module names, got {modules!r}")
    notes.append("no LoRA targets set (peft's default for the architecture): estimated for every linear layer, "
                 "an upper bound")  # fmt: skip
    return "all-linear"


def _model(tool: str, path: str | Path, data: dict, key: str) -> str | None:
    value = data.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InputError(f"{_where(tool, path, key)} must be a model name or path, got {value!r}")
    return value


# --- LLaMA-Factory --------------------------------------------------------------------------------------------


def _llamafactory(path: str | Path, data: dict[str, Any]) -> ImportedConfig:
    """LLaMA-Factory's defaults (src/llamafactory/hparams): stage sft, finetuning_type lora, lora_rank 8,
    lora_alpha 2 x rank, lora_dropout 0, lora_target all, cutoff_len 2048, gradient checkpointing on
    (disable_gradient_checkpointing false); HF's: per_device_train_batch_size 8, accumulation 1, fp32."""
    tool, notes = "llamafactory", []
    _choice(tool, path, data, "stage", "sft", ("sft", "pt"),
            " (rm, ppo, dpo and kto keep a second model or value head, which zero-plan does not estimate)")  # fmt: skip
    finetuning = _choice(tool, path, data, "finetuning_type", "lora", ("full", "lora"),
                         " (freeze and oft are not estimated)")  # fmt: skip
    seq_len = _int(tool, path, data, "cutoff_len", 2048)
    micro = _int(tool, path, data, "per_device_train_batch_size", 8)
    accum = _int(tool, path, data, "gradient_accumulation_steps", 1)
    ckpt = not _bool(tool, path, data, "disable_gradient_checkpointing", False)
    bf16 = _bool(tool, path, data, "bf16", False)
    fp16 = _bool(tool, path, data, "fp16", False)
    if _bool(tool, path, data, "pure_bf16", False):
        raise InputError(f"{_where(tool, path, 'pure_bf16')} true (bf16 weights without fp32 master copies) is not "
                         f"estimated; use bf16: true")  # fmt: skip
    if bf16 and fp16:
        raise InputError(f"{_where(tool, path, 'bf16')} and fp16 are both true; set one")
    precision = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    bits = _choice(tool, path, data, "quantization_bit", None, (None, 4),
                   " (8-bit and other widths are not estimated)")  # fmt: skip
    if bits is not None:
        _choice(tool, path, data, "quantization_method", "bnb", ("bnb",), " (QLoRA is estimated for bitsandbytes NF4)")
        if finetuning != "lora":
            raise InputError(f"{_where(tool, path, 'quantization_bit')} 4 needs finetuning_type lora (QLoRA)")
    method, lora = finetuning, None
    if finetuning == "lora":
        method = "qlora" if bits == 4 else "lora"
        r = _int(tool, path, data, "lora_rank", 8)
        target = data.get("lora_target", "all")
        if not isinstance(target, str) or not target.strip():
            raise InputError(f"{_where(tool, path, 'lora_target')} must be all or comma-separated module names, "
                             f"got {target!r}")  # fmt: skip
        names = [t.strip() for t in target.split(",") if t.strip()]
        lora = LoraInfo(
            r=r,
            alpha=_int(tool, path, data, "lora_alpha", 2 * r),
            dropout=_number(tool, path, data, "lora_dropout", 0.0, 0.0, 1.0),
            target_modules="all-linear" if names == ["all"] else names,
            quantization="nf4" if method == "qlora" else "none",
        )
    ds, source = _deepspeed(tool, path, data.get("deepspeed"))
    return ImportedConfig(tool, str(path), _model(tool, path, data, "model_name_or_path"), seq_len, micro, accum,
                          ckpt, precision, method, lora, ds, source, notes)  # fmt: skip


# --- estimating -----------------------------------------------------------------------------------------------

SEQ_LEN_KEYS = {"axolotl": "sequence_len", "llamafactory": "cutoff_len"}


def with_overrides(imported: ImportedConfig, *, seq_len: int | None, micro_batch: int | None,
                   grad_ckpt: bool | None) -> ImportedConfig:  # fmt: skip
    """Returns `imported` with the command line's --seq-len, --micro-batch and --grad-checkpointing in place of
    the YAML's values where given ("what if micro-batch 4?"), each override noted."""
    changes: dict[str, Any] = {}
    notes = list(imported.notes)
    for flag, field_name, value in (("--seq-len", "seq_len", seq_len), ("--micro-batch", "micro_batch_size",
                                    micro_batch), ("--grad-checkpointing", "gradient_checkpointing", grad_ckpt)):  # fmt: skip
        if value is not None and value != getattr(imported, field_name):
            changes[field_name] = value
            notes.append(f"{flag} {value} overrides the YAML's {getattr(imported, field_name)}")
    return replace(imported, **changes, notes=notes) if changes else imported


def resolve_precision(imported: ImportedConfig, cluster) -> str:
    """Returns bf16/fp16/fp32: Axolotl's bf16 "auto" is bf16 where the GPU has it, else fp16 unless fp16 is
    false (axolotl/utils/config/__init__.py, resolve_dtype)."""
    if imported.precision.startswith("axolotl-auto"):
        if cluster.gpu.bf16 and not cluster.is_cpu:
            return "bf16"
        return "fp32" if imported.precision == "axolotl-auto-no-fp16" or cluster.is_cpu else "fp16"
    return imported.precision


def filled_ds_config(imported: ImportedConfig, cluster) -> dict[str, Any]:
    """Returns the DeepSpeed JSON as HF Trainer hands it to DeepSpeed for this YAML: "auto" batch sizes and
    precision filled from the YAML. A concrete value that disagrees is an InputError, since HF Trainer refuses
    it (transformers/integrations/deepspeed.py, trainer_config_process: "mismatch")."""
    precision = resolve_precision(imported, cluster)
    world = cluster.world_size
    wanted = {
        "train_micro_batch_size_per_gpu": imported.micro_batch_size,
        "gradient_accumulation_steps": imported.gradient_accumulation_steps,
        "train_batch_size": imported.micro_batch_size * imported.gradient_accumulation_steps * world,
    }
    out = json.loads(json.dumps(imported.ds_config))
    yaml_keys = _yaml_key_names(imported.tool)
    for key, value in wanted.items():
        given = out.get(key, "auto")
        if given != "auto" and given != value:
            raise InputError(
                f"{FLAGS[imported.tool]} {imported.path!r}: the DeepSpeed JSON ({imported.ds_config_source}) says "
                f"{key} {given!r} but the YAML gives {value} ({yaml_keys[key]}, {world} GPUs); HF Trainer refuses "
                f"the mismatch"
            )
        out[key] = value
    for name in ("bf16", "fp16"):
        section = out.get(name)
        if isinstance(section, dict):
            enabled = section.get("enabled", False)
            if enabled != "auto" and bool(enabled) != (precision == name):
                raise InputError(
                    f"{FLAGS[imported.tool]} {imported.path!r}: the DeepSpeed JSON ({imported.ds_config_source}) "
                    f"sets {name}.enabled {str(enabled).lower()} but the YAML trains in {precision}; HF Trainer "
                    f"refuses the mismatch"
                )
            section["enabled"] = precision == name
        elif precision == name:
            out[name] = {"enabled": True}
    return out


def _yaml_key_names(tool: str) -> dict[str, str]:
    if tool == "axolotl":
        return {"train_micro_batch_size_per_gpu": "micro_batch_size",
                "gradient_accumulation_steps": "gradient_accumulation_steps",
                "train_batch_size": "micro_batch_size x gradient_accumulation_steps x GPUs"}  # fmt: skip
    return {"train_micro_batch_size_per_gpu": "per_device_train_batch_size",
            "gradient_accumulation_steps": "gradient_accumulation_steps",
            "train_batch_size": "per_device_train_batch_size x gradient_accumulation_steps x GPUs"}  # fmt: skip


def estimate(imported: ImportedConfig, spec, cluster, *, model_name: str | None, plan_path: str,
             pretrained: bool = False, keeps_outputs: bool = False, data_bytes: int = 0,
             data_peak_bytes: int = 0):
    """Returns the planner's ConfigEstimate of the imported config (fit without the safety margin): stage,
    offload, precision and buckets from its DeepSpeed JSON, adapter rank and dropout from the YAML."""
    from zero_planner.plan.userconfig import estimate_config

    if imported.seq_len > spec.max_position_embeddings:
        raise InputError(f"{_where(imported.tool, imported.path, SEQ_LEN_KEYS[imported.tool])} {imported.seq_len} is "
                         f"above {spec.name}'s maximum of {spec.max_position_embeddings} tokens")  # fmt: skip
    lora = imported.lora
    if lora is not None:
        from zero_planner.plan.options import lora_for_model

        given = f"{_where(imported.tool, imported.path, 'lora_dropout')} {lora.dropout:g}" if lora.dropout else None
        lora = lora_for_model(spec, lora, imported.method, dropout_given=given)
    ds = filled_ds_config(imported, cluster)
    est = estimate_config(
        spec,
        cluster,
        ds,
        seq_len=imported.seq_len,
        grad_ckpt=imported.gradient_checkpointing,
        micro_batch=imported.micro_batch_size,
        method=imported.method,
        task="causal-lm",
        model_name=model_name,
        plan_path=plan_path,
        lora=lora,
        pretrained=pretrained,
        keeps_outputs=keeps_outputs,
        data_bytes=data_bytes,
        data_peak_bytes=data_peak_bytes,
    )
    source = f"{NAMES[imported.tool]} config {imported.path} (DeepSpeed JSON: {imported.ds_config_source})"
    est.plan.notes[:0] = [source, *imported.notes]
    return est

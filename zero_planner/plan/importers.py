"""Reading other tools' training configs: `zero-plan --from-axolotl config.yml` / `--from-llamafactory config.yaml`
/ `--from-hf-trainer training_args.json` / `--from-accelerate accelerate_config.yaml`.

"Will my Axolotl / LLaMA-Factory / HF Trainer / Accelerate config fit?" without translating it: the file's model,
sequence length, micro-batch, accumulation, precision, checkpointing, adapter settings and DeepSpeed JSON are read
with each tool's own key names and defaults (the values each tool's schema gives an absent key, cited beside
them), the JSON's HF-style "auto" values are filled as HF Trainer fills them from the file, and the result is
estimated like `--ds-config`: fit against the full capacity, headroom printed. TrainingArguments without a
`deepspeed` JSON, and Accelerate's MULTI_GPU, are plain DDP: estimated as ZeRO stage 0.

Key names and the presets each tool ships come from zero_planner/catalog/tool_keys.json (rebuilt from the
tools' sources by scripts/tool_keys.py); TrainingArguments' fields and optimizers and Accelerate's config keys
from zero_planner/catalog/hf_keys.json (scripts/hf_keys.py, from the installed transformers and accelerate). A
key the tool does not know is an InputError naming the key and the closest valid ones; so is a value zero-plan
cannot estimate (FSDP, DPO, an optimizer with more state than AdamW...), naming the valid choices; a value it
estimates as an upper bound (8-bit optimizers) or leaves out is said in a note.
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
HF_KEYS_FILE = Path(__file__).parent.parent / "catalog" / "hf_keys.json"
FLAGS = {"axolotl": "--from-axolotl", "llamafactory": "--from-llamafactory", "hf_trainer": "--from-hf-trainer",
         "accelerate": "--from-accelerate"}  # fmt: skip
NAMES = {"axolotl": "Axolotl", "llamafactory": "LLaMA-Factory", "hf_trainer": "HF TrainingArguments",
         "accelerate": "Accelerate"}  # fmt: skip
GIVEN_BY = {"axolotl": "the YAML", "llamafactory": "the YAML", "hf_trainer": "the TrainingArguments JSON",
            "accelerate": "the Accelerate config"}  # fmt: skip
"""How an error names the file's side of a mismatch with its DeepSpeed JSON."""


NOT_MODELLED = {
    "axolotl": {
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
        "sequence_parallel_size": "sequence sharded over GPUs is not modelled: activations are for the whole sequence",
        "enable_liger_kernel": "the fused loss is not modelled: fp32 logits are counted",
        "use_unsloth": "Unsloth's kernels are not modelled",
        "use_galore": "GaLore's projected optimizer states are not modelled",
        "use_apollo": "APOLLO's optimizer states are not modelled",
        "use_badam": "BAdam's block-wise updates are not modelled",
        "flash_attn": "activations are estimated for SDPA, what zero-run measures",
    },
    "hf_trainer": {
        "torch_compile": "torch.compile's kernels are not modelled: activations are estimated for eager SDPA",
        "use_liger_kernel": "the fused loss is not modelled: fp32 logits are counted",
        "auto_find_batch_size": "Trainer halves the batch after an out-of-memory error: estimated at "
        "per_device_train_batch_size as given",
        "torch_empty_cache_steps": "emptying the allocator's cache every N steps lowers reserved memory between "
        "steps, not the step's peak: not modelled",
        "parallelism_config": "tensor or context parallelism is not modelled: every GPU is estimated with the whole "
        "model and sequence",
    },
    "accelerate": {},
}
"""Keys that change memory in ways zero-plan does not model: when set (to anything but the default or the
modelled value), the output says so beside the estimate, which is then an upper bound or approximate."""
MODELLED_VALUES = {"attn_implementation": ("sdpa",), "flash_attn": ("auto", "sdpa"),
                   "context_parallel_size": (1,), "sequence_parallel_degree": (1,), "sequence_parallel_size": (1,)}  # fmt: skip


@dataclass(frozen=True)
class ImportedConfig:
    """What a tool's training YAML asks for, in zero-plan's terms."""

    tool: str
    """axolotl | llamafactory | hf_trainer | accelerate"""
    path: str
    model: str | None
    """base_model / model_name_or_path (None when absent: --model must say it)."""
    seq_len: int | None
    """None where the file has no sequence length (TrainingArguments, Accelerate): --seq-len or its default."""
    micro_batch_size: int | None
    """None where the file has no micro-batch (Accelerate): --micro-batch, else the largest that fits."""
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
    training: dict[str, Any] = field(default_factory=dict)
    """Run settings the file carries, keyed by zero-plan's flag (argparse dest: max_steps, epochs, lr,
    save_total_limit, ...): they fill the flags the command line leaves unset."""
    optimizer: str | None = None
    """TrainingArguments' optim when the trainer builds the optimizer (no optimizer section in the JSON)."""
    processes: tuple[int, int] | None = None
    """Accelerate's (num_processes, num_machines): checked against --gpus."""
    ddp: bool = False
    """No DeepSpeed: plain DistributedDataParallel, estimated as ZeRO stage 0."""


@cache
def tool_catalog() -> dict[str, Any]:
    """Returns tool_keys.json: per tool, its source commit, valid keys and DeepSpeed presets."""
    return json.loads(TOOL_KEYS_FILE.read_text(encoding="utf-8"))


@cache
def hf_catalog() -> dict[str, Any]:
    """Returns hf_keys.json: TrainingArguments' fields and optimizers, Accelerate's config keys, with versions."""
    return json.loads(HF_KEYS_FILE.read_text(encoding="utf-8"))


def valid_keys(tool: str) -> tuple[list[str], str]:
    """Returns (the keys a `tool` file may hold, where the list comes from) for the unknown-key error."""
    if tool == "hf_trainer":
        hf = hf_catalog()["hf_trainer"]
        legacy = hf.get("legacy", {})
        keys = sorted({*hf["keys"], *legacy.get("keys", ())})
        also = f" and {legacy['version']}" if legacy else ""
        return keys, f"zero_planner/catalog/hf_keys.json from transformers {hf['version']}{also}"
    if tool == "accelerate":
        return hf_catalog()["accelerate"]["keys"], (f"zero_planner/catalog/hf_keys.json from accelerate "
                                                    f"{hf_catalog()['accelerate']['version']}")  # fmt: skip
    return tool_catalog()[tool]["keys"], f"zero_planner/catalog/tool_keys.json from {tool_catalog()[tool]['source']}"


def read_config(tool: str, path: str | Path) -> ImportedConfig:
    """Returns the ImportedConfig of the `tool` file at `path`. Raises InputError for anything it cannot read."""
    data = _load_json(tool, path) if tool == "hf_trainer" else _load_yaml(tool, path)
    _check_keys(tool, path, data)
    imported = READERS[tool](path, data)
    if tool in OPTIMIZER_KEYS and data.get(OPTIMIZER_KEYS[tool]) is not None:
        # Their optimizer names are TrainingArguments' (both train through HF Trainer): read as --from-hf-trainer
        # reads optim, with what the JSON's optimizer section or an offloaded optimizer puts in its place.
        imported = replace(imported, optimizer=_hf_optimizer(path, data, imported.ds_config, imported.notes,
                                                             tool=tool, key=OPTIMIZER_KEYS[tool]))  # fmt: skip
    for key, why in NOT_MODELLED[tool].items():
        value = data.get(key)
        if value not in (None, False, "", *MODELLED_VALUES.get(key, ())):
            imported.notes.append(f"{key}: {why}" if value is True else f"{key}: {value}: {why}")
    return imported


# --- shared parsing -------------------------------------------------------------------------------------------


def _load_yaml(tool: str, path: str | Path) -> dict[str, Any]:
    import yaml

    return read_mapping(path, f"{FLAGS[tool]} {str(path)!r}", yaml.safe_load, (yaml.YAMLError,), "YAML",
                        f"a {NAMES[tool]} config (a YAML mapping of keys expected)")


def _load_json(tool: str, path: str | Path) -> dict[str, Any]:
    return read_mapping(path, f"{FLAGS[tool]} {str(path)!r}", json.loads, (json.JSONDecodeError,), "JSON",
                        "TrainingArguments as JSON (an object of TrainingArguments fields expected)")  # fmt: skip


def _check_keys(tool: str, path: str | Path, data: dict[str, Any], valid: list[str] | None = None,
                where: str = "", source: str | None = None) -> None:  # fmt: skip
    """Raises InputError for the first key of `data` outside `valid` (default: the tool's keys), with the closest."""
    if valid is None:
        valid, source = valid_keys(tool)
    known = set(valid)
    for key in data:
        if str(key) not in known:
            near = closest(str(key), valid)
            hint = f"did you mean {', '.join(near)}?" if near else "see its documented keys"
            raise InputError(
                f"{FLAGS[tool]} {str(path)!r}: unknown {NAMES[tool]} key {where + str(key)!r} ({hint}; the valid keys are "
                f"listed in {source})"
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


def _deepspeed(tool: str, path: str | Path, value: Any, key: str = "deepspeed") -> tuple[dict[str, Any], str]:
    """Returns (the DeepSpeed JSON, where it came from) for the file's `deepspeed` value: a dict inline, or a
    path relative to the file's folder (then the working directory, where the tools resolve it), or, when
    neither file exists, a preset the tool ships named by its file name."""
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
    presets = tool_catalog()[tool]["presets"] if tool in tool_catalog() else {}
    if named.name in presets:
        return json.loads(json.dumps(presets[named.name])), f"{NAMES[tool]} preset {named.name}"
    raise InputError(
        f"{_where(tool, path, key)} {value!r}: no such file (looked in {str(tries[0].parent)!r}"
        + (f" and {str(tries[1].parent)!r}" if len(tries) > 1 else "")
        + (f") and not one of {NAMES[tool]}'s presets: {', '.join(sorted(presets))}" if presets else ")")
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


# --- HF Trainer -----------------------------------------------------------------------------------------------

ADAMW_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused", "adamw_torch_xla",
                    "adamw_torch_npu_fused", "paged_adamw_32bit")  # fmt: skip
"""TrainingArguments' optim values that keep what the estimate counts: AdamW's two fp32 moments (8 B per trainable
parameter). adamw_hf, transformers' own AdamW, was removed in 4.x and is still found in older JSONs; paged_ keeps
the same states in pages the driver may evict to the host, so the GPU holds at most as much."""
SMALLER_OPTIMIZERS: dict[str, tuple[float, str]] = {
    "adamw_8bit": (2, "bitsandbytes' 8-bit AdamW: two 8-bit moments"),
    "adamw_bnb_8bit": (2, "bitsandbytes' 8-bit AdamW: two 8-bit moments"),
    "paged_adamw_8bit": (2, "bitsandbytes' paged 8-bit AdamW: two 8-bit moments"),
    "adamw_torch_8bit": (2, "torchao's 8-bit AdamW: two 8-bit moments"),
    "adamw_torch_4bit": (1, "torchao's 4-bit AdamW: two 4-bit moments"),
    "ademamix_8bit": (3, "bitsandbytes' 8-bit AdEMAMix: three 8-bit states"),
    "paged_ademamix_8bit": (3, "bitsandbytes' paged 8-bit AdEMAMix: three 8-bit states"),
    "lion_8bit": (1, "Lion: one 8-bit moment"),
    "paged_lion_8bit": (1, "Lion: one 8-bit moment"),
    "lion_32bit": (4, "Lion: one fp32 moment"),
    "paged_lion_32bit": (4, "Lion: one fp32 moment"),
    "adafactor": (0.5, "Adafactor: factored second moments"),
    "sgd": (4, "SGD: at most one fp32 momentum"),
    "adagrad": (4, "Adagrad: one fp32 sum of squares"),
    "rmsprop": (4, "RMSprop: one fp32 average"),
    "rmsprop_bnb": (4, "RMSprop: one fp32 average"),
    "rmsprop_bnb_32bit": (4, "RMSprop: one fp32 average"),
    "rmsprop_bnb_8bit": (1, "RMSprop: one 8-bit average"),
    "adamw_anyprecision": (8, "AnyPrecisionAdamW: two moments in fp32 or bf16"),
    "schedule_free_adamw": (8, "schedule-free AdamW: two fp32 states"),
    "schedule_free_radam": (8, "schedule-free RAdam: two fp32 states"),
    "schedule_free_sgd": (4, "schedule-free SGD: one fp32 state"),
    "stable_adamw": (8, "StableAdamW: two fp32 moments"),
    "galore_adamw": (8, "GaLore: Adam moments of low-rank projections"),
    "galore_adamw_8bit": (2, "GaLore: 8-bit Adam moments of low-rank projections"),
    "galore_adafactor": (0.5, "GaLore: Adafactor of low-rank projections"),
    "galore_adamw_layerwise": (8, "GaLore: Adam moments of low-rank projections, stepped layer by layer"),
    "galore_adamw_8bit_layerwise": (2, "GaLore: 8-bit moments of low-rank projections, stepped layer by layer"),
    "galore_adafactor_layerwise": (0.5, "GaLore: Adafactor of low-rank projections, stepped layer by layer"),
    "apollo_adamw": (8, "APOLLO: low-rank moments"),
    "apollo_adamw_layerwise": (8, "APOLLO: low-rank moments, stepped layer by layer"),
    "lomo": (0, "LOMO: a fused update that keeps no optimizer states (nor whole gradients)"),
    "adalomo": (0, "AdaLomo: a fused update with factored second moments"),
}
"""optim values whose states are at most AdamW's: (their bytes per trainable parameter at most, what they keep).
Estimated with AdamW's fp32 states, an upper bound; the note says by how much."""
LARGER_OPTIMIZERS = {
    "ademamix": "AdEMAMix keeps three fp32 states (12 B per parameter)",
    "paged_ademamix_32bit": "AdEMAMix keeps three fp32 states (12 B per parameter)",
    "grokadamw": "GrokAdamW keeps a gradient average beside Adam's two moments (12 B per parameter)",
}
"""optim values that keep more than AdamW: refused, since an estimate with AdamW's states would be too low."""
CPU_OPTIMIZERS = {"adagrad": "DeepSpeedCPUAdagrad", "lion_32bit": "DeepSpeedCPULion", "paged_lion_32bit": "DeepSpeedCPULion"}
"""With the optimizer offloaded, Accelerate (under HF Trainer too) swaps the trainer's optimizer for a DeepSpeed CPU
one (accelerate accelerator.py _prepare_deepspeed -> utils/deepspeed.py map_pytorch_optim_to_deepspeed, unless the
JSON sets zero_force_ds_cpu_optimizer false): these for torch's Adagrad and bitsandbytes' 32-bit Lion,
DeepSpeedCPUAdam (two fp32 moments, what the estimate counts) for every other."""
HF_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "optim": "adamw_torch_fused"}
"""TrainingArguments' defaults (transformers 5.x training_args.py) for the keys that size memory."""
DDP_NOTE = ("no DeepSpeed: plain DistributedDataParallel, each of the {n} {gpus} holding the whole model and "
            "training its own micro-batch, estimated as ZeRO stage 0 (DeepSpeed's 16-bit working copy and fp32 "
            "master; torch AMP's fp32 weights and DDP's gradient buckets are close to it)")  # fmt: skip
DEVICE_MAP_NOTE = ('from_pretrained(device_map="auto") is not data parallelism: it spreads one copy of the model\'s '
                   "layers over the GPUs of one process (naive model parallelism, one GPU computing at a time); for "
                   "this estimate load the model whole on each process's own GPU, as DDP does")  # fmt: skip


def _hf_trainer(path: str | Path, data: dict[str, Any]) -> ImportedConfig:
    """TrainingArguments as JSON (`args.to_json_string()`, or the keyword arguments): micro-batch, accumulation,
    precision, checkpointing, optimizer and DeepSpeed JSON (absent: plain DDP, estimated as ZeRO stage 0), and the
    run's length, learning rate and save policy for the plan."""
    tool, notes = "hf_trainer", []
    fsdp = data.get("fsdp")
    if fsdp not in (None, "", [], False):
        raise InputError(f"{_where(tool, path, 'fsdp')} {fsdp!r} is set: FSDP is not planned yet; estimate the "
                         f"DeepSpeed variant (deepspeed: a ZeRO JSON) or plain DDP (neither)")  # fmt: skip
    micro = _int(tool, path, data, "per_device_train_batch_size", HF_DEFAULTS["per_device_train_batch_size"])
    accum = _int(tool, path, data, "gradient_accumulation_steps", HF_DEFAULTS["gradient_accumulation_steps"])
    ckpt = bool(_bool(tool, path, data, "gradient_checkpointing", False)) or bool(
        _bool(tool, path, data, "activation_checkpointing", False))  # the 5.x name; the other is its alias
    kwargs = data.get("gradient_checkpointing_kwargs") or data.get("activation_checkpointing_kwargs") or {}
    if ckpt and isinstance(kwargs, dict) and kwargs.get("use_reentrant") is True:
        notes.append("gradient_checkpointing_kwargs use_reentrant true: estimated for non-reentrant checkpointing, "
                     "what zero-run measures")  # fmt: skip
    bf16 = _bool(tool, path, data, "bf16", False)
    fp16 = _bool(tool, path, data, "fp16", False)
    if bf16 and fp16:
        raise InputError(f"{_where(tool, path, 'bf16')} and fp16 are both true; set one")
    precision = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    value = data.get("deepspeed")
    if value in (None, ""):
        ds, source, ddp = {"zero_optimization": {"stage": 0}}, "none", True
    else:
        (ds, source), ddp = _deepspeed(tool, path, value), False
    optimizer = _hf_optimizer(path, data, ds, notes)
    return ImportedConfig(tool, str(path), None, None, micro, accum, ckpt, precision, "full", None, ds, source, notes,
                          training=_hf_training(path, data, notes), optimizer=optimizer, ddp=ddp)  # fmt: skip


OPTIMIZER_KEYS = {"axolotl": "optimizer", "llamafactory": "optim"}
"""The YAML key of the trainer's optimizer (a TrainingArguments optim name) in the tools that train through HF
Trainer."""


def _hf_optimizer(path: str | Path, data: dict[str, Any], ds: dict[str, Any], notes: list[str], *,
                  tool: str = "hf_trainer", key: str = "optim") -> str | None:
    """Returns the optim value whose states the run keeps: None where DeepSpeed's optimizer runs instead (the
    JSON's optimizer section, or CPU Adam for an offloaded optimizer). Raises InputError for a value
    TrainingArguments does not know (--from-hf-trainer; a tool's own optimizer name is noted as not modelled),
    or one that keeps more than AdamW."""
    hf = hf_catalog()["hf_trainer"]
    known = sorted({*hf["optimizers"], *hf.get("legacy", {}).get("optimizers", ()), *ADAMW_OPTIMIZERS})
    optim = data.get(key, HF_DEFAULTS["optim"])
    if optim is None:
        optim = HF_DEFAULTS["optim"]
    if optim not in known and tool != "hf_trainer":  # an Axolotl-only optimizer (optimi_adamw, muon, ...)
        notes.append(f"{key}: {optim}: not modelled: the estimate assumes AdamW with fp32 states")
        return None
    if optim not in known:
        near = closest(str(optim), known)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise InputError(f"{_where(tool, path, key)} {optim!r} is not a TrainingArguments optimizer ({hint}the "
                         f"modelled ones: {', '.join(ADAMW_OPTIMIZERS)})")  # fmt: skip
    if isinstance(ds.get("optimizer"), dict):
        if optim != HF_DEFAULTS["optim"]:
            notes.append(f"{key} {optim} is not used: the DeepSpeed JSON's optimizer section "
                         f"({ds['optimizer'].get('type', 'auto')}) is (transformers integrations/deepspeed.py, "
                         f"deepspeed_optim_sched)")  # fmt: skip
        return None
    zero = ds.get("zero_optimization") if isinstance(ds.get("zero_optimization"), dict) else {}
    offload = zero.get("offload_optimizer") if isinstance(zero.get("offload_optimizer"), dict) else {}
    if offload.get("device") in ("cpu", "nvme") and ds.get("zero_force_ds_cpu_optimizer", True) is not False:
        if optim in ADAMW_OPTIMIZERS:
            return optim
        if optim in CPU_OPTIMIZERS:
            notes.append(f"{key} {optim} runs as DeepSpeed's {CPU_OPTIMIZERS[optim]} with the optimizer offloaded "
                         f"(Accelerate's map_pytorch_optim_to_deepspeed)")  # fmt: skip
            return optim
        notes.append(f"{key} {optim} is not used: with the optimizer offloaded, Accelerate hands DeepSpeed its CPU "
                     f"Adam instead (two fp32 moments, as estimated; accelerate utils/deepspeed.py, "
                     f"map_pytorch_optim_to_deepspeed; zero_force_ds_cpu_optimizer false keeps {optim})")  # fmt: skip
        return None
    if optim in LARGER_OPTIMIZERS:
        raise InputError(f"{_where(tool, path, key)} {optim!r}: {LARGER_OPTIMIZERS[optim]}, more than the AdamW "
                         f"the estimate counts, and is not modelled; the modelled ones: {', '.join(ADAMW_OPTIMIZERS)}")  # fmt: skip
    return optim


def _hf_training(path: str | Path, data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Returns the run settings of TrainingArguments as zero-plan's flags (dest -> value): length, learning rate,
    schedule, warm-up, save policy and seed; a value zero-run has no counterpart for is noted, not carried."""
    tool, out = "hf_trainer", {}
    steps = data.get("max_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        out["max_steps"] = steps
    elif data.get("num_train_epochs") is not None:
        out["epochs"] = _number(tool, path, data, "num_train_epochs", 3.0, 1e-9, float("inf"))
    if data.get("learning_rate") is not None:
        out["lr"] = _number(tool, path, data, "learning_rate", 5e-5, 1e-12, 1.0)
    if data.get("save_total_limit") is not None:
        out["save_total_limit"] = _int(tool, path, data, "save_total_limit", 2)
    save = data.get("save_strategy", "steps")
    if save == "no":
        out["save"] = "final"  # no checkpoints; the script's trainer.save_model() writes the model
    elif save == "steps":
        every = data.get("save_steps")
        if isinstance(every, int) and not isinstance(every, bool) and every > 0:
            out["save_steps"] = every
        elif every is not None:
            notes.append(f"save_steps {every!r} (a share of the run) is not carried: the plan saves every "
                         f"--save-steps steps")  # fmt: skip
    elif save is not None:
        notes.append(f"save_strategy {save!r} is not carried: the plan saves every --save-steps steps")
    schedule = data.get("lr_scheduler_type")
    if schedule in ("constant", "linear", "cosine", "constant_with_warmup"):
        out["lr_scheduler"] = schedule.removesuffix("_with_warmup")
    elif schedule is not None:
        notes.append(f"lr_scheduler_type {schedule!r} is not carried (zero-run has constant, linear, cosine)")
    warmup = data.get("warmup_steps") or data.get("warmup_ratio")  # warmup_ratio: 4.x; a float < 1 is a share in 5.x
    if isinstance(warmup, (int, float)) and not isinstance(warmup, bool) and warmup > 0:
        out["warmup"] = float(warmup)
    seed = data.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
        out["seed"] = seed
    return out


# --- Accelerate -----------------------------------------------------------------------------------------------

ACCELERATE_TYPES = ("NO", "MULTI_GPU", "MULTI_CPU", "DEEPSPEED")
"""distributed_type values zero-plan estimates: one process or DDP (ZeRO stage 0), and DeepSpeed."""
ACCELERATE_PLUGIN_DEFAULTS = {"zero_stage": 2, "offload_optimizer_device": "none", "offload_param_device": "none",
                              "gradient_accumulation_steps": 1}  # fmt: skip
"""DeepSpeedPlugin's values for absent keys (accelerate utils/dataclasses.py, DeepSpeedPlugin.__post_init__)."""
ACCELERATE_FILE_EXCLUSIVE = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage",
                             "offload_optimizer_device", "offload_param_device", "offload_param_nvme_path",
                             "offload_optimizer_nvme_path", "zero3_save_16bit_model")  # fmt: skip
"""Keys Accelerate refuses beside deepspeed_config_file (DeepSpeedPlugin._deepspeed_config_checks), with
mixed_precision."""


def _accelerate(path: str | Path, data: dict[str, Any]) -> ImportedConfig:
    """An `accelerate config` YAML: distributed_type (DDP -> ZeRO stage 0, DEEPSPEED -> its plugin's settings or
    deepspeed_config_file), mixed_precision and the process count. It names no micro-batch (the script's DataLoader
    does): --micro-batch, else the largest that fits."""
    tool, notes = "accelerate", []
    types = hf_catalog()["accelerate"]["distributed_types"]
    kind = data.get("distributed_type", "NO")
    if kind not in types:
        near = closest(str(kind), types)
        raise InputError(f"{_where(tool, path, 'distributed_type')} {kind!r} is not one of {', '.join(types)}"
                         + (f" (did you mean {', '.join(near)}?)" if near else ""))  # fmt: skip
    if kind == "FSDP":
        raise InputError(f"{_where(tool, path, 'distributed_type')} FSDP: FSDP is not planned yet; estimate the "
                         f"DeepSpeed variant (distributed_type: DEEPSPEED) or DDP (MULTI_GPU)")  # fmt: skip
    if kind not in ACCELERATE_TYPES:
        raise InputError(f"{_where(tool, path, 'distributed_type')} {kind} is not estimated; zero-plan estimates "
                         f"{', '.join(ACCELERATE_TYPES)}")  # fmt: skip
    mixed = _choice(tool, path, data, "mixed_precision", "no", ("no", "fp16", "bf16"),
                    " (fp8 is not estimated)")  # fmt: skip
    processes = _int(tool, path, data, "num_processes", 1)
    machines = _int(tool, path, data, "num_machines", 1)
    dynamo = data.get("dynamo_config") or {}
    if isinstance(dynamo, dict) and str(dynamo.get("dynamo_backend", "NO")).upper() != "NO":
        notes.append(f"dynamo_config dynamo_backend {dynamo['dynamo_backend']}: torch.compile's kernels are not "
                     f"modelled: activations are estimated for eager SDPA")  # fmt: skip
    precision = "fp32" if mixed == "no" else mixed
    accum, ddp = 1, kind != "DEEPSPEED"
    if ddp:
        if data.get("deepspeed_config"):
            notes.append(f"deepspeed_config is not used: distributed_type is {kind}")
        ds, source = {"zero_optimization": {"stage": 0}}, "none"
        notes.append("gradient accumulation is the script's (Accelerator(gradient_accumulation_steps=...)): "
                     "estimated without; it adds the gradients kept between micro-steps")  # fmt: skip
    else:
        ds, source, accum, precision = _accelerate_deepspeed(path, data, precision, notes)
    return ImportedConfig(tool, str(path), None, None, None, accum, False, precision, "full", None, ds, source, notes,
                          processes=(processes, machines), ddp=ddp)  # fmt: skip


def _accelerate_deepspeed(path: str | Path, data: dict[str, Any], precision: str,
                          notes: list[str]) -> tuple[dict[str, Any], str, int, str]:  # fmt: skip
    """Returns (DeepSpeed JSON, its source, accumulation, precision) of a DEEPSPEED config: its
    deepspeed_config_file, or the JSON DeepSpeedPlugin builds from the plugin's keys."""
    tool = "accelerate"
    plugin = data.get("deepspeed_config") or {}
    if not isinstance(plugin, dict):
        raise InputError(f"{_where(tool, path, 'deepspeed_config')} must be a mapping of DeepSpeed plugin keys")
    _check_keys(tool, path, plugin, hf_catalog()["accelerate"]["deepspeed_keys"], "deepspeed_config.",
                "zero_planner/catalog/hf_keys.json (what accelerate config writes)")  # fmt: skip
    where = "deepspeed_config."
    if plugin.get("deepspeed_config_file") not in (None, "", "none"):
        beside = [k for k in ACCELERATE_FILE_EXCLUSIVE if k in plugin] + (["mixed_precision"] if "mixed_precision" in data else [])
        if beside:
            raise InputError(f"{_where(tool, path, where + 'deepspeed_config_file')} is set with {', '.join(beside)}: "
                             f"Accelerate refuses them beside the file; set them in the DeepSpeed JSON")  # fmt: skip
        ds, source = _deepspeed(tool, path, plugin["deepspeed_config_file"], where + "deepspeed_config_file")
        accum = ds.get("gradient_accumulation_steps", 1)
        accum = accum if isinstance(accum, int) and not isinstance(accum, bool) and accum > 0 else 1
        sections = [name for name in ("bf16", "fp16") if isinstance(ds.get(name), dict) and ds[name].get("enabled") is True]
        return ds, source, accum, sections[0] if sections else "fp32"
    # Keyed by the full name (deepspeed_config.zero_stage), as the errors say it.
    values = {where + k: v for k, v in {**ACCELERATE_PLUGIN_DEFAULTS, **plugin}.items() if v is not None}
    stage = _choice(tool, path, values, where + "zero_stage", 2, (0, 1, 2, 3))
    devices = ("none", "cpu", "nvme")
    off_opt = _choice(tool, path, values, where + "offload_optimizer_device", "none", devices)
    off_param = _choice(tool, path, values, where + "offload_param_device", "none", devices)
    if off_param != "none" and stage != 3:
        raise InputError(f"{_where(tool, path, where + 'offload_param_device')} {off_param} needs zero_stage 3, "
                         f"got {stage}")  # fmt: skip
    if off_opt != "none" and stage == 0:
        raise InputError(f"{_where(tool, path, where + 'offload_optimizer_device')} {off_opt} needs zero_stage 1-3")
    accum = _int(tool, path, values, where + "gradient_accumulation_steps", 1)
    zero: dict[str, Any] = {"stage": stage}
    for key, device in (("offload_optimizer", off_opt), ("offload_param", off_param)):
        zero[key] = {"device": device}
        if device == "nvme":
            zero[key]["nvme_path"] = plugin.get(f"{key}_nvme_path", "/local_nvme")
    zero["stage3_gather_16bit_weights_on_model_save"] = bool(plugin.get("zero3_save_16bit_model", False))
    ds = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": accum,
          "zero_optimization": zero}  # fmt: skip
    if plugin.get("gradient_clipping") is not None:
        ds["gradient_clipping"] = plugin["gradient_clipping"]
    if plugin.get("zero3_init_flag") is False and stage == 3:
        notes.append("zero3_init_flag false: each process builds the whole model before DeepSpeed partitions it, "
                     "which the load phase's estimate (built under deepspeed.zero.Init, as zero-run does) leaves out")  # fmt: skip
    return ds, "built by Accelerate's DeepSpeed plugin from deepspeed_config", accum, precision


READERS = {"axolotl": _axolotl, "llamafactory": _llamafactory, "hf_trainer": _hf_trainer, "accelerate": _accelerate}
"""Each tool's reader: (path, the file's mapping) -> ImportedConfig."""


# --- estimating -----------------------------------------------------------------------------------------------

SEQ_LEN_KEYS = {"axolotl": "sequence_len", "llamafactory": "cutoff_len"}
"""The file's key for the sequence length (TrainingArguments and Accelerate have none: --seq-len gives it)."""


def with_overrides(imported: ImportedConfig, *, seq_len: int | None, micro_batch: int | None,
                   grad_ckpt: bool | None) -> ImportedConfig:  # fmt: skip
    """Returns `imported` with the command line's --seq-len, --micro-batch and --grad-checkpointing in place of
    the file's values where given ("what if micro-batch 4?"), each override noted; where the file has no such
    value (an Accelerate config's micro-batch or checkpointing, a sequence length outside Axolotl and
    LLaMA-Factory), the flag gives it."""
    changes: dict[str, Any] = {}
    notes = list(imported.notes)
    no_ckpt = imported.tool == "accelerate"  # checkpointing is the script's model.gradient_checkpointing_enable()
    for flag, field_name, value in (("--seq-len", "seq_len", seq_len), ("--micro-batch", "micro_batch_size",
                                    micro_batch), ("--grad-checkpointing", "gradient_checkpointing", grad_ckpt)):  # fmt: skip
        if value is not None and value != getattr(imported, field_name):
            changes[field_name] = value
            held = getattr(imported, field_name)
            if held is not None and not (no_ckpt and field_name == "gradient_checkpointing"):
                notes.append(f"{flag} {value} overrides {GIVEN_BY[imported.tool]}'s {held}")
    return replace(imported, **changes, notes=notes) if changes else imported


ADAPTERS_FROM_FLAGS = ("hf_trainer", "accelerate")
"""Tools whose file holds no adapter settings (the script's peft does): --method and --lora-* give them."""


def with_adapter(imported: ImportedConfig, method: str, lora: LoraInfo | None) -> ImportedConfig:
    """Returns `imported` (a file without adapter settings) trained with --method `method` and its --lora-* `lora`,
    noted. Raises InputError for --method auto, which chooses rather than estimates."""
    if method == "full":
        return imported
    if method == "auto":
        raise InputError(f"--method auto chooses a method; with {FLAGS[imported.tool]} give full, lora or qlora")
    from zero_planner.plan.checks import adapter_lora

    lora = adapter_lora(method, lora)
    targets = lora.target_modules if isinstance(lora.target_modules, str) else ",".join(lora.target_modules)
    note = (f"--method {method}: {GIVEN_BY[imported.tool]} holds no adapter (your script's peft config does): rank "
            f"{lora.r}, alpha {lora.alpha}, dropout {lora.dropout:g}, targets {targets} (--lora-r, --lora-alpha, "
            f"--lora-dropout, --lora-targets)")  # fmt: skip
    return replace(imported, method=method, lora=lora, notes=[*imported.notes, note])


def with_length(imported: ImportedConfig, seq_len: int) -> ImportedConfig:
    """Returns `imported` (a file with no sequence length, and no --seq-len given) at zero-plan's default
    `seq_len`, noted."""
    note = (f"{GIVEN_BY[imported.tool]} has no sequence length: estimated at {seq_len} tokens (zero-plan's default; "
            f"--seq-len N for your data's)")  # fmt: skip
    return replace(imported, seq_len=seq_len, notes=[*imported.notes, note])


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
    if imported.micro_batch_size is None:
        raise ValueError("filled_ds_config needs a micro-batch (choose_micro_batch fills an Accelerate config's)")
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
                f"{key} {given!r} but {GIVEN_BY[imported.tool]} gives {value} "
                f"({yaml_keys[key]}, {world} GPUs); {MISMATCH[imported.tool]}"
            )
        out[key] = value
    for name in ("bf16", "fp16"):
        section = out.get(name)
        if isinstance(section, dict):
            enabled = section.get("enabled", False)
            if enabled != "auto" and bool(enabled) != (precision == name):
                raise InputError(
                    f"{FLAGS[imported.tool]} {imported.path!r}: the DeepSpeed JSON ({imported.ds_config_source}) "
                    f"sets {name}.enabled {str(enabled).lower()} but {GIVEN_BY[imported.tool]} trains in "
                    f"{precision}; {MISMATCH[imported.tool]}"
                )
            section["enabled"] = precision == name
        elif precision == name:
            out[name] = {"enabled": True}
    return out


MISMATCH = {"axolotl": "HF Trainer refuses the mismatch", "llamafactory": "HF Trainer refuses the mismatch",
            "hf_trainer": "HF Trainer refuses the mismatch",
            "accelerate": "make them agree (--micro-batch is your DataLoader's batch_size)"}  # fmt: skip


def _yaml_key_names(tool: str) -> dict[str, str]:
    if tool == "accelerate":
        return {"train_micro_batch_size_per_gpu": "the micro-batch",
                "gradient_accumulation_steps": "deepspeed_config.gradient_accumulation_steps",
                "train_batch_size": "micro-batch x gradient_accumulation_steps x GPUs"}  # fmt: skip
    if tool == "axolotl":
        return {"train_micro_batch_size_per_gpu": "micro_batch_size",
                "gradient_accumulation_steps": "gradient_accumulation_steps",
                "train_batch_size": "micro_batch_size x gradient_accumulation_steps x GPUs"}  # fmt: skip
    return {"train_micro_batch_size_per_gpu": "per_device_train_batch_size",
            "gradient_accumulation_steps": "gradient_accumulation_steps",
            "train_batch_size": "per_device_train_batch_size x gradient_accumulation_steps x GPUs"}  # fmt: skip


def estimate(imported: ImportedConfig, spec, cluster, request):
    """Returns the planner's ConfigEstimate of the imported config (fit without the safety margin): stage,
    offload, precision and buckets from its DeepSpeed JSON, adapter rank and dropout from the file; where the file
    names no micro-batch (Accelerate), the largest that fits under the planner's safety margin. `request` (a
    PlanRequest) gives what the file cannot: the model's name, plan path, weights, step-time constants, the user's
    loop and dataset bytes; the file's sequence length, checkpointing, micro-batch, method and adapters replace its
    fields."""
    from zero_planner.plan.userconfig import estimate_config

    if imported.seq_len is None:
        raise ValueError("estimate needs a sequence length (the CLI fills --seq-len where the file has none)")
    if imported.tool in SEQ_LEN_KEYS and imported.seq_len > spec.max_position_embeddings:
        raise InputError(f"{_where(imported.tool, imported.path, SEQ_LEN_KEYS[imported.tool])} {imported.seq_len} is "
                         f"above {spec.name}'s maximum of {spec.max_position_embeddings} tokens")  # fmt: skip
    _check_processes(imported, cluster)
    if resolve_precision(imported, cluster) == "bf16" and not cluster.gpu.bf16:
        key = "mixed_precision" if imported.tool == "accelerate" else "bf16"
        raise InputError(f"{_where(imported.tool, imported.path, key)}: {cluster.gpu.name} has no bf16; use fp16")
    lora = imported.lora
    if lora is not None:
        from zero_planner.plan.options import lora_for_model

        where = "--lora-dropout" if imported.tool in ADAPTERS_FROM_FLAGS else _where(imported.tool, imported.path,
                                                                                      "lora_dropout")  # fmt: skip
        given = f"{where} {lora.dropout:g}" if lora.dropout else None
        lora = lora_for_model(spec, lora, imported.method, dropout_given=given)

    def at(config: ImportedConfig):
        fields = {"seq_len": config.seq_len, "grad_ckpt": config.gradient_checkpointing, "lora": lora,
                  "micro_batch": config.micro_batch_size, "method": config.method, "task": "causal-lm"}
        return estimate_config(spec, cluster, filled_ds_config(config, cluster), request.but(**fields))

    notes: list[str] = []
    if imported.micro_batch_size is None:
        micro, note = _micro_batch(imported, cluster, lambda m: at(replace(imported, micro_batch_size=m)))
        imported = replace(imported, micro_batch_size=micro)
        notes.append(note)
    est = at(imported)
    if imported.tool == "accelerate":
        notes.append(f"gradient checkpointing is your script's (model.gradient_checkpointing_enable()): estimated "
                     f"{'on' if imported.gradient_checkpointing else 'off'} (--grad-checkpointing / "
                     f"--no-grad-checkpointing)")  # fmt: skip
    if imported.ddp and cluster.world_size > 1:
        notes.append(DDP_NOTE.format(n=cluster.world_size, gpus="processes" if cluster.is_cpu else "GPUs"))
        if not cluster.is_cpu:
            notes.append(DEVICE_MAP_NOTE)
    if imported.ddp and not est.fits:
        notes.append("as DDP every GPU holds the whole model and its optimizer states: zero-plan without "
                     f"{FLAGS[imported.tool]} weighs the ZeRO stages that shard them (and LoRA, QLoRA with --method auto)")  # fmt: skip
    notes += _optimizer_notes(imported, est, cluster)
    json_source = "no DeepSpeed" if imported.ddp else f"DeepSpeed JSON: {imported.ds_config_source}"
    source = f"{NAMES[imported.tool]} config {imported.path} ({json_source})"
    est.plan.notes[:0] = [source, *imported.notes, *notes]
    return est


def _check_processes(imported: ImportedConfig, cluster) -> None:
    """Raises InputError when an Accelerate config's process and machine counts are not --gpus's."""
    if imported.processes is None:
        return
    processes, machines = imported.processes
    if (processes, machines) != (cluster.world_size, cluster.nodes):
        raise InputError(
            f"{FLAGS[imported.tool]} {imported.path!r}: num_processes {processes} on num_machines {machines}, but "
            f"--gpus gives {cluster.world_size} processes on {cluster.nodes} machine{'s' * (cluster.nodes > 1)} "
            f"({cluster.nodes} x {cluster.gpus_per_node}); make them agree"
        )


def _micro_batch(imported: ImportedConfig, cluster, estimate_at) -> tuple[int, str]:
    """Returns (micro-batch, note) for a config without one: the DeepSpeed JSON's concrete
    train_micro_batch_size_per_gpu, else the largest that fits under the planner's safety margins."""
    from zero_planner.plan.fit import gpu_limit_bytes, host_limit_bytes
    from zero_planner.plan.search import MAX_MICRO_BATCH, largest_fitting

    given = imported.ds_config.get("train_micro_batch_size_per_gpu")
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given, f"micro-batch {given}: the DeepSpeed JSON's train_micro_batch_size_per_gpu"

    def fits(micro: int) -> bool:
        est = estimate_at(micro)
        memory = est.option.memory
        return (est.fits and memory.total_bytes <= gpu_limit_bytes(cluster.gpu.memory_bytes)
                and memory.cpu_total_bytes <= host_limit_bytes(cluster.cpu_memory_bytes))  # fmt: skip

    micro = largest_fitting(fits, MAX_MICRO_BATCH)
    if micro == 0:
        return 1, (f"{NAMES[imported.tool]}'s config names no micro-batch (your DataLoader's batch_size): none fits, "
                   f"estimated at 1")  # fmt: skip
    return micro, (f"{NAMES[imported.tool]}'s config names no micro-batch (your DataLoader's batch_size): "
                   f"estimated at {micro}, the largest that fits under the planner's safety margin (up to "
                   f"{MAX_MICRO_BATCH}); --micro-batch N estimates yours")  # fmt: skip


def _optimizer_notes(imported: ImportedConfig, est, cluster) -> list[str]:
    """Returns the note on an optim whose states the estimate does not model (SMALLER_OPTIMIZERS): what it keeps
    and by how much AdamW's fp32 moments, which the estimate counts, overstate it."""
    if imported.optimizer not in SMALLER_OPTIMIZERS:
        return []
    from zero_planner.plan.fit import _gib

    per_param, what = SMALLER_OPTIMIZERS[imported.optimizer]
    strategy, n = est.option.strategy, cluster.world_size
    over = (8 - per_param) * est.plan.model.trainable_params  # AdamW: exp_avg + exp_avg_sq, fp32
    if strategy.offload_optimizer != "none":
        where = f"{_gib(over * cluster.gpus_per_node / n)} of host memory per node"
    else:
        where = f"{_gib(over / (n if strategy.stage > 0 else 1))} per GPU"
    bound = f"an upper bound by up to {where}" if per_param < 8 else "the same size"
    return [f"optim {imported.optimizer} ({what}, at most {per_param:g} B per trainable parameter) is not modelled: "
            f"estimated with AdamW's two fp32 moments (8 B), {bound}"]

"""Hand-off of a plan to other trainers: HF Trainer (TrainingArguments + launch line) and Accelerate (config YAML).

Both write the plan's DeepSpeed JSON unchanged (`plan.deepspeed_config`, concrete values, no "auto") and the
settings of the other tool that must agree with it: HF Trainer's DeepSpeed integration raises on any mismatch
between TrainingArguments and a concrete JSON value (transformers/integrations/deepspeed.py, fill_match), so
batch sizes, accumulation, learning rate, Adam's betas and eps, weight decay, gradient clipping and precision
are all read from that JSON here. With a JSON that has an "optimizer" section, an Accelerate script passes
`accelerate.utils.DummyOptim` to `accelerator.prepare` instead of building its own optimizer.

Pure functions of a Plan (`*_args`, `*_config`) and writers (`write_*`) that return the paths they wrote.
No torch, transformers or accelerate import: the CLI calls these.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from zero_planner.plan import Plan

DS_CONFIG_FILE = "ds_config.json"
TRAINING_ARGS_FILE = "training_args.json"
LAUNCH_FILE = "launch.sh"
LORA_CONFIG_FILE = "lora_config.json"
ACCELERATE_FILE = "accelerate_config.yaml"
USER_SCRIPT = "your_train.py"
PEFT_TASK_TYPES = {"causal-lm": "CAUSAL_LM", "seq-cls": "SEQ_CLS"}


def hf_trainer_args(plan: Plan, ds_config_path: str = DS_CONFIG_FILE) -> dict[str, Any]:
    """Returns keyword arguments for transformers.TrainingArguments that agree with the plan's DeepSpeed JSON.

    The schedule is constant with no warm-up, as zero-run trains (its JSON has no scheduler section).
    """
    ds, t = plan.deepspeed_config, plan.training
    adam = ds.get("optimizer", {}).get("params", {})
    betas = adam.get("betas", [0.9, 0.999])
    args: dict[str, Any] = {
        "output_dir": t.output_dir,
        "per_device_train_batch_size": ds.get("train_micro_batch_size_per_gpu", t.micro_batch_size),
        "gradient_accumulation_steps": ds.get("gradient_accumulation_steps", t.gradient_accumulation_steps),
        "max_steps": t.max_steps,
        "learning_rate": adam.get("lr", t.learning_rate),
        "weight_decay": adam.get("weight_decay", 0.0),
        "adam_beta1": betas[0],
        "adam_beta2": betas[1],
        "adam_epsilon": adam.get("eps", 1e-8),
        "max_grad_norm": ds.get("gradient_clipping", 1.0),
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "bf16": bool(ds.get("bf16", {}).get("enabled", False)),
        "fp16": bool(ds.get("fp16", {}).get("enabled", False)),
        "gradient_checkpointing": t.gradient_checkpointing,
        "deepspeed": ds_config_path,
        "save_steps": t.save_every,
        "logging_steps": t.log_every,
        "seed": t.seed,
    }
    if t.gradient_checkpointing:
        # Non-reentrant checkpointing, as zero-run measures it; also what LoRA needs with a frozen base.
        args["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    return args


def lora_config(plan: Plan) -> dict[str, Any] | None:
    """Returns peft.LoraConfig keyword arguments for a lora/qlora plan (None for full fine-tuning)."""
    t = plan.training
    if t.method == "full":
        return None
    lora = t.lora
    r, alpha, dropout, targets = (16, 32, 0.05, "all-linear") if lora is None else (
        lora.r, lora.alpha, lora.dropout, lora.target_modules)  # fmt: skip
    return {"r": r, "lora_alpha": alpha, "lora_dropout": dropout, "target_modules": targets,
            "task_type": PEFT_TASK_TYPES[t.task]}  # fmt: skip


def hf_trainer_launch(plan: Plan, ds_config_path: str = DS_CONFIG_FILE, script: str = USER_SCRIPT) -> list[str]:
    """Returns the launch line as an argument list: the `deepspeed` launcher (as zero-run builds it), the
    user's script, `--deepspeed JSON` and every TrainingArguments value as an HfArgumentParser flag."""
    from zero_planner.launch import build_launch

    args = hf_trainer_args(plan, ds_config_path)
    flags: list[str] = []
    for key, value in args.items():
        if key == "deepspeed":
            continue  # placed by build_launch right after the script
        if isinstance(value, (dict, list)):
            value = json.dumps(value)  # TrainingArguments parses JSON strings for its dict fields
        flags += [f"--{key}", str(value)]
    hostfile = "hostfile" if plan.hardware.nodes > 1 else None
    argv, env = build_launch(
        plan, plan_path="", script=script, script_args=flags, hostfile=hostfile, config_flag="--deepspeed"
    )
    # build_launch names the JSON under the plan's output_dir (zero-run --script writes it there); here the
    # JSON is the one written beside this launch line.
    argv[argv.index("--deepspeed") + 1] = ds_config_path
    return [*(f"{k}={v}" for k, v in sorted(env.items())), *argv] if env else argv


def write_hf_trainer(plan: Plan, out_dir: str | Path, script: str = USER_SCRIPT) -> list[Path]:
    """Writes ds_config.json, training_args.json, launch.sh (and lora_config.json for LoRA) into `out_dir`;
    returns their paths. The JSON path inside the other files is the one written here."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ds_path = out / DS_CONFIG_FILE
    written = [_write(ds_path, json.dumps(plan.deepspeed_config, indent=2) + "\n")]
    args = hf_trainer_args(plan, str(ds_path))
    written.append(_write(out / TRAINING_ARGS_FILE, json.dumps(args, indent=2) + "\n"))
    line = shlex.join(hf_trainer_launch(plan, str(ds_path), script))
    header = (f"#!/bin/sh\n# Written by zero-plan for {plan.model.name}: replace {script} with your HF Trainer "
              f"script (HfArgumentParser reads these flags).\n")  # fmt: skip
    launch = _write(out / LAUNCH_FILE, header + line + "\n")
    launch.chmod(0o755)
    written.append(launch)
    lora = lora_config(plan)
    if lora is not None:
        written.append(_write(out / LORA_CONFIG_FILE, json.dumps(lora, indent=2) + "\n"))
    return written


def accelerate_config(plan: Plan, ds_config_path: str = DS_CONFIG_FILE) -> dict[str, Any]:
    """Returns an Accelerate config (as `accelerate config` writes it) using the DeepSpeed plugin with the plan's
    JSON. Precision, accumulation, clipping and ZeRO stage live in the JSON only: Accelerate refuses a config
    that sets them beside a deepspeed_config_file (utils/dataclasses.py, _deepspeed_config_checks)."""
    hw, ds = plan.hardware, plan.deepspeed_config
    stage = ds.get("zero_optimization", {}).get("stage", 0)
    mixed = "bf16" if ds.get("bf16", {}).get("enabled") else "fp16" if ds.get("fp16", {}).get("enabled") else "no"
    plugin: dict[str, Any] = {"deepspeed_config_file": ds_config_path, "zero3_init_flag": stage == 3}
    if hw.nodes > 1:
        plugin["deepspeed_hostfile"] = "hostfile"
        plugin["deepspeed_multinode_launcher"] = "pdsh"
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "DEEPSPEED",
        "deepspeed_config": plugin,
        "downcast_bf16": "no",
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": mixed,  # must agree with the JSON; Accelerate reads the JSON's section
        "num_machines": hw.nodes,
        "num_processes": hw.world_size,  # all processes over all machines
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if hw.nodes > 1:
        config["main_process_port"] = 29500
    return config


def write_accelerate(plan: Plan, out_dir: str | Path) -> list[Path]:
    """Writes ds_config.json and accelerate_config.yaml into `out_dir`; returns their paths.

    Use: accelerate launch --config_file OUT/accelerate_config.yaml your_train.py
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ds_path = out / DS_CONFIG_FILE
    written = [_write(ds_path, json.dumps(plan.deepspeed_config, indent=2) + "\n")]
    # Absolute: accelerate resolves deepspeed_config_file against the cwd of `accelerate launch`, not the YAML's.
    written.append(_write(out / ACCELERATE_FILE, to_yaml(accelerate_config(plan, str(ds_path.resolve())))))
    return written


def to_yaml(data: dict[str, Any]) -> str:
    """Returns YAML text for a dict of scalars and nested dicts: PyYAML where installed (a transformers
    dependency), else a small emitter for exactly this shape (strings JSON-quoted, which YAML accepts)."""
    try:
        import yaml
    except ImportError:
        return "".join(_yaml_lines(data, 0))
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _yaml_lines(data: dict[str, Any], indent: int):
    pad = "  " * indent
    for key, value in data.items():
        if isinstance(value, dict):
            yield f"{pad}{key}:\n"
            yield from _yaml_lines(value, indent + 1)
        elif isinstance(value, bool):
            yield f"{pad}{key}: {'true' if value else 'false'}\n"
        elif value is None:
            yield f"{pad}{key}: null\n"
        elif isinstance(value, (int, float)):
            yield f"{pad}{key}: {value}\n"
        else:
            yield f"{pad}{key}: {json.dumps(str(value))}\n"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path

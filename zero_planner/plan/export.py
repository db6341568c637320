"""Hand-off of a plan to other trainers: HF Trainer (TrainingArguments + launch line), Accelerate (config YAML),
Axolotl and LLaMA-Factory (their training YAML + the command) and TRL (an SFTTrainer script + launch line).

Both write the plan's DeepSpeed JSON unchanged (`plan.deepspeed_config`, concrete values, no "auto") and the
settings of the other tool that must agree with it: HF Trainer's DeepSpeed integration raises on any mismatch
between TrainingArguments and a concrete JSON value (transformers/integrations/deepspeed.py, fill_match), so
batch sizes, accumulation, learning rate, Adam's betas and eps, weight decay, gradient clipping and precision
are all read from that JSON here. With a JSON that has an "optimizer" section, an Accelerate script passes
`accelerate.utils.DummyOptim` to `accelerator.prepare` instead of building its own optimizer.

Axolotl and LLaMA-Factory train through HF Trainer too, so the same agreement holds for their YAML: every
value the JSON fixes is written with the tool's own key name (zero_planner/catalog/tool_keys.json lists the
keys each tool accepts, from its source). A plan setting a tool has no key for is listed as a comment at the
top of its YAML and in the NOTES file (`unmapped`), never dropped silently.

Pure functions of a Plan (`*_args`, `*_config`) and writers (`write_*`) that return the paths they wrote.
No torch, transformers or accelerate import: the CLI calls these.
"""

from __future__ import annotations

import json
import pprint
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zero_planner.plan.command import Rendezvous, build_launch
from zero_planner.planfile import CPU_DEVICE, FILE_BUILDERS, Plan

DS_CONFIG_FILE = "ds_config.json"
TRAINING_ARGS_FILE = "training_args.json"
LAUNCH_FILE = "launch.sh"
LORA_CONFIG_FILE = "lora_config.json"
ACCELERATE_FILE = "accelerate_config.yaml"
USER_SCRIPT = "your_train.py"
AXOLOTL_FILE = "axolotl.yml"
LLAMAFACTORY_FILE = "llamafactory.yaml"
TRL_SCRIPT = "train_sft.py"
COMMAND_FILE = "command.sh"
DATASET_PLACEHOLDER = "REPLACE_WITH_YOUR_DATASET"
PEFT_TASK_TYPES = {"causal-lm": "CAUSAL_LM", "seq-cls": "SEQ_CLS"}


def hf_trainer_args(plan: Plan, ds_config_path: str = DS_CONFIG_FILE) -> dict[str, Any]:
    """Returns keyword arguments for transformers.TrainingArguments that agree with the plan's DeepSpeed JSON and
    carry the rest of what the user gave zero-plan, as zero-run trains it: the length (steps, or epochs with
    max_steps -1), the schedule and warm-up (a float below 1 is a ratio in both), the save policy and its limit,
    evaluation every eval_every steps or at each save (the script passes the eval dataset: the split is the
    script's), and the monitors. The JSON has no scheduler section, so Trainer builds the schedule named here."""
    ds, t = plan.deepspeed_config, plan.training
    adam = ds.get("optimizer", {}).get("params", {})
    betas = adam.get("betas", [0.9, 0.999])
    args: dict[str, Any] = {
        "output_dir": t.output_dir,
        "per_device_train_batch_size": ds.get("train_micro_batch_size_per_gpu", t.micro_batch_size),
        "gradient_accumulation_steps": ds.get("gradient_accumulation_steps", t.gradient_accumulation_steps),
        "max_steps": t.max_steps if t.epochs is None else -1,
        "learning_rate": adam.get("lr", t.learning_rate),
        "weight_decay": adam.get("weight_decay", 0.0),
        "adam_beta1": betas[0],
        "adam_beta2": betas[1],
        "adam_epsilon": adam.get("eps", 1e-8),
        "max_grad_norm": ds.get("gradient_clipping", 1.0),
        "lr_scheduler_type": t.lr_scheduler if t.lr_scheduler != "constant" or not t.warmup else "constant_with_warmup",
        "warmup_steps": t.warmup,
        "bf16": bool(ds.get("bf16", {}).get("enabled", False)),
        "fp16": bool(ds.get("fp16", {}).get("enabled", False)),
        "gradient_checkpointing": t.gradient_checkpointing,
        "deepspeed": ds_config_path,
        # --save final: Trainer saves no checkpoint and the script's trainer.save_model() writes the model
        "save_strategy": "steps" if t.save == "steps" else "no",
        "save_steps": t.save_every,
        "save_total_limit": t.save_total_limit,
        "eval_strategy": "steps" if t.eval_split else "no",
        "logging_steps": t.log_every,
        "report_to": list(t.report_to) or "none",
        "seed": t.seed,
    }
    if t.epochs is not None:
        args["num_train_epochs"] = t.epochs
    if t.eval_split:
        args["eval_steps"] = t.eval_every or t.save_every  # zero-run evaluates at each save without eval_every
    if t.gradient_checkpointing:
        # Non-reentrant checkpointing, as zero-run measures it; also what LoRA needs with a frozen base.
        args["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if plan.hardware.gpu == CPU_DEVICE:
        # On a torch without an accelerator, Accelerate's PartialState finds no distributed backend unless told
        # cpu (state.py, _prepare_backend): each rank the deepspeed launcher starts then counts a world of 1 and
        # Trainer refuses the JSON's train_batch_size (micro x accumulation x 2 ranks). With use_cpu the ranks
        # join one gloo group and Trainer still trains through DeepSpeed (it builds its Accelerator without cpu).
        args["use_cpu"] = True
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


CPU_ZERO3_NOTE = ("CPU processes at ZeRO-3: call deepspeed.init_distributed() before building the model (zero.Init "
                  "counts the ranks through DeepSpeed's own comm, which the ranks' torch gloo group leaves unset)")
"""What a script must add for a cpu:N plan at stage 3 (launch.sh, command.sh; train_sft.py does it itself)."""

CPU_EXIT_NOTE = ("CPU processes: end with {call}, as torch's docs ask (a rank still in its gloo group at interpreter "
                 "exit can abort after training: \"terminate called without an active exception\", exit 250)")
"""What a script must add for a cpu:N plan, at its end (launch.sh, command.sh; train_sft.py does it itself). Seen in
fresh-clone CI: the TRL launch once in two runs (before train_sft.py left the group), the HF Trainer launch at stage 3
once in five (2026-12-07); gloo's worker threads are still joinable when the interpreter is torn down
(pytorch/pytorch#190489). Accelerate's end_training() destroys the group."""


def _cpu_zero3(plan: Plan) -> bool:
    """Returns True for a cpu:N plan at stage 3. Under HF Trainer (use_cpu) or Accelerate (PartialState(cpu=True))
    the ranks join torch's gloo group, not DeepSpeed's comm; a model built under zero.Init before DeepSpeed's comm
    is set up reads a world of 1 (runtime/config.py: dist.get_world_size() fails, world_size = 1) and DeepSpeed
    stops at its train_batch_size assertion (4 != 2 * 1 * 1). deepspeed.init_distributed() adopts the gloo group."""
    return plan.hardware.gpu == CPU_DEVICE and plan.deepspeed_config.get("zero_optimization", {}).get("stage") == 3


def hf_trainer_launch(plan: Plan, ds_config_path: str = DS_CONFIG_FILE, script: str = USER_SCRIPT) -> list[str]:
    """Returns the launch line as an argument list: the `deepspeed` launcher (as zero-run builds it), the
    user's script, `--deepspeed JSON` and every TrainingArguments value as an HfArgumentParser flag."""
    args = hf_trainer_args(plan, ds_config_path)
    flags: list[str] = []
    for key, value in args.items():
        if key == "deepspeed":
            continue  # placed by build_launch right after the script
        if isinstance(value, list):  # report_to: HfArgumentParser takes one name for it (launch.sh says so)
            value = value[0]
        if isinstance(value, dict):
            value = json.dumps(value)  # TrainingArguments parses JSON strings for its dict fields
        flags += [f"--{key}", str(value)]
    hostfile = "hostfile" if plan.hardware.nodes > 1 else None
    argv, env = build_launch(plan, plan_path="", script=script, script_args=flags, config_flag="--deepspeed",
                             where=Rendezvous(hostfile=hostfile))  # fmt: skip
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
    # Absolute (as every path written into a hand-off file): launch.sh runs from any directory.
    ds_path = ds_path.resolve()
    args = hf_trainer_args(plan, str(ds_path))
    written.append(_write(out / TRAINING_ARGS_FILE, json.dumps(args, indent=2) + "\n"))
    line = shlex.join(hf_trainer_launch(plan, str(ds_path), script))
    header = (f"#!/bin/sh\n# Written by zero-plan for {plan.model.name}: replace {script} with your HF Trainer "
              f"script (HfArgumentParser reads these flags).\n")  # fmt: skip
    if len(plan.training.report_to) > 1:
        header += (f"# --report_to takes one name on a command line: training_args.json has them all "
                   f"({', '.join(plan.training.report_to)}).\n")  # fmt: skip
    if _cpu_zero3(plan):
        header += f"# {script}: {CPU_ZERO3_NOTE}.\n"
    if plan.hardware.gpu == CPU_DEVICE:
        header += f"# {script}: {CPU_EXIT_NOTE.format(call='torch.distributed.destroy_process_group()')}.\n"
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
    that sets them beside a deepspeed_config_file (utils/dataclasses.py, _deepspeed_config_checks), and
    `accelerate launch` counts a mixed_precision key in the file among them, whatever its value (commands/launch.py:
    mp_from_config_flag), so the file has none: without it Accelerate takes the JSON's bf16/fp16 section."""
    hw, ds = plan.hardware, plan.deepspeed_config
    stage = ds.get("zero_optimization", {}).get("stage", 0)
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
        "num_machines": hw.nodes,
        "num_processes": hw.world_size,  # all processes over all machines
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if hw.nodes > 1:
        config["main_process_port"] = 29500
    return config


def accelerate_launch(plan: Plan, config_path: str) -> list[str]:
    """Returns `accelerate launch --config_file CONFIG your_train.py`, under the allocator setting the plan assumes;
    for a cpu:N plan under DS_ACCELERATOR=cpu, as zero-run and the other hand-offs launch it (DeepSpeed otherwise
    takes a GPU where the machine has one)."""
    env = ["env", "DS_ACCELERATOR=cpu"] if plan.hardware.gpu == CPU_DEVICE else _allocator_env(plan)
    return [*env, "accelerate", "launch", "--config_file", config_path, "your_train.py"]


def accelerate_notes(plan: Plan) -> list[str]:
    """Returns what the user's script must do for the JSON to hold (command.sh's comments): Accelerate refuses an
    optimizer built in code beside the JSON's optimizer section (accelerator.py, _prepare_deepspeed: "You cannot
    specify an optimizer in the config file and in the code at the same time"), and the JSON fixes the batch. With
    accumulation, Accelerate (1.16) marks DeepSpeed's accumulation boundary from its own sync_gradients
    (utils/deepspeed.py, DeepSpeedEngineWrapper.backward), which only `accelerator.accumulate(model)` advances: a
    loop without it steps the optimizer at every micro-batch.

    The section stays: it carries the plan's AdamW settings (the JSON is the one source of lr, betas, eps and
    weight decay) and ZeRO-Offload trains only with DeepSpeed's own CPU Adam (engine.py refuses a torch optimizer
    under offload_optimizer unless zero_force_ds_cpu_optimizer is false). Checked by a real launch on CPU
    (tests/test_export_launch_cpu.py), where a cpu:N plan needs one more line: Accelerate finds no distributed
    backend on a torch without an accelerator unless told cpu (state.py, _prepare_backend), so each rank would
    count num_processes 1 and read the whole DataLoader; `use_cpu: true` in the YAML is no way out, since
    `accelerate launch` then skips DeepSpeed (launch.py: `use_deepspeed and not args.cpu`)."""
    ds = plan.deepspeed_config
    accumulation = ds.get("gradient_accumulation_steps", 1)
    notes = [f"your_train.py: a DataLoader of batch_size={ds['train_micro_batch_size_per_gpu']} per process; "
             f"DeepSpeed accumulates {accumulation} micro-batches per step"]  # fmt: skip
    if accumulation > 1:
        notes.append("your_train.py: each micro-batch's forward, backward and step inside `with "
                     "accelerator.accumulate(model):` (Accelerate takes the JSON's accumulation; without the context "
                     "DeepSpeed's optimizer steps at every micro-batch)")  # fmt: skip
    if "optimizer" in ds:
        notes.append("your_train.py: the JSON has an optimizer section (the plan's AdamW), so build none in code: "
                     "pass accelerate.utils.DummyOptim(model.parameters()) to accelerator.prepare")  # fmt: skip
    if plan.hardware.gpu == CPU_DEVICE:
        notes.append("your_train.py: CPU processes: call accelerate.PartialState(cpu=True) before Accelerator(), or "
                     "each rank counts num_processes 1 and reads every batch (DeepSpeed still trains)")  # fmt: skip
    if _cpu_zero3(plan):
        notes.append(f"your_train.py: {CPU_ZERO3_NOTE}")
    if plan.hardware.gpu == CPU_DEVICE:
        call = "accelerator.end_training() (it destroys the process group)"
        notes.append(f"your_train.py: {CPU_EXIT_NOTE.format(call=call)}")
    if "scheduler" in ds:
        notes.append("your_train.py: the JSON has a scheduler section: pass accelerate.utils.DummyScheduler(optimizer)")
    return notes


def write_accelerate(plan: Plan, out_dir: str | Path) -> list[Path]:
    """Writes ds_config.json, accelerate_config.yaml and command.sh (`accelerate launch`, with what the script must
    do as comments) into `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ds_path = out / DS_CONFIG_FILE
    written = [_write(ds_path, json.dumps(plan.deepspeed_config, indent=2) + "\n")]
    # Absolute: accelerate resolves deepspeed_config_file against the cwd of `accelerate launch`, not the YAML's.
    config_path = out / ACCELERATE_FILE
    written.append(_write(config_path, to_yaml(accelerate_config(plan, str(ds_path.resolve())))))
    launch = accelerate_launch(plan, str(config_path.resolve()))  # absolute: command.sh runs from any directory
    command = _write(out / COMMAND_FILE, _command_text(plan, "Accelerate", [launch], [], notes=accelerate_notes(plan)))
    command.chmod(0o755)
    written.append(command)
    return written


# --- Axolotl, LLaMA-Factory, TRL ---------------------------------------------------------------------------


def _optimizer_values(plan: Plan) -> dict[str, Any]:
    """Returns the optimizer values the plan's JSON fixes (HF's fill_match checks each against the trainer's)."""
    ds = plan.deepspeed_config
    adam = ds.get("optimizer", {}).get("params", {})
    betas = adam.get("betas", [0.9, 0.999])
    return {
        "learning_rate": adam.get("lr", plan.training.learning_rate),
        "weight_decay": adam.get("weight_decay", 0.0),
        "adam_beta1": betas[0],
        "adam_beta2": betas[1],
        "adam_epsilon": adam.get("eps", 1e-8),
        "max_grad_norm": ds.get("gradient_clipping", 1.0),
    }


def _common_unmapped(plan: Plan, tool: str) -> list[str]:
    """Returns the plan settings no training YAML of `tool` can carry, one line each."""
    t, m = plan.training, plan.model
    lines = []
    if t.dataset == "synthetic":
        lines.append(f"training.dataset synthetic (zero-run's random tokens): no {tool} counterpart; "
                     f"replace {DATASET_PLACEHOLDER} with your dataset")  # fmt: skip
    if m.init == "random":
        lines.append(f"model.init random (zero-run initialises a config-only model randomly): {tool} loads "
                     f"pretrained weights from the model name")  # fmt: skip
    if plan.hardware.nodes > 1:
        lines.append(f"hardware.nodes {plan.hardware.nodes}: run the command on every node (see the command file)")
    return lines


def axolotl_config(plan: Plan, ds_config_path: str = DS_CONFIG_FILE) -> tuple[dict[str, Any], list[str]]:
    """Returns (Axolotl YAML as a dict, the plan settings it cannot carry). Key names: Axolotl's input schema
    (src/axolotl/utils/schemas/*.py); its trainer is HF Trainer, so the JSON's values are repeated exactly."""
    t = plan.training
    unmapped = _common_unmapped(plan, "Axolotl")
    config: dict[str, Any] = {"base_model": plan.model.name}
    if t.method != "full":
        lora = lora_config(plan) or {}
        config["adapter"] = t.method  # lora | qlora
        if t.method == "qlora":
            config["load_in_4bit"] = True  # bitsandbytes NF4 with double quantisation, as zero-run's QLoRA
        config["lora_r"] = lora["r"]
        config["lora_alpha"] = lora["lora_alpha"]
        config["lora_dropout"] = lora["lora_dropout"]
        if lora["target_modules"] == "all-linear":
            config["lora_target_linear"] = True
        else:
            config["lora_target_modules"] = list(lora["target_modules"])
    if t.task != "causal-lm":
        unmapped.append(f"training.task {t.task} (num_labels {t.num_labels}): Axolotl trains causal LMs; not mapped")
    dataset = DATASET_PLACEHOLDER if t.dataset == "synthetic" else t.dataset
    config["datasets"] = [{"path": dataset, "type": "completion", "field": t.text_field}]
    config["sequence_len"] = t.seq_len
    # The attention zero-plan's activations assume. Axolotl's own key for it: `sdp_attention: true` is deprecated
    # there in favour of attn_implementation (the importer reads both).
    config["attn_implementation"] = t.attn_implementation
    config["micro_batch_size"] = t.micro_batch_size
    config["gradient_accumulation_steps"] = t.gradient_accumulation_steps
    config["max_steps"] = t.max_steps
    config.update(_optimizer_values(plan))
    config["lr_scheduler"] = "constant"  # the JSON has no scheduler, as zero-run trains
    config["warmup_steps"] = 0
    config["bf16"] = t.precision == "bf16"
    config["fp16"] = t.precision == "fp16"
    config["gradient_checkpointing"] = t.gradient_checkpointing
    if t.gradient_checkpointing:
        config["gradient_checkpointing_kwargs"] = {"use_reentrant": False}  # as zero-run measures it
    config["deepspeed"] = ds_config_path
    config["output_dir"] = t.output_dir
    config["save_steps"] = t.save_every
    config["logging_steps"] = t.log_every
    config["seed"] = t.seed
    unmapped.append("num_epochs: the plan has max_steps (written) and no epoch count")
    return config, unmapped


def llamafactory_config(plan: Plan, ds_config_path: str = DS_CONFIG_FILE) -> tuple[dict[str, Any], list[str]]:
    """Returns (LLaMA-Factory `llamafactory-cli train` YAML as a dict, the plan settings it cannot carry). Key
    names: LLaMA-Factory's hparams dataclasses and HF Seq2SeqTrainingArguments. Gradient checkpointing is on
    by default there: the key is `disable_gradient_checkpointing`."""
    t = plan.training
    unmapped = _common_unmapped(plan, "LLaMA-Factory")
    config: dict[str, Any] = {"model_name_or_path": plan.model.name}
    if t.task != "causal-lm":
        unmapped.append(f"training.task {t.task} (num_labels {t.num_labels}): LLaMA-Factory's stages train causal "
                        f"LMs (rm adds a value head, not a classifier); not mapped")  # fmt: skip
    # pt: loss on every token of plain text, zero-run's objective; sft with a chat template takes the same memory.
    config["stage"] = "pt"
    config["do_train"] = True
    config["finetuning_type"] = "full" if t.method == "full" else "lora"
    if t.method != "full":
        lora = lora_config(plan) or {}
        config["lora_rank"] = lora["r"]
        config["lora_alpha"] = lora["lora_alpha"]
        config["lora_dropout"] = lora["lora_dropout"]
        targets = lora["target_modules"]
        config["lora_target"] = "all" if targets == "all-linear" else ",".join(targets)
        if t.method == "qlora":
            config["quantization_bit"] = 4
            config["quantization_method"] = "bnb"
    config["deepspeed"] = ds_config_path
    config["dataset"] = DATASET_PLACEHOLDER if t.dataset == "synthetic" else t.dataset
    config["cutoff_len"] = t.seq_len
    config["flash_attn"] = "sdpa" if t.attn_implementation == "sdpa" else "disabled"
    config["output_dir"] = t.output_dir
    config["logging_steps"] = t.log_every
    config["save_steps"] = t.save_every
    config["overwrite_output_dir"] = True
    config["per_device_train_batch_size"] = t.micro_batch_size
    config["gradient_accumulation_steps"] = t.gradient_accumulation_steps
    config["max_steps"] = t.max_steps
    config.update(_optimizer_values(plan))
    config["lr_scheduler_type"] = "constant"
    config["warmup_steps"] = 0
    config["bf16"] = t.precision == "bf16"
    config["fp16"] = t.precision == "fp16"
    config["disable_gradient_checkpointing"] = not t.gradient_checkpointing
    config["seed"] = t.seed
    if t.dataset != "synthetic":
        unmapped.append(f"training.text_field {t.text_field}: LLaMA-Factory names columns in dataset_info.json")
    unmapped.append("num_train_epochs: the plan has max_steps (written) and no epoch count")
    return config, unmapped


def _command_text(plan: Plan, tool: str, lines: list[list[str]], unmapped: list[str], *,
                  notes: Sequence[str] = ()) -> str:  # fmt: skip
    header = [f"#!/bin/sh", f"# Written by zero-plan for {plan.model.name}: train with {tool} on this plan."]
    header += [f"# not mapped: {line}" for line in unmapped] + [f"# {line}" for line in notes]
    return "\n".join(header + [shlex.join(line) for line in lines]) + "\n"


def _allocator_env(plan: Plan) -> list[str]:
    """Returns `env PYTORCH_CUDA_ALLOC_CONF=...` for GPU plans: the memory plan assumes expandable segments
    (memory.ALLOC_CONF), which zero-run sets and another launcher must too; nothing for CPU plans."""
    from zero_planner.plan.memory import ALLOC_CONF

    return [] if plan.hardware.gpu == CPU_DEVICE else ["env", f"PYTORCH_CUDA_ALLOC_CONF={ALLOC_CONF}"]


def axolotl_command(plan: Plan, config_path: str) -> list[list[str]]:
    """Returns the command lines: `axolotl train CONFIG` with torchrun pinned to the plan's GPUs per node."""
    hw = plan.hardware
    torchrun = ["--nproc_per_node", str(hw.gpus_per_node)]
    if hw.nodes > 1:
        torchrun += ["--nnodes", str(hw.nodes), "--node_rank", "$NODE_RANK", "--rdzv_endpoint", "$MASTER_ADDR:29500"]
    return [[*_allocator_env(plan), "axolotl", "train", config_path, "--launcher", "torchrun", "--", *torchrun]]


def llamafactory_command(plan: Plan, config_path: str) -> list[list[str]]:
    """Returns the command: `llamafactory-cli train CONFIG` under torchrun (FORCE_TORCHRUN, NPROC_PER_NODE and, on
    several nodes, NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT: the variables of llamafactory/launcher.py)."""
    hw = plan.hardware
    env = ["env", *_allocator_env(plan)[1:], "FORCE_TORCHRUN=1", f"NPROC_PER_NODE={hw.gpus_per_node}"]
    if hw.nodes > 1:
        env += [f"NNODES={hw.nodes}", "NODE_RANK=$NODE_RANK", "MASTER_ADDR=$MASTER_ADDR", "MASTER_PORT=29500"]
    return [[*env, "llamafactory-cli", "train", config_path]]


def _write_tool(plan: Plan, out_dir: str | Path, tool: str, file_name: str, build, command) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ds_path = out / DS_CONFIG_FILE
    written = [_write(ds_path, json.dumps(plan.deepspeed_config, indent=2) + "\n")]
    # Absolute: both tools open the JSON relative to the directory they are started from.
    config, unmapped = build(plan, str(ds_path.resolve()))
    comments = "".join(f"# not mapped: {line}\n" for line in unmapped)
    config_path = out / file_name
    written.append(_write(config_path, f"# Written by zero-plan for {plan.model.name}\n" + comments + to_yaml(config)))
    # The config by its absolute path: command.sh runs from any directory (the YAML names the JSON the same way).
    script = _write(out / COMMAND_FILE, _command_text(plan, tool, command(plan, str(config_path.resolve())), unmapped))
    script.chmod(0o755)
    written.append(script)
    return written


def write_axolotl(plan: Plan, out_dir: str | Path) -> list[Path]:
    """Writes ds_config.json, axolotl.yml and command.sh into `out_dir`; returns their paths."""
    return _write_tool(plan, out_dir, "Axolotl", AXOLOTL_FILE, axolotl_config, axolotl_command)


def write_llamafactory(plan: Plan, out_dir: str | Path) -> list[Path]:
    """Writes ds_config.json, llamafactory.yaml and command.sh into `out_dir`; returns their paths."""
    return _write_tool(plan, out_dir, "LLaMA-Factory", LLAMAFACTORY_FILE, llamafactory_config, llamafactory_command)


def trl_config(plan: Plan, ds_config_path: str = DS_CONFIG_FILE) -> dict[str, Any]:
    """Returns keyword arguments for trl.SFTConfig: the TrainingArguments of hf_trainer_args plus the sequence
    length (SFTConfig's max_length) and the dataset's text column."""
    args = hf_trainer_args(plan, ds_config_path)
    if not _eval_share(plan):
        args["eval_strategy"] = "no"  # a split name or file: command.sh names it (trl_unmapped)
        args.pop("eval_steps", None)
    args["max_length"] = plan.training.seq_len
    args["dataset_text_field"] = plan.training.text_field
    args["packing"] = False  # one sample per sequence, as the plan's activations assume
    return args


def trl_script(plan: Plan, ds_config_path: str = DS_CONFIG_FILE) -> str:
    """Returns a short SFTTrainer script with the plan's settings (SFTConfig and, for LoRA, peft's LoraConfig)."""
    t = plan.training
    dataset = DATASET_PLACEHOLDER if t.dataset == "synthetic" else t.dataset
    lines = [
        f'"""SFT with TRL on the zero-plan plan for {plan.model.name}. Launch with command.sh."""',
        "from datasets import load_dataset",
        "from trl import SFTConfig, SFTTrainer",
    ]
    lora = lora_config(plan)
    if lora is not None:
        lines.append("from peft import LoraConfig")
    lines += ["", f"config = SFTConfig(**{pprint.pformat(trl_config(plan, ds_config_path), sort_dicts=False)})"]
    model_kwargs = []
    if t.precision in ("bf16", "fp16"):
        model_kwargs.append(f'"dtype": "{"bfloat16" if t.precision == "bf16" else "float16"}"')
    if t.attn_implementation:
        model_kwargs.append(f'"attn_implementation": "{t.attn_implementation}"')
    if t.method == "qlora":
        lines.insert(3, "from transformers import BitsAndBytesConfig")
        model_kwargs.append('"quantization_config": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", '
                            'bnb_4bit_use_double_quant=True)')  # fmt: skip
    lines.append("config.model_init_kwargs = {" + ", ".join(model_kwargs) + "}")
    if lora is not None:
        lines.append(f"peft_config = LoraConfig(**{pprint.pformat(lora, sort_dicts=False)})")
    lines.append(f"dataset = {load_dataset_call(dataset)}")
    if _cpu_zero3(plan):  # before SFTTrainer builds the model under zero.Init (_cpu_zero3 says why)
        lines.insert(1, "import deepspeed")
        lines.append("deepspeed.init_distributed()")
    datasets = "train_dataset=dataset"
    share = _eval_share(plan)
    if share is not None:  # held out of the training rows as zero-run holds them out (a share, or a row count)
        lines.append(f"held_out = dataset.train_test_split(test_size={share!r}, seed={t.seed})")
        datasets = 'train_dataset=held_out["train"], eval_dataset=held_out["test"]'
    lines += [
        f"trainer = SFTTrainer(model={plan.model.name!r}, args=config, {datasets}"
        + (", peft_config=peft_config)" if lora is not None else ")"),
        "trainer.train()",
        # Leave the process group before exit (CPU_EXIT_NOTE says why; harmless where the backend is NCCL).
        "import torch.distributed as dist",
        "if dist.is_initialized():",
        "    dist.destroy_process_group()",
    ]
    return "\n".join(lines) + "\n"


def load_dataset_call(spec: str) -> str:
    """Returns the `datasets.load_dataset(...)` call (Python source) that reads the training rows of
    `training.dataset` as zero-run reads them: a local file or glob through its builder (`load_dataset("json",
    data_files=...)`: a file path alone is no dataset to `datasets`, which looks for a folder of that name), a
    folder as datasets infers it from its files, a hub `name:config` as the name and the config."""
    suffix = Path(spec).suffix
    if suffix in FILE_BUILDERS and (spec.startswith((".", "/", "~")) or any(ch in spec for ch in "*?[")
                                    or Path(spec).expanduser().exists()):  # fmt: skip
        return f"load_dataset({FILE_BUILDERS[suffix]!r}, data_files={spec!r}, split=\"train\")"
    name, _, config = spec.partition(":")
    if config and not spec.startswith((".", "/", "~")):
        return f"load_dataset({name!r}, {config!r}, split=\"train\")"
    return f"load_dataset({spec!r}, split=\"train\")"


def _eval_share(plan: Plan) -> float | int | None:
    """Returns --eval-split as datasets' train_test_split test_size (a share below 1, else a row count), or None
    without one or where it names a split or a file."""
    split = plan.training.eval_split
    if split is None:
        return None
    try:
        value = float(split)
    except ValueError:
        return None
    return value if value < 1 else int(value)


def trl_unmapped(plan: Plan) -> list[str]:
    """Returns the plan settings train_sft.py does not carry (command.sh's comments)."""
    lines = _common_unmapped(plan, "TRL")
    if plan.training.task != "causal-lm":
        lines.append(f"training.task {plan.training.task} (num_labels {plan.training.num_labels}): SFTTrainer trains "
                     f"causal LMs; --export hf-trainer carries a classification plan to Trainer")  # fmt: skip
    if plan.training.eval_split is not None and _eval_share(plan) is None:
        lines.append(f"training.eval_split {plan.training.eval_split}: load it as eval_dataset in train_sft.py "
                     f"(SFTConfig evaluates nothing until then)")  # fmt: skip
    return lines


def trl_launch(plan: Plan, script: str = TRL_SCRIPT) -> list[str]:
    """Returns the launch line: the `deepspeed` launcher as zero-run builds it, then the script (which names its
    DeepSpeed JSON in SFTConfig itself)."""
    hostfile = "hostfile" if plan.hardware.nodes > 1 else None
    argv, env = build_launch(plan, plan_path="", script=script, config_flag="--deepspeed",
                             where=Rendezvous(hostfile=hostfile))  # fmt: skip
    argv = argv[: argv.index(script) + 1]
    return [*(f"{k}={v}" for k, v in sorted(env.items())), *argv] if env else argv


def write_trl(plan: Plan, out_dir: str | Path) -> list[Path]:
    """Writes ds_config.json, train_sft.py and command.sh into `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ds_path = out / DS_CONFIG_FILE
    written = [_write(ds_path, json.dumps(plan.deepspeed_config, indent=2) + "\n")]
    script_path = out / TRL_SCRIPT
    written.append(_write(script_path, trl_script(plan, str(ds_path.resolve()))))
    unmapped = trl_unmapped(plan)
    launch = trl_launch(plan, str(script_path.resolve()))  # absolute: command.sh runs from any directory
    command = _write(out / COMMAND_FILE, _command_text(plan, "TRL", [launch], unmapped))
    command.chmod(0o755)
    written.append(command)
    return written


WRITERS = {
    "hf-trainer": lambda plan, out: write_hf_trainer(plan, out),
    "accelerate": write_accelerate,
    "axolotl": write_axolotl,
    "llamafactory": write_llamafactory,
    "trl": write_trl,
}
"""--export KIND -> the writer of its hand-off files."""


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
        elif isinstance(value, list):
            yield f"{pad}{key}: {json.dumps(value)}\n"  # JSON's flow style is YAML
        elif isinstance(value, (int, float)):
            yield f"{pad}{key}: {value}\n"
        else:
            yield f"{pad}{key}: {json.dumps(str(value))}\n"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path

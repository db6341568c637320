"""--ds-config: read a user's DeepSpeed JSON and estimate exactly that ("will my existing config fit?").

    read_ds_config(path)                                  -> dict (InputError when unreadable)
    estimate_config(spec, cluster, ds_config, PlanRequest(seq_len=...)) -> ConfigEstimate, fit judged without the margin
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zero_planner.errors import InputError, read_mapping
from zero_planner.hardware import Cluster
from zero_planner.models.spec import ModelSpec
from zero_planner.plan.assemble import _assemble, candidate
from zero_planner.plan.checks import ADAPTER_METHODS, adapter_lora, check_inputs, resolve_precision
from zero_planner.plan.dsconfig import bucket_sizes, default_optimizer
from zero_planner.plan.fit import _gib, gpu_limit_bytes
from zero_planner.plan.memory import ALLOC_CONF, ZeroBuffers
from zero_planner.plan.options import Evaluator, Option, known_failure
from zero_planner.plan.request import PlanRequest
from zero_planner.planfile import Plan
from zero_planner.strategies import Strategy


@dataclass
class ConfigEstimate:
    """The estimate of one given DeepSpeed JSON (`--ds-config`): fit without margin, and the headroom."""

    option: Option
    """fits / reason measured against the full GPU and host capacity (no safety margin)."""
    gpu_headroom_bytes: int
    """GPU capacity minus the predicted total (negative: short by that much)."""
    host_headroom_bytes: int
    plan: Plan
    """A plan around the given config, unchanged except that "auto" values are made concrete."""
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.option.fits


def read_ds_config(path: str | Path) -> dict[str, Any]:
    """Returns the DeepSpeed JSON at `path` as a dict; InputError when unreadable or not a JSON object."""
    return read_mapping(path, f"--ds-config {str(path)!r}", json.loads, (json.JSONDecodeError,), "JSON",
                        "a DeepSpeed config (a JSON object expected)")


def _int_field(config: dict, key: str, where: str = "") -> int | None:
    value = config.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
        raise InputError(f"--ds-config: {where}{key} must be a positive integer, got {value!r}")
    return int(value)


def _enabled(section: Any) -> bool:
    return isinstance(section, dict) and section.get("enabled") not in (False, None, "false")


def _offload_device(zero: dict, key: str) -> str:
    section = zero.get(key)
    if section is None:
        return "none"
    if not isinstance(section, dict):
        raise InputError(f"--ds-config: zero_optimization.{key} must be an object with a device")
    device = section.get("device", "none")
    if device not in ("none", "cpu", "nvme"):
        raise InputError(f"--ds-config: zero_optimization.{key}.device {device!r} is not one of none, cpu, nvme")
    return device


def config_strategy(config: dict[str, Any]) -> Strategy:
    """Returns the Strategy a DeepSpeed JSON describes (stage, optimizer and parameter offload). Raises InputError."""
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise InputError("--ds-config: zero_optimization must be an object")
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise InputError(f"--ds-config: zero_optimization.stage {stage!r} is not one of 0, 1, 2, 3")
    offload_optimizer = _offload_device(zero, "offload_optimizer")
    offload_param = _offload_device(zero, "offload_param")
    if offload_param != "none" and stage != 3:
        raise InputError(f"--ds-config: offload_param needs zero_optimization.stage 3, got stage {stage}")
    return Strategy(stage, offload_optimizer=offload_optimizer, offload_param=offload_param)


def config_precision(config: dict[str, Any], cluster: Cluster) -> str:
    """Returns bf16/fp16/fp32 from the config's bf16/fp16 sections ("auto" -> what the GPU supports)."""
    bf16, fp16 = config.get("bf16"), config.get("fp16")
    if _enabled(bf16) and _enabled(fp16):
        auto = [name for name, s in (("bf16", bf16), ("fp16", fp16)) if s.get("enabled") == "auto"]
        if len(auto) == 2:  # HF-style "auto" for both: the GPU decides
            return resolve_precision("auto", cluster)
        if not auto:
            raise InputError("--ds-config enables both bf16 and fp16; enable one")
        return "fp16" if auto == ["bf16"] else "bf16"
    if _enabled(bf16):
        return "bf16"
    if _enabled(fp16):
        return "fp16"
    return "fp32"


def _concrete(
    config: dict[str, Any], *, micro: int, accum: int, world: int, precision: str, hidden_size: int
) -> dict[str, Any]:
    """Returns a copy of `config` with Hugging Face style "auto" values replaced by the ones estimated."""
    out = json.loads(json.dumps(config))
    out["train_micro_batch_size_per_gpu"] = micro
    out["gradient_accumulation_steps"] = accum
    out["train_batch_size"] = micro * accum * world
    for name in ("bf16", "fp16"):
        if isinstance(out.get(name), dict) and out[name].get("enabled") == "auto":
            out[name]["enabled"] = name == precision
    zero = out.get("zero_optimization")
    if isinstance(zero, dict):
        ours = bucket_sizes(hidden_size)
        for key, value in list(zero.items()):
            if value == "auto" and key in ours:
                zero[key] = ours[key]
    if out.get("gradient_clipping") == "auto":
        out["gradient_clipping"] = 1.0
    # HF Trainer fills the optimizer's and scheduler's "auto" values from its TrainingArguments; handed to
    # DeepSpeed as they are, CPU Adam fails on lr="auto" (measured: create_adam() incompatible arguments, both
    # HF "auto" JSONs on the H100). A JSON with no optimizer (Axolotl, LLaMA-Factory: the trainer brings one)
    # gets DeepSpeed's AdamW, which keeps the same two fp32 moments.
    ours = default_optimizer()
    optimizer = out.setdefault("optimizer", ours)
    if isinstance(optimizer, dict):
        if optimizer.get("type") == "auto":
            optimizer["type"] = ours["type"]
        params = optimizer.setdefault("params", {})
        if isinstance(params, dict):
            for key, value in list(params.items()):
                if value == "auto":
                    params[key] = ours["params"].get(key, value)
    scheduler = out.get("scheduler")
    if isinstance(scheduler, dict) and isinstance(scheduler.get("params"), dict):
        lr = optimizer.get("params", {}).get("lr", ours["params"]["lr"]) if isinstance(optimizer, dict) else None
        fills = {"warmup_min_lr": 0.0, "warmup_max_lr": lr, "warmup_num_steps": 0, "total_num_steps": 1_000_000}
        for key, value in list(scheduler["params"].items()):
            if value == "auto" and key in fills:
                scheduler["params"][key] = fills[key]
    return out


def _loop_note(ev, strategy: Strategy, ckpt: bool, micro: int, accum: int, memory, cluster: Cluster,
               keeps_outputs: bool) -> str:
    """Returns the note on the training loop: what holding the model's outputs through backward adds (the 16-bit
    logits, micro-batch x sequence x vocabulary), and whether the config then still fits."""
    other = ev.like(keeps_outputs=not keeps_outputs).memory(strategy, ckpt, micro, accum)
    with_outputs, without = (memory, other) if keeps_outputs else (other, memory)
    extra = with_outputs.total_bytes - without.total_bytes
    fits_with = with_outputs.total_bytes <= cluster.gpu.memory_bytes
    if keeps_outputs:
        return (f"estimated for a loop that keeps the model's outputs through backward and the step (+{_gib(extra)} "
                f"of logits over one that keeps only the loss, as zero-run and HF Trainer do)")  # fmt: skip
    verdict = "" if without.total_bytes > cluster.gpu.memory_bytes else " and still fits" if fits_with else \
        " and would not fit"
    return (f"estimated for a loop that keeps only the loss (zero-run, HF Trainer); one that holds the model's outputs "
            f"through backward (outputs = model(**batch); backward(outputs.loss)) adds {_gib(extra)} of logits"
            f"{verdict}: --loop-keeps-outputs")  # fmt: skip


def _batch_shape(ds_config: dict[str, Any], world: int, micro_batch: int | None) -> tuple[int, int, str | None]:
    """Returns (micro-batch, accumulation, note) of a DeepSpeed JSON on `world` ranks: its own values, the micro-batch
    from train_batch_size where only that is given, `micro_batch` (--micro-batch) where it says "auto"; the note
    says where its train_batch_size does not add up. Raises InputError where no micro-batch can be had."""
    micro = _int_field(ds_config, "train_micro_batch_size_per_gpu")
    accum = _int_field(ds_config, "gradient_accumulation_steps")
    total = _int_field(ds_config, "train_batch_size")
    if micro is None and total is not None:
        micro = total // ((accum or 1) * world) or None
    micro = micro or micro_batch
    if micro is None:
        raise InputError('--ds-config sets no train_micro_batch_size_per_gpu (or it is "auto"); give --micro-batch N')
    if accum is None:
        accum = max(1, total // (micro * world)) if total is not None else 1
    if total is None or total == micro * accum * world:
        return micro, accum, None
    # Memory depends on the micro-batch only; DeepSpeed would refuse the mismatch, so the plan's copy is fixed.
    return micro, accum, (
        f"--ds-config: train_batch_size({total}) != train_micro_batch_size_per_gpu({micro}) * "
        f"gradient_accumulation_steps({accum}) * world_size({world}), which DeepSpeed rejects; the plan's copy "
        f"says train_batch_size {micro * accum * world}"
    )


def estimate_config(
    spec: ModelSpec, cluster: Cluster, ds_config: dict[str, Any], request: PlanRequest
) -> ConfigEstimate:
    """Returns the estimate of exactly this DeepSpeed JSON: micro-batch, accumulation, stage, offload, precision
    and bucket sizes come from it (`request.micro_batch` only where it says "auto"); fit is judged without the
    safety margin, so `request`'s precision, stage, global_batch and margin are not read. Gradient checkpointing is
    the model's switch, not DeepSpeed's: `request.grad_ckpt` says it (None: off); the other fields (adapters, head,
    weights, step-time constants, the user's loop keeping outputs, dataset bytes) as PlanRequest documents them.
    Raises InputError.
    """
    r = request
    seq_len, method, task, grad_ckpt = r.seq_len, r.method, r.task, bool(r.grad_ckpt)
    world = cluster.world_size
    strategy = config_strategy(ds_config)
    micro, accum, batch_note = _batch_shape(ds_config, world, r.micro_batch)
    check_inputs(
        spec, seq_len=seq_len, micro_batch=micro, global_batch=None, world_size=world, method=method, task=task
    )
    precision = config_precision(ds_config, cluster)
    if precision == "bf16" and not cluster.gpu.bf16:
        raise InputError(f"--ds-config enables bf16, which {cluster.gpu.name} lacks; use fp16")
    try:
        buffers = ZeroBuffers.from_ds_config(ds_config, spec.hidden_size)
    except (TypeError, ValueError) as error:
        raise InputError(f"--ds-config: bad zero_optimization value ({error})") from None
    if method == "auto":
        raise InputError("--method auto chooses a method; with --ds-config give full, lora or qlora")
    lora = adapter_lora(method, r.lora) if method in ADAPTER_METHODS else r.lora
    ev = Evaluator(spec, cluster, r.but(precision=precision, lora=lora, margin=False), buffers)
    memory = ev.memory(strategy, grad_ckpt, micro, accum)
    problem = known_failure(method, strategy) or ev.why_not(strategy, grad_ckpt, micro, accum)
    step = ev.step(strategy, grad_ckpt, micro, accum)
    if problem:
        option = Option(strategy, grad_ckpt, micro, accum, memory, False, problem, step)
    else:
        option = Option(strategy, grad_ckpt, micro, accum, memory, True, "fits (no safety margin)", step)
    gpu_headroom = cluster.gpu.memory_bytes - memory.total_bytes
    host_headroom = cluster.cpu_memory_bytes - memory.cpu_total_bytes
    concrete = _concrete(
        ds_config, micro=micro, accum=accum, world=world, precision=precision, hidden_size=spec.hidden_size
    )
    notes = [batch_note] if batch_note else []
    notes += memory.notes
    if not cluster.is_cpu and memory.fragmented_total_bytes > memory.total_bytes:
        # zero-run launches with it; a script launched another way needs it set to get this fit.
        notes.append(
            f"assumes PYTORCH_CUDA_ALLOC_CONF={ALLOC_CONF} (zero-run sets it); with PyTorch's default allocator "
            f"plan on up to {_gib(memory.fragmented_total_bytes)} per GPU for its fragmented cache"
        )
    if task == "causal-lm":
        notes.append(_loop_note(ev, strategy, grad_ckpt, micro, accum, memory, cluster, r.keeps_outputs))
    if "optimizer" not in ds_config:
        notes.append("the JSON names no optimizer (the trainer brings its own); estimated and run with DeepSpeed's "
                     "AdamW, whose two fp32 moments are what torch's AdamW keeps too")
    if problem is None and memory.total_bytes > gpu_limit_bytes(cluster.gpu.memory_bytes):
        notes.append(
            f"fits, but inside the planner's safety margin: {_gib(gpu_headroom)} headroom is less than "
            f"{_gib(cluster.gpu.memory_bytes - gpu_limit_bytes(cluster.gpu.memory_bytes))}"
        )
    plan_ = _assemble(spec, cluster, option, ev.request, ds_config=concrete, candidates=[candidate(option, chosen=True)],
                      notes=notes)
    return ConfigEstimate(option, gpu_headroom, host_headroom, plan_, notes)

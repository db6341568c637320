"""The choice: for every strategy and checkpointing setting, the largest micro-batch that fits; the fastest wins.

    plan(spec, cluster, seq_len=2048)              -> PlanResult (candidates, chosen, Plan or advice)
    estimate_config(spec, cluster, ds_config, ...)  -> ConfigEstimate ("will my existing config fit?")
    python -m zero_planner.planner --write-ds-configs [--check]   regenerates ds_configs/

Pure planning code: numbers in, a pydantic Plan out; no torch, transformers or deepspeed import (DeepSpeed's
own config check, `validate_ds_config`, is the caller's choice: it costs seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zero_planner.dsconfig import bucket_sizes, build_ds_config
from zero_planner.errors import InputError, closest
from zero_planner.hardware import Cluster
from zero_planner.memory import MemoryEstimate, Workload, ZeroBuffers, estimate_memory, trainable_params
from zero_planner.models.spec import ModelSpec
from zero_planner.plan import (
    Candidate,
    LoraInfo,
    CpuEstimate,
    Estimate,
    HardwareInfo,
    LaunchInfo,
    ModelInfo,
    PerGpuEstimate,
    Plan,
    StrategyInfo,
    TrainingInfo,
)
from zero_planner.strategies import STRATEGIES, Strategy
from zero_planner.throughput import StepTime, estimate_step_time

SAFETY_MARGIN_FRACTION = 0.05
"""Share of GPU memory the planner leaves free when it chooses: the memory model's error on measured steps
plus fragmentation it cannot see. Not applied to --ds-config, which reports fit against the full capacity."""
SAFETY_MARGIN_BYTES = 256 * 2**20
"""Fixed part of the GPU margin (on top of the fraction): NCCL/cuBLAS workspaces that grow with the run,
which matter most on small cards."""
HOST_MARGIN_FRACTION = 0.05
"""Share of host memory per node left to the OS, the page cache and other processes."""
MAX_MICRO_BATCH = 64
"""Upper end of the micro-batch search: beyond it throughput no longer improves and accumulation is cheaper."""
MAX_WORLD_SIZE_SEARCHED = 64
"""When nothing fits, the planner looks for the smallest number of GPUs of the same type that would, up to this."""
MIN_SEQ_LEN_SUGGESTED = 64
"""When nothing fits, shorter sequences are tried by halving down to this length."""
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
METHODS = ("full", "lora", "qlora", "auto")
ADAPTER_METHODS = ("lora", "qlora")
TASKS = ("causal-lm", "seq-cls")
STAGES = ("auto", *STRATEGIES)
REFERENCE_HIDDEN_SIZE = 4096
"""ds_configs/ reference files are built for hidden size 4096 (Llama-2/3 7-8B, Mistral 7B): micro-batch 1,
accumulation 1, one GPU."""
DS_CONFIGS_DIR = Path(__file__).resolve().parent.parent / "ds_configs"

GIB = 2**30


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.1f} GiB"


def gpu_limit_bytes(gpu_memory_bytes: int) -> int:
    """Returns the per-GPU bytes a chosen candidate may use: capacity less the safety margin."""
    return gpu_memory_bytes - int(SAFETY_MARGIN_FRACTION * gpu_memory_bytes) - SAFETY_MARGIN_BYTES


def host_limit_bytes(cpu_memory_bytes: int) -> int:
    """Returns the host bytes per node a chosen candidate may use: host memory less HOST_MARGIN_FRACTION."""
    return cpu_memory_bytes - int(HOST_MARGIN_FRACTION * cpu_memory_bytes)


@dataclass(frozen=True)
class Option:
    """One evaluated (strategy, checkpointing) pair at the micro-batch the search settled on."""

    strategy: Strategy
    gradient_checkpointing: bool
    micro_batch_size: int
    """The largest that fits; 1 (or the given micro-batch) when none fits."""
    gradient_accumulation_steps: int
    memory: MemoryEstimate
    fits: bool
    reason: str
    """`fits...`, or why not with the numbers (`GPU: needs 17.2 GiB > 13.8 GiB`)."""
    step: StepTime | None = None
    """The step-time estimate; None when the option does not fit."""

    @property
    def tokens_per_second(self) -> float:
        return self.step.tokens_per_second if self.step else 0.0


@dataclass
class PlanResult:
    """What `plan` found: every option evaluated, the chosen one and its Plan, or advice when none fits."""

    spec: ModelSpec
    cluster: Cluster
    precision: str
    seq_len: int
    options: list[Option]
    chosen: Option | None
    plan: Plan | None
    notes: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    """Nothing fits: what would, in numbers (more GPUs, host memory, a shorter sequence, LoRA/QLoRA)."""

    @property
    def fits(self) -> bool:
        return self.chosen is not None


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


# --- inputs --------------------------------------------------------------------------------------------------


def resolve_precision(precision: str, cluster: Cluster) -> str:
    """Returns bf16/fp16/fp32 for `precision` on this cluster: auto is bf16 where the GPU has it, else fp16;
    CPU processes train in fp32 (DeepSpeed's CPU accelerator has no fp16). Raises InputError."""
    if precision not in PRECISIONS:
        raise InputError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    gpu = cluster.gpu
    if precision == "auto":
        if cluster.is_cpu:
            return "fp32"
        return "bf16" if gpu.bf16 else "fp16"
    if precision == "bf16" and not gpu.bf16:
        raise InputError(f"--precision bf16: {gpu.name} has no bf16; use fp16 (or fp32)")
    if precision == "fp16" and cluster.is_cpu:
        raise InputError(
            "--precision fp16: DeepSpeed's CPU accelerator has no fp16; use fp32 or bf16 with --gpus cpu:N"
        )
    return precision


def resolve_strategies(stage: str) -> list[Strategy]:
    """Returns the strategies to evaluate: all seven for `auto`, else the named one. Raises InputError."""
    if stage == "auto":
        return list(STRATEGIES.values())
    if stage not in STRATEGIES:
        near = closest(stage, STRATEGIES)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise InputError(f"--stage {stage!r} is not one of {', '.join(STAGES)}{hint}")
    return [STRATEGIES[stage]]


def check_inputs(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch: int | None,
    global_batch: int | None,
    world_size: int,
    method: str,
    task: str,
) -> None:
    """Raises InputError for values no plan can use, each message naming the value and what is allowed."""
    if seq_len <= 0:
        raise InputError(f"--seq-len must be a positive number of tokens, got {seq_len}")
    if seq_len > spec.max_position_embeddings:
        raise InputError(
            f"--seq-len {seq_len} is above {spec.name}'s maximum of {spec.max_position_embeddings} tokens "
            f"(max_position_embeddings)"
        )
    if micro_batch is not None and micro_batch <= 0:
        raise InputError(f"--micro-batch must be a positive integer or auto, got {micro_batch}")
    if global_batch is not None:
        if global_batch <= 0:
            raise InputError(f"--global-batch must be a positive integer, got {global_batch}")
        if global_batch < world_size:
            raise InputError(
                f"--global-batch {global_batch} is smaller than the {world_size} GPUs (one sample each at least)"
            )
        if micro_batch is not None and micro_batch * world_size > global_batch:
            raise InputError(
                f"--micro-batch {micro_batch} x {world_size} GPUs = {micro_batch * world_size} exceeds "
                f"--global-batch {global_batch}"
            )
    if method not in METHODS:
        raise InputError(f"--method {method!r} is not one of {', '.join(METHODS)}")
    if task not in TASKS:
        raise InputError(f"--task {task!r} is not one of {', '.join(TASKS)}")


# --- evaluation ----------------------------------------------------------------------------------------------


def why_not(memory: MemoryEstimate, gpu_cap_bytes: int, host_cap_bytes: int) -> str | None:
    """Returns why `memory` does not fit under the per-GPU and per-node host caps (with the numbers), or None."""
    problems = []
    if memory.total_bytes > gpu_cap_bytes:
        problems.append(f"GPU: needs {_gib(memory.total_bytes)} > {_gib(gpu_cap_bytes)}")
        if 0 < memory.floor_bytes <= gpu_cap_bytes:
            # Not planned: whether PyTorch can release enough of its cache in time was measured both ways.
            problems.append(f"{_gib(memory.total_bytes - memory.floor_bytes)} of it is allocator cache; "
                            f"it might run, unplanned")  # fmt: skip
    if memory.cpu_total_bytes > host_cap_bytes:
        problems.append(f"host: needs {_gib(memory.cpu_total_bytes)} > {_gib(host_cap_bytes)}")
    return "; ".join(problems) or None


class _Evaluator:
    """Memoised estimate_memory for one model, cluster, sequence length and precision."""

    def __init__(
        self,
        spec: ModelSpec,
        cluster: Cluster,
        *,
        seq_len: int,
        precision: str,
        method: str,
        task: str,
        buffers: ZeroBuffers | None = None,
        margin: bool = True,
        lora: LoraInfo | None = None,
        num_labels: int = 2,
    ) -> None:
        self.spec, self.cluster, self.seq_len, self.precision = spec, cluster, seq_len, precision
        self.lora = lora or LoraInfo()  # rank and dropout matter here; the method says whether it is 4-bit
        self.num_labels = num_labels
        self.margin = margin
        self.gpu_cap_bytes = gpu_limit_bytes(cluster.gpu.memory_bytes) if margin else cluster.gpu.memory_bytes
        self.host_cap_bytes = host_limit_bytes(cluster.cpu_memory_bytes) if margin else cluster.cpu_memory_bytes
        self.method, self.task = method, task
        self.buffers = buffers or ZeroBuffers.for_model(spec.hidden_size)
        self.attn = spec.attn_implementation or "sdpa"
        self._cache: dict[tuple, MemoryEstimate] = {}

    def workload(self, ckpt: bool, micro: int, accum: int = 1) -> Workload:
        return Workload(
            micro_batch_size=micro,
            seq_len=self.seq_len,
            gradient_checkpointing=ckpt,
            precision=self.precision,
            world_size=self.cluster.world_size,
            gpus_per_node=self.cluster.gpus_per_node,
            attn_implementation=self.attn,
            method=self.method,
            task=self.task,
            gradient_accumulation_steps=accum,
            lora_r=self.lora.r,
            lora_dropout=self.lora.dropout,
            num_labels=self.num_labels,
        )

    def memory(self, strategy: Strategy, ckpt: bool, micro: int, accum: int = 1) -> MemoryEstimate:
        key = (strategy, ckpt, micro, accum)
        if key not in self._cache:
            self._cache[key] = estimate_memory(
                self.spec, strategy, self.workload(ckpt, micro, accum), self.buffers, gpu_name=self.cluster.gpu.name
            )
        return self._cache[key]

    def why_not(self, strategy: Strategy, ckpt: bool, micro: int, accum: int = 1) -> str | None:
        return why_not(self.memory(strategy, ckpt, micro, accum), self.gpu_cap_bytes, self.host_cap_bytes)

    def like(
        self, cluster: Cluster | None = None, seq_len: int | None = None, method: str | None = None
    ) -> "_Evaluator":
        """Returns an evaluator for the same model and settings on another cluster, sequence length or method."""
        return _Evaluator(
            self.spec,
            cluster or self.cluster,
            seq_len=seq_len or self.seq_len,
            precision=self.precision,
            method=method or self.method,
            task=self.task,
            buffers=self.buffers,
            margin=self.margin,
            lora=self.lora,
            num_labels=self.num_labels,
        )

    def step(self, strategy: Strategy, ckpt: bool, micro: int, accum: int) -> StepTime:
        return estimate_step_time(self.spec, strategy, self.cluster.gpu, self.workload(ckpt, micro, accum))


def largest_fitting(fits: Callable[[int], bool], cap: int) -> int:
    """Returns the largest micro-batch in 1..cap for which `fits` holds, 0 when 1 does not fit.

    Doubles from 1 while it fits, then bisects between the last fit and the first miss: memory grows with
    the micro-batch, so this is the largest fit in O(log cap) evaluations."""
    if cap < 1 or not fits(1):
        return 0
    good, bad = 1, cap + 1
    trial = 2
    while trial <= cap:
        if not fits(trial):
            bad = trial
            break
        good, trial = trial, trial * 2
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def batch_shape(max_micro: int, world_size: int, global_batch: int | None) -> tuple[int, int, str | None]:
    """Returns (micro_batch, accumulation, note) reaching `global_batch` = micro * accumulation * world.

    Prefers a micro-batch that divides the per-GPU batch exactly, unless that would halve it; otherwise the
    accumulation is rounded and the note says which global batch results. No global batch: accumulation 1.
    """
    if global_batch is None:
        return max_micro, 1, None
    per_gpu, remainder = divmod(global_batch, world_size)
    note = None
    if remainder:
        per_gpu = max(1, round(global_batch / world_size))
    max_micro = min(max_micro, per_gpu)
    divisor = max(d for d in range(1, max_micro + 1) if per_gpu % d == 0)
    if 2 * divisor >= max_micro:
        micro, accum = divisor, per_gpu // divisor
    else:
        micro, accum = max_micro, max(1, round(per_gpu / max_micro))
    reached = micro * accum * world_size
    if reached != global_batch:
        note = (
            f"global batch {reached} instead of {global_batch}: micro-batch({micro}) x accumulation({accum}) x "
            f"GPUs({world_size}); {global_batch} is not reachable with micro-batch {micro}"
        )
    return micro, accum, note


def _option(
    ev: _Evaluator, strategy: Strategy, ckpt: bool, *, micro_batch: int | None, global_batch: int | None
) -> tuple[Option, str | None]:
    """Returns the option for (strategy, ckpt) at its largest fitting (or the given) micro-batch, and a batch note."""
    world = ev.cluster.world_size
    if micro_batch is not None:
        problem = ev.why_not(strategy, ckpt, micro_batch)
        if problem:
            return Option(strategy, ckpt, micro_batch, 1, ev.memory(strategy, ckpt, micro_batch), False, problem), None
        if global_batch is None:
            micro, accum, note = micro_batch, 1, None
        else:
            accum = max(1, round(global_batch / (world * micro_batch)))
            micro, note = micro_batch, None
            if micro * accum * world != global_batch:
                note = (
                    f"global batch {micro * accum * world} instead of {global_batch}: micro-batch({micro}) x "
                    f"accumulation({accum}) x GPUs({world})"
                )
        reason = "fits"
    else:
        cap = MAX_MICRO_BATCH if global_batch is None else min(MAX_MICRO_BATCH, max(1, round(global_batch / world)))
        largest = largest_fitting(lambda m: ev.why_not(strategy, ckpt, m) is None, cap)
        if largest == 0:
            return Option(
                strategy, ckpt, 1, 1, ev.memory(strategy, ckpt, 1), False, ev.why_not(strategy, ckpt, 1) or ""
            ), None
        micro, accum, note = batch_shape(largest, world, global_batch)
        if largest < cap:
            reason = f"fits; micro-batch {largest + 1} would not ({ev.why_not(strategy, ckpt, largest + 1)})"
        else:
            reason = f"fits; micro-batch capped at {cap}"
        if micro != largest:
            reason += f"; {micro} divides the global batch"
    memory = ev.memory(strategy, ckpt, micro, accum)
    problem = ev.why_not(strategy, ckpt, micro, accum)
    if problem:  # accumulation changed the estimate (DeepSpeed's fp32 accumulation buffers)
        return Option(strategy, ckpt, micro, accum, memory, False, problem), note
    return Option(strategy, ckpt, micro, accum, memory, True, reason, ev.step(strategy, ckpt, micro, accum)), note


def _rank_key(option: Option) -> tuple:
    order = list(STRATEGIES.values()).index(option.strategy) if option.strategy in STRATEGIES.values() else 99
    # Fastest first; on a tie the simpler strategy, then no checkpointing, then the larger micro-batch.
    return (-round(option.tokens_per_second, 6), order, option.gradient_checkpointing, -option.micro_batch_size)


def plan(
    spec: ModelSpec,
    cluster: Cluster,
    *,
    seq_len: int,
    micro_batch: int | None = None,
    global_batch: int | None = None,
    grad_ckpt: bool | None = None,
    precision: str = "auto",
    stage: str = "auto",
    method: str = "full",
    task: str = "causal-lm",
    margin: bool = True,
    model_name: str | None = None,
    plan_path: str = "plan.json",
    lora: LoraInfo | None = None,
    num_labels: int = 2,
) -> PlanResult:
    """Returns the PlanResult: every (strategy, checkpointing) option at its largest fitting micro-batch, the
    fastest that fits under the safety margin, and its Plan; or, when none fits, advice in numbers.

    `micro_batch` None searches 1..MAX_MICRO_BATCH (capped at the per-GPU global batch); `grad_ckpt` None
    tries both; `stage` "auto" tries all seven strategies; `margin` False judges fit against the full GPU and
    host capacity instead of gpu_limit_bytes / host_limit_bytes. Raises InputError for bad values.
    """
    check_inputs(
        spec,
        seq_len=seq_len,
        micro_batch=micro_batch,
        global_batch=global_batch,
        world_size=cluster.world_size,
        method=method,
        task=task,
    )
    if method == "auto":
        return _plan_auto(spec, cluster, seq_len=seq_len, micro_batch=micro_batch, global_batch=global_batch,
                          grad_ckpt=grad_ckpt, precision=precision, stage=stage, task=task, margin=margin,
                          model_name=model_name, plan_path=plan_path, lora=lora, num_labels=num_labels)  # fmt: skip
    if method == "qlora" and cluster.is_cpu:
        raise InputError("--method qlora needs CUDA GPUs (bitsandbytes 4-bit); use --method lora with --gpus cpu:N")
    precision = resolve_precision(precision, cluster)
    strategies = resolve_strategies(stage)
    ckpts = [False, True] if grad_ckpt is None else [grad_ckpt]
    if method in ADAPTER_METHODS:
        lora = (lora or LoraInfo()).model_copy(update={"quantization": "nf4" if method == "qlora" else "none"})
    else:
        lora = None
    ev = _Evaluator(spec, cluster, seq_len=seq_len, precision=precision, method=method, task=task, margin=margin,
                    lora=lora, num_labels=num_labels)  # fmt: skip

    options, batch_notes = [], {}
    for strategy in strategies:
        for ckpt in ckpts:
            option, note = _option(ev, strategy, ckpt, micro_batch=micro_batch, global_batch=global_batch)
            options.append(option)
            batch_notes[(strategy, ckpt)] = note
    feasible = sorted((o for o in options if o.fits), key=_rank_key)
    chosen = feasible[0] if feasible else None
    notes: list[str] = []
    if cluster.cpu_memory_source == "assumed":
        notes.append(
            f"host memory {_gib(cluster.cpu_memory_bytes)} per node is assumed for {cluster.gpu.name} machines; "
            f"pass --cpu-mem SIZE for yours"
        )
    if chosen is None:
        result = PlanResult(spec, cluster, precision, seq_len, options, None, None, notes)
        result.advice = advice(result, ev, micro_batch=micro_batch, ckpts=ckpts, strategies=strategies)
        return result
    if batch_notes[(chosen.strategy, chosen.gradient_checkpointing)]:
        notes.append(batch_notes[(chosen.strategy, chosen.gradient_checkpointing)])
    result = PlanResult(spec, cluster, precision, seq_len, options, chosen, None, notes)
    result.plan = build_plan(result, method=method, task=task, model_name=model_name, plan_path=plan_path,
                             lora=lora, num_labels=num_labels)  # fmt: skip
    return result


def _plan_auto(spec: ModelSpec, cluster: Cluster, **kwargs: Any) -> PlanResult:
    """Returns full fine-tuning's plan when it fits, else the faster of LoRA and QLoRA that fits, with what
    each method costs in the notes (and full fine-tuning's explanation when nothing fits).

    Full fine-tuning comes first because it is what LoRA and QLoRA approximate; between the adapter methods
    the step-time model decides (QLoRA's 4-bit base also costs some quality, which the notes leave to the user).
    """
    results = {"full": plan(spec, cluster, method="full", **kwargs)}
    if not results["full"].fits:
        for method in ["lora"] + ([] if cluster.is_cpu else ["qlora"]):
            results[method] = plan(spec, cluster, method=method, **kwargs)
    fitting = {m: r for m, r in results.items() if r.fits}
    if "full" in fitting:
        chosen = "full"
    elif fitting:
        # LoRA or QLoRA, whichever trains faster where it fits (QLoRA's 4-bit base also costs some quality).
        chosen = max(fitting, key=lambda m: fitting[m].chosen.tokens_per_second)
    else:
        chosen = "full"
    costs = []
    for method, result in results.items():
        best = result.chosen or min(result.options, key=lambda o: o.memory.total_bytes)
        costs.append(
            f"--method {method}: {'fits' if result.fits else 'does not fit'}; "
            f"{'best' if result.fits else 'smallest'} option stage {best.strategy.name} "
            f"{_ckpt_text(best.gradient_checkpointing)}, micro-batch {best.micro_batch_size}, "
            f"{_gib(best.memory.total_bytes)} per GPU, {_gib(best.memory.cpu_total_bytes)} host"
            + (f", ~{best.tokens_per_second:,.0f} tokens/s (model)" if result.fits else "")
            + (" <- chosen" if method == chosen and result.fits else "")
        )
    result = results[chosen]
    result.notes[:0] = costs
    if result.plan is not None:
        result.plan.notes[:0] = costs
    return result


# --- when nothing fits ---------------------------------------------------------------------------------------


def _smallest(
    ev: _Evaluator, strategies: Sequence[Strategy], ckpts: Sequence[bool]
) -> tuple[Strategy, bool, MemoryEstimate]:
    """Returns the (strategy, ckpt, memory) at micro-batch 1 with the smallest per-GPU total."""
    return min(((s, c, ev.memory(s, c, 1)) for s in strategies for c in ckpts), key=lambda t: t[2].total_bytes)


def _first_fit(
    ev: _Evaluator, strategies: Sequence[Strategy], ckpts: Sequence[bool]
) -> tuple[Strategy, bool, MemoryEstimate] | None:
    """Returns the first (strategy, ckpt, memory) that fits at micro-batch 1, in strategy order, or None."""
    for strategy in strategies:
        for ckpt in ckpts:
            if ev.why_not(strategy, ckpt, 1) is None:
                return strategy, ckpt, ev.memory(strategy, ckpt, 1)
    return None


def _ckpt_text(ckpt: bool) -> str:
    return "with gradient checkpointing" if ckpt else "without checkpointing"


def _layouts(cluster: Cluster):
    """Yields larger clusters of the same GPU type: one node up to max(8, GPUs per node), then whole nodes."""
    per_node_max = max(8, cluster.gpus_per_node)
    for world in range(cluster.world_size + 1, MAX_WORLD_SIZE_SEARCHED + 1):
        if world <= per_node_max:
            nodes, per_node = 1, world
        elif world % per_node_max == 0:
            nodes, per_node = world // per_node_max, per_node_max
        else:
            continue
        host = cluster.cpu_memory_bytes
        if cluster.cpu_memory_source == "assumed":
            host = cluster.gpu.host_memory_per_gpu_bytes * per_node
        yield replace(cluster, nodes=nodes, gpus_per_node=per_node, cpu_memory_bytes=host)


def _gpus_text(cluster: Cluster) -> str:
    if cluster.is_cpu:
        return f"cpu:{cluster.gpus_per_node}"
    if cluster.nodes > 1:
        return f"{cluster.nodes}x{cluster.gpus_per_node}x{cluster.gpu.name}"
    return f"{cluster.gpus_per_node}x{cluster.gpu.name}"


def advice(
    result: PlanResult,
    ev: _Evaluator,
    *,
    micro_batch: int | None,
    ckpts: Sequence[bool],
    strategies: Sequence[Strategy],
) -> list[str]:
    """Returns what would make a plan fit, each line with its numbers: the smallest option's need, another
    stage or checkpointing, more host memory (offload), more GPUs, a shorter sequence, LoRA/QLoRA."""
    cluster, spec = result.cluster, result.spec
    every, both = list(STRATEGIES.values()), [False, True]
    lines = []
    strategy, ckpt, memory = _smallest(ev, strategies, ckpts)
    lines.append(
        f"smallest option: stage {strategy.name} {_ckpt_text(ckpt)}, micro-batch 1, needs {_gib(memory.total_bytes)} "
        f"per GPU (limit {_gib(ev.gpu_cap_bytes)} of {_gib(cluster.gpu.memory_bytes)}) and "
        f"{_gib(memory.cpu_total_bytes)} of host memory per node (limit {_gib(ev.host_cap_bytes)})"
    )
    if micro_batch is not None and micro_batch > 1:
        fit = _first_fit(ev, strategies, ckpts)
        if fit:
            lines.append(
                f"--micro-batch 1 fits (stage {fit[0].name} {_ckpt_text(fit[1])}, {_gib(fit[2].total_bytes)} per GPU)"
            )
    if len(strategies) < len(every) or len(ckpts) < 2:
        fit = _first_fit(ev, every, both)
        if fit:
            flag = "--grad-checkpointing" if fit[1] else "--no-grad-checkpointing"
            lines.append(f"--stage {fit[0].name} {flag} fits at micro-batch 1 ({_gib(fit[2].total_bytes)} per GPU)")

    # More host memory: offload options whose GPU side fits but whose host side does not.
    gpu_cap = ev.gpu_cap_bytes
    offload = [s for s in every if s.offload_optimizer != "none"]
    host_needs = [
        (ev.memory(s, c, 1).cpu_total_bytes, s, c)
        for s in offload
        for c in both
        if ev.memory(s, c, 1).total_bytes <= gpu_cap
    ]
    if host_needs:
        need, s, c = min(host_needs, key=lambda t: t[0])
        if need > ev.host_cap_bytes:
            required = math.ceil(need / (1 - (HOST_MARGIN_FRACTION if ev.margin else 0)) / GIB)
            lines.append(
                f"more host memory: stage {s.name} {_ckpt_text(c)} fits the GPU and needs {_gib(need)} of host memory "
                f"per node (have {_gib(cluster.cpu_memory_bytes)}): --cpu-mem {required}GiB"
            )
    else:
        s, c, m = _smallest(ev, offload, both)
        lines.append(
            f"more host memory alone does not help: even stage {s.name} {_ckpt_text(c)} needs "
            f"{_gib(m.total_bytes)} per GPU"
        )

    # More GPUs of this type (CPU processes share one machine's memory: more of them add none).
    found = None
    for bigger in [] if cluster.is_cpu else _layouts(cluster):
        bigger_ev = ev.like(cluster=bigger)
        fit = _first_fit(bigger_ev, every, both)
        if fit:
            found = (bigger, fit)
            break
    if found:
        bigger, (s, c, m) = found
        lines.append(
            f"more GPUs: --gpus {_gpus_text(bigger)} fits with stage {s.name} {_ckpt_text(c)} at micro-batch 1 "
            f"({_gib(m.total_bytes)} per GPU, {_gib(m.cpu_total_bytes)} host per node)"
        )
    elif not cluster.is_cpu:
        lines.append(
            f"more GPUs: no count of {cluster.gpu.name} up to {MAX_WORLD_SIZE_SEARCHED} fits at --seq-len {ev.seq_len}"
        )

    # A shorter sequence.
    seq = ev.seq_len // 2
    while seq >= MIN_SEQ_LEN_SUGGESTED:
        short_ev = ev.like(seq_len=seq)
        fit = _first_fit(short_ev, every, both)
        if fit:
            lines.append(
                f"a shorter sequence: --seq-len {seq} fits with stage {fit[0].name} {_ckpt_text(fit[1])} at "
                f"micro-batch 1 ({_gib(fit[2].total_bytes)} per GPU)"
            )
            break
        seq //= 2
    else:
        lines.append(f"a shorter sequence: none down to {MIN_SEQ_LEN_SUGGESTED} tokens fits on {_gpus_text(cluster)}")

    if ev.method == "full":
        fitting = []
        for method in ("lora",) + (() if cluster.is_cpu else ("qlora",)):
            adapter_ev = ev.like(method=method)
            fit = _first_fit(adapter_ev, every, both)
            if fit:
                fitting.append(
                    f"--method {method} (r={adapter_ev.lora.r}: {trainable_params(spec, adapter_ev.workload(False, 1)) / 1e6:.1f}M "
                    f"trainable parameters) fits with stage {fit[0].name} {_ckpt_text(fit[1])} at micro-batch 1 "
                    f"({_gib(fit[2].total_bytes)} per GPU)"
                )
        if fitting:
            lines += fitting
            lines.append("--method auto plans both and takes the faster that fits")
        else:
            lines.append("--method lora / qlora: no strategy fits at micro-batch 1 either")
    return lines


# --- the plan file -------------------------------------------------------------------------------------------


def _estimate(memory: MemoryEstimate) -> Estimate:
    return Estimate(
        per_gpu=PerGpuEstimate(
            params=memory.params_bytes,
            gradients=memory.gradients_bytes,
            optimizer=memory.optimizer_bytes,
            activations=memory.activations_bytes,
            buffers=memory.buffers_bytes,
            overhead=memory.overhead_bytes,
            peak_allocated=memory.peak_allocated_bytes,
            total=memory.total_bytes,
        ),
        cpu=CpuEstimate(total=memory.cpu_total_bytes),
    )


def _strategy_info(strategy: Strategy) -> StrategyInfo:
    return StrategyInfo(
        stage=strategy.stage,
        offload_optimizer=strategy.offload_optimizer,
        offload_param=strategy.offload_param,
        name=strategy.name,
    )


def candidate(option: Option, *, chosen: bool = False) -> Candidate:
    """Returns the plan file's record of one option."""
    return Candidate(
        strategy=_strategy_info(option.strategy),
        micro_batch_size=option.micro_batch_size,
        gradient_checkpointing=option.gradient_checkpointing,
        fits=option.fits,
        estimate=_estimate(option.memory),
        tokens_per_second=option.tokens_per_second,
        reason=option.reason,
        chosen=chosen,
    )


def _model_info(spec: ModelSpec, model_name: str | None, trainable: int) -> ModelInfo:
    return ModelInfo(
        name=model_name or spec.hub_id or spec.name,
        hub_id=spec.hub_id,
        source=spec.source,
        params=spec.num_params,
        trainable_params=trainable,  # every parameter for full fine-tuning; the adapters for LoRA/QLoRA
        init="pretrained" if spec.has_weights else "random",
        weights_path=spec.weights_path,
        largest_layer=spec.largest_layer_name,
        largest_layer_params=spec.largest_layer_numel,
        config=spec.config,
    )


def _hardware_info(cluster: Cluster) -> HardwareInfo:
    return HardwareInfo(
        gpu=cluster.gpu.name,
        nodes=cluster.nodes,
        gpus_per_node=cluster.gpus_per_node,
        gpu_memory_bytes=cluster.gpu.memory_bytes,
        cpu_memory_bytes=cluster.cpu_memory_bytes,
    )


def _assemble(
    spec: ModelSpec,
    cluster: Cluster,
    option: Option,
    *,
    seq_len: int,
    precision: str,
    method: str,
    task: str,
    ds_config: dict[str, Any],
    candidates: list[Candidate],
    notes: list[str],
    model_name: str | None,
    plan_path: str,
    lora: LoraInfo | None = None,
    num_labels: int = 2,
) -> Plan:
    from zero_planner.launch import (
        launch_command,
    )  # zero-run's module; imported late to keep the planner's import small

    training = TrainingInfo(
        micro_batch_size=option.micro_batch_size,
        gradient_accumulation_steps=option.gradient_accumulation_steps,
        seq_len=seq_len,
        gradient_checkpointing=option.gradient_checkpointing,
        precision=precision,
        method=method,
        task=task,
        attn_implementation=spec.attn_implementation or "sdpa",
        lora=lora if method in ADAPTER_METHODS else None,
        num_labels=num_labels,
    )
    workload = Workload(option.micro_batch_size, seq_len, option.gradient_checkpointing, precision,
                        method=method, task=task, lora_r=(lora or LoraInfo()).r, num_labels=num_labels)  # fmt: skip
    result = Plan(
        model=_model_info(spec, model_name, trainable_params(spec, workload)),
        hardware=_hardware_info(cluster),
        training=training,
        strategy=_strategy_info(option.strategy),
        estimate=_estimate(option.memory),
        candidates=candidates,
        deepspeed_config=ds_config,
        launch=LaunchInfo(command=[]),
        notes=notes,
    )
    result.launch = LaunchInfo(command=launch_command(result, plan_path))
    return result


def build_plan(
    result: PlanResult,
    *,
    method: str = "full",
    task: str = "causal-lm",
    model_name: str | None = None,
    plan_path: str = "plan.json",
    lora: LoraInfo | None = None,
    num_labels: int = 2,
) -> Plan:
    """Returns the Plan for `result.chosen`: its DeepSpeed JSON, estimate, every candidate and the launch command."""
    chosen = result.chosen
    if chosen is None:
        raise ValueError("no option fits; there is no plan to build")
    ds_config = build_ds_config(
        chosen.strategy,
        micro_batch_size=chosen.micro_batch_size,
        gradient_accumulation_steps=chosen.gradient_accumulation_steps,
        world_size=result.cluster.world_size,
        precision=result.precision,
        hidden_size=result.spec.hidden_size,
    )
    candidates = [candidate(o, chosen=o is chosen) for o in result.options]
    notes = [*result.notes, *chosen.memory.notes]
    return _assemble(
        result.spec,
        result.cluster,
        chosen,
        seq_len=result.seq_len,
        precision=result.precision,
        method=method,
        task=task,
        ds_config=ds_config,
        candidates=candidates,
        notes=notes,
        model_name=model_name,
        plan_path=plan_path,
        lora=lora,
        num_labels=num_labels,
    )


# --- --ds-config: estimate a given DeepSpeed JSON ------------------------------------------------------------


def read_ds_config(path: str | Path) -> dict[str, Any]:
    """Returns the DeepSpeed JSON at `path` as a dict; InputError when unreadable or not a JSON object."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--ds-config {str(path)!r}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"--ds-config {str(path)!r}: cannot read it ({error.__class__.__name__}: {error})") from None
    except json.JSONDecodeError as error:
        raise InputError(f"--ds-config {str(path)!r} is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise InputError(f"--ds-config {str(path)!r} is not a DeepSpeed config (a JSON object expected)")
    return config


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
    return out


def estimate_config(
    spec: ModelSpec,
    cluster: Cluster,
    ds_config: dict[str, Any],
    *,
    seq_len: int,
    grad_ckpt: bool = False,
    micro_batch: int | None = None,
    method: str = "full",
    task: str = "causal-lm",
    model_name: str | None = None,
    plan_path: str = "plan.json",
) -> ConfigEstimate:
    """Returns the estimate of exactly this DeepSpeed JSON: micro-batch, accumulation, stage, offload, precision
    and bucket sizes come from it (`micro_batch` only where it says "auto"); fit is judged without the safety
    margin. Gradient checkpointing is the model's switch, not DeepSpeed's: `grad_ckpt` says it. Raises InputError.
    """
    world = cluster.world_size
    strategy = config_strategy(ds_config)
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
    batch_note = None
    if total is not None and total != micro * accum * world:
        # Memory depends on the micro-batch only; DeepSpeed would refuse the mismatch, so the plan's copy is fixed.
        batch_note = (
            f"--ds-config: train_batch_size({total}) != train_micro_batch_size_per_gpu({micro}) * "
            f"gradient_accumulation_steps({accum}) * world_size({world}), which DeepSpeed rejects; the plan's copy "
            f"says train_batch_size {micro * accum * world}"
        )
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
    ev = _Evaluator(
        spec, cluster, seq_len=seq_len, precision=precision, method=method, task=task, buffers=buffers, margin=False
    )
    memory = ev.memory(strategy, grad_ckpt, micro, accum)
    problem = ev.why_not(strategy, grad_ckpt, micro, accum)
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
    if problem is None and memory.total_bytes > gpu_limit_bytes(cluster.gpu.memory_bytes):
        notes.append(
            f"fits, but inside the planner's safety margin: {_gib(gpu_headroom)} headroom is less than "
            f"{_gib(cluster.gpu.memory_bytes - gpu_limit_bytes(cluster.gpu.memory_bytes))}"
        )
    plan_ = _assemble(
        spec,
        cluster,
        option,
        seq_len=seq_len,
        precision=precision,
        method=method,
        task=task,
        ds_config=concrete,
        candidates=[candidate(option, chosen=True)],
        notes=notes,
        model_name=model_name,
        plan_path=plan_path,
        lora=ev.lora if method in ADAPTER_METHODS else None,
    )
    return ConfigEstimate(option, gpu_headroom, host_headroom, plan_, notes)


# --- ds_configs/: the reference DeepSpeed JSON of every strategy ---------------------------------------------


def reference_name(strategy: Strategy, precision: str) -> str:
    """Returns the reference file name: what it does, e.g. zero3_bf16_offload_all.json."""
    suffix = ""
    if strategy.offload_param != "none":
        suffix = "_offload_all"
    elif strategy.offload_optimizer != "none":
        suffix = "_offload_optimizer"
    return f"zero{strategy.stage}_{precision}{suffix}.json"


def reference_ds_configs() -> dict[str, dict[str, Any]]:
    """Returns {file name: config} for every strategy in bf16 and fp16, at hidden size REFERENCE_HIDDEN_SIZE,
    micro-batch 1, accumulation 1, one GPU: the files in ds_configs/."""
    configs = {}
    for precision in ("bf16", "fp16"):
        for strategy in STRATEGIES.values():
            configs[reference_name(strategy, precision)] = build_ds_config(
                strategy,
                micro_batch_size=1,
                gradient_accumulation_steps=1,
                world_size=1,
                precision=precision,
                hidden_size=REFERENCE_HIDDEN_SIZE,
            )
    return configs


def reference_text(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2) + "\n"


def write_ds_configs(directory: Path = DS_CONFIGS_DIR, *, check: bool = False) -> list[str]:
    """Writes (or with `check`, compares) ds_configs/; returns the names of files that differed."""
    directory.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, config in reference_ds_configs().items():
        path = directory / name
        text = reference_text(config)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
            if not check:
                path.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zero_planner.planner", description="Regenerate ds_configs/.")
    parser.add_argument("--write-ds-configs", action="store_true", help="write the reference DeepSpeed JSONs")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when a file differs")
    parser.add_argument("--dir", type=Path, default=DS_CONFIGS_DIR)
    args = parser.parse_args(argv)
    if not (args.write_ds_configs or args.check):
        parser.error("nothing to do: give --write-ds-configs or --check")
    stale = write_ds_configs(args.dir, check=args.check)
    verb = "differ" if args.check else "written"
    print(
        f"{len(stale)} of {len(reference_ds_configs())} files {verb} in {args.dir}"
        + (f": {', '.join(stale)}" if stale else "")
    )
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

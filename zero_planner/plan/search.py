"""The choice: for every strategy and checkpointing setting, the largest micro-batch that fits; the fastest wins.

    plan(spec, cluster, PlanRequest(seq_len=2048))   -> PlanResult (candidates, chosen, Plan or advice)

Pure planning code: numbers in, a pydantic Plan out; no torch, transformers or deepspeed import (DeepSpeed's
own config check, `validate_ds_config`, is the caller's choice: it costs seconds).

The planner's other jobs live in modules named after them, below this one:
    checks.py            input checks (precision, stage, sequence and batch values, method, task)
    fit.py               safety margins and why an estimate does not fit
    options.py           what the search weighs: Option, PlanResult, the memoised Evaluator, known failures
    advice.py            when nothing fits, what would
    assemble.py          the plan file of a chosen option
    userconfig.py        --ds-config: reading and estimating a user's DeepSpeed JSON (beside the search)
    reference_configs.py ds_configs/, the reference JSON of every strategy
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from zero_planner.errors import InputError
from zero_planner.hardware import Cluster
from zero_planner.models.spec import ModelSpec
from zero_planner.plan.advice import _ckpt_text, advice
from zero_planner.plan.assemble import build_plan
from zero_planner.plan.checks import (ADAPTER_METHODS, adapter_lora, check_inputs, resolve_precision,
                                     resolve_strategies)  # fmt: skip
from zero_planner.plan.fit import _gib
from zero_planner.plan.memory import adapted_linears, param_adapters, sdpa_math_kernel, trainable_params
from zero_planner.plan.options import Evaluator, Option, PlanResult, known_failure
from zero_planner.plan.request import PlanRequest
from zero_planner.strategies import STRATEGIES, Strategy

MAX_MICRO_BATCH = 64
"""Upper end of the micro-batch search: beyond it throughput no longer improves and accumulation is cheaper."""


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
    ev: Evaluator, strategy: Strategy, ckpt: bool, *, micro_batch: int | None, global_batch: int | None
) -> tuple[Option, str | None]:
    """Returns the option for (strategy, ckpt) at its largest fitting (or the given) micro-batch, and a batch note."""
    world = ev.cluster.world_size
    broken = known_failure(ev.method, strategy)
    if broken:
        micro = micro_batch or 1
        return Option(strategy, ckpt, micro, 1, ev.memory(strategy, ckpt, micro), False, broken), None
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


T = TypeVar("T")

SPEED_TIE = 0.005
"""Candidates within this fraction of the fastest one's modelled tokens/s are a tie (far inside the step-time
model's error, catalog/step_time.json and benchmarks/throughput_check.py): the simpler strategy wins, then no
checkpointing, then the larger micro-batch. Without it a 0.1% edge chose ZeRO-2 offload at 14.0 of 14.1 GiB over ZeRO-1 at 10.9 GiB."""


def _rank_key(option: Option) -> tuple:
    order = list(STRATEGIES.values()).index(option.strategy) if option.strategy in STRATEGIES.values() else 99
    # Fastest first; on a tie the simpler strategy, then no checkpointing, then the larger micro-batch.
    return (-round(option.tokens_per_second, 6), order, option.gradient_checkpointing, -option.micro_batch_size)


def pick_fastest(items: Sequence[T], speed: Callable[[T], float], simpler: Callable[[T], Any]) -> T:
    """Returns the item to run: of those within SPEED_TIE of the fastest `speed`, the least by `simpler`. The
    planner's choice (_choose) and benchmarks/throughput_check's plan quality both choose by this rule."""
    speeds = [speed(item) for item in items]
    fastest = max(speeds)
    return min((item for item, s in zip(items, speeds) if s >= fastest * (1 - SPEED_TIE)), key=simpler)


def _choose(feasible: list[Option]) -> Option:
    """Returns the candidate to run: of those within SPEED_TIE of the fastest, the simplest (_rank_key's order)."""
    return pick_fastest(feasible, lambda o: o.tokens_per_second, lambda o: _rank_key(o)[1:])


def plan(spec: ModelSpec, cluster: Cluster, request: PlanRequest) -> PlanResult:
    """Returns the PlanResult: every (strategy, checkpointing) option at its largest fitting micro-batch, the
    fastest that fits under the safety margin, and its Plan; or, when none fits, advice in numbers.

    `request` (request.PlanRequest) says what is asked: `micro_batch` None searches 1..MAX_MICRO_BATCH (capped at
    the per-GPU global batch); `grad_ckpt` None tries both; `stage` "auto" tries all seven strategies; `margin`
    False judges fit against the full GPU and host capacity instead of gpu_limit_bytes / host_limit_bytes; the
    other fields as PlanRequest documents them. Raises InputError for bad values.
    """
    r = request
    method, seq_len, micro_batch, global_batch = r.method, r.seq_len, r.micro_batch, r.global_batch
    check_inputs(spec, seq_len=seq_len, micro_batch=micro_batch, global_batch=global_batch,
                 world_size=cluster.world_size, method=method, task=r.task)  # fmt: skip
    if method == "auto":
        return _plan_auto(spec, cluster, r)
    if method == "qlora" and cluster.is_cpu:
        raise InputError("--method qlora needs CUDA GPUs (bitsandbytes 4-bit); use --method lora with --gpus cpu:N")
    precision = resolve_precision(r.precision, cluster)
    strategies = resolve_strategies(r.stage)
    ckpts = [False, True] if r.grad_ckpt is None else [r.grad_ckpt]
    lora = adapter_lora(method, r.lora) if method in ADAPTER_METHODS else None
    ev = Evaluator(spec, cluster, r.but(precision=precision, lora=lora))

    options, batch_notes = [], {}
    for strategy in strategies:
        for ckpt in ckpts:
            option, note = _option(ev, strategy, ckpt, micro_batch=micro_batch, global_batch=global_batch)
            options.append(option)
            batch_notes[(strategy, ckpt)] = note
    feasible = sorted((o for o in options if o.fits), key=_rank_key)
    chosen = _choose(feasible) if feasible else None
    notes: list[str] = []
    if cluster.cpu_memory_source == "assumed":
        notes.append(
            f"host memory {_gib(cluster.cpu_memory_bytes)} per node is assumed for {cluster.gpu.name} machines; "
            f"pass --cpu-mem SIZE for yours"
        )
    if sdpa_math_kernel(spec, ev.workload(False, 1)):
        why = ("fp32 with grouped-query attention, which no fused kernel takes" if precision == "fp32" else
               f"the model hands it {spec.num_key_value_heads} key/value head(s) for {spec.num_attention_heads} query "
               f"heads without enable_gqa, which torch's fused kernels refuse")  # fmt: skip
        notes.append(f"attention runs SDPA's math kernel ({why}): every layer keeps its fp32 scores, counted above in "
                     f"memory and tokens/s")  # fmt: skip
    stacks = param_adapters(spec, ev.workload(False, 1))
    if stacks:
        adapters = trainable_params(spec, ev.workload(False, 1))
        notes.append(
            f"LoRA adapts {adapted_linears(spec)} linear layers and {stacks['count']} expert weights "
            f"({', '.join(stacks['names'])}) through peft {stacks['peft']}'s lora.ParamWrapper, as its \"all-linear\" "
            f"does for {spec.model_type}: {adapters / 1e6:,.1f}M trainable parameters, lora_dropout 0 (ParamWrapper "
            f"refuses dropout); --lora-targets q_proj,k_proj,v_proj,o_proj leaves the experts frozen")  # fmt: skip
    if chosen is None:
        result = PlanResult(spec, cluster, precision, seq_len, options, None, None, notes)
        runnable = [s for s in strategies if not known_failure(method, s)] or strategies
        result.advice = advice(result, ev, micro_batch=micro_batch, ckpts=ckpts, strategies=runnable)
        return result
    if batch_notes[(chosen.strategy, chosen.gradient_checkpointing)]:
        notes.append(batch_notes[(chosen.strategy, chosen.gradient_checkpointing)])
    result = PlanResult(spec, cluster, precision, seq_len, options, chosen, None, notes)
    result.plan = build_plan(result, ev.request)
    return result


def _plan_auto(spec: ModelSpec, cluster: Cluster, request: PlanRequest) -> PlanResult:
    """Returns full fine-tuning's plan when it fits, else the faster of LoRA and QLoRA that fits, with what
    each method costs in the notes (and full fine-tuning's explanation when nothing fits).

    Full fine-tuning comes first because it is what LoRA and QLoRA approximate; between the adapter methods
    the step-time model decides (QLoRA's 4-bit base also costs some quality, which the notes leave to the user).
    """
    results = {"full": plan(spec, cluster, request.but(method="full"))}
    if not results["full"].fits:
        for method in ["lora"] + ([] if cluster.is_cpu else ["qlora"]):
            results[method] = plan(spec, cluster, request.but(method=method))
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
        runnable = [o for o in result.options if not known_failure(method, o.strategy)] or result.options
        best = result.chosen or min(runnable, key=lambda o: o.memory.total_bytes)
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


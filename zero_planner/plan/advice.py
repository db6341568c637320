"""When nothing fits: what would, in numbers (another stage, more host memory, more GPUs, a shorter
sequence, LoRA/QLoRA). Every suggestion is itself evaluated with the memory model before it is offered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from zero_planner.hardware import Cluster
from zero_planner.plan.fit import GIB, HOST_MARGIN_FRACTION, _gib
from zero_planner.plan.memory import MemoryEstimate, trainable_params
from zero_planner.plan.options import Evaluator, PlanResult, known_failure
from zero_planner.strategies import STRATEGIES, Strategy

MAX_WORLD_SIZE_SEARCHED = 64
"""When nothing fits, the planner looks for the smallest number of GPUs of the same type that would, up to this."""
MIN_SEQ_LEN_SUGGESTED = 64
"""When nothing fits, shorter sequences are tried by halving down to this length."""


def _smallest(
    ev: Evaluator, strategies: Sequence[Strategy], ckpts: Sequence[bool]
) -> tuple[Strategy, bool, MemoryEstimate]:
    """Returns the (strategy, ckpt, memory) at micro-batch 1 with the smallest per-GPU total."""
    return min(((s, c, ev.memory(s, c, 1)) for s in strategies for c in ckpts), key=lambda t: t[2].total_bytes)


def _first_fit(
    ev: Evaluator, strategies: Sequence[Strategy], ckpts: Sequence[bool], micro_batch: int | None = None
) -> tuple[Strategy, bool, MemoryEstimate, int] | None:
    """Returns the first (strategy, ckpt, memory, micro-batch) that fits, in strategy order, or None: at the
    user's --micro-batch where given (what they asked for), else, or where nothing fits there, at micro-batch 1."""
    for mb in dict.fromkeys((micro_batch or 1, 1)):
        for strategy in strategies:
            for ckpt in ckpts:
                if ev.why_not(strategy, ckpt, mb) is None:
                    return strategy, ckpt, ev.memory(strategy, ckpt, mb), mb
    return None


def _ckpt_text(ckpt: bool) -> str:
    return "with gradient checkpointing" if ckpt else "without checkpointing"


def _fit_text(fit: tuple[Strategy, bool, MemoryEstimate, int], *, host: bool = False,
              asked: int | None = None) -> str:
    """Returns how a _first_fit answer fits: its stage and checkpointing at its micro-batch, with the GiB per GPU
    (and per host node); `asked` (the user's --micro-batch) is named where the fit needed a smaller one."""
    strategy, ckpt, memory, mb = fit
    host_text = f", {_gib(memory.cpu_total_bytes)} host per node" if host else ""
    return (f"stage {strategy.name} {_ckpt_text(ckpt)} at micro-batch {mb} ({_gib(memory.total_bytes)} per "
            f"GPU{host_text}{_not_asked(asked, mb)})")


def _not_asked(asked: int | None, micro_batch: int) -> str:
    """Returns ', not at --micro-batch 8' where a fit needed a smaller micro-batch than the user's."""
    return f", not at --micro-batch {asked}" if asked and asked != micro_batch else ""


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
    ev: Evaluator,
    *,
    micro_batch: int | None,
    ckpts: Sequence[bool],
    strategies: Sequence[Strategy],
) -> list[str]:
    """Returns what would make a plan fit, each line with its numbers: the smallest option's need, another
    stage or checkpointing, more host memory (offload), more GPUs, a shorter sequence, LoRA/QLoRA."""
    cluster, spec = result.cluster, result.spec
    every = [s for s in STRATEGIES.values() if not known_failure(ev.method, s)]
    both = [False, True]
    lines = []
    strategy, ckpt, memory = _smallest(ev, strategies, ckpts)
    lines.append(
        f"smallest option: stage {strategy.name} {_ckpt_text(ckpt)}, micro-batch 1, needs {_gib(memory.total_bytes)} "
        f"per GPU (limit {_gib(ev.gpu_cap_bytes)} of {_gib(cluster.gpu.memory_bytes)}) and "
        f"{_gib(memory.cpu_total_bytes)} of host memory per node (limit {_gib(ev.host_cap_bytes)})"
    )
    if micro_batch is not None and micro_batch > 1:
        fit = _first_fit(ev, strategies, ckpts, 1)
        if fit:
            lines.append(
                f"--micro-batch 1 fits (stage {fit[0].name} {_ckpt_text(fit[1])}, {_gib(fit[2].total_bytes)} per GPU)"
            )
    if len(strategies) < len(every) or len(ckpts) < 2:
        fit = _first_fit(ev, every, both, micro_batch)
        if fit:
            flag = "--grad-checkpointing" if fit[1] else "--no-grad-checkpointing"
            lines.append(f"--stage {fit[0].name} {flag} fits at micro-batch {fit[3]} ({_gib(fit[2].total_bytes)} "
                         f"per GPU{_not_asked(micro_batch, fit[3])})")

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
        fit = _first_fit(bigger_ev, every, both, micro_batch)
        if fit:
            found = (bigger, fit)
            break
    if found:
        bigger, fit = found
        lines.append(f"more GPUs: --gpus {_gpus_text(bigger)} fits with {_fit_text(fit, host=True, asked=micro_batch)}")
    elif not cluster.is_cpu:
        lines.append(
            f"more GPUs: no count of {cluster.gpu.name} up to {MAX_WORLD_SIZE_SEARCHED} fits at --seq-len {ev.seq_len}"
        )

    # A shorter sequence.
    seq = ev.seq_len // 2
    while seq >= MIN_SEQ_LEN_SUGGESTED:
        short_ev = ev.like(seq_len=seq)
        fit = _first_fit(short_ev, every, both, micro_batch)
        if fit:
            lines.append(f"a shorter sequence: --seq-len {seq} fits with {_fit_text(fit, asked=micro_batch)}")
            break
        seq //= 2
    else:
        lines.append(f"a shorter sequence: none down to {MIN_SEQ_LEN_SUGGESTED} tokens fits on {_gpus_text(cluster)}")

    if ev.method == "full":
        fitting = []
        for method in ("lora",) + (() if cluster.is_cpu else ("qlora",)):
            adapter_ev = ev.like(method=method)
            # the strategies DeepSpeed runs for this method (LoRA under ZeRO-3 parameter offload does not run)
            runnable = [s for s in STRATEGIES.values() if not known_failure(method, s)]
            fit = _first_fit(adapter_ev, runnable, both, micro_batch)
            if fit:
                trainable = trainable_params(spec, adapter_ev.workload(False, 1))
                fitting.append(f"--method {method} (r={adapter_ev.lora.r}: {trainable / 1e6:.1f}M trainable parameters) "
                               f"fits with {_fit_text(fit, asked=micro_batch)}")  # fmt: skip
            else:
                broken = _first_fit(adapter_ev, [s for s in STRATEGIES.values() if known_failure(method, s)], both)
                if broken:
                    lines.append(f"--method {method} fits only with stage {broken[0].name}, which does not run: "
                                 f"{known_failure(method, broken[0]).removeprefix('does not run: ')}")  # fmt: skip
        if fitting:
            lines += fitting
            lines.append("--method auto plans " + ("both and takes the faster that fits" if len(fitting) > 1 else
                                                   "full fine-tuning first and this where it does not fit"))  # fmt: skip
        else:
            lines.append("--method lora / qlora: no strategy fits at micro-batch 1 either")
    return lines

"""Input checks: values no plan can use, each refused with the value and what is allowed.

    resolve_precision("auto", cluster)  -> "bf16" | "fp16" | "fp32"
    resolve_strategies("auto")          -> the strategies to evaluate
    check_inputs(spec, seq_len=..., ...) raises InputError

Whether the inputs are coherent, not whether this machine can run them (that is the search's job).
"""

from __future__ import annotations

from zero_planner.errors import InputError, closest
from zero_planner.hardware import Cluster
from zero_planner.models.spec import ModelSpec
from zero_planner.planfile import LoraInfo
from zero_planner.strategies import STRATEGIES, Strategy

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
METHODS = ("full", "lora", "qlora", "auto")
ADAPTER_METHODS = ("lora", "qlora")
TASKS = ("causal-lm", "seq-cls")
STAGES = ("auto", *STRATEGIES)


def adapter_lora(method: str, lora: LoraInfo | None) -> LoraInfo:
    """Returns the adapters an adapter `method` (lora, qlora) trains: `lora` (LoraInfo's defaults where None) on a
    4-bit NF4 base for qlora, a 16-bit one for lora."""
    return (lora or LoraInfo()).model_copy(update={"quantization": "nf4" if method == "qlora" else "none"})


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


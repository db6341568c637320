"""The plan file from a chosen option: its DeepSpeed JSON, estimate, every candidate and the launch command."""

from __future__ import annotations

from typing import Any

from zero_planner.hardware import Cluster
from zero_planner.models.spec import ModelSpec
from zero_planner.plan.checks import ADAPTER_METHODS
from zero_planner.plan.command import launch_command
from zero_planner.plan.dsconfig import build_ds_config
from zero_planner.plan.memory import MemoryEstimate, Workload, trainable_params
from zero_planner.plan.options import Option, PlanResult
from zero_planner.plan.request import PlanRequest
from zero_planner.planfile import (
    Candidate,
    CpuEstimate,
    Estimate,
    HardwareInfo,
    LaunchInfo,
    LoraInfo,
    ModelInfo,
    PerGpuEstimate,
    Plan,
    StrategyInfo,
    TrainingInfo,
)
from zero_planner.strategies import Strategy


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
            phases=dict(memory.phase_peaks),
            binding_phase=memory.binding_phase if memory.phase_peaks else None,
        ),
        cpu=CpuEstimate(total=memory.cpu_total_bytes, phases=dict(memory.host_phase_peaks),
                        data_bytes=memory.data_bytes, data_peak_bytes=memory.data_peak_bytes),
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
        tokens_per_second=option.tokens_per_second,  # null for CPU plans: Plan.check_no_cpu_throughput
        reason=option.reason,
        chosen=chosen,
        bound=option.step.bound if option.fits and option.step is not None and option.step.modelled else None,
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


def _assemble(spec: ModelSpec, cluster: Cluster, option: Option, request: PlanRequest, *, ds_config: dict[str, Any],
              candidates: list[Candidate], notes: list[str]) -> Plan:
    """Returns the Plan of `option` with this DeepSpeed JSON, candidates and notes; `request` as the evaluator
    resolved it (a precision, one method, the adapters it ran)."""
    r = request
    seq_len, precision, method, task, lora, num_labels = r.seq_len, r.precision, r.method, r.task, r.lora, r.num_labels
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
        model=_model_info(spec, r.model_name, trainable_params(spec, workload)),
        hardware=_hardware_info(cluster),
        training=training,
        strategy=_strategy_info(option.strategy),
        estimate=_estimate(option.memory),
        candidates=candidates,
        deepspeed_config=ds_config,
        launch=LaunchInfo(command=[]),
        notes=notes,
    )
    result.launch = LaunchInfo(command=launch_command(result, r.plan_path))
    return result


def build_plan(result: PlanResult, request: PlanRequest) -> Plan:
    """Returns the Plan for `result.chosen`: its DeepSpeed JSON, estimate, every candidate and the launch command;
    `request` as the search's evaluator resolved it (Evaluator.request)."""
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
    return _assemble(result.spec, result.cluster, chosen, request, ds_config=ds_config, candidates=candidates,
                     notes=notes)

"""What the search weighs: one evaluated candidate (Option), the search's result (PlanResult), and the memoised
estimates it is made from (Evaluator); also the combinations DeepSpeed cannot run whatever the memory.

    Evaluator(spec, cluster, request, buffers)  request: a PlanRequest, its precision and method resolved
        .memory(strategy, ckpt, micro, accum)   -> MemoryEstimate (memoised)
        .why_not(strategy, ckpt, micro, accum)  -> None, or why it does not fit under the caps
        .step(strategy, ckpt, micro, accum)     -> StepTime
    known_failure(method, strategy)             -> None, or why DeepSpeed cannot run it

Below the search (search.py) and the modules that work on its results (advice.py, assemble.py, userconfig.py),
so that each of them imports these types instead of the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zero_planner.errors import InputError
from zero_planner.hardware import Cluster
from zero_planner.models.spec import ModelSpec
from zero_planner.plan.fit import gpu_limit_bytes, host_limit_bytes, why_not
from zero_planner.plan.memory import MemoryEstimate, Workload, ZeroBuffers, estimate_memory, param_adapters
from zero_planner.plan.throughput import StepTime, estimate_step_time
from zero_planner.plan.request import PlanRequest
from zero_planner.planfile import LoraInfo, Plan
from zero_planner.strategies import Strategy


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


class Evaluator:
    """Memoised estimate_memory for one model, cluster, sequence length and precision."""

    def __init__(self, spec: ModelSpec, cluster: Cluster, request: PlanRequest, buffers: ZeroBuffers | None = None):
        """`request` as the search resolved it: a precision (bf16, fp16, fp32), not auto, and one method; its
        stage, micro-batch, global batch and checkpointing are the search's to try, not read here. `buffers`: the
        bucket sizes (None: the planner's for this model)."""
        self.spec, self.cluster, self.request = spec, cluster, request
        self.seq_len, self.precision, self.method, self.task = request.seq_len, request.precision, request.method, \
            request.task  # fmt: skip
        self.pretrained, self.keeps_outputs = request.pretrained, request.keeps_outputs
        # Workload's: a user's dataset, per rank
        self.data_bytes, self.data_peak_bytes = request.data_bytes, request.data_peak_bytes
        self.calibration = request.calibration  # None: the committed constants (throughput.load_calibration)
        self.lora = request.lora or LoraInfo()  # rank and dropout matter here; the method says whether it is 4-bit
        self.num_labels = request.num_labels
        self.margin = request.margin
        self.gpu_cap_bytes = gpu_limit_bytes(cluster.gpu.memory_bytes) if self.margin else cluster.gpu.memory_bytes
        self.host_cap_bytes = host_limit_bytes(cluster.cpu_memory_bytes) if self.margin else cluster.cpu_memory_bytes
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
            lora_targets=None if self.lora.target_modules == "all-linear" else tuple(self.lora.target_modules),
            num_labels=self.num_labels,
            pretrained=self.pretrained,
            keeps_outputs=self.keeps_outputs,
            data_bytes=self.data_bytes,
            data_peak_bytes=self.data_peak_bytes,
        )

    def memory(self, strategy: Strategy, ckpt: bool, micro: int, accum: int = 1) -> MemoryEstimate:
        key = (strategy, ckpt, micro, accum)
        if key not in self._cache:
            self._cache[key] = estimate_memory(
                self.spec, strategy, self.workload(ckpt, micro, accum), self.buffers, gpu_name=self.cluster.gpu.name)
        return self._cache[key]

    def why_not(self, strategy: Strategy, ckpt: bool, micro: int, accum: int = 1) -> str | None:
        return why_not(self.memory(strategy, ckpt, micro, accum), self.gpu_cap_bytes, self.host_cap_bytes)

    def like(
        self, cluster: Cluster | None = None, seq_len: int | None = None, method: str | None = None,
        keeps_outputs: bool | None = None,
    ) -> "Evaluator":
        """Returns an evaluator for the same model and settings on another cluster, sequence length or method."""
        changed = {"seq_len": seq_len, "method": method, "keeps_outputs": keeps_outputs}
        request = self.request.but(**{name: value for name, value in changed.items() if value is not None})
        return Evaluator(self.spec, cluster or self.cluster, request, self.buffers)

    def step(self, strategy: Strategy, ckpt: bool, micro: int, accum: int) -> StepTime:
        return estimate_step_time(self.spec, strategy, self.cluster.gpu, self.workload(ckpt, micro, accum),
                                  self.calibration, self.buffers)


def lora_for_model(spec: ModelSpec, lora: LoraInfo, method: str, *, dropout_given: str | None) -> LoraInfo:
    """Returns `lora` as peft can run it on this model: dropout 0 where its adapters include lora.ParamWrapper
    (mixture-of-experts stacks, memory.param_adapters), which refuses any other. Raises InputError where a dropout
    was given (`dropout_given` names where: "--lora-dropout 0.05", "axolotl.yml lora_dropout 0.05") or where peft,
    which decides what "all-linear" adapts on such a model, is not installed."""
    if method not in ("lora", "qlora") or not spec.param_adapters:
        return lora
    targets = None if lora.target_modules == "all-linear" else tuple(lora.target_modules)
    stacks = param_adapters(spec, Workload(1, 1, False, "bf16", method=method, lora_targets=targets))
    if stacks is None:
        return lora
    if stacks.get("peft") is None:
        raise InputError(
            f"--method {method} on {spec.name}: which of its expert weights LoRA adapts is peft's decision, and peft "
            f"is not installed (pip install peft)")  # fmt: skip
    if lora.dropout == 0:
        return lora
    if dropout_given:
        raise InputError(
            f"{dropout_given}: peft's lora.ParamWrapper, which puts LoRA on {spec.name}'s expert weights "
            f"({', '.join(stacks['names'])}), refuses dropout; use 0, or targets that leave the experts frozen "
            f"(--lora-targets q_proj,k_proj,v_proj,o_proj)")  # fmt: skip
    return lora.model_copy(update={"dropout": 0.0})


def known_failure(method: str, strategy: Strategy) -> str | None:
    """Returns why DeepSpeed cannot run this combination whatever the memory (None when it can).

    LoRA with ZeRO-3's parameters offloaded stops in the first training step with DeepSpeed 0.19.8's assertion
    "Cannot partition a param in flight" (partition_parameters.py _partition_param), with and without gradient
    checkpointing: measured with zero-run on Llama 3.2 1B and Mistral-7B LoRA in fp16 (H100 and H200, each
    capped at a T4's memory, 2026-11-25; benchmarks/results/*phases-r3*, *phases-r4*). QLoRA there is not
    measured: its frozen base is partitioned the same way, so it is left out too."""
    if method in ("lora", "qlora") and strategy.offload_param != "none":
        return ("does not run: DeepSpeed 0.19 stops LoRA with ZeRO-3 parameter offload in its first step "
                "(\"Cannot partition a param in flight\"; measured)")
    return None

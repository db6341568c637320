"""The plan file: pydantic models, load and save. `schema_version` comes first in every file.

All memory figures are int bytes (docs/design.md). Fields other code relies on are documented there; more may be
added, but a rename or a change of meaning bumps SCHEMA_VERSION.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator

from zero_planner.errors import InputError, closest

SCHEMA_VERSION = 1
CPU_DEVICE = "cpu"
"""hardware.gpu of a `--gpus cpu:N` plan: the GPU catalog's placeholder entry for CPU processes."""
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
"""The local data files `training.dataset` may name, by suffix, and the `datasets` builder that reads each (zero-run
loads them so, and the TRL hand-off writes the same `load_dataset` call)."""

Precision = Literal["bf16", "fp16", "fp32"]
Method = Literal["full", "lora", "qlora"]
Task = Literal["causal-lm", "seq-cls"]
Offload = Literal["none", "cpu", "nvme"]
SavePolicy = Literal["none", "final", "steps"]
ReportTo = Literal["tensorboard", "csv", "wandb"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class _OmitsUnsetProbe(_Model):
    """Leaves `probe` out of the JSON while it is None, so plans nobody probed are written as before."""

    @model_serializer(mode="wrap")
    def _omit_unset_probe(self, handler):
        data = handler(self)
        if isinstance(data, dict) and data.get("probe", 0) is None:
            del data["probe"]
        return data


class ModelInfo(_Model):
    name: str
    """What the user passed to --model (catalog name, hub id or path)."""
    hub_id: str | None = None
    source: str = "catalog"
    """catalog | hub | folder | file: where the config came from."""
    params: int
    """Total parameter count, tied tensors counted once."""
    trainable_params: int
    """Parameters the optimizer updates (all for full fine-tuning; the adapters for LoRA/QLoRA)."""
    init: Literal["pretrained", "random"] = "random"
    """pretrained: zero-run loads the weights (from_pretrained of `load_path`); random: it initialises them
    randomly (asked for with --init random, or only a config exists)."""
    weights_path: str | None = None
    load_path: str | None = None
    """What zero-run hands to from_pretrained: a local folder, or a hub id read through the Hugging Face cache
    (HF_HUB_OFFLINE honoured). None for random init."""
    load_sharded: bool = False
    """True when the weights load partitioned (ZeRO-3: zero.Init via HfDeepSpeedConfig), so a node holds one
    copy of them in memory, not one per rank; False: every rank loads the whole model."""
    largest_layer: str | None = None
    largest_layer_params: int | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    """The model's config.json, so zero-run can build the model with no network."""


class HardwareInfo(_Model):
    gpu: str
    nodes: int = 1
    gpus_per_node: int
    gpu_memory_bytes: int
    cpu_memory_bytes: int
    """Host memory per node available to the run."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


class LoraInfo(_Model):
    """LoRA / QLoRA adapter settings (peft)."""

    r: int = 16
    """Adapter rank."""
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"
    """peft's target_modules: "all-linear" (every linear layer but the output head) or module names."""
    quantization: Literal["none", "nf4"] = "none"
    """nf4: QLoRA, frozen linear weights stored in 4-bit NF4 (bitsandbytes) with double quantisation."""


class TrainingInfo(_Model):
    micro_batch_size: int = Field(ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    seq_len: int = Field(ge=1)
    gradient_checkpointing: bool
    precision: Precision
    method: Method = "full"
    task: Task = "causal-lm"
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    num_labels: int = 2
    """seq-cls only: classes of the classification head."""
    lora: LoraInfo | None = None
    """Set for method lora / qlora."""
    max_steps: int = Field(50, ge=0)
    """Optimizer steps; 0 with `epochs`: no cap (the epochs decide)."""
    output_dir: str = "runs/zero-run"
    dataset: str = "synthetic"
    """synthetic (built in), a hub dataset name (`name` or `name:config`), or local
    .json/.jsonl/.csv/.parquet/.txt files (a file, folder or glob)."""
    text_field: str = "text"
    """Column of plain text (causal-lm: packed; seq-cls: classified)."""
    data_format: Literal["auto", "text", "chat", "prompt-response"] = "auto"
    """auto: chat when the data has a `messages_field` column, prompt-response when it has both
    `prompt_field` and `response_field`, else text. chat/prompt-response go through the tokenizer's chat
    template and train on the answers only (every other token's label is -100)."""
    messages_field: str = "messages"
    prompt_field: str = "prompt"
    response_field: str = "response"
    eval_split: str | None = None
    """Held-out data for eval loss: a split name of a hub dataset (`validation`), a local file, or a share of
    the training rows (`0.05`: 5%; `200`: 200 rows). None: no evaluation."""
    eval_every: int | None = None
    """Optimizer steps between evaluations (None: at every checkpoint and at the end)."""
    tokenizer: str | None = None
    """None: the model's own (from its folder or hub id; an error when it has none); `bytes`: the built-in
    byte-level tokenizer (for random-init models); else a folder or hub id to load one from."""
    learning_rate: float = 2e-5
    """Peak learning rate; zero-run writes it into deepspeed_config's optimizer (the two always agree)."""
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    """After warmup: constant, linear decay to 0, or cosine decay to 0 at the last step (transformers'
    get_scheduler, so HF Trainer with the same settings follows the same curve)."""
    warmup: float = 0
    """Linear warmup from 0: a number of optimizer steps when >= 1, a share of the run when below 1."""
    epochs: float | None = None
    """Passes over the training data; sets the run's length (max_steps, when set above 0, caps it)."""
    save: SavePolicy = "steps"
    """What zero-run keeps on disk. steps: a DeepSpeed checkpoint (weights and optimizer states, resumable) every
    `save_every` steps, at the last step and when interrupted, the newest `save_total_limit` kept, then the final
    export. final: only the final export (the 16-bit model; the adapter for LoRA/QLoRA), also written when the run
    is interrupted (the model so far: no optimizer states, so no --resume). none: nothing but run_report.json.
    Plans written before this field: steps, or final where save_every is 0."""
    save_every: int = Field(25, ge=0)
    """Optimizer steps between checkpoints (save steps); 0: none (the same as save final)."""
    save_total_limit: int = Field(2, ge=1)
    """Complete checkpoints kept (save steps): the newest ones; the one a run resumed from is never deleted."""
    report_to: list[ReportTo] = Field(default_factory=list)
    """Where zero-run also logs its metrics, through DeepSpeed's monitor (the `tensorboard`, `csv_monitor` and
    `wandb` sections of deepspeed_config, written under output_dir/logs): loss, eval loss, learning rate,
    tokens/s and peak memory per optimizer step. Empty: progress lines and run_report.json only."""
    log_every: int = 5
    seed: int = 1234

    @model_validator(mode="before")
    @classmethod
    def _save_of_older_plans(cls, data: Any) -> Any:
        """A plan without `save` keeps the behaviour it was written for: save_every 0 meant the final export only."""
        if isinstance(data, dict) and "save" not in data:
            data = {**data, "save": "final" if data.get("save_every", 25) == 0 else "steps"}
        return data

    @model_validator(mode="after")
    def check_save_interval(self) -> "TrainingInfo":
        if self.save == "steps" and self.save_every == 0:
            raise ValueError("save 'steps' needs save_every above 0 (save_every 0 is save 'final')")
        return self


class StrategyInfo(_Model):
    stage: int = Field(ge=0, le=3)
    offload_optimizer: Offload = "none"
    offload_param: Offload = "none"
    name: str = ""
    """Short name: 0, 1, 2, 2-offload, 3, 3-offload, 3-offload-all."""


class PerGpuEstimate(_Model):
    params: int
    gradients: int
    optimizer: int
    activations: int
    buffers: int
    overhead: int
    peak_allocated: int
    """The largest of `phases`: torch.cuda.max_memory_allocated() over the whole run."""
    total: int
    phases: dict[str, int] = Field(default_factory=dict)
    """Predicted peak allocated bytes of each phase of a run (memory.PHASES: load, initialize, resume, train,
    eval, save, export); empty in plans written before phases were modelled (their peak was the train phase's)."""
    binding_phase: str | None = None
    """The phase whose peak is `peak_allocated`."""


class CpuEstimate(_Model):
    total: int
    """Host memory per node the run needs: offloaded states, pinned buffers, one process per GPU, at the largest
    of its phases."""
    phases: dict[str, int] = Field(default_factory=dict)
    """Host memory per node of the phases that hold more than loading and training may: initialize (ZeRO-3),
    train, save, export, resume (memory.host_phase_peaks); empty in older plans."""
    data_bytes: int | None = None
    """Host bytes each rank holds for the dataset as the phases count it (data.held_data_bytes at planning; 0 for
    the built-in corpus and hub datasets); None in plans written before it was recorded."""
    data_peak_bytes: int | None = None
    """The same while each rank tokenizes and packs it (the load phase)."""


class Estimate(_Model):
    per_gpu: PerGpuEstimate
    cpu: CpuEstimate


ProbeStatus = Literal["ok", "oom", "error", "interrupted", "skipped"]


class ProbeAttempt(_Model):
    """One launch of a candidate by `--probe`: the micro-batch it ran at and how it ended."""

    micro_batch_size: int
    status: ProbeStatus
    message: str = ""


class ProbeResult(_Model):
    """What `--probe` measured for one candidate (zero_planner/run/probe.py); measured figures are None when not run."""

    status: ProbeStatus
    """ok: ran; oom: out of GPU memory down to micro-batch 1; error: failed otherwise; interrupted: Ctrl-C;
    skipped: this machine cannot run it (the preflight's reason in `message`)."""
    micro_batch_size: int
    """The micro-batch of the last attempt: the one measured when status is ok."""
    gradient_accumulation_steps: int = 1
    tokens_per_second: float | None = None
    """Whole cluster, over the steps after the warm-up, as zero_planner.train times them."""
    peak_allocated_bytes: int | None = None
    """Busiest rank's torch.cuda.max_memory_allocated(); None on CPU processes (no device allocator)."""
    peak_reserved_bytes: int | None = None
    host_rss_bytes: int | None = None
    """Largest peak host RSS of any rank."""
    steps: int = 0
    warmup_steps: int = 0
    """Steps left out of tokens_per_second."""
    rank: int | None = None
    """1 = fastest measured; None when it did not run."""
    message: str = ""
    attempts: list[ProbeAttempt] = Field(default_factory=list)


class ProbeSummary(_Model):
    """The plan file's record of a `--probe` run: where and how it measured, and what it chose."""

    probed: list[int]
    """Indices into candidates[] in the order they were run (the planner's ranking)."""
    chosen: int | None
    """Index into candidates[] of the fastest measured; None when none ran (the analytic choice stays)."""
    planned: int | None
    """Index of the candidate the planner chose (step-time model)."""
    reason: str
    steps: int
    warmup_steps: int
    complete: bool = True
    """False when Ctrl-C stopped the probe: only what ran is recorded."""
    device: str = ""
    date: str = ""
    versions: dict[str, str] = Field(default_factory=dict)


class Candidate(_OmitsUnsetProbe):
    strategy: StrategyInfo
    micro_batch_size: int
    gradient_checkpointing: bool
    fits: bool
    estimate: Estimate
    tokens_per_second: float | None
    """Whole-cluster tokens/s of the step-time model (throughput.py), for ranking; None for CPU processes,
    where that model does not apply (see throughput.models_throughput)."""
    reason: str
    chosen: bool = False
    bound: Literal["gpu", "host"] | None = None
    """What sets the pace of the step in the step-time model (throughput.StepTime.bound): the GPU's work, or the
    host's (layer launches, ZeRO-2's buckets, ZeRO-3's hooks), whose speed differs between machines; each has its
    own stated error (Calibration.stated_error). None where tokens/s is not modelled or the candidate does not fit."""
    probe: ProbeResult | None = None
    """Set in plan.probed.json for each candidate `--probe` ran."""


class LaunchInfo(_Model):
    command: list[str]


class Plan(_OmitsUnsetProbe):
    schema_version: int = SCHEMA_VERSION
    model: ModelInfo
    hardware: HardwareInfo
    training: TrainingInfo
    strategy: StrategyInfo
    estimate: Estimate
    candidates: list[Candidate] = Field(default_factory=list)
    deepspeed_config: dict[str, Any]
    launch: LaunchInfo
    notes: list[str] = Field(default_factory=list)
    probe: ProbeSummary | None = None
    """Set in plan.probed.json: the measured ranking that chose this plan's strategy and micro-batch."""

    @model_validator(mode="after")
    def check_no_cpu_throughput(self) -> "Plan":
        """A plan for CPU processes (`--gpus cpu:N`, hardware.gpu "cpu") carries no tokens/s: the step-time model
        is for GPUs and was 250x off on two CPU processes (issue 16), so no figure is written or shown; plan files
        written before load with null."""
        if self.hardware.gpu == CPU_DEVICE:
            for candidate in self.candidates:
                candidate.tokens_per_second = None
        return self

    @model_validator(mode="after")
    def check_deepspeed_agrees(self) -> "Plan":
        _check_deepspeed_agrees(self)
        return self


def _check_deepspeed_agrees(plan: "Plan") -> None:
    """Raises ValueError where deepspeed_config and the plan's own fields say different things: the ranks read the
    micro-batch and accumulation from `training` and hand `deepspeed_config` to DeepSpeed, so an edit to one of them
    would train another batch than DeepSpeed checks, or another stage than the memory figures are for. Values
    DeepSpeed leaves to others ("auto" in a Trainer JSON) are not compared."""
    ds, t = plan.deepspeed_config, plan.training
    pairs = [
        ("train_micro_batch_size_per_gpu", ds.get("train_micro_batch_size_per_gpu"),
         "training.micro_batch_size", t.micro_batch_size),
        ("gradient_accumulation_steps", ds.get("gradient_accumulation_steps"),
         "training.gradient_accumulation_steps", t.gradient_accumulation_steps),
        ("zero_optimization.stage", (ds.get("zero_optimization") or {}).get("stage", 0 if ds else None),
         "strategy.stage", plan.strategy.stage),
    ]  # fmt: skip
    for ds_key, ds_value, key, value in pairs:
        if isinstance(ds_value, int) and not isinstance(ds_value, bool) and ds_value != value:
            raise ValueError(f"deepspeed_config.{ds_key} is {ds_value} but {key} is {value}; make them agree "
                             f"(or plan again)")  # fmt: skip


def save_plan(plan: Plan, path: str | Path) -> None:
    """Writes the plan as indented JSON (schema_version first) via a temp file, so a crash leaves no half file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(plan_json(plan) + "\n")
    tmp.replace(path)


def plan_json(plan: Plan) -> str:
    return json.dumps(plan.model_dump(mode="json"), indent=2)


def load_plan(path: str | Path) -> Plan:
    """Returns the validated plan at `path`; InputError (one line) when missing, not JSON or invalid."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"plan file {str(path)!r} does not exist (make one with zero-plan ... -o {path})") from None
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"plan file {str(path)!r} is not readable JSON: {error}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise InputError(
            f"plan file {str(path)!r} has schema_version {version!r}; this zero-planner reads {SCHEMA_VERSION}"
        )
    unknown = unknown_keys(Plan, data)
    if unknown:
        where, key, known = unknown[0]
        near = closest(key, known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else f" (known keys: {', '.join(sorted(known))})"
        more = f"; {len(unknown) - 1} more unknown key(s)" if len(unknown) > 1 else ""
        raise InputError(f"plan file {str(path)!r} has an unknown key {where}{hint}{more}")
    try:
        return Plan.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"plan file {str(path)!r} is invalid at {where}: {first['msg']}") from None


def unknown_keys(model: type[BaseModel], data: Any, where: str = "") -> list[tuple[str, str, list[str]]]:
    """Returns (dotted path, key, the keys known there) of every key in `data` that `model` has no field for,
    depth first. A misspelt key (`lerning_rate`) would otherwise load as an extra and be silently ignored (the
    models allow extras so that fields written by newer planners still load); free-form dicts (the model's
    config.json, deepspeed_config, phases) are not looked into: DeepSpeed's own parser checks its section."""
    if not isinstance(data, dict):
        return []
    found = []
    fields = model.model_fields
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        field = fields.get(key)
        if field is None:
            found.append((path, key, list(fields)))
            continue
        for sub in _model_types(field.annotation):
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                at = f"{path}[{i}]" if isinstance(value, list) else path
                found += unknown_keys(sub, item, at)
    return found


def _model_types(annotation: Any) -> list[type[BaseModel]]:
    """Returns the pydantic models inside a field's annotation (`X`, `X | None`, `list[X]`)."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [t for arg in typing.get_args(annotation) for t in _model_types(arg)]

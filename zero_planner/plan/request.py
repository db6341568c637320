"""What the user asks the planner for, in one validated object: the search (`search.plan`) and the estimate of a
user's DeepSpeed JSON (`userconfig.estimate_config`) both take a PlanRequest, built once by the CLI, the cluster
comparison and the importers, instead of the same dozen-and-more keyword arguments passed down each chain.

    PlanRequest(seq_len=2048, method="lora")       the CLI's defaults for everything else
    request.but(method="full")                     one field changed, checked again (--method auto plans each
                                                   method so; pydantic's model_copy would not check it)

Types are checked here (pydantic, as the plan file is); values (a sequence length the model cannot take, a batch
the GPUs cannot split) are checked against the model and cluster by checks.check_inputs, which names the flag.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt

from zero_planner.plan.throughput import Calibration
from zero_planner.planfile import LoraInfo


class PlanRequest(BaseModel):
    """One planning request. Defaults are zero-plan's."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    seq_len: StrictInt
    """Tokens per sample."""
    micro_batch: StrictInt | None = None
    """Samples per GPU per step; None: the search tries 1..MAX_MICRO_BATCH (estimate_config: the JSON's, this only
    where the JSON says "auto")."""
    global_batch: StrictInt | None = None
    """Samples per optimizer step over all GPUs; None: no constraint (micro-batch x 1 accumulation)."""
    grad_ckpt: StrictBool | None = None
    """Gradient checkpointing forced on or off; None: the search tries both (estimate_config: off)."""
    precision: str = "auto"
    """auto, bf16, fp16 or fp32 (estimate_config: the JSON's)."""
    stage: str = "auto"
    """A strategy name or auto (all seven); estimate_config: the JSON's."""
    method: str = "full"
    """full, lora, qlora or auto (the search only)."""
    task: str = "causal-lm"
    """causal-lm or seq-cls."""
    margin: StrictBool = True
    """Judge fit under the safety margins (gpu_limit_bytes, host_limit_bytes); False: against full capacity.
    estimate_config always judges without them."""
    model_name: str | None = None
    """The model as the user named it, written into the plan."""
    plan_path: str = "plan.json"
    """Where the plan is written: the launch command names it."""
    lora: LoraInfo | None = None
    """Adapter settings for lora/qlora (None: LoraInfo's defaults)."""
    num_labels: StrictInt = 2
    """Classes of a seq-cls head."""
    pretrained: StrictBool = False
    """zero-run loads weights (no randomly initialised LM head before tying)."""
    keeps_outputs: StrictBool = False
    """The user's own loop holds the model's outputs (16-bit logits) through backward and step: --ds-config and the
    importers only (zero-run's loop keeps only the loss)."""
    calibration: Calibration | None = None
    """The step-time constants; None: the committed ones (--gpus auto passes this machine's CPU Adam rate)."""
    data_bytes: StrictInt = 0
    """A user's dataset in each rank's host memory, held (Workload's)."""
    data_peak_bytes: StrictInt = 0
    """... and at its peak while packed."""

    def but(self, **fields) -> PlanRequest:
        """Returns this request with `fields` changed, their names and types checked as the constructor checks them
        (pydantic's model_copy(update=) takes any key and any value)."""
        return type(self)(**{**dict(self), **fields})

"""The seven ZeRO strategies the planner chooses between, named by what they shard and offload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OffloadDevice = Literal["none", "cpu", "nvme"]


@dataclass(frozen=True)
class Strategy:
    """One DeepSpeed ZeRO configuration family, as the plan file records it."""

    stage: int
    """ZeRO stage: 0 replicates everything, 1 shards optimizer states, 2 also gradients, 3 also weights."""
    offload_optimizer: OffloadDevice = "none"
    """Where optimizer states and fp32 master weights live (and where Adam runs)."""
    offload_param: OffloadDevice = "none"
    """Stage 3 only: where the bf16/fp16 parameter partitions live between uses."""

    @property
    def name(self) -> str:
        """The short name used on the command line (`2-offload`, `3-offload-all`)."""
        if self.offload_param != "none":
            return f"{self.stage}-offload-all"
        if self.offload_optimizer != "none":
            return f"{self.stage}-offload"
        return str(self.stage)


STRATEGIES: dict[str, Strategy] = {
    "0": Strategy(0),
    "1": Strategy(1),
    "2": Strategy(2),
    "2-offload": Strategy(2, offload_optimizer="cpu"),
    "3": Strategy(3),
    "3-offload": Strategy(3, offload_optimizer="cpu"),
    "3-offload-all": Strategy(3, offload_optimizer="cpu", offload_param="cpu"),
}


STRATEGY_FAMILIES = {"0": "0-2", "1": "0-2", "2": "0-2", "2-offload": "2-offload", "3": "3", "3-offload": "3-offload",
                     "3-offload-all": "3-offload"}  # fmt: skip
"""Strategy family of each strategy: what bounds its step, so that candidates of one family measure alike.
0-2: the whole model computes on every GPU and the optimizer steps there; the stages differ only in the
collectives around the same gradient bytes (an all-reduce, stages 1-2 then an all-gather) and in memory, so the
step-time model predicts them within a few percent of each other and they often tie outright. 2-offload: the
optimizer steps on the host (CPU Adam, gradients down and weights up over PCIe each step), a host-bound step.
3: weights are gathered layer by layer in forward and backward, bound by the all-gathers. 3-offload and
3-offload-all: stage 3's gathers plus the host's optimizer step (and, for -all, weights streamed from host
memory): bound by the host and its link; -all is chosen where 3-offload does not fit, so the two rarely both
fit a model at once."""


def step_kind(name: str, gradient_checkpointing: bool) -> tuple[str, bool]:
    """Returns (strategy family, checkpointing) of a candidate: the kinds of step that measure differently, of
    which zero-plan --probe runs the fastest predicted of each first (run/probe.py probe_order)."""
    return STRATEGY_FAMILIES.get(name, name), gradient_checkpointing

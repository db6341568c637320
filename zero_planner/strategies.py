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

"""What fits: the safety margins the planner keeps and why a memory estimate does not fit under them.

    gpu_limit_bytes(capacity) / host_limit_bytes(capacity)  -> what a chosen candidate may use
    why_not(memory, gpu_cap_bytes, host_cap_bytes)           -> None, or why not with the numbers
"""

from __future__ import annotations

from zero_planner.plan.memory import MemoryEstimate

SAFETY_MARGIN_FRACTION = 0.03
"""Share of GPU memory the planner leaves free when it chooses, for the memory model's error and what it does
not see (other library versions, other GPUs). Where the planner operates the error is small and one-sided:
peak allocated over-predicted by +0.0..+2.2% in every operating-point case on the H100, and micro-batches one
above the picks ran up to a predicted 77.4 of 79.2 GiB (benchmarks/results/h100x1-op-*). Was 5% before
expandable segments, when the allocator's cache still had to fit; not applied to --ds-config."""
SAFETY_MARGIN_BYTES = 256 * 2**20
"""Fixed part of the GPU margin (on top of the fraction): NCCL/cuBLAS workspaces that grow with the run,
which matter most on small cards."""
HOST_MARGIN_FRACTION = 0.05
"""Share of host memory per node left to the OS, the page cache and other processes."""

GIB = 2**30


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.1f} GiB"


def gpu_limit_bytes(gpu_memory_bytes: int) -> int:
    """Returns the per-GPU bytes a chosen candidate may use: capacity less the safety margin."""
    return gpu_memory_bytes - int(SAFETY_MARGIN_FRACTION * gpu_memory_bytes) - SAFETY_MARGIN_BYTES


def host_limit_bytes(cpu_memory_bytes: int) -> int:
    """Returns the host bytes per node a chosen candidate may use: host memory less HOST_MARGIN_FRACTION."""
    return cpu_memory_bytes - int(HOST_MARGIN_FRACTION * cpu_memory_bytes)

def why_not(memory: MemoryEstimate, gpu_cap_bytes: int, host_cap_bytes: int) -> str | None:
    """Returns why `memory` does not fit under the per-GPU and per-node host caps (with the numbers), or None."""
    problems = []
    need = memory.total_bytes
    if need > gpu_cap_bytes:
        phase = "" if memory.binding_phase == "train" else f"{memory.binding_phase} "
        problems.append(f"GPU: {phase}needs {_gib(need)} > {_gib(gpu_cap_bytes)}")
        if 0 < memory.floor_bytes <= gpu_cap_bytes:
            # Not planned: whether PyTorch can release enough of its cache in time was measured both ways.
            problems.append(f"{_gib(need - memory.floor_bytes)} of it is allocator cache; "
                            f"it might run, unplanned")  # fmt: skip
    if memory.cpu_total_bytes > host_cap_bytes:
        phase = host_binding_phase(memory)
        problems.append(f"host: {phase + ' ' if phase not in ('', 'train') else ''}needs "
                        f"{_gib(memory.cpu_total_bytes)} > {_gib(host_cap_bytes)}")  # fmt: skip
    return "; ".join(problems) or None


def host_binding_phase(memory: MemoryEstimate) -> str:
    """Returns the phase whose host figure is cpu_total_bytes ("" when it is loading and training's)."""
    for name, value in memory.host_phase_peaks.items():
        if value == memory.cpu_total_bytes:
            return name
    return ""


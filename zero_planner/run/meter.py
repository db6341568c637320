"""Measured memory per phase of a zero-run: device peaks (allocated, reserved) and host RSS peaks.

A run has more phases than its training step (docs/design.md): load, initialize, resume, the training steps, eval,
checkpoint save and the final export each have a peak of their own. The meter closes one phase when the next
begins: it reads torch.cuda.max_memory_allocated/max_memory_reserved and the process's peak RSS, then resets
both counters (the RSS peak through /proc/self/clear_refs, where the kernel allows it), so every phase's figure
is its own. Phases that run several times (eval, save) keep their largest figure.

torch is imported lazily; without CUDA only host RSS is recorded.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

from zero_planner.phases import PHASES

MEMORY_LIMIT_ENV = "ZERO_RUN_MEMORY_LIMIT_BYTES"
"""Benchmarks only: emulate a smaller GPU. The caching allocator refuses to reserve past this many bytes (the
card's capacity less its CUDA context), and the free-memory queries DeepSpeed and transformers size their
buffers by (NVML through the accelerator, torch.cuda.mem_get_info) answer as that card would."""

STEP_PEAKS_KEPT = 8
"""Per-step peaks recorded for the first steps of a run (ZeRO-3 records its trace in step 1, optimizer states
are created in step 1); later steps only raise the phase's peak."""


class PhaseMeter:
    """Records each phase's peak device memory and host RSS, in bytes."""

    def __init__(self, on_cuda: bool):
        self.on_cuda = on_cuda
        self.current: str | None = None
        self.phases: dict[str, dict[str, int]] = {}
        self.step_peaks: list[int] = []
        self._rss_resettable = _reset_rss_peak()
        self._folded: dict[str, int] = {}  # device peaks read before a library reset the counters mid-phase
        if on_cuda:
            self._keep_peaks_across_resets()

    def _keep_peaks_across_resets(self) -> None:
        """Makes torch.cuda's peak resets fold the peak so far into the current phase first. DeepSpeed resets the
        counters inside deepspeed.initialize (ZeRO-1/2: runtime/utils.py empty_cache() calls
        reset_peak_memory_stats), which would otherwise drop the phase's peak before the reset."""
        import torch

        original = torch.cuda.reset_peak_memory_stats
        self._reset_device_peaks = original

        def folding_reset(device=None):
            for key, value in self._read_device().items():
                self._folded[key] = max(self._folded.get(key, 0), value)
            original(device)

        torch.cuda.reset_peak_memory_stats = folding_reset
        torch.cuda.reset_max_memory_allocated = folding_reset

    def enter(self, phase: str) -> None:
        """Closes the current phase and starts `phase` with fresh peak counters."""
        self.close()
        self.current = phase

    def close(self) -> None:
        """Records the current phase's peaks (the larger of this and an earlier visit) and resets the counters."""
        if self.current is None:
            return
        figures = self._read()
        kept = self.phases.setdefault(self.current, {})
        for key, value in figures.items():
            kept[key] = max(kept.get(key, 0), value)
        self.current = None
        self._reset()

    def step_done(self) -> None:
        """Marks the end of one optimizer step inside the train phase: keeps its own peak for the first steps."""
        if self.current != "train" or len(self.step_peaks) >= STEP_PEAKS_KEPT:
            return
        figures = self._read()
        kept = self.phases.setdefault("train", {})
        for key, value in figures.items():
            kept[key] = max(kept.get(key, 0), value)
        self.step_peaks.append(figures.get("peak_allocated_bytes", 0))
        self._reset()

    def running_peak(self, key: str) -> int:
        """Returns the current phase's peak so far of `key` (peak_allocated_bytes, host_rss_peak_bytes) in bytes,
        counters untouched: what zero-run logs per step (--report-to)."""
        live = self._read().get(key, 0)
        return max(live, self.phases.get(self.current, {}).get(key, 0)) if self.current else live

    def alloc_retries(self) -> int:
        """Returns how many times so far PyTorch's caching allocator found no room for a request and released its
        cache to try again (memory_stats num_alloc_retries; 0 without CUDA)."""
        if not self.on_cuda:
            return 0
        import torch

        return int(torch.cuda.memory_stats().get("num_alloc_retries", 0))

    def capacity_bytes(self) -> int | None:
        """Returns the memory this rank's allocator may hold: the emulated card's (MEMORY_LIMIT_ENV) where set, else
        the GPU's; None without CUDA."""
        if not self.on_cuda:
            return None
        raw = os.environ.get(MEMORY_LIMIT_ENV)
        if raw:
            return int(float(raw))
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)

    def report(self) -> dict[str, Any]:
        """Returns {phase: {peak_allocated_bytes, peak_reserved_bytes, host_rss_peak_bytes}} and the step peaks."""
        self.close()
        ordered = {name: self.phases[name] for name in PHASES if name in self.phases}
        return {"phases": ordered, "step_peak_allocated_bytes": list(self.step_peaks),
                "host_rss_reset_per_phase": self._rss_resettable}  # fmt: skip

    def _read(self) -> dict[str, int]:
        figures = {"host_rss_peak_bytes": _rss_peak_bytes(), **self._read_device()}
        for key, value in self._folded.items():
            figures[key] = max(figures.get(key, 0), value)
        return figures

    def _read_device(self) -> dict[str, int]:
        if not self.on_cuda:
            return {}
        import torch

        return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                "peak_reserved_bytes": torch.cuda.max_memory_reserved()}  # fmt: skip

    def _reset(self) -> None:
        self._folded = {}
        if self.on_cuda:
            self._reset_device_peaks()
        if self._rss_resettable:
            _reset_rss_peak()


def _rss_peak_bytes() -> int:
    """Returns the peak RSS since the last reset (VmHWM), or since the start where it cannot be read."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _reset_rss_peak() -> bool:
    """Resets VmHWM to the current RSS (Linux: writing 5 to /proc/self/clear_refs); returns whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def emulate_memory_limit(local_rank: int) -> int | None:
    """Caps this process's CUDA memory at MEMORY_LIMIT_ENV bytes when set (benchmarks: a smaller GPU, emulated);
    returns the cap. The free-memory queries answer for the emulated card: DeepSpeed flattens ZeRO-1/2 weights
    on the GPU only when NVML reports room for a second copy (stage_1_and_2.py: `available_memory() >=
    flat_buffer_bytes`), and transformers sizes its allocator warm-up by torch.cuda.mem_get_info; on a real
    card of that size both see the card's free memory, so they must here too."""
    raw = os.environ.get(MEMORY_LIMIT_ENV)
    if not raw:
        return None
    import torch
    from deepspeed.accelerator import get_accelerator

    limit = int(float(raw))
    total = torch.cuda.get_device_properties(local_rank).total_memory
    torch.cuda.set_per_process_memory_fraction(limit / total, local_rank)
    real_mem_get_info = torch.cuda.mem_get_info

    def mem_get_info(device=None):
        free, _ = real_mem_get_info(device)
        return min(free, max(limit - torch.cuda.memory_reserved(device), 0)), limit

    torch.cuda.mem_get_info = mem_get_info
    accelerator = get_accelerator()
    accelerator.available_memory = lambda device_index=None: mem_get_info(device_index)[0]
    accelerator.total_memory = lambda device_index=None: limit
    return limit


def release_freed_memory() -> None:
    """Hands the C heap's freed pages back to the OS (glibc's malloc_trim; nothing elsewhere). Tokenizing leaves
    many small freed blocks that the allocator keeps, and the OS counts them against the host for the rest of the
    run: 75 MB of prompt/response JSONL held 25 bytes a token per rank after loading, 16
    after the trim (2026-11-28, benchmarks/data_rss.py)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass

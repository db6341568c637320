"""zero-run's per-phase meter: phases close in order, repeated phases keep their largest peak, and a library's
reset of the device peak counters inside a phase (DeepSpeed's, in deepspeed.initialize) loses nothing."""

from __future__ import annotations

import types

import pytest

from zero_planner.phases import PHASES
from zero_planner.run import meter as meter_module
from zero_planner.run.meter import PhaseMeter
from zero_planner.run.report import phase_rows


class FakeCuda:
    """torch.cuda's peak counters, driven by the test: alloc(n) raises the running peak; reset lowers it."""

    def __init__(self):
        self.current = self.peak = 0

    def alloc(self, n):
        self.current += n
        self.peak = max(self.peak, self.current)

    def free(self, n):
        self.current -= n

    def max_memory_allocated(self):
        return self.peak

    def max_memory_reserved(self):
        return self.peak

    def reset_peak_memory_stats(self, device=None):
        self.peak = self.current

    retries = 0

    def memory_stats(self):
        return {"num_alloc_retries": self.retries} if self.retries else {}  # the key appears with the first retry


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    torch = types.SimpleNamespace(cuda=fake)
    monkeypatch.setitem(__import__("sys").modules, "torch", torch)
    return fake


def test_each_phase_keeps_its_own_peak_across_a_library_reset(cuda):
    meter = PhaseMeter(on_cuda=True)
    meter.enter("load")
    cuda.alloc(100)
    meter.enter("initialize")
    cuda.alloc(100)  # a flat copy of the weights...
    cuda.free(100)
    cuda.reset_peak_memory_stats()  # ...then DeepSpeed resets the counters (runtime/utils.py empty_cache)
    cuda.alloc(10)
    meter.enter("train")
    cuda.alloc(50)
    cuda.free(50)
    meter.step_done()
    meter.enter("eval")
    cuda.alloc(20)
    cuda.free(20)
    meter.enter("train")
    meter.enter("eval")  # a second eval, smaller: the phase keeps the larger
    cuda.alloc(5)
    cuda.free(5)
    report = meter.report()
    peaks = {name: figures["peak_allocated_bytes"] for name, figures in report["phases"].items()}
    assert peaks == {"load": 100, "initialize": 200, "train": 160, "eval": 130}
    assert list(report["phases"]) == [p for p in PHASES if p in peaks]  # in the order of a run
    assert report["step_peak_allocated_bytes"] == [160]


def test_host_rss_is_recorded_per_phase_without_cuda():
    import mmap

    meter = PhaseMeter(on_cuda=False)
    meter.enter("load")
    # An anonymous mapping of its own, so that closing it returns the pages (a heap block might stay resident).
    block = mmap.mmap(-1, 64 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    block.close()
    meter.enter("initialize")
    report = meter.report()
    load, init = (report["phases"][p]["host_rss_peak_bytes"] for p in ("load", "initialize"))
    assert load >= 64 * 2**20
    if report["host_rss_reset_per_phase"]:  # Linux lets a process reset its peak RSS (/proc/self/clear_refs)
        assert init < load


def test_report_rows_put_each_phase_beside_its_prediction():
    rows = phase_rows({"load": {"peak_allocated_bytes": 100}, "save": {"peak_allocated_bytes": 50}}, {"load": 110})
    assert rows["load"]["predicted_peak_allocated_bytes"] == 110 and round(rows["load"]["error_pct"]) == 10
    assert rows["save"]["predicted_peak_allocated_bytes"] is None and rows["save"]["error_pct"] is None


def test_memory_limit_env_is_off_by_default(monkeypatch):
    monkeypatch.delenv(meter_module.MEMORY_LIMIT_ENV, raising=False)
    assert meter_module.emulate_memory_limit(0) is None


def test_allocator_retries_are_counted_on_cuda_and_zero_without(cuda):
    meter = PhaseMeter(on_cuda=True)
    assert meter.alloc_retries() == 0
    cuda.retries = 3
    assert meter.alloc_retries() == 3
    assert PhaseMeter(on_cuda=False).alloc_retries() == 0


def test_capacity_is_the_emulated_cards_where_set(monkeypatch):
    monkeypatch.setenv(meter_module.MEMORY_LIMIT_ENV, str(24 * 2**30))
    assert PhaseMeter(on_cuda=False).capacity_bytes() is None  # no device allocator
    fake = types.SimpleNamespace(cuda=FakeCuda())
    monkeypatch.setitem(__import__("sys").modules, "torch", fake)
    assert PhaseMeter(on_cuda=True).capacity_bytes() == 24 * 2**30

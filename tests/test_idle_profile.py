"""benchmarks/idle_profile.py: the GPU's idle gaps in a profiler trace, charged to what the host was doing."""

from __future__ import annotations

import json

import pytest

from benchmarks.idle_profile import idle_breakdown, main


def x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


# Two steps' worth of a forward and a step: a GEMM queued ahead of its gap-free successor, then, after a host sync,
# two tiny kernels the host launched late (the GPU waited 40 and 30 us for them), and a kernel already queued behind
# a 5 us wait on another stream.
TRACE = {"traceEvents": [
    x("user_annotation", "zp:forward", 0, 100),
    x("user_annotation", "zp:step", 100, 200),
    x("cpu_op", "aten::mm", 1, 5),
    x("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=1),
    x("cpu_op", "aten::add", 6, 3),
    x("cuda_runtime", "cudaLaunchKernel", 7, 1, correlation=2),
    x("kernel", "gemm", 5, 50, correlation=1),
    x("kernel", "add", 55, 10, correlation=2),
    x("cpu_op", "aten::item", 20, 50),
    x("cuda_runtime", "cudaStreamSynchronize", 21, 45),
    x("cpu_op", "aten::isfinite", 100, 20),
    x("python_function", "deepspeed/runtime/utils.py(205): has_inf_or_nan", 99, 60),
    x("cpu_op", "aten::amax", 104, 4),
    x("cuda_runtime", "cudaLaunchKernel", 105, 1, correlation=3),
    x("kernel", "reduce", 105, 3, correlation=3),
    x("cpu_op", "aten::amin", 136, 4),
    x("cuda_runtime", "cudaLaunchKernel", 137, 1, correlation=4),
    x("kernel", "reduce", 138, 2, correlation=4),
    x("cuda_runtime", "cudaLaunchKernel", 139, 1, correlation=5),
    x("kernel", "copy", 145, 5, correlation=5),
]}


def test_each_gap_is_charged_to_the_host_work_that_launched_what_came_after_it():
    idle = idle_breakdown(TRACE, steps=1)
    # busy 50 + 10 + 3 + 2 + 5 = 70 us; gaps 65 -> 105 (40), 108 -> 138 (30), 140 -> 145 (5)
    assert idle["gpu_busy_ms"] == pytest.approx(0.070) and idle["idle_ms"] == pytest.approx(0.075)
    assert idle["gaps_per_step"] == 3
    assert idle["idle_by_cause_ms"] == {"launch": pytest.approx(0.070), "queued": pytest.approx(0.005)}
    assert idle["idle_by_phase_ms"] == {"step": pytest.approx(0.075)}
    # the queued kernel was launched inside aten::amin too (at 139, before its gap began at 140)
    assert idle["idle_by_launching_op_ms"] == {"aten::amax": pytest.approx(0.040), "aten::amin": pytest.approx(0.035)}
    assert idle["idle_by_outer_op_ms"] == {"aten::isfinite": pytest.approx(0.040), "aten::amin": pytest.approx(0.035)}
    assert idle["idle_by_frame_ms"] == {"deepspeed/runtime/utils.py(205): has_inf_or_nan": pytest.approx(0.075)}
    # the host's wait ended at 66, inside the first gap: that gap follows a synchronisation
    assert idle["idle_after_sync_ms"] == {"cudaStreamSynchronize in aten::item": pytest.approx(0.040)}
    assert idle["idle_by_gap_size_ms"] == {"10-100us": pytest.approx(0.070), "<10us": pytest.approx(0.005)}
    # per step: two steps of the same trace halve every figure
    assert idle_breakdown(TRACE, steps=2)["idle_ms"] == pytest.approx(0.0375, abs=0.001)  # rounded to the us


def test_the_report_reads_committed_profiles(tmp_path, capsys):
    idle = {"wall_ms": 1.0, "with_stack": False, **idle_breakdown(TRACE, steps=1)}
    row = {"id": "toy|1", "ranks": [{"profile": {"idle": [idle]}}]}
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "toy|1  stack=False" in out and "aten::amax" in out and "idle 0.1 in 3 gaps" in out

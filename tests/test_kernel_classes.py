"""benchmarks/kernel_classes.py: the step-time model's kernel classes (broadcasting elementwise kernels, misaligned
GEMMs, ZeRO-3's separate bias adds) held to the committed profiles and kernel rates they were read from (no GPU;
the counts' own unit tests are in tests/test_throughput.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks import kernel_classes as kc
from zero_planner.plan import throughput

ROOT = Path(__file__).resolve().parents[1]


def test_every_profiled_step_ran_its_broadcast_bytes_at_one_rate_on_both_gpus():
    # The generic elementwise kernels of 39 committed ZeRO-0 steps (seven families, plain and checkpointed, 2 to 37
    # sequences) against the bytes the model counts as broadcasts: 1.35-1.75 TB/s for the dense ones on the H100 and
    # the H200 alike, Mixtral's routing 1.40-1.44; Qwen2-MoE's 1.11 (its shared expert's sigmoid-gate multiply
    # broadcasts too, not counted). Steps with an explicit attention mask (Phi-3's window) have more generic work
    # than these bytes.
    rows = [(step, seconds, size) for step, seconds, size in kc.broadcast_rates(kc.profiled_steps())
            if not throughput.attention_mask_bytes(step["spec"], step["workload"])]
    dense = [(step, seconds, size) for step, seconds, size in rows if step["spec"].num_experts <= 1]
    assert len(dense) >= 30 and {step["gpu"] for step, _, _ in dense} == {"H100", "H200"}
    rates = {gpu: [size / seconds for step, seconds, size in dense if step["gpu"] == gpu] for gpu in ("H100", "H200")}
    assert all(1.3e12 < rate < 1.8e12 for values in rates.values() for rate in values)
    assert statistics.median(rates["H100"]) == pytest.approx(statistics.median(rates["H200"]), rel=0.05)
    moe = [size / seconds for step, seconds, size in rows if step["spec"].num_experts > 1]
    assert len(moe) == 4 and all(1.0e12 < rate < 1.5e12 for rate in moe)
    h200 = [size / seconds for step, seconds, size in rows if step["gpu"] == "H200"]
    h200_rate = throughput.broadcast_bytes_per_s(kc.find_gpu("H200"))
    assert statistics.median(h200) == pytest.approx(h200_rate, rel=0.05)


def test_gpt2s_head_ran_on_align1_kernels_at_an_eighth_of_the_peak():
    steps = [s for s in kc.profiled_steps() if kc.misaligned_head_flops(s["spec"], s["workload"])]
    assert {s["spec"].name for s in steps} >= {"gpt2-medium", "gpt2-large"}
    for step in steps:
        seconds = kc.align1_gemm_seconds(step["top_kernels"])
        assert 0.11 < kc.misaligned_head_flops(step["spec"], step["workload"]) / seconds / 989.4e12 < 0.14
    kernels = json.loads((ROOT / "benchmarks/results/kernels-h200-2026-11-29.json").read_text())
    assert 0.1 < kernels["misaligned_gemm_fraction"] < 0.2 and 0.3 < kernels["even_misaligned_gemm_fraction"] < 0.4
    aligned = next(e for e in kernels["misaligned"] if e["n"] == 50264)
    assert all(aligned["roofline_s"] / aligned[f"{p}_s"] > 0.85 for p in ("forward", "input_grad", "weight_grad"))


def test_pythias_zero3_step_ran_its_bias_adds_at_the_broadcast_rate():
    steps = kc.profiled_steps()
    zero = {(s["spec"].name, s["workload"]): s for s in steps if s["strategy"] == "0"}
    pairs = [(s, zero[(s["spec"].name, s["workload"])]) for s in steps
             if s["strategy"] == "3" and (s["spec"].name, s["workload"]) in zero]
    assert len(pairs) == 2
    for step, twin in pairs:
        extra = step["kernel_s"]["other"] - twin["kernel_s"]["other"]
        assert 1.3e12 < throughput.zero3_bias_bytes(step["spec"], step["workload"]) / extra < 1.7e12

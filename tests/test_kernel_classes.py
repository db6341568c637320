"""benchmarks/kernel_classes.py: the byte and FLOP counts of the kernel classes the step-time model lumps together,
held to the committed profiles and kernel rates they were read from (no GPU)."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import kernel_classes as kc
from benchmarks.cases import model_config
from zero_planner.models.spec import load_model_spec, spec_from_config
from zero_planner.plan.memory import Workload

ROOT = Path(__file__).resolve().parents[1]


def work(**kw) -> Workload:
    return Workload(**{"micro_batch_size": 1, "seq_len": 2048, "gradient_checkpointing": False, "precision": "bf16", **kw})


def test_a_product_is_aligned_where_every_dimension_is_a_multiple_of_eight():
    assert kc.gemm_alignment(2, 16384, 1024, 50264) == 8
    assert kc.gemm_alignment(2, 16384, 1024, 50260) == 4
    assert kc.gemm_alignment(2, 16384, 1024, 50258) == 2
    assert kc.gemm_alignment(2, 16384, 1024, 50257) == 1
    assert kc.gemm_alignment(2, 16383, 1024, 4096) == 1  # the token count leads the weight gradient's product
    assert kc.gemm_alignment(4, 16384, 1024, 50257) == 8  # fp32: not measured
    gpt2 = load_model_spec("gpt2-large")
    assert kc.misaligned_head_flops(gpt2, work(micro_batch_size=37, seq_len=1024)) == 6.0 * 37 * 1024 * 1280 * 50257
    assert kc.misaligned_head_flops(load_model_spec("meta-llama/Llama-3.2-1B"), work()) == 0.0  # 128,256 tokens


def test_the_linears_with_a_bias_by_model_type():
    def outputs(spec, **config):
        return kc.biased_outputs(replace(spec, config={**spec.config, **config}))

    assert outputs(load_model_spec("Qwen/Qwen2.5-7B")) == 3584 + 2 * 512  # q, k, v
    pythia = spec_from_config(model_config("pythia-1.4b"), "pythia-1.4b")
    assert outputs(pythia) == 3 * 2048 + 2048 + 8192 + 2048  # qkv, dense, the MLP's two
    assert outputs(pythia, attention_bias=False) == 8192 + 2048  # the MLP keeps its biases
    opt = load_model_spec("facebook/opt-1.3b")
    assert outputs(opt) == 3 * 2048 + 2048 + 8192 + 2048 and outputs(opt, enable_bias=False) == 0
    llama = load_model_spec("meta-llama/Llama-3.2-1B")
    assert outputs(llama) == 0
    assert outputs(llama, attention_bias=True) == 2048 + 2 * 512 + 2048  # q, k, v, o
    assert outputs(llama, mlp_bias=True) == 2 * 8192 + 2048  # gate, up, down
    assert outputs(load_model_spec("gpt2-large")) == 0  # Conv1D's addmm fuses its bias
    assert kc.zero3_bias_bytes(pythia, work(micro_batch_size=13)) == 2 * 2 * 18432 * 24 * 13 * 2048
    assert kc.zero3_bias_bytes(pythia, work(micro_batch_size=13, gradient_checkpointing=True)) == \
        2 * kc.zero3_bias_bytes(pythia, work(micro_batch_size=13))


def test_layernorm_models_without_rotary_broadcast_nothing():
    assert kc.layer_broadcast_bytes(load_model_spec("gpt2-large")) == 0
    assert kc.layer_broadcast_bytes(load_model_spec("facebook/opt-1.3b")) == 0
    llama = load_model_spec("meta-llama/Llama-3.2-1B")
    qk = (llama.num_attention_heads + llama.num_key_value_heads) * llama.head_dim
    assert kc.layer_broadcast_bytes(llama) == 2 * 12 * llama.hidden_size + 8 * qk
    assert kc.broadcast_traffic_bytes(llama, work(gradient_checkpointing=True)) == 4 / 3 * kc.broadcast_traffic_bytes(llama, work())


def test_every_profiled_dense_step_ran_its_broadcast_bytes_at_one_rate_on_both_gpus():
    # The generic elementwise kernels of 35 committed steps (five families, plain and checkpointed, 2 to 21 sequences)
    # against the bytes counted: 1.35-1.75 TB/s on the H100 and the H200 alike, so the count is what they run; steps
    # with an explicit attention mask (Phi-3's window) have more generic work than these bytes
    rows = [(step, seconds, size) for step, seconds, size in kc.broadcast_rates(kc.profiled_steps())
            if not kc.throughput.attention_mask_bytes(step["spec"], step["workload"])]
    assert len(rows) >= 30 and {step["gpu"] for step, _, _ in rows} == {"H100", "H200"}
    rates = {gpu: [size / seconds for step, seconds, size in rows if step["gpu"] == gpu] for gpu in ("H100", "H200")}
    assert all(1.3e12 < rate < 1.8e12 for values in rates.values() for rate in values)
    assert statistics.median(rates["H100"]) == pytest.approx(statistics.median(rates["H200"]), rel=0.05)


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
        assert 1.3e12 < kc.zero3_bias_bytes(step["spec"], step["workload"]) / extra < 1.7e12

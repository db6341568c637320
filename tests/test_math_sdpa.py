"""SDPA's math kernel: where torch's fused kernels refuse a model's attention shapes (Falcon-7B's one K/V head for
71 query heads, without enable_gqa), the scores are materialized in fp32 and kept. Memory and step time count them,
held to the H200 measurements of 2026-11-29 (benchmarks/sdpa_path.py, i26-falcon-path-h200)."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import ROOT

from benchmarks.memory_regression import workload_of
from benchmarks.throughput_check import timed_steps
from zero_planner.hardware import find_gpu, parse_gpus
from zero_planner.models.activations import attention_coefficients
from zero_planner.models.catalog import catalog_entry
from zero_planner.models.spec import load_model_spec, spec_from_config
from zero_planner.plan import throughput
from zero_planner.plan.memory import (MATH_SDPA_BACKWARD_SCORE_BYTES, Workload, activation_bytes, estimate_memory,
                                      eval_peak, math_attention_backward_bytes)
from zero_planner.plan.request import PlanRequest
from zero_planner.plan.search import plan
from zero_planner.strategies import STRATEGIES

CONFIGS = ROOT / "benchmarks" / "model_configs"
RESULTS = ROOT / "benchmarks" / "results"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def probe() -> dict[tuple[str, int], dict]:
    """The layer probes (calls 1-3; call 3's row, the one the Calibration's rates came from, last), by model and
    micro-batch."""
    rows = json.loads((RESULTS / "sdpa-path-h200-2026-11-29.json").read_text())
    return {(row["model"], row["micro_batch_size"]): row for row in rows if row["call"] <= 3}


@pytest.fixture(scope="module")
def falcon_4l():
    return spec_from_config(_config("falcon-7b-4l"), "falcon-7b-4l")


def test_the_gpu_took_the_math_kernel_for_falcon_and_a_fused_one_for_llama(probe):
    falcon, llama = probe[("falcon-7b", 1)], probe[("llama3.2-1b", 1)]
    assert all(call.startswith("ToCopyBackward0") and "k(1, 1," in call for call in falcon["sdpa_grad_fn"])
    assert any("softmax_warp_forward<float" in kernel for kernel in falcon["attention_kernels"])
    assert all("CudnnAttention" in call or "Flash" in call or "Efficient" in call for call in llama["sdpa_grad_fn"])


def test_the_trace_keeps_what_the_math_kernel_kept_on_the_gpu(probe):
    """A Falcon-7B layer at 1 x 2,048 kept 1,434,207,232 bytes on the H200; the meta-device trace, which now runs the
    math kernel where the fused ones refuse the shapes, counts the same per token (fp32 probabilities: 71 x 4 bytes
    per position)."""
    coef = attention_coefficients(_config("falcon-7b"), "bfloat16", "sdpa")
    assert coef["layer_per_seq"] == 71 * 4
    seq = 2048
    measured = probe[("falcon-7b", 1)]["layer_saved_bytes"] / seq
    assert coef["layer"] + coef["layer_per_seq"] * seq == pytest.approx(measured, rel=1e-4)
    # two sequences keep twice (the H200's second probe, within its allocator's rounding)
    assert probe[("falcon-7b", 2)]["layer_saved_bytes"] == pytest.approx(2 * measured * seq, rel=0.06)
    # a grouped-query model whose transformers code passes enable_gqa stays on the fused count: nothing per position
    assert attention_coefficients(_config("llama3.2-1b"), "bfloat16", "sdpa")["layer_per_seq"] == 0


def test_the_catalog_carries_the_math_kernels_table():
    table = catalog_entry("falcon-7b")["params"]["activations"]
    assert table["16bit"]["sdpa"]["layer_per_seq"] == table["fp32"]["sdpa"]["layer_per_seq"] == 284
    # the LoRA table holds the layer without its scores, which memory.py adds at the run's length
    assert table["lora"]["16bit"]["layer"] == table["16bit"]["sdpa"]["layer"]


def test_backward_holds_three_fp32_score_gradients_only_under_the_math_kernel(falcon_4l, probe):
    llama = spec_from_config(_config("llama3.2-1b"), "llama3.2-1b")
    alone = probe[("falcon-7b", 1)]["attention_alone"]
    assert alone["backward_peak_per_score"] == MATH_SDPA_BACKWARD_SCORE_BYTES == 12  # measured: SDPA alone, H200
    rows = [json.loads(line) for line in (RESULTS / "h200x1-i26-falcon-path-2026-11-29.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["case"]["micro_batch_size"] == 4 and not r["case"]["gradient_checkpointing"])
    work = workload_of(row, falcon_4l)
    assert math_attention_backward_bytes(falcon_4l, work) == 12 * 71 * 2048
    assert math_attention_backward_bytes(llama, work) == 0
    act = activation_bytes(falcon_4l, work)
    tokens = 4 * 2048
    # the loss's fp32 log-softmax (4 bytes per logit, kept) is freed before the last layer's backward
    assert act.backward_peak_bytes - act.saved_bytes == tokens * (12 * 71 * 2048 - 4 * falcon_4l.vocab_size)

    # in the whole step the backward rose 9.5 bytes per score above the forward's end, from 2 to 4 sequences: the
    # 12 of SDPA alone less what the layer's backward had freed by then (the log-softmax, 1.8 bytes per score here)
    def rise(micro: int) -> int:
        phases = next(r for r in rows if r["case"]["micro_batch_size"] == micro
                      and not r["case"]["gradient_checkpointing"])["ranks"][0]["phases"]  # fmt: skip
        forward_end = next(p["allocated_bytes"] for p in phases if p["phase"] == "forward")
        return next(p["peak_allocated_bytes"] for p in phases if p["phase"] == "backward") - forward_end

    per_score = (rise(4) - rise(2)) / (2 * 2048) / (71 * 2048)
    assert 8 < per_score < 12 < per_score + 2.5


def test_falcon_7b_fits_where_the_model_says_on_one_h200():
    """The 7B on one H200 (ZeRO-3 with checkpointing at 2,048 tokens): with 8 bytes per score the model put the pick
    at 7 sequences, which ran out of memory; with 12 the pick is 5 (129.37 GiB measured), and 4 and 6 ran within 1%."""
    rows = [json.loads(line) for name in ("h200x1-i26-falcon-7b-2026-11-29.jsonl", "h200x1-i26-falcon-7b-pick-2026-11-29.jsonl")
            for line in (RESULTS / name).read_text().splitlines()]  # fmt: skip
    spec = spec_from_config(_config("falcon-7b"), "falcon-7b")
    gpu = find_gpu("H200")
    seen = {}
    for row in rows:
        work = workload_of(row, spec)
        estimate = estimate_memory(spec, STRATEGIES["3"], work, gpu_name="H200")
        micro = row["case"]["micro_batch_size"]
        if row["status"] == "oom":
            assert estimate.total_bytes > gpu.memory_bytes, micro
        else:
            measured = max(rank["peak_allocated_bytes"] for rank in row["ranks"])
            assert estimate.train_peak_bytes == pytest.approx(measured, rel=0.01), micro
        seen[micro] = row["status"]
    assert seen == {4: "ok", 5: "ok", 6: "ok", 7: "oom", 8: "oom"}


def test_step_time_runs_the_math_kernels_scores_and_fp32_matmuls_at_their_measured_rates(falcon_4l, probe):
    """With fused attention the model had the trimmed Falcon's steps 2.0-3.1x too fast. The math kernel's products
    and elementwise kernels at the rates SDPA alone ran (the Calibration's two fractions, from the probe) put every
    Falcon step within 4%: the trimmed model's and the 7B's."""
    alone = probe[("falcon-7b", 1)]["attention_alone"]
    cal = throughput.load_calibration()
    gpu = find_gpu("H200")
    flops = 12 * alone["scores"] * 64  # QK^T and PV, forward and backward
    assert flops / (alone["fp32_matmuls_forward_backward_ms"] / 1e3) / (gpu.peak_tflops_fp32 * 1e12) == \
        pytest.approx(cal.math_sdpa_matmul_fraction, abs=0.001)  # fmt: skip
    elementwise_s = (alone["sdpa_forward_backward_ms"] - alone["fp32_matmuls_forward_backward_ms"]) / 1e3
    assert 74 * alone["scores"] / elementwise_s / gpu.memory_bandwidth_bytes_per_s == \
        pytest.approx(cal.math_sdpa_memory_fraction, abs=0.001)  # fmt: skip
    big = spec_from_config(_config("falcon-7b"), "falcon-7b")
    checked = 0
    for name in ("falcon-path", "falcon-7b", "falcon-7b-pick"):
        for line in (RESULTS / f"h200x1-i26-{name}-2026-11-29.jsonl").read_text().splitlines():
            row = json.loads(line)
            spec = falcon_4l if name == "falcon-path" else big
            if row["status"] != "ok" or row["case"]["micro_batch_size"] * row["case"]["seq_len"] < 4096:
                continue
            work = workload_of(row, spec)
            assert throughput.sdpa_math_kernel(spec, work)
            strategy = STRATEGIES[row["case"]["strategy"]]
            predicted = throughput.estimate_step_time(spec, strategy, gpu, work).step_s
            assert predicted / statistics.median(timed_steps(row)) == pytest.approx(1, abs=0.04), row["id"]
            checked += 1
    assert checked == 7


def test_eval_holds_one_layers_fp32_scores_under_the_math_kernel(falcon_4l):
    """Eval's forward keeps nothing, but inside a layer the math kernel holds the fp32 product, the probabilities and
    the -inf mask at once (9 bytes per score; SDPA alone peaked 9.3), and the fp32 query, key and value over the
    heads: for Falcon at 5 x 2,048 that is above the loss's logits, the figure eval had; a fused model's eval is the
    loss's. A whole zero-run's eval (4 layers at 12 x 2,048, H200) is held by memory_regression.py's phases."""
    llama = spec_from_config(_config("llama3.2-1b"), "llama3.2-1b")
    for spec, heads, math_kernel in ((falcon_4l, 71, True), (llama, 32, False)):
        work = Workload(micro_batch_size=5, seq_len=2048, gradient_checkpointing=True, precision="bf16")
        tokens = 5 * 2048
        at_loss = 10 * tokens * spec.vocab_size + 4 * tokens * spec.hidden_size
        peak = eval_peak(spec, work, resident=0, ws=0, gathered=0, forward_activations=10**15)
        if math_kernel:
            assert peak == tokens * heads * (9 * 2048 + 3 * 4 * 64) + 4 * tokens * spec.hidden_size > at_loss
        else:
            assert peak == at_loss


def test_the_same_call_with_enable_gqa_takes_a_fused_kernel_many_times_faster(probe):
    """The fifth call timed SDPA alone again, with enable_gqa beside it: the math kernel repeated within 1%, and the
    fused kernel it would take with enable_gqa ran 17-25 times faster (what Falcon loses; speed.md)."""
    rows = [r for r in json.loads((RESULTS / "sdpa-path-h200-2026-11-29.json").read_text()) if r["call"] == 5]
    assert {r["micro_batch_size"] for r in rows} == {1, 5}
    for row in rows:
        alone = row["attention_alone"]
        assert alone["enable_gqa_forward_backward_ms"] < alone["sdpa_forward_backward_ms"] / 15
        assert alone["backward_peak_per_score"] == pytest.approx(12, abs=0.2)
    again = next(r for r in rows if r["micro_batch_size"] == 1)["attention_alone"]
    first = probe[("falcon-7b", 1)]["attention_alone"]
    assert again["sdpa_forward_backward_ms"] == pytest.approx(first["sdpa_forward_backward_ms"], rel=0.01)


def test_the_plan_says_when_attention_runs_the_math_kernel():
    """zero-plan's notes name the cause where the math kernel runs (Falcon's one K/V head; fp32 with grouped-query
    attention), and say nothing for a model whose SDPA call the fused kernels take."""
    cluster = parse_gpus("1xH200", "256GiB")
    falcon = plan(load_model_spec("tiiuae/falcon-7b"), cluster, PlanRequest(seq_len=2048))
    assert falcon.chosen is not None
    assert any("SDPA's math kernel" in note and "1 key/value head(s) for 71 query heads" in note for note in falcon.notes)
    assert (falcon.chosen.strategy.name, falcon.chosen.micro_batch_size) == ("3", 5)  # what ran at 129.37 GiB
    llama = load_model_spec("meta-llama/Llama-3.2-1B")
    assert not any("math kernel" in note for note in plan(llama, cluster, PlanRequest(seq_len=2048)).notes)
    fp32 = plan(llama, cluster, PlanRequest(seq_len=2048, precision="fp32"))
    assert any("math kernel (fp32 with grouped-query attention" in note for note in fp32.notes)

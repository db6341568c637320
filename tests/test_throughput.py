"""The step-time model: one hand-computed case per term, and the directions the ranking relies on."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zero_planner.hardware import find_gpu
from zero_planner.models.spec import ModelSpec, load_model_spec, spec_from_config
from zero_planner.plan import throughput
from zero_planner.plan.memory import Workload, ZeroBuffers
from zero_planner.plan.throughput import estimate_step_time
from zero_planner.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]

# A model with round numbers: 1e9 parameters (tied embeddings: every parameter is in a matmul), 10 layers,
# attention width 1000.
TOY = ModelSpec(
    name="toy",
    hub_id=None,
    model_type="llama",
    config={},
    num_params=10**9,
    num_embedding_params=0,
    num_layer_params=10**8,
    num_layers=10,
    hidden_size=1000,
    intermediate_size=4000,
    num_attention_heads=10,
    num_key_value_heads=10,
    head_dim=100,
    vocab_size=1000,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    num_experts=1,
    num_experts_per_tok=1,
    gated_mlp=True,
    largest_tensor_numel=10**6,
    largest_layer_name="layers.0",
    largest_layer_numel=10**8,
    tensor_sizes=((10**9, 1),),
    source="file",
    has_weights=False,
    weights_path=None,
)
# A GPU with round numbers: 100 TFLOP/s 16-bit, 100 GB/s between GPUs, 20 GB/s PCIe.
GPU = replace(
    find_gpu("A100-80GB"),
    peak_dense_tflops_16bit=100.0,
    peak_tflops_fp32=10.0,
    intra_node_bandwidth_bytes_per_s=10**11,
    pcie_bandwidth_bytes_per_s=2 * 10**10,
)


def work(**kw) -> Workload:
    base = dict(
        micro_batch_size=1,
        seq_len=1000,
        gradient_checkpointing=False,
        precision="bf16",
        world_size=1,
        gpus_per_node=1,
        gradient_accumulation_steps=1,
    )
    return Workload(**{**base, **kw})


def test_compute_hand_computed():
    # Matmuls 6 * N * tokens = 6e12 FLOPs, attention 12 * L * d_attn * s * tokens = 1.2e11, each at the H100's
    # measured share of this GPU's 100 TFLOP/s peak (it has no measurement of its own).
    matmul_fraction, memory_fraction, attention_fraction = throughput.reference_fractions()
    # Memory-bound bytes per token and layer (bf16): 2 RMSNorms 72,000 + rotary 44,000 + silu 16,000 + gate
    # 24,000 + residuals 12,000 + attention output 4,000 = 172,000; forward + 2x backward over 10 layers, the KV
    # cache's cat of k and v (4 bytes per element of 2 x 1,000) per layer, plus 40 bytes per logit of the loss:
    # (3 * 10 * 172,000 + 10 * 8,000 + 40 * 1000) * 1000 tokens = 5.28e9 bytes.
    assert throughput.activation_traffic_bytes(TOY, work()) == 5.28e9
    # Checkpointing: no KV cache; the forward once more, less each layer's last residual add (6 * 1,000).
    assert throughput.activation_traffic_bytes(TOY, work(gradient_checkpointing=True)) == pytest.approx(
        (4 * 10 * 172_000 - 10 * 6_000 + 40 * 1000) * 1000)
    # Of those, the broadcasting multiplies (RMSNorm's two, 12 of its 36 bytes, and rotary's cos and sin, 8 of its 22)
    # run at their own measured rate: (2 * 12,000 + 8 * 2,000) * 3 * 10 layers * 1000 tokens = 1.2e9 bytes.
    assert throughput.broadcast_traffic_bytes(TOY, work()) == 1.2e9
    broadcast_fraction = throughput.load_calibration().broadcast_fraction_for(GPU.name)
    t = estimate_step_time(TOY, STRATEGIES["0"], GPU, work())
    expected = (
        6e12 / (100e12 * matmul_fraction)
        + 1.2e11 / (100e12 * attention_fraction)
        + (5.28e9 - 1.2e9) / (GPU.memory_bandwidth_bytes_per_s * memory_fraction)
        + 1.2e9 / (GPU.memory_bandwidth_bytes_per_s * broadcast_fraction)
    )
    assert t.compute_s == pytest.approx(expected)
    assert t.optimizer_s == pytest.approx(
        throughput.OPTIMIZER_BYTES_PER_PARAM * 1e9 / (GPU.memory_bandwidth_bytes_per_s * memory_fraction)
    )
    assert t.communication_s == 0 and t.offload_s == 0 and t.stage3_s == 0
    assert t.tokens_per_step == 1000
    # its one gradient tensor, checked on the host in the step (ZeRO-0 checks every one), and what the host's
    # launches of its 10 layers starve the GPU of beside its work (the smooth maximum's excess: host_overlap_power)
    cal = throughput.load_calibration()
    launches = throughput.host_seconds(TOY, STRATEGIES["0"], work())
    assert launches == pytest.approx(10 * cal.host_seconds_per_layer) and launches < t.compute_s
    excess = throughput.overlapped_seconds(t.compute_s, launches, cal.host_overlap_power) - t.compute_s
    assert t.host_s == pytest.approx(excess + cal.seconds_per_grad_tensor * 1) and 0 <= excess < 0.01 * t.compute_s
    assert t.tokens_per_second == pytest.approx(1000 / (t.compute_s + t.optimizer_s + t.host_s))
    assert t.mfu == pytest.approx(6.12e12 / (t.step_s * 100e12))


def test_checkpointing_recomputes_the_layers_not_the_lm_head():
    # 8N per token less the lm_head's recomputed forward (2 * vocab * hidden = 2e6) and each layer's down_proj
    # (2 * intermediate * hidden = 8e6 x 10 layers: its output goes straight into the residual add): 7.918e12.
    assert throughput.matmul_flops(TOY, work(gradient_checkpointing=True)) == pytest.approx(7.918e12)
    assert throughput.attention_flops(TOY, work(gradient_checkpointing=True)) == pytest.approx(1.6e11)


def test_every_gpu_scales_its_peaks_by_the_reference_gpus_measured_fractions():
    cal = throughput.load_calibration()
    h100, a100 = find_gpu("H100"), find_gpu("A100-80GB")
    assert cal.reference_gpu == h100.name
    for gpu in (h100, a100):
        assert throughput.matmul_flops_per_s(gpu, "bf16") == gpu.peak_dense_tflops_16bit * 1e12 * cal.matmul_fraction
        assert throughput.memory_bytes_per_s(gpu) == gpu.memory_bandwidth_bytes_per_s * cal.memory_fraction
    assert 0.3 < cal.matmul_fraction <= throughput.MAX_MATMUL_FRACTION
    assert 0 < cal.memory_fraction <= 1 and 0 < cal.attention_fraction <= 1


def test_the_captions_scope_names_what_was_measured():
    cal = throughput.load_calibration()
    text = cal.scope_text()
    for gpu in cal.fitted_gpus():
        assert gpu in text
    assert cal.fitted_gpus()[0] == cal.reference_gpu and len(cal.fitted_gpus()) == 1 + len(cal.gpu_memory_fractions)
    assert cal.link_measured_on and f"NCCL's {cal.link_fraction:.0%}" in text and cal.link_measured_on in text
    bare = replace(cal, link_measured_on="", gpu_memory_fractions=())
    assert bare.scope_text().startswith(f"fitted on {cal.reference_gpu} runs") and "not measured" in bare.scope_text()


def test_a_gpu_with_its_own_fitted_memory_fraction_uses_it():
    cal = throughput.load_calibration()
    h200, a100 = find_gpu("H200"), find_gpu("A100-80GB")
    own = cal.memory_fraction_for(h200.name)
    assert own != cal.memory_fraction  # fitted on the H200's runs (catalog/step_time.json gpu_memory_fraction)
    assert throughput.memory_bytes_per_s(h200) == h200.memory_bandwidth_bytes_per_s * own
    assert cal.memory_fraction_for(a100.name) == cal.memory_fraction  # no runs: the reference GPU's
    # the memory-bound part of a step, and the optimizer's, scale with it; the matmuls do not
    base = replace(cal, gpu_memory_fractions=())
    slow = estimate_step_time(TOY, STRATEGIES["0"], h200, work(), base)
    fitted = estimate_step_time(TOY, STRATEGIES["0"], h200, work(), cal)
    assert fitted.optimizer_s == pytest.approx(slow.optimizer_s * cal.memory_fraction / own)
    assert throughput.matmul_flops_per_s(h200, "bf16", cal) == throughput.matmul_flops_per_s(h200, "bf16", base)


def test_collectives_run_at_nccls_measured_share_of_the_link():
    import glob
    import subprocess
    import sys

    cal = throughput.load_calibration()
    h100 = find_gpu("H100")
    two = work(world_size=2, gpus_per_node=2)
    assert throughput.link_bandwidth_bytes_per_s(h100, two) == h100.intra_node_bandwidth_bytes_per_s * cal.link_fraction
    assert 0.5 < cal.link_fraction < 1  # NCCL on NVLink 4 reached 319 of 450 GB/s (2026-11-27)
    # the committed constant is what the committed NCCL timings give
    for pattern in ("nccl-h100*.json", "nccl-h200*.json"):  # the H200's NVLink measured alike (0.70, 2026-11-27)
        files = sorted(glob.glob(str(ROOT / "benchmarks" / "results" / pattern)))
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "nccl_rates.py"), "--fit", *files],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        fitted = float(out.split("(")[1].split(" of the catalog's link")[0])
        assert fitted == pytest.approx(cal.link_fraction, abs=0.015), (pattern, out)
    # ZeRO-1 on two GPUs: DeepSpeed all-reduces the gradients (2 x Psi x 2 bytes x 1/2) and all-gathers the
    # updated parameters (Psi x 2 bytes x 1/2), at that rate
    seconds = throughput.communication_seconds(TOY, STRATEGIES["1"], h100, two, cal)
    volume = 3 * throughput.trainable_params(TOY, two) * 2 * 0.5
    assert seconds == pytest.approx(volume / (h100.intra_node_bandwidth_bytes_per_s * cal.link_fraction))


def test_zero1_and_zero2_all_reduce_their_gradients_as_deepspeed_does():
    # stage_1_and_2.py all-reduces each gradient bucket (use_multi_rank_bucket_allreduce) and all-gathers the
    # parameters; stage 0 only all-reduces; stage 3 reduce-scatters and gathers the weights in each pass
    four = work(world_size=4, gpus_per_node=4)
    psi_bytes = throughput.trainable_params(TOY, four) * 2
    ring = 3 / 4
    volume = {stage: throughput.communication_bytes(TOY, STRATEGIES[stage], four) for stage in ("0", "1", "2")}
    assert volume["0"] == pytest.approx(2 * psi_bytes * ring)
    assert volume["1"] == pytest.approx(3 * psi_bytes * ring)
    assert volume["2"] == pytest.approx(3 * psi_bytes * ring)
    # stage 2 reduces in every micro-step's backward, stage 1 once per optimizer step
    accumulating = replace(four, gradient_accumulation_steps=4)
    assert throughput.communication_bytes(TOY, STRATEGIES["2"], accumulating) == pytest.approx(9 * psi_bytes * ring)
    assert throughput.communication_bytes(TOY, STRATEGIES["1"], accumulating) == pytest.approx(3 * psi_bytes * ring)


def test_a_refitted_calibration_replaces_every_constant():
    cal = throughput.load_calibration()
    slower = replace(cal, matmul_fraction=cal.matmul_fraction / 2, attention_fraction=cal.attention_fraction / 2,
                     memory_fraction=cal.memory_fraction / 2, broadcast_memory_fraction=cal.broadcast_memory_fraction / 2)
    base = estimate_step_time(TOY, STRATEGIES["0"], GPU, work())
    half = estimate_step_time(TOY, STRATEGIES["0"], GPU, work(), slower)
    assert half.compute_s == pytest.approx(2 * base.compute_s)
    assert half.optimizer_s == pytest.approx(2 * base.optimizer_s)


def test_larger_vocabulary_costs_more_time_per_token():
    # The loss upcasts micro_batch * seq * vocab logits to fp32 and reads/writes them forward and backward.
    small = estimate_step_time(TOY, STRATEGIES["0"], GPU, work())
    large_spec = replace(TOY, vocab_size=150_000, num_params=TOY.num_params + 149_000 * 1000)
    large = estimate_step_time(large_spec, STRATEGIES["0"], GPU, work())
    traffic = throughput.activation_traffic_bytes(large_spec, work()) - throughput.activation_traffic_bytes(TOY, work())
    assert traffic == 40 * 149_000 * 1000
    assert large.tokens_per_second < small.tokens_per_second


def test_stage3_pays_host_time_per_fetch_hidden_by_long_micro_steps():
    # One GPU, a model of many tensors: 100 layers of 7 fetched matrices (ZeRO-3 gathers each in forward and
    # backward). At 1 x 128 tokens the GPU's work is short and the hooks set the pace; at 64 x 4096 it hides them.
    many = replace(TOY, tensor_sizes=((10**9 // 700, 700),))
    assert throughput.stage3_fetches(many, work()) == 1400
    small = dict(micro_batch_size=1, seq_len=128)
    s2, s3 = (estimate_step_time(many, STRATEGIES[n], GPU, work(**small)) for n in ("2", "3"))
    host = throughput.host_seconds(many, STRATEGIES["3"], work(**small))
    # the hooks add to the layers' launches on the host's one thread
    cal = throughput.load_calibration()
    power = cal.host_overlap_power
    overlapped = throughput.overlapped_seconds
    # and each gradient bucket it closes (about one per matrix here)
    hooks = (1400 * throughput.STAGE3_SECONDS_PER_FETCH
             + throughput.stage2_reductions(many, work(**small)) * cal.stage3_seconds_per_bucket)  # fmt: skip
    assert s3.stage3_s == pytest.approx(overlapped(s3.compute_s, host + hooks, power)
                                        - overlapped(s3.compute_s, host, power))  # fmt: skip
    assert s3.stage3_s > 1400 * throughput.STAGE3_SECONDS_PER_FETCH - s3.compute_s > 0
    assert s3.step_s > s2.step_s
    large = dict(micro_batch_size=64, seq_len=4096)
    l2, l3 = (estimate_step_time(many, STRATEGIES[n], GPU, work(**large)) for n in ("2", "3"))
    assert l3.stage3_s < 1e-3 * l3.step_s and l3.step_s == pytest.approx(l2.step_s, rel=1e-3)


def test_small_micro_batches_wait_for_the_host_and_large_ones_hide_it():
    # The host's launches of each layer are a floor on the micro-step; ZeRO-2 adds its time per reduced bucket.
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    tiny, big = work(micro_batch_size=1, seq_len=128), work(micro_batch_size=16, seq_len=4096)
    cal = throughput.load_calibration()
    floor = spec.num_layers * cal.host_seconds_per_layer
    def tensors(name: str, w: Workload) -> float:  # the per-gradient-tensor work, at every micro-batch
        return throughput.grad_tensor_seconds(spec, STRATEGIES[name], w)

    assert tensors("0", tiny) == pytest.approx(146 * cal.seconds_per_grad_tensor) and tensors("0", tiny) > 0  # 146 tensors
    def busy(gpu_s: float, host_s: float) -> float:  # the GPU's work and the host's side by side
        return throughput.overlapped_seconds(gpu_s, host_s, cal.host_overlap_power)

    s0 = estimate_step_time(spec, STRATEGIES["0"], GPU, tiny)
    assert s0.host_s == pytest.approx(busy(s0.compute_s, floor) - s0.compute_s + tensors("0", tiny))
    assert s0.host_s > floor - s0.compute_s + tensors("0", tiny) > tensors("0", tiny)
    s2 = estimate_step_time(spec, STRATEGIES["2"], GPU, tiny)
    buckets = throughput.stage2_reductions(spec, tiny)
    assert s2.host_s == pytest.approx(busy(s2.compute_s, floor + buckets * cal.stage2_seconds_per_reduction)
                                      - s2.compute_s + tensors("2", tiny))  # fmt: skip
    assert s2.step_s > estimate_step_time(spec, STRATEGIES["1"], GPU, tiny).step_s
    checkpointed = estimate_step_time(spec, STRATEGIES["0"], GPU, replace(tiny, gradient_checkpointing=True))
    assert checkpointed.host_s + checkpointed.compute_s == pytest.approx(busy(checkpointed.compute_s, floor * 4 / 3)
                                                                         + tensors("0", tiny))  # fmt: skip
    for name in ("0", "1", "2"):  # the smooth maximum leaves a trace: (1 + r^p)^(1/p) - 1 of the GPU's time, r the host's share
        assert estimate_step_time(spec, STRATEGIES[name], GPU, big).host_s == pytest.approx(tensors(name, big), rel=1e-4)


def test_a_step_is_host_bound_where_the_hosts_work_reaches_the_gpus():
    # StepTime.bound says which stated error a candidate's tokens/s carries: the host's work of the micro-steps
    # (layer launches, ZeRO-2's buckets, ZeRO-3's hooks) against the GPU's, before the two race.
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    tiny, big = work(micro_batch_size=1, seq_len=128), work(micro_batch_size=16, seq_len=4096)
    cal = throughput.load_calibration()
    floor = spec.num_layers * cal.host_seconds_per_layer
    s0 = estimate_step_time(spec, STRATEGIES["0"], GPU, tiny)
    assert s0.host_work_s == pytest.approx(floor) and s0.host_work_s > s0.compute_s and s0.bound == "host"
    assert estimate_step_time(spec, STRATEGIES["0"], GPU, big).bound == "gpu"
    # ZeRO-3's hooks add to the host's work, accumulation multiplies both sides alike
    mid = work(micro_batch_size=1, seq_len=1024)  # 0.12 s of GPU work on the toy GPU; the hooks' 0.33 s outlast it
    z0, z3 = (estimate_step_time(spec, STRATEGIES[name], GPU, mid) for name in ("0", "3"))
    fetches = throughput.stage3_host_seconds(spec, mid, cal)
    assert z3.host_work_s == pytest.approx(z0.host_work_s + fetches) and fetches > 0
    assert z0.bound == "gpu" and z3.bound == "host"
    assert estimate_step_time(spec, STRATEGIES["3"], GPU, work(micro_batch_size=2, seq_len=2048)).bound == "gpu"
    accumulated = estimate_step_time(spec, STRATEGIES["3"], GPU, replace(mid, gradient_accumulation_steps=4))
    assert accumulated.host_work_s == pytest.approx(4 * z3.host_work_s) and accumulated.bound == "host"


def test_the_stated_error_is_that_of_runs_bound_alike_where_measured():
    cal = replace(throughput.load_calibration(), median_error=0.08, max_error=0.8, several_gpus_median_error=0.06,
                  several_gpus_max_error=0.6, bound_errors=(("1:gpu", 0.05, 0.3), ("1:host", 0.14, 0.8),
                                                            ("n:gpu", 0.04, 0.4), ("n:host", 0.13, 0.6)))  # fmt: skip
    assert cal.stated_error(1) == (0.08, 0.8) and cal.stated_error(4) == (0.06, 0.6)
    assert cal.stated_error(1, "gpu") == (0.05, 0.3) and cal.stated_error(1, "host") == (0.14, 0.8)
    assert cal.stated_error(2, "gpu") == (0.04, 0.4) and cal.stated_error(8, "host") == (0.13, 0.6)
    # nothing measured per bound, or on several GPUs: the figures that were
    assert replace(cal, bound_errors=()).stated_error(1, "host") == (0.08, 0.8)
    assert replace(cal, bound_errors=(("1:gpu", 0.05, 0.3),)).stated_error(2, "gpu") == (0.06, 0.6)
    assert replace(cal, several_gpus_median_error=0.0).stated_error(2, "gpu") == (0.05, 0.3)


def test_deepspeed_handles_gradients_one_tensor_at_a_time():
    # Stages 0-2 check each gradient of the rank's partition in the step; ZeRO-3 moves each into its partition in
    # every micro-step's backward, on every rank; offloading walks them alike to copy them to the host.
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    one, four = work(), work(world_size=4, gpus_per_node=4, gradient_accumulation_steps=2)
    passes = {name: (throughput.grad_tensor_passes(spec, STRATEGIES[name], one),
                     throughput.grad_tensor_passes(spec, STRATEGIES[name], four)) for name in STRATEGIES}
    assert passes["0"] == (146, 146) and passes["1"] == passes["2"] == (146, 146 / 4)
    assert passes["3"] == (146, 2 * 146)
    assert passes["2-offload"] == passes["2"] and passes["3-offload"] == passes["3-offload-all"] == passes["3"]
    lora = replace(one, method="lora", lora_r=8)
    assert throughput.trainable_tensors(spec, lora) == 2 * 7 * 16  # A and B of seven linears in 16 layers


def test_stage2_reductions_follow_the_bucket_size():
    # Llama 3.2 1B at our hidden^2 buckets: each of the 7 matrices of a layer closes a bucket (16 layers), and the
    # embedding one more; DeepSpeed's default 5e8 elements take its 1.24e9 parameters in three.
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    assert throughput.stage2_reductions(spec, work()) == 16 * 7 + 1
    assert throughput.stage2_reductions(spec, work(), bucket=500_000_000) == 3
    counts = [throughput.stage2_reductions(spec, work(), bucket=2**k) for k in range(16, 32)]
    assert counts == sorted(counts, reverse=True)
    lora = throughput.stage2_reductions(spec, work(method="lora"))
    assert lora == -(-throughput.trainable_params(spec, work(method="lora")) // (2048 * 2048))


TINY_OPT = {"model_type": "opt", "vocab_size": 512, "hidden_size": 64, "ffn_dim": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 128, "word_embed_proj_dim": 64}
TINY_NEOX = {"model_type": "gpt_neox", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 256,
             "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128}
"""Families models/analytic.py does not cover: their buckets follow the meta-device count's parameter order."""


@pytest.mark.parametrize("model, bucket", [("llama-tiny", 20_000), ("llama-tiny", 60_000), ("opt", 4096),
                                           ("opt", 20_000), ("gpt_neox", 4096)])
def test_stage2_reductions_count_what_deepspeed_reduces(tmp_path, model, bucket):
    """A real ZeRO-2 engine (one CPU process, overlap_comm as our JSON writes it): its reduce_ipg_grads calls in one
    backward of a tiny model, within one of the count from the reversed registration order (analytic.parameter_order
    for llama, the meta-device count's for OPT and GPT-NeoX, whose biases close buckets of their own at hidden^2)."""
    import subprocess
    import sys

    config = {"opt": TINY_OPT, "gpt_neox": TINY_NEOX}.get(model) or json.loads(
        (ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text())
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "ds_reductions.py"), json.dumps(config), str(bucket)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=900)  # fmt: skip
    lines = [line for line in out.stdout.splitlines() if line.startswith("REDUCTIONS ")]
    assert lines, out.stdout[-2000:] + out.stderr[-2000:]
    measured = int(lines[-1].split()[1])
    predicted = throughput.stage2_reductions(spec_from_config(config, model), work(), bucket=bucket)
    assert measured > 3 and abs(predicted - measured) <= 1, (predicted, measured)


def test_cpu_adam_time_is_proportional_to_parameters():
    one = estimate_step_time(TOY, STRATEGIES["2-offload"], GPU, work())
    two = estimate_step_time(replace(TOY, num_params=2 * 10**9), STRATEGIES["2-offload"], GPU, work())
    adam = 1e9 / throughput.CPU_ADAM_PARAMS_PER_S_PER_NODE
    assert two.offload_s - one.offload_s == pytest.approx(adam + 0.2)  # + 2e9 bytes more each way over PCIe
    assert one.optimizer_s == 0  # the optimizer runs on the CPU


def test_communication_hand_computed():
    # Stage 0 on 2 GPUs: all-reduce of 1e9 bf16 gradients = 2 * 2e9 bytes * (2-1)/2 = 2e9 bytes at 100 GB/s times
    # NCCL's measured share of a link (link_fraction).
    share = throughput.load_calibration().link_fraction
    t = estimate_step_time(TOY, STRATEGIES["0"], GPU, work(world_size=2, gpus_per_node=2))
    assert t.communication_s == pytest.approx(0.02 / share)
    # Stage 3: 3 * 2e9 bytes * 1/2 = 3e9 bytes.
    t3 = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(world_size=2, gpus_per_node=2))
    assert t3.communication_s == pytest.approx(0.03 / share)


def test_offload_hand_computed():
    # One GPU, 2-offload: 2e9 bytes of gradients down + 2e9 bytes of parameters up at 20 GB/s = 0.2 s,
    # plus CPU Adam over 1e9 parameters at 1.5e9 parameters/s.
    t = estimate_step_time(TOY, STRATEGIES["2-offload"], GPU, work())
    assert t.offload_s == pytest.approx(0.2 + 1e9 / throughput.CPU_ADAM_PARAMS_PER_S_PER_NODE)
    # Parameter offload adds the partition twice more per micro-step (forward and backward): 2 * 2e9 / 2e10.
    t_all = estimate_step_time(TOY, STRATEGIES["3-offload-all"], GPU, work())
    assert t_all.offload_s == pytest.approx(t.offload_s + 0.2)


def test_one_gpu_has_no_communication():
    for strategy in STRATEGIES.values():
        assert estimate_step_time(TOY, strategy, GPU, work()).communication_s == 0


@given(world=st.integers(1, 64), accum=st.integers(1, 8), micro=st.integers(1, 16))
def test_more_gpus_never_slow_compute(world, accum, micro):
    one = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(micro_batch_size=micro, gradient_accumulation_steps=accum))
    shape = dict(micro_batch_size=micro, gradient_accumulation_steps=accum)
    many = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(**shape, world_size=world, gpus_per_node=min(world, 8)))
    assert many.compute_s <= one.compute_s * (1 + 1e-12)
    assert many.tokens_per_step == world * one.tokens_per_step


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize("world", [1, 2, 16])
def test_checkpointing_is_slower(name, world):
    w = dict(world_size=world, gpus_per_node=min(world, 8))
    plain = estimate_step_time(TOY, STRATEGIES[name], GPU, work(**w))
    ckpt = estimate_step_time(TOY, STRATEGIES[name], GPU, work(gradient_checkpointing=True, **w))
    assert ckpt.step_s > plain.step_s


@pytest.mark.parametrize("offloaded, plain", [("2-offload", "2"), ("3-offload", "3"), ("3-offload-all", "3"),
                                               ("3-offload", "2-offload")])
@pytest.mark.parametrize("world", [1, 4])
def test_offload_is_slower(offloaded, plain, world):
    w = work(world_size=world, gpus_per_node=world)
    assert (
        estimate_step_time(TOY, STRATEGIES[offloaded], GPU, w).step_s
        > estimate_step_time(TOY, STRATEGIES[plain], GPU, w).step_s
    )


def test_stage3_moves_more_than_stage2_and_stage2_reduces_every_micro_step():
    w = dict(world_size=8, gpus_per_node=8)
    t = {
        n: estimate_step_time(TOY, STRATEGIES[n], GPU, work(gradient_accumulation_steps=4, **w))
        for n in ("0", "1", "2", "3")
    }
    # stage 1 all-gathers its parameters after the all-reduce stage 0 also does
    assert t["0"].communication_s < t["1"].communication_s < t["2"].communication_s < t["3"].communication_s


def test_inter_node_link_is_slower():
    one_node = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(world_size=16, gpus_per_node=16))
    two_nodes = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(world_size=16, gpus_per_node=8))
    # within the node NCCL reaches its measured share of the link; across nodes the assumed NIC sets the pace
    within = GPU.intra_node_bandwidth_bytes_per_s * throughput.load_calibration().link_fraction
    assert two_nodes.communication_s == pytest.approx(
        one_node.communication_s * within / throughput.INTER_NODE_BANDWIDTH_BYTES_PER_S
    )


def test_fp32_uses_the_fp32_peak():
    # 100 vs 10 TFLOP/s for the matmuls; elementwise kernels move twice the bytes.
    assert throughput.matmul_flops_per_s(GPU, "bf16") == pytest.approx(10 * throughput.matmul_flops_per_s(GPU, "fp32"))
    fp32 = throughput.activation_traffic_bytes(TOY, work(precision="fp32"))
    assert fp32 == 2 * throughput.activation_traffic_bytes(TOY, work())


def test_larger_micro_batch_is_not_slower_per_token():
    # Stages 0-2: the same tokens per step cost the same GPU work (the measured steps show no per-micro-step
    # cost beyond it at >= 4096 tokens); stage 3 pays its host time per micro-step, so fewer, larger ones win.
    for name in ("2", "3"):
        small = estimate_step_time(TOY, STRATEGIES[name], GPU, work(micro_batch_size=1, gradient_accumulation_steps=8))
        large = estimate_step_time(TOY, STRATEGIES[name], GPU, work(micro_batch_size=8, gradient_accumulation_steps=1))
        assert large.tokens_per_second >= small.tokens_per_second * (1 - 1e-12)


def test_mixture_of_experts_computes_with_routed_experts_only():
    mixtral = load_model_spec("mistralai/Mixtral-8x7B-v0.1")
    active = throughput.compute_params(mixtral)
    # Mixtral 8x7B: 46.7B parameters, ~12.9B active per token (Mistral AI), less the 131M-parameter input embedding.
    assert 12.5e9 < active < 13.0e9 < mixtral.num_params


def test_stage3_offload_brings_parameters_up_from_pageable_memory():
    """Measured (Llama-3.2-3B, H200, alone): ZeRO-3 with the optimizer offloaded is 1.1-1.6 s per step slower
    than ZeRO-2 offload at the same shape, and slower than offloading the parameters too; the difference is
    the 16-bit parameter copy from a fresh pageable buffer, w * P / STAGE3_OFFLOAD_COPY_BYTES_PER_S."""
    from zero_planner.plan.memory import trainable_params
    from zero_planner.plan.throughput import STAGE3_OFFLOAD_COPY_BYTES_PER_S

    w = work()
    three = estimate_step_time(TOY, STRATEGIES["3-offload"], GPU, w)
    two = estimate_step_time(TOY, STRATEGIES["2-offload"], GPU, w)
    copy = 2 * trainable_params(TOY, w) / STAGE3_OFFLOAD_COPY_BYTES_PER_S
    assert three.offload_s == pytest.approx(two.offload_s + copy)



@pytest.mark.parametrize("name", ["meta-llama/Llama-3.2-1B", "microsoft/Phi-3-mini-4k-instruct", "gpt2-medium",
                                  "mistralai/Mixtral-8x7B-v0.1", "google/gemma-2-2b", "Qwen/Qwen2.5-0.5B"])
def test_gemm_shapes_reconcile_with_the_exact_parameter_count(name):
    # The GEMMs are the standard projections; their FLOPs must be the matmul FLOPs of the exact count (GPT-2's
    # position table is a lookup, 0.4% of its parameters).
    spec = load_model_spec(name)
    for ckpt in (False, True):
        w = work(micro_batch_size=2, seq_len=512, gradient_checkpointing=ckpt)
        assert sum(g.flops for g in throughput.gemms(spec, w)) == pytest.approx(throughput.matmul_flops(spec, w), rel=5e-3)


def test_the_mlp_output_projection_is_recomputed_only_where_something_after_it_saves_its_output():
    down = TOY.intermediate_size * TOY.hidden_size
    assert throughput.output_projection_params(TOY) == down  # Llama: down_proj -> residual add
    assert throughput.output_projection_params(replace(TOY, model_type="gemma2")) == 0  # post-feedforward norm
    assert throughput.output_projection_params(replace(TOY, model_type="gpt2", config={})) == 0  # resid_pdrop 0.1
    assert throughput.output_projection_params(replace(TOY, model_type="gpt2", config={"resid_pdrop": 0.0})) == down
    # OPT drops out fc2's output (config.dropout, OPTConfig's default 0.1): fc2 runs again, and the dropouts' bytes count
    assert throughput.output_projection_params(replace(TOY, model_type="opt", config={})) == 0
    assert throughput.output_projection_params(replace(TOY, model_type="opt", config={"dropout": 0.0})) == down
    opt = load_model_spec("facebook/opt-1.3b")
    assert opt.model_type == "opt" and throughput.output_projection_params(opt) == 0
    undropped = replace(opt, config={**opt.config, "dropout": 0.0})
    assert throughput.layer_traffic_bytes(opt) > throughput.layer_traffic_bytes(undropped)
    assert throughput.output_projection_params(_moe(8, 2, 1000)) == 0
    checkpointed = work(gradient_checkpointing=True)
    assert throughput.unrecomputed_params(TOY, work()) == 0
    assert throughput.unrecomputed_params(TOY, replace(checkpointed, method="lora")) == 0  # PEFT runs the base first
    # Llama 3.2 1B's GEMMs charge down_proj's forward once, the other projections twice
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    plain = sum(g.flops for g in throughput.gemms(spec, work()))
    again = sum(g.flops for g in throughput.gemms(spec, checkpointed)) - plain
    projections = sum(k * n for k, n in throughput.layer_linears(spec)) - spec.intermediate_size * spec.hidden_size
    assert again == pytest.approx(2 * 1000 * spec.num_layers * projections, rel=1e-6)


def test_attention_through_a_mask_runs_at_its_measured_rate():
    # Phi-3-mini's 2,047-token window: at 2,048 tokens every layer attends through a boolean mask (no causal skip),
    # timed at masked_attention_fraction of the peak; at 1,024 no layer does, and the fitted rate holds
    spec = load_model_spec("microsoft/Phi-3-mini-4k-instruct")
    cal = throughput.load_calibration()
    gpu = find_gpu("H100-SXM")
    for seq, masked in ((1024, 0.0), (2048, 1.0)):
        w = work(seq_len=seq)
        assert throughput.masked_attention_share(spec, w) == masked
        flops = throughput.attention_flops(spec, w)
        rate = throughput.peak_flops(gpu, "bf16") * (cal.masked_attention_fraction if masked else cal.attention_fraction)
        assert throughput.attention_seconds(spec, gpu, w) == pytest.approx(flops / rate)
    assert throughput.masked_attention_share(spec, replace(work(seq_len=2048), attn_implementation="eager")) == 0.0
    # unmeasured (0): the unmasked rate
    unmeasured = replace(cal, masked_attention_fraction=0.0)
    w = work(seq_len=2048)
    assert throughput.attention_seconds(spec, gpu, w, unmeasured) == pytest.approx(
        throughput.attention_flops(spec, w) / throughput.attention_flops_per_s(gpu, "bf16", unmeasured))


def test_eager_attention_moves_its_scores_through_memory():
    # Gemma 2 2B, 8 heads, 26 layers, soft-capped scores: (24 + 12) forward + (28 + 14) backward bytes per score
    # element, the forward twice with checkpointing; nothing under SDPA
    spec = spec_from_config(json.loads((ROOT / "benchmarks" / "model_configs" / "gemma2-2b.json").read_text()), "gemma2-2b")
    eager = replace(work(micro_batch_size=5, seq_len=2048), attn_implementation="eager")
    scores = 26 * 5 * 8 * 2048 * 2048
    assert throughput.eager_attention_bytes(spec, eager) == scores * (36 + 42)
    assert throughput.eager_attention_bytes(spec, replace(eager, gradient_checkpointing=True)) == scores * (2 * 36 + 42)
    assert throughput.eager_attention_bytes(spec, replace(eager, attn_implementation="sdpa")) == 0
    assert throughput.eager_attention_bytes(spec, replace(eager, precision="fp32")) == 2 * scores * (36 + 42)
    # the committed measurement: zero-run with the plan's eager attention against the harness's SDPA, timed the same
    # way (one wait per step), two H200s; the difference is these bytes at the measured score rate
    # (eager_scores_memory_fraction, 0.54 of 4.8 TB/s; the H200's memory-bound kernels: 0.55), within 5%
    root = ROOT / "benchmarks"
    sweep = {json.loads(line)["id"]: json.loads(line)
             for line in (root / "results" / "h200x2-i26-gemma2-one-sync-2026-11-27.jsonl").read_text().splitlines()}
    for name, harness_id in (("z1", "gemma2-2b|1|bf16|mb5|s2048|nogc|g2|ga1|cap139.8|xs|one-sync"),
                             ("z0gc", "gemma2-2b|0|bf16|mb13|s2048|gc|g2|ga1|cap139.8|xs|one-sync")):
        report = json.loads((root / "zero_run" / f"gemma2-2b-eager-{name}-s2048-2xh200-2026-11-27.report.json").read_text())
        case = sweep[harness_id]["case"]
        assert sweep[harness_id]["ranks"][0]["attn_implementation"] == "sdpa"
        assert (report["micro_batch_size"], report["strategy"]) == (case["micro_batch_size"], case["strategy"])
        tokens = report["micro_batch_size"] * report["seq_len"] * report["world_size"]
        steps = sweep[harness_id]["ranks"][0]["step_times_s"][1:]
        extra_s = tokens / report["tokens_per_second"] - sorted(steps)[len(steps) // 2]
        w = replace(work(micro_batch_size=case["micro_batch_size"], seq_len=2048,
                         gradient_checkpointing=case["gradient_checkpointing"]), attn_implementation="eager")
        assert throughput.eager_attention_seconds(spec, find_gpu("H200"), w) == pytest.approx(extra_s, rel=0.05)


def test_eager_scores_run_at_their_measured_rate_not_the_fitted_one():
    spec = spec_from_config(json.loads((ROOT / "benchmarks" / "model_configs" / "gemma2-2b.json").read_text()), "gemma2-2b")
    gpu = find_gpu("H200")
    cal = throughput.load_calibration()
    eager = replace(work(micro_batch_size=5, seq_len=2048), attn_implementation="eager")
    scores = throughput.eager_attention_bytes(spec, eager)
    assert throughput.eager_attention_seconds(spec, gpu, eager) == pytest.approx(
        scores / (gpu.memory_bandwidth_bytes_per_s * cal.eager_scores_memory_fraction))
    # the micro-step adds exactly that to the same shape under SDPA; unmeasured, the fitted HBM rate times them
    sdpa = replace(eager, attn_implementation="sdpa")
    assert throughput.micro_step_gpu_seconds(spec, gpu, eager) - throughput.micro_step_gpu_seconds(spec, gpu, sdpa) == \
        pytest.approx(throughput.eager_attention_seconds(spec, gpu, eager))
    unmeasured = replace(cal, eager_scores_memory_fraction=0.0)
    assert throughput.eager_attention_seconds(spec, gpu, eager, unmeasured) == pytest.approx(
        scores / throughput.memory_bytes_per_s(gpu, unmeasured))
    assert throughput.eager_attention_seconds(spec, gpu, sdpa) == 0.0
    # the committed constant is the median of the committed pairs (same shape under eager and SDPA in one call on
    # one machine, one wait each)
    from benchmarks.throughput_check import eager_pairs

    pairs = eager_pairs(quiet=True)
    assert len(pairs) >= 12 and {p.bandwidth for p in pairs} == {find_gpu("H100").memory_bandwidth_bytes_per_s,
                                                                 gpu.memory_bandwidth_bytes_per_s}  # fmt: skip
    assert statistics.median(p.fraction for p in pairs) == pytest.approx(cal.eager_scores_memory_fraction, abs=0.005)
    # where the difference is large next to a step's own spread (above 150 ms), every pair is within 0.45-0.65
    assert all(0.45 < p.fraction < 0.65 for p in pairs if p.eager_s - p.sdpa_s > 0.15)
    # a second family, no soft-cap (Llama 3.2 1B, 32 heads of 64, on one H100 and one H200): the byte count and
    # the rate hold there within 10%, from 1 sequence of 2,048 to 8 checkpointed (its own shares 0.50-0.53)
    llama = [p for p in pairs if p.name.startswith("llama3.2-1b|")]
    assert len(llama) == 4 and all(p.predicted_s == pytest.approx(p.eager_s - p.sdpa_s, rel=0.10) for p in llama)


def _moe(experts: int, top_k: int, intermediate: int) -> ModelSpec:
    """A mixture of experts with the TOY's attention and `experts` routed experts of width `intermediate`."""
    return replace(TOY, model_type="mixtral", num_experts=experts, num_experts_per_tok=top_k,
                   intermediate_size=intermediate, linear=None,
                   num_params=TOY.num_params)  # fmt: skip


def test_small_experts_are_held_back_by_the_bytes_they_move():
    # Same active FLOPs per token (top-k x width equal) on the H100 (ridge ~400 FLOP/B at the measured rates),
    # 4,096 tokens: 8 experts top-2 of width 3,000 see 1,024 tokens each and are bound by their FLOPs; 128
    # experts top-8 of width 750 see 256 tokens each, read their whole weight in every pass, and are bound by
    # the bytes (roofline): the same FLOPs take about twice as long.
    h100 = find_gpu("H100")
    w = work(micro_batch_size=4, seq_len=1024)
    rate, bandwidth = throughput.matmul_flops_per_s(h100, "bf16"), throughput.memory_bytes_per_s(h100)

    def expert_seconds(spec: ModelSpec) -> tuple[float, float]:
        grouped = [g for g in throughput.gemms(spec, w) if g.grouped]
        return sum(g.flops for g in grouped) / rate, sum(max(g.flops / rate, g.bytes / bandwidth) for g in grouped)

    (few_flops, few_s), (many_flops, many_s) = expert_seconds(_moe(8, 2, 3000)), expert_seconds(_moe(128, 8, 750))
    assert few_flops == pytest.approx(many_flops)
    assert few_s < 1.1 * few_flops
    assert many_s > 1.7 * many_flops


def test_routing_and_permutation_bytes_grow_with_top_k_and_vanish_for_dense_models():
    w = work(micro_batch_size=2, seq_len=1024)
    assert throughput.moe_traffic_bytes(TOY, w) == 0
    two, eight = throughput.moe_traffic_bytes(_moe(32, 2, 1000), w), throughput.moe_traffic_bytes(_moe(32, 8, 1000), w)
    assert 3.5 < eight / two < 4  # the per-token rows and the router's softmax do not grow with k
    recomputed = throughput.moe_traffic_bytes(_moe(32, 8, 1000), work(micro_batch_size=2, seq_len=1024, gradient_checkpointing=True))
    assert eight < recomputed < 2 * eight  # the forward runs again, the backward does not


MOE_TRACE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "moe-ops-transformers-5.17.0.json"


@pytest.mark.parametrize("block", json.loads(MOE_TRACE.read_text())["blocks"], ids=lambda b: b["name"])
def test_moe_block_bytes_match_the_traced_kernels(block):
    # benchmarks/moe_ops.py traced one MoE block's aten ops under transformers 5.17.0 (the GPU runs' version): the
    # count must agree op for op in total, less the radix sorts' inner passes (inside one aten op each) and with
    # the shared expert that layer_traffic_bytes counts. And checkpointing's recomputation stops where the trace
    # says it does: after the inverse permutation (Mixtral) or at the shared expert's scaled add (Qwen2-MoE).
    spec = spec_from_config(block["config"], block["name"])
    layer = throughput.moe_layer_bytes(spec)
    traced = block["forward"]["bytes_per_token"] + block["backward"]["bytes_per_token"]
    shared = (1 + throughput.BACKWARD_TRAFFIC_RATIO) * throughput.shared_expert_bytes(spec)
    assert layer.forward + layer.backward - layer.sort_passes + shared == pytest.approx(traced, rel=0.015)
    assert (layer.not_recomputed > 0) == ("index x1" in block["not_recomputed"])
    # Without checkpointing, use_cache builds a KV cache: every layer concatenates its k and v into it.
    kv = spec.num_key_value_heads * spec.head_dim
    assert throughput._KV_CACHE_BYTES * 2 * kv == pytest.approx(block["use_cache_bytes_per_token"], rel=0.05)


def test_fp32_routing_weights_make_the_permuted_rows_fp32():
    # Mixtral's router hands the experts fp32 weights, so proj_out * weights is fp32 and the gather back, the
    # k-way sum and their backward move 4-byte rows; Qwen3-MoE casts the weights back to bf16.
    mixtral, qwen = _moe(32, 8, 512), replace(_moe(32, 8, 512), model_type="qwen3_moe")
    h, k = TOY.hidden_size, 8
    forward, backward = throughput.expert_row_bytes(2, 4)
    assert (forward, backward) == (7 * 2 + 4 * 4, 11 * 4 + 7 * 2)
    assert throughput.expert_row_bytes(2, 2) == (11 * 2, 16 * 2)
    extra = throughput.moe_layer_bytes(mixtral).forward - throughput.moe_layer_bytes(qwen).forward
    assert extra == k * h * (4 * 4 - 4 * 2) + h * (4 + 6 - 2)  # rows, plus the per-token sum and its cast


def test_a_sliding_window_the_sequence_reaches_costs_mask_bytes():
    # Phi-3-mini: window 2047, 32 layers. At 1,024 tokens SDPA runs causal without a mask; at 4,096 each layer's
    # boolean mask becomes a bf16 bias once per forward (read 1 B, write 2); cuDNN's kernel reads it inside its own
    # time (masked_attention_fraction), not once per head (the profiles: docs/speed.md, "Attention through a mask")
    phi3 = load_model_spec("microsoft/Phi-3-mini-4k-instruct")
    assert throughput.attention_mask_bytes(phi3, work(seq_len=1024)) == 0
    assert throughput.attention_mask_bytes(phi3, work(seq_len=4096)) == 32 * 4096 * 4096 * (1 + 2)
    assert throughput.attention_mask_bytes(phi3, work(seq_len=4096, gradient_checkpointing=True)) == 2 * 32 * 4096 * 4096 * 3


def _ds_gathers(tmp_path, config: dict, *args: int, world: int = 1) -> tuple[int, int]:
    """Runs tests/ds_gathers.py on `world` CPU ranks over gloo; returns rank 0's (fetched, gathered-less) counts."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, str(ROOT / "tests" / "ds_gathers.py"), json.dumps(config), *map(str, args)]
    procs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "DS_ACCELERATOR": "cpu", "RANK": str(rank), "LOCAL_RANK": str(rank),
                                   "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
             for rank in range(world)]  # fmt: skip
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    lines = [line for line in outputs[0].splitlines() if line.startswith("FETCHED ")]
    assert lines, outputs[0][-3000:]
    fields = lines[-1].split()
    return int(fields[1]), int(fields[3])


def test_one_rank_skips_zero3s_gathers():
    spec = spec_from_config(json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text()), "t")
    cal = replace(throughput.load_calibration(), stage3_seconds_per_fetch=1e-3, stage3_seconds_per_gather=2e-3,
                  stage3_seconds_per_reduction=3e-3, stage3_seconds_per_bucket=4e-4)  # fmt: skip
    one, two = work(seq_len=16), work(seq_len=16, world_size=2, gpus_per_node=2)
    fetches, gathers = throughput.stage3_fetches(spec, one), throughput.stage3_gathers(spec, one)
    buckets = throughput.stage2_reductions(spec, two)
    assert buckets >= 1
    # one rank pays the fetches and its buckets; two pay each gather and each bucket across the ranks on top
    assert throughput.stage3_host_seconds(spec, one, cal) == pytest.approx(fetches * 1e-3 + buckets * 4e-4)
    assert throughput.stage3_host_seconds(spec, two, cal) == pytest.approx(fetches * 1e-3 + buckets * 4e-4 + gathers * 2e-3
                                                                           + buckets * 3e-3)
    # host-bound on a toy workload: two GPUs pay the gathers and the buckets' reductions on top of one GPU's hooks
    t1 = estimate_step_time(spec, STRATEGIES["3"], GPU, one, cal)
    t2 = estimate_step_time(spec, STRATEGIES["3"], GPU, two, cal)
    assert t2.stage3_s - t1.stage3_s == pytest.approx(gathers * 2e-3 + buckets * 3e-3, rel=1e-6)


def test_zero3s_gathers_and_buckets_cost_more_per_doubling_of_the_ranks():
    spec = spec_from_config(json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text()), "t")
    cal = replace(throughput.load_calibration(), stage3_seconds_per_fetch=1e-3, stage3_seconds_per_gather=2e-3,
                  stage3_seconds_per_reduction=3e-3, stage3_sync_growth_per_doubling=0.5,
                  stage3_seconds_per_bucket=0.0)  # fmt: skip  (one rank's bucket time does not grow: tested above)
    fetches = throughput.stage3_fetches(spec, work(seq_len=16))

    def across(world: int) -> float:
        w = work(seq_len=16, world_size=world, gpus_per_node=world)
        return throughput.stage3_gathers(spec, w) * 2e-3 + throughput.stage2_reductions(spec, w) * 3e-3

    for world, factor in ((2, 1.0), (4, 1.5), (8, 2.0)):
        w = work(seq_len=16, world_size=world, gpus_per_node=world)
        assert throughput.stage3_host_seconds(spec, w, cal) == pytest.approx(fetches * 1e-3 + across(world) * factor)
    # no growth: four GPUs' hooks cost what two GPUs' do
    flat = replace(cal, stage3_sync_growth_per_doubling=0.0)
    four = work(seq_len=16, world_size=4, gpus_per_node=4)
    assert throughput.stage3_host_seconds(spec, four, flat) == pytest.approx(fetches * 1e-3 + across(4))


def test_zero12s_buckets_cost_the_host_only_across_ranks():
    """ZeRO-1/2 on several GPUs: each gradient bucket all-reduced across the ranks costs the host
    seconds_per_reduction_across_ranks, in every micro-step at stage 2 and once per optimizer step at stage 1; one GPU
    and stages 0 and 3 pay nothing of it (stage 3's buckets are stage3_seconds_per_reduction's)."""
    spec = spec_from_config(json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text()), "t")
    cal = replace(throughput.load_calibration(), seconds_per_reduction_across_ranks=2e-3)
    off = replace(cal, seconds_per_reduction_across_ranks=0.0)
    one = work(seq_len=16)
    two = work(seq_len=16, world_size=2, gpus_per_node=2)
    four_accum = work(seq_len=16, world_size=2, gpus_per_node=2, gradient_accumulation_steps=4)
    buckets = throughput.stage2_reductions(spec, two)
    assert buckets >= 1
    assert throughput.reductions_across_ranks(spec, STRATEGIES["2"], two) == buckets
    assert throughput.reductions_across_ranks(spec, STRATEGIES["1"], four_accum) == pytest.approx(buckets / 4)
    assert throughput.reductions_across_ranks(spec, STRATEGIES["2"], four_accum) == buckets
    for name, workload in (("1", one), ("2", one), ("0", two), ("3", two)):
        assert throughput.reductions_across_ranks(spec, STRATEGIES[name], workload) == 0
        assert throughput.host_seconds(spec, STRATEGIES[name], workload, cal) == throughput.host_seconds(
            spec, STRATEGIES[name], workload, off)
    for name in ("1", "2"):
        added = throughput.host_seconds(spec, STRATEGIES[name], two, cal) - throughput.host_seconds(spec, STRATEGIES[name], two, off)
        assert added == pytest.approx(buckets * 2e-3)
    # a user's JSON with DeepSpeed's 5e8-element buckets: one or two a step, so next to nothing across ranks
    minimal = ZeroBuffers.from_ds_config({"zero_optimization": {"stage": 2}}, spec.hidden_size)
    assert throughput.host_seconds(spec, STRATEGIES["2"], two, cal, minimal) - throughput.host_seconds(
        spec, STRATEGIES["2"], two, off, minimal) == pytest.approx(2e-3)


def test_zero3s_reductions_follow_the_users_bucket_size():
    """A JSON that leaves reduce_bucket_size out gets DeepSpeed's 5e8 elements: a bucket or two per backward where
    ours (hidden^2) closes one per weight matrix; each costs the host stage3_seconds_per_bucket on any number of GPUs,
    and on several stage3_seconds_per_reduction more."""
    spec = spec_from_config(json.loads((ROOT / "benchmarks" / "model_configs" / "llama3.2-1b.json").read_text()), "l")
    cal = replace(throughput.load_calibration(), stage3_seconds_per_reduction=1e-3, stage3_seconds_per_bucket=4e-4)
    one = work(seq_len=2048, micro_batch_size=2)
    two = work(seq_len=2048, micro_batch_size=2, world_size=2, gpus_per_node=2)
    minimal = ZeroBuffers.from_ds_config({"zero_optimization": {"stage": 3}}, spec.hidden_size)
    ours, theirs = throughput.stage2_reductions(spec, two), throughput.stage2_reductions(spec, two, bucket=minimal.reduce_bucket_size)
    assert minimal.reduce_bucket_size == 500_000_000 and theirs < 5 < 100 < ours
    saved = throughput.stage3_host_seconds(spec, two, cal) - throughput.stage3_host_seconds(spec, two, cal, minimal)
    assert saved == pytest.approx((ours - theirs) * 1.4e-3)
    saved = throughput.stage3_host_seconds(spec, one, cal) - throughput.stage3_host_seconds(spec, one, cal, minimal)
    assert saved == pytest.approx((ours - theirs) * 4e-4)
    # and the step: on one GPU a host-bound ZeRO-3 step is shorter at the user's buckets by about as much
    gpu = find_gpu("H200")
    steps = [estimate_step_time(spec, STRATEGIES["3"], gpu, one, cal, buffers=b).step_s for b in (None, minimal)]
    assert steps[0] - steps[1] == pytest.approx((ours - theirs) * 4e-4, rel=0.3)


def test_families_counted_on_the_meta_device_bucket_in_their_parameter_order():
    """OPT is outside models/analytic.py: its gradient buckets come from the meta-device count's named_parameters
    order, in which each linear's bias follows its weight and closes a bucket of its own under ours (hidden^2), as
    GPT-2's do; at DeepSpeed's 5e8 the gradients fill a handful. Without the order (a cache from before), about one
    bucket per weight matrix at ours and the elements over the bucket at 5e8. GPT-NeoX, counted on the meta device
    until models/analytic.py covered it, buckets the same from the analytic order (195 at ours, 3 at 5e8 both ways)."""
    from zero_planner.models.analytic import parameter_order

    w = work(seq_len=2048, micro_batch_size=2)
    for name in ("opt-1.3b", "pythia-1.4b"):
        config = json.loads((ROOT / "benchmarks" / "model_configs" / f"{name}.json").read_text())
        spec = spec_from_config(config, name)
        if name == "pythia-1.4b":
            assert spec.parameter_order is None  # analytic.parameter_order gives it; the meta count's, as it was:
            spec = replace(spec, parameter_order=parameter_order(config))
            assert throughput.stage2_reductions(spec, w) == 195
        assert spec.parameter_order and sum(spec.parameter_order) == spec.num_params
        matrices = sum(count for numel, count in spec.tensor_sizes if numel > 10 * spec.hidden_size)
        assert throughput.stage2_reductions(spec, w) >= 2 * matrices - 2  # a bias after each matrix
        assert throughput.stage2_reductions(spec, w, bucket=500_000_000) == -(-spec.num_params // 500_000_000)
        if name == "opt-1.3b":
            unordered = replace(spec, parameter_order=None)
            assert throughput.stage2_reductions(unordered, w) == matrices
            assert throughput.stage2_reductions(unordered, w, bucket=500_000_000) == -(-spec.num_params // 500_000_000)
    assert load_model_spec("facebook/opt-1.3b").parameter_order  # the catalog keeps the order too
    assert load_model_spec("meta-llama/Llama-3.2-1B").parameter_order is None  # analytic.parameter_order gives it


def test_zero3_keeps_what_it_reuses_within_the_window():
    spec = spec_from_config(json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text()), "t")
    # llama-tiny: embedding, 2 x 7 matrices, lm_head above the persistence threshold (10 x 128 elements)
    for gc in (False, True):
        w = work(seq_len=16, gradient_checkpointing=gc)
        # a window of the whole model: each tensor gathered once, in the forward
        assert throughput.stage3_gathers(spec, w, reuse_distance=10**9) == 16
        # hooks fire on every pass all the same
        assert throughput.stage3_fetches(spec, w) == 16 * (3 if gc else 2)
    # no window: everything gathered again in the backward, and the checkpointed layers' recompute once more
    assert throughput.stage3_gathers(spec, work(seq_len=16), reuse_distance=0) == 32
    assert throughput.stage3_gathers(spec, work(seq_len=16, gradient_checkpointing=True), reuse_distance=0) == 46
    # a full-size model (Qwen3-1.7B's shape) keeps only the forward's last layers for the backward (1e9 window)
    config = json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text())
    big = spec_from_config({**config, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
                            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                            "tie_word_embeddings": True}, "big")  # fmt: skip
    gathers = throughput.stage3_gathers(big, work())
    assert throughput.stage3_fetches(big, work()) * 0.8 < gathers < throughput.stage3_fetches(big, work())


@pytest.mark.parametrize("reuse,gc,prefetch,predicted_reuse", [
    (0, 0, 0, 0),                 # no window, no prefetch: every pass gathers
    (100_000, 1, 0, 100_000),     # a window of part of a layer, with checkpointing
    (-1, 0, None, None),          # our JSON as zero-plan writes it (1e9 window, 0.9 x hidden^2 prefetch)
])  # fmt: skip
def test_stage3_gathers_count_what_deepspeed_gathers(tmp_path, reuse, gc, prefetch, predicted_reuse):
    """A real ZeRO-3 engine (one CPU rank): the parameters its coordinator gathers in the third micro-step of
    llama-tiny, against stage3_gathers (which leaves out what the prefetcher's look-ahead also keeps: about one
    module; the tiny model's prefetch bucket covers it whole, as the 1e9 window does)."""
    config = json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text())
    args = (reuse, gc) + (() if prefetch is None else (prefetch,))
    fetched, _ = _ds_gathers(tmp_path, config, *args)
    spec = spec_from_config(config, "llama-tiny")
    predicted = throughput.stage3_gathers(spec, work(seq_len=16, gradient_checkpointing=bool(gc)), reuse_distance=predicted_reuse)
    assert fetched >= 16 and abs(predicted - fetched) <= 2, (predicted, fetched)


def test_deepspeed_gathers_across_ranks_only(tmp_path):
    """DeepSpeed hands a one-rank partition over without a gather (all_gather_coalesced -> _no_gather_coalesced),
    which is why stage3_seconds_per_gather applies on several GPUs only: two CPU ranks over gloo gather every fetched
    parameter, one rank none."""
    config = json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text())
    fetched1, no_gather1 = _ds_gathers(tmp_path, config, world=1)
    fetched2, no_gather2 = _ds_gathers(tmp_path, config, world=2)
    assert fetched1 == fetched2 > 0
    assert no_gather1 >= fetched1 and no_gather2 == 0


def test_a_users_zero2_buckets_reach_the_step_time(tmp_path, capsys):
    """--ds-config: the step-time model counts ZeRO-2's reductions at the JSON's own reduce_bucket_size (a
    host-bound micro-step: Llama 3.2 1B at 1 x 512 on an H100), where the memory already read it."""
    from zero_planner.cli import main

    speeds = {}
    for bucket in (500_000_000, 200_000):
        path = tmp_path / f"ds_{bucket}.json"
        path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                    "bf16": {"enabled": True},
                                    "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": bucket}}))
        main(["--model", "meta-llama/Llama-3.2-1B", "--gpus", "1xH100", "--seq-len", "512", "--ds-config", str(path), "--json"])
        (candidate,) = json.loads(capsys.readouterr().out)["candidates"]
        speeds[bucket] = candidate["tokens_per_second"]
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    few, many = (throughput.stage2_reductions(spec, work(seq_len=512), bucket=b) for b in (500_000_000, 200_000))
    assert few < 10 < 100 < many
    assert speeds[500_000_000] > 1.3 * speeds[200_000]
    # our own JSON's buckets (hidden^2) when none is given
    ours = estimate_step_time(spec, STRATEGIES["2"], find_gpu("H100"), work(seq_len=512))
    buffers = ZeroBuffers.for_model(spec.hidden_size)
    assert ours.step_s == estimate_step_time(spec, STRATEGIES["2"], find_gpu("H100"), work(seq_len=512), buffers=buffers).step_s


def test_the_host_and_the_gpu_overlap_as_a_smooth_maximum():
    # (a^p + b^p)^(1/p): the plain maximum at infinity; at a finite power the GPU loses most where the two are close
    overlapped = throughput.overlapped_seconds
    assert overlapped(0.3, 0.1, float("inf")) == 0.3 and overlapped(0.0, 0.0, 4.0) == 0.0
    assert overlapped(0.3, 0.0, 6.0) == pytest.approx(0.3) and overlapped(0.1, 0.3, 6.0) == overlapped(0.3, 0.1, 6.0)
    assert overlapped(0.2, 0.2, 6.0) == pytest.approx(0.2 * 2 ** (1 / 6))  # equal: 12% more than either
    assert overlapped(0.2, 0.1, 6.0) == pytest.approx(0.2 * (1 + 0.5**6) ** (1 / 6))  # half: 0.26% more
    assert overlapped(0.2, 0.1, 2.0) > overlapped(0.2, 0.1, 6.0) > 0.2


@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0), st.sampled_from([1.5, 2.0, 3.0, 4.0, 6.0, 10.0, float("inf")]))
def test_a_smooth_maximum_lies_between_the_maximum_and_the_sum(gpu_s, host_s, power):
    busy = throughput.overlapped_seconds(gpu_s, host_s, power)
    assert max(gpu_s, host_s) * (1 - 1e-12) <= busy <= (gpu_s + host_s) * (1 + 1e-12)


def test_a_gemm_whose_dimensions_are_not_multiples_of_eight_is_misaligned():
    assert throughput.gemm_alignment(2, 16384, 1024, 50264) == 8
    assert throughput.gemm_alignment(2, 16384, 1024, 50260) == 4
    assert throughput.gemm_alignment(2, 16384, 1024, 50258) == 2
    assert throughput.gemm_alignment(2, 16384, 1024, 50257) == 1
    assert throughput.gemm_alignment(2, 16383, 1024, 4096) == 1  # the rows count too: they lead the gradient's product
    assert throughput.gemm_alignment(4, 16384, 1024, 50257) == 8  # fp32: not modelled
    cal = throughput.load_calibration()
    shares = {g.alignment: throughput.gemm_rate_share(g, cal) for g in (throughput.Gemm(1.0, 0.0, alignment=a) for a in (1, 2, 4, 8))}
    assert shares == {1: cal.misaligned_gemm_fraction, 2: cal.even_misaligned_gemm_fraction,
                      4: cal.even_misaligned_gemm_fraction, 8: 1.0}  # fmt: skip
    assert throughput.gemm_rate_share(throughput.Gemm(1.0, 0.0, grouped=True, alignment=1), cal) == cal.grouped_gemm_fraction


def test_gpt2s_head_runs_at_the_misaligned_rate_and_an_aligned_vocabulary_does_not():
    # GPT-2's 50,257-token head: its three products (forward, input and weight gradients) are misaligned, the decoder's
    # are not; the committed kernels ran that head at 0.12-0.19 of the roofline on one H200 (kernel_rates.py)
    spec, w, gpu = load_model_spec("gpt2-large"), work(micro_batch_size=37, seq_len=1024), find_gpu("H200")
    misaligned = [g for g in throughput.gemms(spec, w) if g.alignment < throughput.ALIGNED_ELEMENTS]
    tokens = 37 * 1024
    assert len(misaligned) == 3 and sum(g.flops for g in misaligned) == 3 * 2 * tokens * spec.hidden_size * spec.vocab_size
    cal = throughput.load_calibration()
    aligned_cal = replace(cal, misaligned_gemm_fraction=1.0)
    rate = throughput.matmul_flops_per_s(gpu, "bf16", cal)
    extra = sum(g.flops for g in misaligned) / rate * (1 / cal.misaligned_gemm_fraction - 1)
    assert throughput.gemm_seconds(spec, gpu, w, cal) - throughput.gemm_seconds(spec, gpu, w, aligned_cal) == pytest.approx(extra)
    kernels = json.loads((ROOT / "benchmarks/results/kernels-h200-2026-11-29.json").read_text())
    assert kernels["misaligned_gemm_fraction"] == cal.misaligned_gemm_fraction
    assert kernels["even_misaligned_gemm_fraction"] == cal.even_misaligned_gemm_fraction
    llama = load_model_spec("meta-llama/Llama-3.2-1B")  # 128,256 tokens
    assert all(g.alignment == throughput.ALIGNED_ELEMENTS for g in throughput.gemms(llama, w))
    assert throughput.gemm_seconds(llama, gpu, w, cal) == throughput.gemm_seconds(llama, gpu, w, aligned_cal)


def test_the_linears_with_a_bias_by_model_type():
    def outputs(spec, **config):
        return throughput.biased_outputs(replace(spec, config={**spec.config, **config}), work())[0]

    qwen = load_model_spec("Qwen/Qwen2.5-7B")  # q, k and v: 3,584 + 2 x 512
    assert outputs(qwen) == 4608
    pythia = spec_from_config(json.loads((ROOT / "benchmarks/model_configs/pythia-1.4b.json").read_text()), "pythia")
    assert outputs(pythia) == 3 * 2048 + 2048 + 8192 + 2048  # qkv, dense, the MLP's two
    assert outputs(pythia, attention_bias=False) == 8192 + 2048  # the MLP keeps its biases
    opt = load_model_spec("facebook/opt-1.3b")
    assert outputs(opt) == 3 * 2048 + 2048 + 8192 + 2048 and outputs(opt, enable_bias=False) == 0
    llama = load_model_spec("meta-llama/Llama-3.2-1B")
    assert outputs(llama) == 0
    assert outputs(llama, attention_bias=True) == 2048 + 2 * 512 + 2048  # q, k, v, o
    assert outputs(llama, mlp_bias=True) == 2 * 8192 + 2048  # gate, up, down
    assert outputs(load_model_spec("gpt2-large")) == 0  # Conv1D's addmm fuses its bias


def test_zero3_adds_biases_apart_at_the_broadcast_rate():
    # Pythia-1.4B's ZeRO-3 at 13 x 2,048 on one H200 ran its elementwise kernels 30.5 ms longer than ZeRO-0
    # (i26-kinds-pythia3-h200): 47 GB of bias adds at the measured broadcast rate
    pythia = spec_from_config(json.loads((ROOT / "benchmarks/model_configs/pythia-1.4b.json").read_text()), "pythia")
    w, gpu = work(micro_batch_size=13, seq_len=2048), find_gpu("H200")
    assert throughput.zero3_bias_bytes(pythia, w) == 2 * 2 * 18432 * 24 * 13 * 2048
    seconds = throughput.zero3_bias_seconds(pythia, STRATEGIES["3"], gpu, w)
    assert seconds == pytest.approx(0.0305, rel=0.15)
    assert throughput.zero3_bias_seconds(pythia, STRATEGIES["2"], gpu, w) == 0.0
    compute = {stage: estimate_step_time(pythia, STRATEGIES[stage], gpu, w).compute_s for stage in ("2", "3")}
    assert compute["3"] - compute["2"] == pytest.approx(seconds)
    # checkpointing adds the recomputed forward's, less the MLP's output projection where its recomputation stops early
    outputs, recomputed = throughput.biased_outputs(pythia, work(gradient_checkpointing=True))
    assert (outputs, recomputed) == (18432, 18432 - 2048)


def _generic_elementwise_seconds(case_id: str) -> float:
    """The profiled step's generic (non-vectorized, broadcasting) elementwise kernels, seconds per step."""
    for line in (ROOT / "benchmarks/results/h200x1-i26-kinds-2026-11-29.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["id"].startswith(case_id):
            kernels = row["ranks"][0]["profile"]["top_kernels"]
            return sum(v for k, v in kernels.items() if "elementwise_kernel<128" in k and "gpu_kernel_impl_nocast" in k)
    raise AssertionError(case_id)


@pytest.mark.parametrize(("name", "mb"), [("qwen3-4b", 5), ("llama3.2-3b", 8)])
def test_rmsnorm_and_rotary_broadcasts_take_what_the_profiled_generic_kernels_took(name, mb):
    config = json.loads((ROOT / f"benchmarks/model_configs/{name}.json").read_text())
    spec, w, gpu = spec_from_config(config, name), work(micro_batch_size=mb, seq_len=2048), find_gpu("H200")
    case_id = f"{name}|0|bf16|mb{mb}|s2048|nogc"
    predicted = throughput.broadcast_traffic_bytes(spec, w) / throughput.broadcast_bytes_per_s(gpu)
    assert predicted == pytest.approx(_generic_elementwise_seconds(case_id), rel=0.1)
    assert throughput.broadcast_traffic_bytes(spec, w) < throughput.activation_traffic_bytes(spec, w)


def test_layernorm_models_without_rotary_broadcast_nothing():
    assert throughput.layer_broadcast_bytes(load_model_spec("gpt2-large")) == 0
    assert throughput.layer_broadcast_bytes(load_model_spec("facebook/opt-1.3b")) == 0
    llama = load_model_spec("meta-llama/Llama-3.2-1B")
    h, qk = llama.hidden_size, (llama.num_attention_heads + llama.num_key_value_heads) * llama.head_dim
    assert throughput.layer_broadcast_bytes(llama) == 2 * 12 * h + 8 * qk
    w = work(gradient_checkpointing=True)
    assert throughput.broadcast_traffic_bytes(llama, w) == 4 / 3 * throughput.broadcast_traffic_bytes(llama, work())

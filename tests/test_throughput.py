"""The step-time model: one hand-computed case per term, and the directions the ranking relies on."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zero_planner import throughput
from zero_planner.hardware import find_gpu
from zero_planner.memory import Workload
from zero_planner.models.spec import ModelSpec, load_model_spec
from zero_planner.strategies import STRATEGIES
from zero_planner.throughput import estimate_step_time

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
    # 6 * N * tokens + 12 * L * d_attn * s * tokens = 6e12 + 12 * 10 * 1000 * 1000 * 1000 = 6.12e12 FLOPs;
    # utilisation 0.40 * 1000 / (1000 + 256).
    t = estimate_step_time(TOY, STRATEGIES["0"], GPU, work())
    mfu = 0.40 * 1000 / 1256
    assert t.mfu == pytest.approx(mfu)
    assert t.compute_s == pytest.approx(6.12e12 / (100e12 * mfu))
    assert t.communication_s == 0 and t.offload_s == 0
    assert t.tokens_per_step == 1000
    assert t.tokens_per_second == pytest.approx(1000 / t.compute_s)


def test_checkpointing_adds_one_forward_hand_computed():
    t = estimate_step_time(TOY, STRATEGIES["0"], GPU, work(gradient_checkpointing=True))
    assert t.compute_s == pytest.approx(8.16e12 / (100e12 * 0.40 * 1000 / 1256))  # 8N + 16 L d s per token


def test_communication_hand_computed():
    # Stage 0 on 2 GPUs: all-reduce of 1e9 bf16 gradients = 2 * 2e9 bytes * (2-1)/2 = 2e9 bytes at 100 GB/s.
    t = estimate_step_time(TOY, STRATEGIES["0"], GPU, work(world_size=2, gpus_per_node=2))
    assert t.communication_s == pytest.approx(0.02)
    # Stage 3: 3 * 2e9 bytes * 1/2 = 3e9 bytes.
    t3 = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(world_size=2, gpus_per_node=2))
    assert t3.communication_s == pytest.approx(0.03)


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


@pytest.mark.parametrize("offloaded, plain", [("2-offload", "2"), ("3-offload", "3"), ("3-offload-all", "3-offload")])
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
    assert t["0"].communication_s == t["1"].communication_s < t["2"].communication_s < t["3"].communication_s


def test_inter_node_link_is_slower():
    one_node = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(world_size=16, gpus_per_node=16))
    two_nodes = estimate_step_time(TOY, STRATEGIES["3"], GPU, work(world_size=16, gpus_per_node=8))
    assert two_nodes.communication_s == pytest.approx(
        one_node.communication_s * GPU.intra_node_bandwidth_bytes_per_s / throughput.INTER_NODE_BANDWIDTH_BYTES_PER_S
    )


def test_fp32_uses_the_fp32_peak():
    bf16 = estimate_step_time(TOY, STRATEGIES["0"], GPU, work())
    fp32 = estimate_step_time(TOY, STRATEGIES["0"], GPU, work(precision="fp32"))
    assert fp32.compute_s == pytest.approx(bf16.compute_s * 10)  # 100 vs 10 TFLOP/s


def test_larger_micro_batch_is_not_slower_per_token():
    small = estimate_step_time(TOY, STRATEGIES["2"], GPU, work(micro_batch_size=1, gradient_accumulation_steps=8))
    large = estimate_step_time(TOY, STRATEGIES["2"], GPU, work(micro_batch_size=8, gradient_accumulation_steps=1))
    assert large.tokens_per_second > small.tokens_per_second


def test_mixture_of_experts_computes_with_routed_experts_only():
    mixtral = load_model_spec("mistralai/Mixtral-8x7B-v0.1")
    active = throughput.compute_params(mixtral)
    # Mixtral 8x7B: 46.7B parameters, ~12.9B active per token (Mistral AI), less the 131M-parameter input embedding.
    assert 12.5e9 < active < 13.0e9 < mixtral.num_params

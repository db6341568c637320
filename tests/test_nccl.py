"""NCCL's buffers per rank from its defaults (zero_planner/plan/nccl.py): exact hand-computed values."""

from __future__ import annotations

import pytest
from conftest import LLAMA_TINY, heavy_modules_after

from zero_planner.models.spec import spec_from_config
from zero_planner.plan.memory import CUDA_CONTEXT_BYTES, Workload, estimate_memory
from zero_planner.plan.nccl import CONNECTION_BYTES, LL128_BUFFSIZE_BYTES, LL_BUFFSIZE_BYTES, nccl_buffer_bytes, note
from zero_planner.strategies import STRATEGIES

MiB = 2**20


def test_protocol_buffers_are_nccls_defaults():
    assert LL_BUFFSIZE_BYTES == 524_288  # 8 lines * 512 threads * 8 steps * 16 B = 512 KiB
    assert LL128_BUFFSIZE_BYTES == 4_915_200  # 120 elems * 640 threads * 8 steps * 8 B = 4,800 KiB
    assert CONNECTION_BYTES == 524_288 + 4_915_200 + 4_194_304 == 9_633_792


@pytest.mark.parametrize(
    "world, per_node, expected",
    [
        (1, 1, 0),  # one rank: no peer, no communicator buffers
        (2, 2, 2 * 32 * 1 * 9_633_792),  # one node: rings only = 616,562,688 B (588 MiB)
        (8, 8, 616_562_688),  # the ring has one predecessor however many ranks it joins
        (16, 8, 2 * 32 * (1 + 3) * 9_633_792),  # two nodes: ring + tree = 2,466,250,752 B (2,352 MiB)
        (2, 1, 2_466_250_752),  # 2x1: one rank per node still joins the tree over nodes
        (64, 8, 2_466_250_752),  # eight nodes: a rank's connections do not grow with the node count
    ],
)
def test_buffers_per_rank(world, per_node, expected):
    assert nccl_buffer_bytes(world, per_node) == expected


def test_channels_and_communicators_scale_linearly():
    assert nccl_buffer_bytes(8, 8, channels=2, communicators=1) == 2 * 9_633_792


def test_estimate_counts_them_on_gpus_not_on_cpu():
    spec = spec_from_config(LLAMA_TINY, name="llama-tiny")
    kw = dict(micro_batch_size=1, seq_len=64, gradient_checkpointing=False, precision="bf16")
    two_nodes = estimate_memory(spec, STRATEGIES["2"], Workload(**kw, world_size=16, gpus_per_node=8), gpu_name="H100")
    assert two_nodes.floor_bytes == two_nodes.peak_allocated_bytes + CUDA_CONTEXT_BYTES + 2_466_250_752
    assert any("2,352 MiB of NCCL buffers" in n and "not yet measured" in n for n in two_nodes.notes)
    cpu = estimate_memory(spec, STRATEGIES["2"], Workload(**{**kw, "precision": "fp32"}, world_size=2, gpus_per_node=2),
                          gpu_name="cpu")  # fmt: skip
    assert cpu.overhead_bytes == 0 and not any("NCCL" in n for n in cpu.notes)  # gloo: no NCCL buffers


def test_note_names_every_factor():
    assert note(8, 8) == ("includes 588 MiB of NCCL buffers per rank from NCCL's defaults (2 communicators x 32 "
                          "channels x 1 ring connection x 9.19 MiB; a bound, not yet measured)")  # fmt: skip
    assert "x 4 ring + tree connections x" in note(16, 8)


def test_import_is_light():
    assert heavy_modules_after("import zero_planner.plan.nccl") == []

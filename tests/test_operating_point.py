"""The operating-point suite's cases and how the GPU harness packs them (no GPU needed)."""

from __future__ import annotations

from benchmarks.gpu_harness import host_budget_bytes, host_need_bytes
from benchmarks.operating_point import operating_cases
from zero_planner.plan.memory import CUDA_CONTEXT_BYTES, GiB


def test_cases_carry_the_emulated_card_and_the_planned_host_memory():
    cases = operating_cases("qwen2.5-0.5b", 1024, gpu="H100", capacity=24 * GiB, host=60 * GiB)
    picks = {c["strategy"] + str(c["gradient_checkpointing"]): c for c in cases if c["planned"]["role"] == "pick"}
    nexts = [c for c in cases if c["planned"]["role"] == "next"]
    assert picks and len(nexts) == len(picks)
    for c in nexts:
        pick = picks[c["strategy"] + str(c["gradient_checkpointing"])]
        assert c["micro_batch_size"] == pick["micro_batch_size"] + 1
    for c in cases:
        assert c["memory_limit_bytes"] == 24 * GiB - CUDA_CONTEXT_BYTES
        assert "|cap24.0|" in c["id"]
    offload = [c for c in cases if "offload" in c["strategy"]]
    dense = [c for c in cases if "offload" not in c["strategy"]]
    # Offloaded optimizer states live on the host: those cases need several times what a dense one does.
    assert min(c["planned"]["predicted_host_bytes"] for c in offload) > 2 * max(
        c["planned"]["predicted_host_bytes"] for c in dense)


def test_host_packing_keeps_a_tenth_and_a_gib_to_spare():
    assert host_need_bytes({"planned": {"predicted_host_bytes": 10 * GiB}}) == 12 * GiB
    assert host_need_bytes({"id": "a suite case with no plan"}) == 0


def test_host_budget_can_be_given_where_memtotal_grows_with_use(monkeypatch):
    monkeypatch.setenv("HARNESS_HOST_BYTES", str(256 * GiB))
    assert host_budget_bytes() == 240 * GiB
    monkeypatch.delenv("HARNESS_HOST_BYTES")
    assert 0 < host_budget_bytes() + 16 * GiB < 2**50  # read from /proc/meminfo

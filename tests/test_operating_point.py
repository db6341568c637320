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


def test_cases_on_several_gpus_are_planned_for_that_many():
    cases = operating_cases("qwen2.5-0.5b", 1024, gpu="H100", capacity=24 * GiB, host=60 * GiB, num_gpus=4,
                            roles=("pick",))  # fmt: skip
    single = operating_cases("qwen2.5-0.5b", 1024, gpu="H100", capacity=24 * GiB, host=60 * GiB, roles=("pick",))
    assert cases and all(c["num_gpus"] == 4 and "|g4|" in c["id"] for c in cases)
    for c in cases:
        ds = c["deepspeed_config"]
        assert ds["train_batch_size"] == 4 * ds["train_micro_batch_size_per_gpu"] == 4 * c["micro_batch_size"]
    # Partitioned states leave more room per GPU on four: ZeRO-3's pick is larger than on one.
    pick = {c["strategy"] + str(c["gradient_checkpointing"]): c["micro_batch_size"] for c in single}
    assert any(c["micro_batch_size"] > pick.get(c["strategy"] + str(c["gradient_checkpointing"]), 10**6)
               for c in cases if c["strategy"] == "3")


def test_rendezvous_ports_stay_below_the_ephemeral_range():
    from benchmarks.gpu_harness import free_port

    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50 and all(20000 <= p < 32768 for p in ports)


def test_a_rank_out_of_memory_is_the_outcome_of_a_case_that_timed_out():
    from benchmarks.memory_regression import case_outcome

    waited = {"status": "timeout", "ranks": [{"rank": 2, "status": "oom"}]}
    assert case_outcome(waited) == "oom"
    assert case_outcome({"status": "timeout", "ranks": []}) == "timeout"
    assert case_outcome({"status": "ok", "ranks": [{"status": "ok"}]}) == "ok"

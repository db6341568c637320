"""The phases suite's case runner and generator (benchmarks/phase_case.py, benchmarks/phases.py): what a whole
zero-run of several ranks is compared on."""

from __future__ import annotations

import json

from benchmarks.phase_case import memory_limit, rank_phases, read_run
from zero_planner.plan.memory import CUDA_CONTEXT_BYTES
from benchmarks.phases import parse_setting, setting_cases

GIB = 2**30


def test_each_phase_takes_its_busiest_rank_and_the_node_sums_its_ranks_host():
    ranks = [
        {"rank": 0, "node": 0, "phases": {"train": {"peak_allocated_bytes": 10 * GIB, "host_rss_peak_bytes": 3 * GIB},
                                          "export": {"peak_allocated_bytes": 12 * GIB, "host_rss_peak_bytes": 5 * GIB,
                                                     "error_pct": 1.0}}},
        {"rank": 1, "node": 0, "phases": {"train": {"peak_allocated_bytes": 11 * GIB, "host_rss_peak_bytes": 2 * GIB},
                                          "export": {"peak_allocated_bytes": 4 * GIB, "host_rss_peak_bytes": 2 * GIB}}},
    ]  # fmt: skip
    phases = rank_phases(ranks)
    assert phases["train"]["peak_allocated_bytes"] == 11 * GIB  # rank 1 peaks in training
    assert phases["export"]["peak_allocated_bytes"] == 12 * GIB  # rank 0 consolidates the export
    assert phases["train"]["node_host_rss_peak_bytes"] == 5 * GIB
    assert phases["export"]["node_host_rss_peak_bytes"] == 7 * GIB
    assert "error_pct" not in phases["export"]
    one = rank_phases(ranks[:1])
    assert one["train"] == {"peak_allocated_bytes": 10 * GIB, "host_rss_peak_bytes": 3 * GIB}


def test_a_finished_run_keeps_each_ranks_allocator_retries(tmp_path):
    # zero-run's run_report.json as report.build_report writes it, for two ranks, one of which retried in step 2
    ranks = [{"rank": 0, "peak_allocated_bytes": 10 * GIB, "phases": {}, "alloc_retry_steps": [[2, 3]]},
             {"rank": 1, "peak_allocated_bytes": 9 * GIB, "phases": {}, "alloc_retry_steps": []}]  # fmt: skip
    (tmp_path / "run_report.json").write_text(json.dumps({"ranks": ranks, "step_times_s": [1.0, 0.5]}))
    run = read_run(tmp_path, 0)
    assert run["status"] == "ok"
    assert run["alloc_retry_steps"] == [[[2, 3]], []]
    assert run["step_times_s"] == [1.0, 0.5]


def test_a_plan_for_a_smaller_card_runs_capped_to_it_even_where_the_suite_forgot_to():
    h100, h200_smi, h100_smi = 85_017_493_504, 143_771 * 2**20, 81_559 * 2**20  # torch's and nvidia-smi's totals
    planned = {"planned": {"gpu_capacity_bytes": h100}}
    # the suite's own limit wins (phases.py --harness-gpu H200)
    assert memory_limit({**planned, "memory_limit_bytes": 123}, h200_smi) == (123, "case")
    # an H100 plan on an H200 without one (phases.py's default harness GPU is the H100): capped to the H100's card
    limit, source = memory_limit(planned, h200_smi)
    assert limit == h100 - CUDA_CONTEXT_BYTES and "smaller" in source
    # on the card it was planned for, or where the GPU cannot be read: the whole GPU
    assert memory_limit(planned, h100_smi) == (None, "whole GPU")
    assert memory_limit(planned, None) == (None, "whole GPU")
    assert memory_limit({}, h200_smi) == (None, "whole GPU")


def test_a_setting_of_several_gpus_plans_and_names_them(tmp_path):
    two = setting_cases(parse_setting("llama3.2-1b:RTX4090:1024:gpus=2,stage=3,gc=off"), harness_gpu="H100",
                        work_root=str(tmp_path))  # fmt: skip
    assert len(two) == 1 and two[0]["num_gpus"] == 2
    assert two[0]["id"] == "llama3.2-1b|3|bf16|full|mb3|s1024|nogc|2xRTX4090|pick"
    assert two[0]["plan"]["hardware"]["gpus_per_node"] == 2
    # 3-offload's resume needs ~31 GiB of host memory, beyond the 32 GiB a one-GPU RTX 4090 host is assumed
    one = setting_cases(parse_setting("llama3.2-1b:RTX4090:1024:stage=3-offload,gc=on,cpu_mem=64GiB"), harness_gpu="H100",
                        work_root=str(tmp_path))  # fmt: skip
    assert one[0]["num_gpus"] == 1 and one[0]["id"].endswith("|gc|RTX4090|pick")  # the committed ids, unchanged

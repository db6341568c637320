"""The phases suite's case runner and generator (benchmarks/phase_case.py, benchmarks/phases.py): what a whole
zero-run of several ranks is compared on."""

from __future__ import annotations

import json

from benchmarks.gpu_harness import cap_smaller_cards
from benchmarks.phase_case import rank_phases, read_run
from benchmarks.phases import HARNESS_GPU_BYTES, parse_setting, setting_cases
from zero_planner.plan.memory import CUDA_CONTEXT_BYTES

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


def test_a_plan_for_a_smaller_card_runs_capped_to_it_even_where_the_suite_forgot_to(tmp_path):
    h100, h200 = HARNESS_GPU_BYTES["H100"], HARNESS_GPU_BYTES["H200"]  # torch's total_memory
    # the suite written for an H100 harness (phases.py's default): no limit in the case
    (forgot,) = setting_cases(parse_setting("llama3.2-1b:H100:1024:stage=1,mb=4,gc=off,resume=0"), harness_gpu="H100",
                              work_root=str(tmp_path))  # fmt: skip
    assert "memory_limit_bytes" not in forgot
    written = setting_cases(parse_setting("llama3.2-1b:H100:1024:stage=1,mb=4,gc=off,resume=0"), harness_gpu="H200",
                            work_root=str(tmp_path))[0]  # fmt: skip
    own = {**written, "memory_limit_bytes": 123}
    on_h100 = dict(forgot)
    cap_smaller_cards([forgot, own], h200)
    cap_smaller_cards([on_h100], h100)
    # on an H200 it gets the limit phases.py --harness-gpu H200 writes (the H100's card less the context), noted
    assert forgot["memory_limit_bytes"] == written["memory_limit_bytes"] == h100 - CUDA_CONTEXT_BYTES
    assert "smaller" in forgot["memory_limit_source"]
    assert own["memory_limit_bytes"] == 123 and "memory_limit_source" not in own  # a suite's own limit stands
    assert "memory_limit_bytes" not in on_h100  # on the card it was planned for: the whole GPU


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

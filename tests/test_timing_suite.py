"""The issue-26 timing suites: every fitting candidate of a setting, alone on the GPU, settled steps (no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.timing_suite import RERUN_STEPS, STEPS, SUITES, SUITES_DIR, suite_cases


@pytest.mark.parametrize("name", ["i26-moe-small-h100", "i26-mistral7b-h200", "i26-llama1b-2xh100", "i26-qwen1.5b-2xh100",
                                  "i26-rerun-3b-h100", "i26-stage2-3b-h100"])  # the traced Qwen2-MoE takes seconds
def test_committed_suites_are_what_the_generator_writes(name):
    # but for the ZeRO-2 picks that counting the reduction stream's pool (2026-11-28) moved one micro-batch down:
    # the suites ran what the planner picked then
    committed = [json.loads(line) for line in (SUITES_DIR / f"{name}.jsonl").read_text().splitlines()]
    generated = suite_cases(name)
    assert len(committed) == len(generated)
    for ran, now in zip(committed, generated):
        assert ran == now or moved_by_the_reduction_pool(ran, now), ran["id"]


def moved_by_the_reduction_pool(ran: dict, now: dict) -> bool:
    """True where `now` is `ran` one micro-batch smaller, a ZeRO-2 candidate whose old micro-batch fits the planner's
    limit without the reduction stream's pool and not with it."""
    from benchmarks.cases import model_config
    from zero_planner.models.spec import spec_from_config
    from zero_planner.plan.fit import gpu_limit_bytes
    from zero_planner.plan.memory import Workload, ZeroBuffers, estimate_memory, reduction_stream_bytes, trainable_params
    from zero_planner.strategies import STRATEGIES

    if ran["strategy"] != "2" or now["micro_batch_size"] != ran["micro_batch_size"] - 1:
        return False
    if {k for k in ran if ran[k] != now.get(k)} != {"id", "micro_batch_size", "deepspeed_config", "planned"}:
        return False
    spec = spec_from_config(model_config(ran["model"]), ran["model"])
    n = ran["num_gpus"]
    w = Workload(micro_batch_size=ran["micro_batch_size"], seq_len=ran["seq_len"], precision=ran["precision"],
                 gradient_checkpointing=ran["gradient_checkpointing"], world_size=n, gpus_per_node=n)  # fmt: skip
    estimate = estimate_memory(spec, STRATEGIES["2"], w, gpu_name=ran["planned"]["gpu"])
    pool = reduction_stream_bytes(STRATEGIES["2"], ZeroBuffers.for_model(spec.hidden_size), w, trainable_params(spec, w))
    limit = gpu_limit_bytes(ran["planned"]["gpu_capacity_bytes"])
    return pool > 0 and estimate.total_bytes - pool <= limit < estimate.total_bytes


SHORT_SUITES = {"i26-phi3-h200": "h200x1-i26-phi3-2026-11-27.jsonl",
                "i26-idle-qwen7b-2xh200": "h200x2-i26-idle-qwen7b-2026-11-28.jsonl",
                "i26-mistral7b-4xh100": "h200x4-i26-mistral7b-2026-11-28.jsonl",
                "i26-llama8b-2xh200": "h200x2-i26-llama8b-2026-11-28.jsonl",
                "i26-qwen3-4b-h200": "h200x1-i26-qwen3-4b-2026-11-28.jsonl",
                "i26-gpt2-large-h200": "h200x1-i26-gpt2-large-2026-11-28.jsonl"}
"""Suites run with fewer than STEPS steps, or PROFILE_STEPS where they profile (Phi-3-mini: 6, so that its four
64-sequence candidates fit one 600-s device call; Qwen2.5-7B's two profiles: 5; Mistral-7B's six candidates on four
GPUs: 5; the three sweeps predicted before they ran, 2026-11-28: 6), each with its committed results, whose medians
must show they settled."""
PROFILE_STEPS = 6
"""Steps before the profiled ones of a profiling case (idle_trace: benchmarks/idle_profile.py), whose timings are
not fitted: it reads where the GPU idles in four more steps under torch.profiler."""


def test_every_case_times_settled_steps_alone_on_its_gpu():
    for name in SUITES:
        for case in (json.loads(line) for line in (SUITES_DIR / f"{name}.jsonl").read_text().splitlines()):
            least = 5 if name in SHORT_SUITES else PROFILE_STEPS if case.get("idle_trace") else STEPS
            assert case["steps"] >= least and "memory_limit_bytes" not in case
            assert case["planned"]["role"] in ("pick", "ladder")


@pytest.mark.parametrize("name", sorted(SHORT_SUITES))
def test_a_short_suite_settled_within_its_steps(name):
    # the last two timed steps of every case within 5% of the case's median: no case was still speeding up; four timed
    # steps at least, three under ZeRO-3 (which leaves two out as warm-up: throughput.warmup_steps)
    from benchmarks.throughput_check import timed_steps

    rows = [json.loads(line) for line in (SUITES_DIR.parent / "results" / SHORT_SUITES[name]).read_text().splitlines()]
    suite = (SUITES_DIR / f"{name}.jsonl").read_text().splitlines()
    assert {row["id"] for row in rows} == {json.loads(line)["id"] for line in suite}
    for row in rows:
        times = timed_steps(row)
        median = sorted(times)[len(times) // 2]
        least = 3 if row["case"]["strategy"].startswith("3") else 4
        settled = len(times) >= least and all(abs(t / median - 1) < 0.05 for t in times[-2:])
        assert settled != (row["id"] in UNSETTLED), (row["id"], times)


UNSETTLED = {"llama3-8b|3|bf16|mb4|s2048|nogc|g2|ga1|cap139.8|xs|one-sync",
             "qwen3-4b|3|bf16|mb4|s2048|nogc|g1|ga1|cap139.8|xs|one-sync",
             "gpt2-large|3|bf16|mb37|s1024|nogc|g1|ga1|cap139.8|xs|one-sync"}
"""ZeRO-3 without checkpointing in the three six-step sweeps of 2026-11-28: its four timed steps had not settled (the
last two 4-12% off their median). Each ran 15-32% below its setting's best, so no plan-quality figure hangs on it;
its tokens/s is indicative (docs/speed.md). The test fails if any of them did settle or any other case did not."""


def test_a_rerun_is_the_committed_case_with_more_steps():
    cases = suite_cases("i26-rerun-3b-h100")
    committed = {}
    for line in (SUITES_DIR.parent / "results" / "h100x1-op-2026-11-23.jsonl").read_text().splitlines():
        row = json.loads(line)
        committed[row["id"]] = row["case"]
    assert [c["strategy"] for c in cases] == ["1", "2"]
    for case in cases:
        before = committed[case["id"]]
        assert case["steps"] == RERUN_STEPS > before.get("steps", 4)
        assert {k: v for k, v in case.items() if k not in ("steps", "suite")} == \
            {k: v for k, v in before.items() if k not in ("steps", "suite")}


def test_a_variant_changes_only_its_zero_settings_and_says_so():
    cases = {c["id"]: c for c in suite_cases("i26-stage2-3b-h100")}
    ours = cases["llama3.2-3b|2|bf16|mb2|s2048|gc|g1|ga1|cap79.2|xs"]
    variant = cases["llama3.2-3b|2|bf16|mb2|s2048|gc|g1|ga1|cap79.2|xs|no-overlap"]
    assert variant["variant"] == "no-overlap" and "variant" not in ours
    assert ours["deepspeed_config"]["zero_optimization"]["overlap_comm"] is True
    assert variant["deepspeed_config"]["zero_optimization"] == {**ours["deepspeed_config"]["zero_optimization"], "overlap_comm": False}


def test_a_sweep_holds_every_fitting_candidate():
    cases = [json.loads(line) for line in Path(SUITES_DIR / "i26-moe-small-h100.jsonl").read_text().splitlines()]
    assert {(c["strategy"], c["gradient_checkpointing"]) for c in cases} == {
        (s, gc) for s in ("0", "1", "2", "2-offload", "3", "3-offload", "3-offload-all") for gc in (False, True)}
    assert sum(c["planned"]["chosen"] for c in cases) == 1


def test_a_sweep_on_two_gpus_plans_for_two_gpus():
    cases = suite_cases("i26-llama1b-2xh100")
    assert {c["num_gpus"] for c in cases} == {2} and len(cases) == 14
    assert all("|g2|" in c["id"] for c in cases) and sum(c["planned"]["chosen"] for c in cases) == 1


def test_a_sync_pair_alternates_the_harness_wait_and_zero_runs_one_wait():
    cases = suite_cases("i26-phase-sync-2xh200")
    gemma = [c for c in cases if c["id"].startswith("gemma2-2b|1|bf16|mb2|")]
    assert [c["phase_sync"] for c in gemma] == [True, False, True, False]
    assert [c["id"].rsplit("|", 1)[1] for c in gemma] == ["phase-sync-1", "one-sync-1", "phase-sync-2", "one-sync-2"]
    assert len({c["id"] for c in cases}) == len(cases)

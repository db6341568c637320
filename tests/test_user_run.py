"""A user's whole run on two H200s, held against today's planner: their own DeepSpeed JSON (LLaMA-Factory's ds_z2.json,
DeepSpeed's defaults for what it leaves out), their own JSONL, Gemma 2 2B at the largest micro-batch zero-plan said
fits, through load, initialize, train, eval, checkpoint saves, the final export and a --resume
(benchmarks/user_run_gpu.sh, 2026-11-28; benchmarks/zero_run/gemma2-2b-eager-user-llamafactory-z2-*)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zero_planner.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "zero_run" / "gemma2-2b-eager-user-llamafactory-z2-s2048-2xh200-2026-11-28"
ARGS = ["--model", str(ROOT / "benchmarks" / "model_configs" / "gemma2-2b.json"), "--gpus", "2xH200", "--seq-len", "2048",
        "--ds-config", str(ROOT / "benchmarks" / "user_configs" / "llamafactory-ds_z2.json")]  # fmt: skip


def plan_now(capsys, micro_batch: int) -> tuple[int, dict | None]:
    capsys.readouterr()
    code = main([*ARGS, "--micro-batch", str(micro_batch), "--json"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if code == 0 else None)


def reports() -> list[dict]:
    return [json.loads(Path(f"{RUN}.report-{n}.json").read_text()) for n in (1, 2)]


def test_the_largest_micro_batch_that_fits_is_the_one_that_ran(capsys):
    # the device script asked for 12, 11, ... and ran the first that fit: 5 (its train peak 129.36 of 139.8 GiB;
    # a sixth sequence adds about 23 GiB of activations)
    assert plan_now(capsys, 6)[0] == 1
    code, plan = plan_now(capsys, 5)
    assert code == 0 and plan["strategy"]["name"] == "2" and plan["training"]["attn_implementation"] == "eager"
    assert json.loads(Path(f"{RUN}.plan.json").read_text())["training"]["micro_batch_size"] == 5


def test_every_phase_of_both_runs_is_within_two_percent_of_todays_plan(capsys):
    # measured 2026-11-28: every phase within 0.12% of the plan (resume's in the second run)
    phases = plan_now(capsys, 5)[1]["estimate"]["per_gpu"]["phases"]
    seen = set()
    for report in reports():
        for rank in report["ranks"]:
            for phase, measured in rank["phases"].items():
                assert measured["peak_allocated_bytes"] == pytest.approx(phases[phase], rel=0.02), (rank["rank"], phase)
                seen.add(phase)
    assert seen == {"load", "initialize", "resume", "train", "eval", "save", "export"}


def test_the_hosts_peak_is_the_resume_and_within_five_percent(capsys):
    # the node's peak RSS (both ranks) was the resume's: 35.26 GB against 34.70 predicted (-1.6%). Train and export
    # came out 12% and 29% above their predictions per node (5.15 and 9.43 GB against 4.51 and 6.66): below the
    # resume's, so they do not decide the fit (noted on issue 26, not modelled yet)
    cpu = plan_now(capsys, 5)[1]["estimate"]["cpu"]
    resumed = reports()[1]
    node = {phase: sum(r["phases"][phase]["host_rss_peak_bytes"] for r in resumed["ranks"])
            for phase in resumed["ranks"][0]["phases"]}  # fmt: skip
    assert max(node, key=node.get) == "resume" == max(cpu["phases"], key=cpu["phases"].get)
    assert node["resume"] == pytest.approx(cpu["total"], rel=0.05)

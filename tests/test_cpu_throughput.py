"""Issue 16: no tokens/s figure for CPU processes (the step-time model describes GPUs), yet the same ranking."""

from __future__ import annotations

import json

from conftest import GIB, ROOT, make_candidate, make_plan

from zero_planner.cli import main
from zero_planner.hardware import parse_gpus
from zero_planner.models.spec import load_model_spec
from zero_planner.plan import search
from zero_planner.plan.request import PlanRequest
from zero_planner.plan.throughput import models_throughput
from zero_planner.planfile import Plan
from zero_planner.run.report import build_run_report, next_choice, report_table

TINY = str(ROOT / "benchmarks" / "model_configs" / "llama-tiny.json")
DEMO = ["--model", TINY, "--gpus", "cpu:2", "--cpu-mem", "8GiB", "--seq-len", "128", "--global-batch", "16"]


def test_cpu_is_not_modelled_gpus_are():
    assert not models_throughput(parse_gpus("cpu:2", "8GiB").gpu)
    assert models_throughput(parse_gpus("2xT4").gpu)


def test_cpu_plan_carries_null_and_keeps_the_ranking():
    cluster = parse_gpus("cpu:2", "8GiB")
    result = search.plan(load_model_spec(TINY), cluster, PlanRequest(seq_len=128, global_batch=16))
    fitting = [o for o in result.options if o.fits]
    assert len(fitting) > 1
    # The choice is still the fastest by the model (computed, only not shown).
    assert result.chosen.tokens_per_second == max(o.tokens_per_second for o in fitting) > 0
    assert all(o.step is None or not o.step.modelled for o in result.options)
    assert [c.tokens_per_second for c in result.plan.candidates] == [None] * len(result.options)


def test_gpu_plan_keeps_its_figures(capsys):
    assert main(["--model", "gpt2", "--gpus", "2xT4", "--seq-len", "512", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert all(c["tokens_per_second"] > 0 for c in plan["candidates"] if c["fits"])


def test_cli_says_not_modelled_and_prints_no_figure(capsys):
    assert main([*DEMO, "--micro-batch", "4"]) == 0
    out = capsys.readouterr().out
    assert "not modelled for CPU processes" in out and "n/a" in out
    assert "estimated" not in out  # the "estimated N tokens/s" line of GPU plans


def test_cpu_plan_file_with_old_figures_loads_with_null():
    data = make_plan("2").model_dump(mode="json")
    data["candidates"] = [make_candidate("2", micro_batch_size=4, checkpointing=False, fits=True, peak_bytes=GIB,
                                         tokens_per_second=178_313.0, chosen=True)]  # fmt: skip
    assert Plan.model_validate(data).candidates[0].tokens_per_second is None
    data["hardware"]["gpu"] = "H100"
    assert Plan.model_validate(data).candidates[0].tokens_per_second == 178_313.0


def test_run_report_prints_na_for_predicted_on_cpu():
    plan = make_plan("2", candidates=[make_candidate("2", micro_batch_size=4, checkpointing=False, fits=True,
                                                     peak_bytes=GIB, tokens_per_second=178_313.0, chosen=True)])  # fmt: skip
    report = build_run_report(plan, [{"rank": 0, "peak_allocated_bytes": GIB}], [2.0, 1.0], 712.0, steps=2,
                              device="cpu")  # fmt: skip
    assert report["predicted_tokens_per_second"] is None
    caption = str(report_table(report).caption)
    assert "tokens/s 712" in caption and "predicted n/a" in caption and "178" not in caption


def test_next_choice_on_cpu_takes_the_least_change():
    plan = make_plan("2", peak_bytes=10 * GIB, candidates=[
        make_candidate("2", micro_batch_size=4, checkpointing=False, fits=True, peak_bytes=10 * GIB,
                       tokens_per_second=900, chosen=True),
        make_candidate("3", micro_batch_size=4, checkpointing=True, fits=True, peak_bytes=6 * GIB,
                       tokens_per_second=950),
        make_candidate("2", micro_batch_size=2, checkpointing=False, fits=True, peak_bytes=8 * GIB,
                       tokens_per_second=800),
    ])  # fmt: skip
    assert plan.hardware.gpu == "cpu" and plan.candidates[1].tokens_per_second is None
    assert next_choice(plan).startswith("stage 2, micro-batch 2")  # the highest peak below 10 GiB
    gpu = make_plan("2", gpu="H100", peak_bytes=10 * GIB, candidates=[c.model_dump() for c in plan.candidates])
    gpu.candidates[1].tokens_per_second, gpu.candidates[2].tokens_per_second = 950.0, 800.0
    assert next_choice(gpu).startswith("stage 3, micro-batch 4")  # the fastest on a GPU


"""zero-run checks the host memory of the run it is about to start: the plan's host phases this run goes through,
with the data its ranks will pack now (run/preflight.py host_need)."""

import json
import shutil
from pathlib import Path

import pytest

from zero_planner import launch
from zero_planner.cli import main as zero_plan
from zero_planner.planfile import load_plan
from zero_planner.run import preflight
from zero_planner.run.data import held_data_bytes
from zero_planner.run.preflight import Machine, host_need

GIB = 2**30
MODEL = "benchmarks/model_configs/llama3.2-1b.json"


def write_rows(path, count: int, start: int = 0) -> None:
    with open(path, "a") as f:
        for i in range(start, start + count):
            f.write(json.dumps({"prompt": f"question {i} " + "q" * 200, "response": "a" * 300}) + "\n")


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """A two-GPU plan (H100) of Llama 3.2 1B over 3,000 prompt/response rows of a local JSONL."""
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "d.jsonl", 3000)
    shutil.copy(Path(__file__).parents[1] / MODEL, tmp_path / "model.json")
    assert zero_plan(["--model", "model.json", "--gpus", "2xH100", "--dataset", "d.jsonl", "--tokenizer", "bytes",
                      "--init", "random", "-o", "plan.json"]) == 0  # fmt: skip
    return tmp_path / "plan.json"


def test_the_plan_records_the_data_its_host_phases_count(planned):
    plan = load_plan(planned)
    held, peak, tokens = held_data_bytes(plan.training)
    cpu = plan.estimate.cpu
    assert (cpu.data_bytes, cpu.data_peak_bytes) == (held, peak) and tokens > 1_000_000
    assert "load" in cpu.phases


def test_only_the_phases_this_run_goes_through(planned):
    plan = load_plan(planned)
    phases = plan.estimate.cpu.phases
    # a fresh run saves checkpoints and exports; only --resume reads a checkpoint first
    fresh = {k: v for k, v in phases.items() if k != "resume"}
    assert host_need(plan) == (max(fresh.values()), max(fresh, key=fresh.get))
    assert host_need(plan, resume=True) == (phases["resume"], "resume")
    plan.training.save = "final"  # the final export only
    assert host_need(plan)[1] != "save" and host_need(plan)[0] == max(phases["export"], phases["train"], phases["load"])
    plan.training.save = "none"
    assert host_need(plan)[0] == max(phases["train"], phases["load"])


def test_data_that_grew_since_planning_is_counted(planned, tmp_path):
    plan = load_plan(planned)
    before = dict(plan.estimate.cpu.phases)
    was_held, was_peak = plan.estimate.cpu.data_bytes, plan.estimate.cpu.data_peak_bytes
    write_rows(tmp_path / "d.jsonl", 9000, start=3000)  # four times the rows
    held, peak, _ = held_data_bytes(plan.training)
    assert held > 3 * was_held
    g = plan.hardware.gpus_per_node
    need, phase = host_need(plan, resume=True)
    assert phase == "resume" and need == before["resume"] + (held - was_held) * g
    # without saves: training with the larger data, or packing it (the load phase: its peak in place of the old)
    plan.training.save = "none"
    phases = {"load": before["load"] + (peak - was_peak) * g, "train": before["train"] + (held - was_held) * g}
    assert host_need(plan) == (max(phases.values()), max(phases, key=phases.get))


def test_a_plan_without_a_recorded_dataset_is_read_as_planned(planned):
    plan = load_plan(planned)
    plan.estimate.cpu.data_bytes = plan.estimate.cpu.data_peak_bytes = None  # a plan written before they were
    plan.training.dataset = "synthetic"
    fresh = {k: v for k, v in plan.estimate.cpu.phases.items() if k != "resume"}
    assert host_need(plan)[0] == max(fresh.values())


def test_zero_run_refuses_a_machine_without_the_host_memory_and_says_how_much(planned, monkeypatch, capsys):
    plan = load_plan(planned)
    need, phase = host_need(plan)
    gpus = [("NVIDIA H100 80GB HBM3", 85 * 10**9)] * 2
    short = Machine(gpus=gpus, host_available_bytes=need - 1, disk_free_bytes=10**13)
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: short)
    assert launch.main([str(planned)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refusing to launch: the run needs" in err[0]
    assert f"{need / GIB:.1f} GiB of host memory per node at its peak ({phase})" in err[0] and f"--cpu-mem {int((need - 1) / GIB)}GiB" in err[0]
    # the same machine with what the plan needs passes
    assert preflight.preflight(plan, Machine(gpus=gpus, host_available_bytes=need, disk_free_bytes=10**13),
                               output_dir=str(planned.parent / "run"), own_loop=True) == []  # fmt: skip
    # a user's script: its host memory is its own; only offload's is checked
    assert preflight.preflight(plan, short, output_dir=str(planned.parent / "run")) == []


def test_another_dataset_given_to_zero_run_is_sized_before_launch(planned, tmp_path, monkeypatch, capsys):
    plan = load_plan(planned)
    planned_need, _ = host_need(plan)
    write_rows(tmp_path / "big.jsonl", 30000)  # ten times the planned rows
    gpus = [("NVIDIA H100 80GB HBM3", 85 * 10**9)] * 2
    enough_as_planned = Machine(gpus=gpus, host_available_bytes=planned_need, disk_free_bytes=10**13)
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: enough_as_planned)
    assert launch.main([str(planned), "--dataset", "big.jsonl"]) == 2
    err = capsys.readouterr().err
    # each rank holds ten times the data, in every phase
    assert "refusing to launch: the run needs" in err and f"{planned_need / GIB:.1f} GiB is available" in err

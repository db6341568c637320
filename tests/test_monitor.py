"""--report-to: DeepSpeed's monitor sections in the plan's JSON, the checks before launch, and (slow) the TensorBoard
event files a real CPU run writes, read back with tensorboard's own reader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import GIB, make_plan

from zero_planner.launch import main
from zero_planner.plan.dsconfig import build_ds_config, monitors_enabled, validate_ds_config, with_monitor
from zero_planner.planfile import save_plan
from zero_planner.run import launcher, preflight
from zero_planner.run.preflight import Machine
from zero_planner.strategies import STRATEGIES


def test_monitor_sections_are_deepspeeds_schema():
    from deepspeed.monitor.config import get_monitor_config

    config = build_ds_config(STRATEGIES["2"], micro_batch_size=1, gradient_accumulation_steps=1, world_size=1,
                             precision="bf16", hidden_size=64, report_to=["tensorboard", "csv", "wandb"],
                             output_dir="runs/x")  # fmt: skip
    assert config["tensorboard"] == {"enabled": True, "output_path": "runs/x/logs", "job_name": "zero-run"}
    assert config["csv_monitor"] == {"enabled": True, "output_path": "runs/x/logs", "job_name": "zero-run"}
    assert config["wandb"] == {"enabled": True, "project": "zero-run"}
    monitor = get_monitor_config(config)  # DeepSpeed's own parser of these sections (extra keys are refused)
    assert monitor.tensorboard.enabled and monitor.csv_monitor.enabled and monitor.wandb.enabled
    assert monitor.tensorboard.output_path == "runs/x/logs" and monitor.wandb.project == "zero-run"
    validate_ds_config(config)
    assert monitors_enabled(config) == ["tensorboard", "csv", "wandb"]


def test_with_monitor_replaces_only_the_monitor_sections():
    config = make_plan().deepspeed_config
    assert monitors_enabled(config) == []  # no section unless asked: the reference ds_configs/ stay as they are
    logged = with_monitor({**config, "comet": {"enabled": False}}, ["csv"], "/out")
    assert logged["csv_monitor"]["output_path"] == "/out/logs" and "tensorboard" not in logged
    assert logged["comet"] == {"enabled": False}
    assert with_monitor(logged, [], "/out") == {**config, "comet": {"enabled": False}}


def dry_run_json(capsys, argv) -> tuple[str, dict]:
    assert main(argv) == 0
    first, rest = capsys.readouterr().out.split("\n", 1)
    return first, json.loads(rest)


def test_zero_run_report_to_and_output_dir_override(plan_file, tmp_path, capsys):
    path = plan_file(gpu="cpu")
    first, ds = dry_run_json(capsys, [str(path), "--dry-run", "--report-to", "tensorboard,csv", "--output-dir",
                                      str(tmp_path / "elsewhere")])  # fmt: skip
    assert first.endswith("--report-to tensorboard,csv")
    assert ds["tensorboard"]["output_path"] == ds["csv_monitor"]["output_path"] == str(tmp_path / "elsewhere" / "logs")
    # A plan that records tensorboard logs under the --output-dir given to zero-run.
    plan = make_plan(gpu="cpu", output_dir=str(tmp_path / "planned"), report_to=["tensorboard"])
    plan.deepspeed_config = with_monitor(plan.deepspeed_config, ["tensorboard"], plan.training.output_dir)
    save_plan(plan, tmp_path / "logged.json")
    _, ds = dry_run_json(capsys, [str(tmp_path / "logged.json"), "--dry-run", "--output-dir", str(tmp_path / "o")])
    assert ds["tensorboard"]["output_path"] == str(tmp_path / "o" / "logs")
    _, ds = dry_run_json(capsys, [str(tmp_path / "logged.json"), "--dry-run", "--report-to", "none"])
    assert monitors_enabled(ds) == []


def test_report_to_reaches_a_script_through_its_json(plan_file, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("")
    _, ds = dry_run_json(capsys, [str(plan_file(gpu="cpu")), "--dry-run", "--script", str(script), "--report-to", "csv"])
    assert monitors_enabled(ds) == ["csv"]


@pytest.mark.parametrize(
    "value, message",
    [
        ("tensorbord", "argument --report-to: 'tensorbord' is not one of tensorboard, csv, wandb, none (did you mean "
                       "tensorboard?)"),
        ("none,csv", "argument --report-to: 'none,csv': none cannot be combined with csv"),
        ("", "argument --report-to: '' is not one of tensorboard, csv, wandb, none"),
    ],
)  # fmt: skip
def test_bad_report_to_exits_2_in_one_line(plan_file, capsys, value, message):
    assert main([str(plan_file(gpu="cpu")), "--dry-run", "--report-to", value]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_zero_plan_records_report_to(tmp_path, capsys):
    from zero_planner.cli import main as zero_plan

    out = tmp_path / "plan.json"
    assert zero_plan(["--model", "llama3.2-1b", "--gpus", "1xH100", "--report-to", "csv,tensorboard", "-o", str(out)]) == 0
    plan = json.loads(out.read_text())
    ds = json.loads((tmp_path / "plan.ds_config.json").read_text())
    assert plan["training"]["report_to"] == ["csv", "tensorboard"]
    assert ds == plan["deepspeed_config"] and monitors_enabled(ds) == ["tensorboard", "csv"]
    assert ds["csv_monitor"]["output_path"] == str(Path(plan["training"]["output_dir"]) / "logs")


def test_a_monitor_that_cannot_be_imported_is_refused_before_launch(plan_file, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    monkeypatch.setattr(launcher, "spawn", lambda *a, **k: pytest.fail("spawned despite a missing monitor package"))
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: Machine(
        gpus=None, host_available_bytes=64 * GIB, disk_free_bytes=100 * GIB))  # fmt: skip
    assert main([str(plan_file(gpu="cpu")), "--report-to", "wandb,csv"]) == 2
    err = capsys.readouterr().err
    assert err == ("zero-run: refusing to launch: --report-to wandb needs the wandb package, which is not installed "
                   "here (pip install wandb, or leave wandb out of --report-to)\n")  # fmt: skip


# --- a real run (slow): TensorBoard's event files hold what run_report.json holds ---


@pytest.mark.slow
def test_tensorboard_events_match_the_run_report(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    steps = 4
    plan = make_plan("2", output_dir=str(out), max_steps=steps, eval_split="0.05", eval_every=2)
    save_plan(plan, tmp_path / "plan.json")
    assert main([str(tmp_path / "plan.json"), "--report-to", "tensorboard,csv", "--save", "none"]) == 0
    report = json.loads((out / "run_report.json").read_text())
    assert not (out / "final").exists() and not (out / "checkpoints").exists()  # --save none keeps nothing else

    events = EventAccumulator(str(out / "logs" / "zero-run"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"Train/Steps/train_loss", "Train/Steps/eval_loss", "Train/Steps/learning_rate",
            "Train/Steps/tokens_per_second", "Train/Steps/host_rss_GiB"} <= scalars  # fmt: skip
    # One learning-rate series (DeepSpeed's own lr, the next step's rate, is dropped), and every series over the
    # optimizer step, DeepSpeed's own included (its global sample count was the x of each)
    assert not any(tag.startswith("Train/Samples/") or tag.endswith("/lr") for tag in scalars), scalars

    def series(tag):
        return [(e.step, e.value) for e in events.Scalars(tag)]

    samples_per_step = plan.deepspeed_config["train_batch_size"]
    loss = series("Train/Steps/train_loss")
    assert [x for x, _ in loss] == list(range(1, steps + 1))
    assert [v for _, v in loss] == pytest.approx(report["losses"], rel=1e-6)  # event files store float32
    evals = series("Train/Steps/eval_loss")
    assert [(x, v) for x, v in evals] == [(e["step"], pytest.approx(e["loss"], rel=1e-6)) for e in report["eval_losses"]]
    assert len(evals) == 2
    assert [(x, v) for x, v in series("Train/Steps/learning_rate")] == [
        (i + 1, pytest.approx(3e-3)) for i in range(steps)]  # fmt: skip
    tokens_per_step = samples_per_step * plan.training.seq_len
    assert [v for _, v in series("Train/Steps/tokens_per_second")] == pytest.approx(
        [tokens_per_step / s for s in report["step_times_s"]], rel=1e-5)  # fmt: skip
    # The CSV monitor's files: its `step` column holds the optimizer step (it held DeepSpeed's sample count)
    rows = (out / "logs" / "zero-run" / "Train_Steps_train_loss.csv").read_text().split()
    assert rows[0] == "step,train_loss" and [int(r.split(",")[0]) for r in rows[1:]] == list(range(1, steps + 1))
    assert not list((out / "logs" / "zero-run").glob("Train_Samples_*.csv"))
    rss = [v for _, v in series("Train/Steps/host_rss_GiB")]
    assert all(0 < v * GIB <= report["ranks"][0]["host_rss_bytes"] for v in rss)

    # The run's page is written beside the report, with a point per step and per evaluation.
    page = (out / "run_report.html").read_text()
    assert len(re.findall(r'class="point" data-series="train loss"', page)) == steps
    assert len(re.findall(r'class="point" data-series="eval loss"', page)) == 2

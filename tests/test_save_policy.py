"""What zero-run keeps (--save none|final|steps, --save-steps, --save-total-limit) and the disk check that counts it.

The fast tests cover the arithmetic (checkpoint sizes per stage, how many checkpoints a run writes and holds at
once), the flags and the preflight's one line; the slow ones run two CPU ranks under the real launcher and look at
the files each policy leaves.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import GIB, make_plan

from zero_planner.errors import InputError
from zero_planner.launch import main
from zero_planner.plan import saves
from zero_planner.planfile import Plan, TrainingInfo, save_plan
from zero_planner.run import checkpoint as ckpt
from zero_planner.run import launcher, preflight
from zero_planner.run.preflight import Machine, disk_problem, run_disk_need
from zero_planner.run.training_args import apply_save_args

B, F = 10**9, 10**6  # a billion-parameter model and a million trainable (adapter) parameters

# --- one checkpoint's size, per stage and precision ---


@pytest.mark.parametrize(
    "stage, precision, frozen_excluded, expected",
    [
        # full fine-tuning: module weights (none at stage 3) + Adam's two moments + the fp32 master (none at fp32
        # stage 0, where the weights are the master); measured 14.0 / 12.0 / 14.0 / 16.0 / 12.0 B per parameter
        (0, "bf16", False, B * 2 + B * 12),
        (0, "fp32", False, B * 4 + B * 8),
        (1, "bf16", False, B * 2 + B * 12),
        (2, "fp16", False, B * 2 + B * 12),
        (2, "fp32", False, B * 4 + B * 12),
        (3, "bf16", False, B * 12),
        (3, "fp32", False, B * 12),
        # LoRA/QLoRA: exclude_frozen_parameters, so the adapters alone
        (2, "bf16", True, F * 2 + F * 12),
        (3, "bf16", True, F * 12),
        (None, "bf16", False, B * 2 + B * 12),  # stage unknown: the largest any stage writes
    ],
)
def test_checkpoint_bytes_per_stage(stage, precision, frozen_excluded, expected):
    trainable = F if frozen_excluded else B
    assert saves.checkpoint_bytes(B, trainable, precision, frozen_excluded=frozen_excluded, stage=stage) == expected


@pytest.mark.parametrize(
    "max_steps, save_every, start_step, expected",
    [
        (50, 25, 0, 2),  # steps 25 and 50
        (8, 100_000, 0, 1),  # only the last step
        (12, 4, 0, 3),
        (13, 4, 0, 4),  # 4, 8, 12 and the last, 13
        (13, 4, 10, 2),  # a resume from step 10: 12 and 13
        (50, 25, 50, 0),  # nothing left to run
        (0, 25, 0, None),  # --epochs decides the length: unknown before launch
    ],
)
def test_checkpoint_saves(max_steps, save_every, start_step, expected):
    assert saves.checkpoint_saves(max_steps, save_every, start_step) == expected
    if expected:  # the same count as checkpoint_due over the run, which the training loop asks
        due = [s for s in range(start_step + 1, max_steps + 1) if saves.checkpoint_due("steps", s, max_steps, save_every)]
        assert len(due) == expected


@pytest.mark.parametrize(
    "save, step, stopping, due, exported, exported_if_stopped",
    [
        ("steps", 10, False, True, True, False),  # every 10 steps; an interrupted run resumes from its checkpoint
        ("steps", 11, False, False, True, False),
        ("steps", 11, True, True, True, False),
        ("steps", 20, False, True, True, False),  # the last step
        ("final", 10, True, False, True, True),  # the model so far, the one thing --save final keeps
        ("none", 20, True, False, False, False),
    ],
)
def test_what_each_policy_writes(save, step, stopping, due, exported, exported_if_stopped):
    assert saves.checkpoint_due(save, step, 20, 10, stopping=stopping) == due
    assert saves.exports_model(save, interrupted=False) == exported
    assert saves.exports_model(save, interrupted=True) == exported_if_stopped


# --- what a run writes at most ---


def test_disk_need_counts_this_runs_checkpoints_limit_and_export():
    one = B * 14  # bf16, stage 2
    export = B * 2
    # 100 steps, a checkpoint every 10: 10 saves; limit 2 keeps 2 plus the one being written before pruning.
    need = saves.disk_need(B, B, "bf16", stage=2, save="steps", save_every=10, save_total_limit=2, max_steps=100)
    assert (need.checkpoint_bytes, need.checkpoints, need.export_bytes) == (one, 3, export)
    assert need.total_bytes == 3 * one + export
    # fewer saves than the limit allows: only those
    assert saves.disk_need(B, B, "bf16", stage=2, save_every=50, save_total_limit=5, max_steps=100).checkpoints == 2
    # a resume at step 95 writes the last one only
    assert saves.disk_need(B, B, "bf16", stage=2, save_every=10, max_steps=100, start_step=95).total_bytes == one + export
    # unknown length (--epochs): the limit decides
    assert saves.disk_need(B, B, "bf16", stage=2, save_total_limit=4, max_steps=0).checkpoints == 5
    assert saves.disk_need(B, B, "bf16", stage=2, save="final", max_steps=100).total_bytes == export
    assert saves.disk_need(B, B, "bf16", stage=2, save="none", max_steps=100).total_bytes == 0
    # LoRA at stage 2 also exports the merged model; checkpoints hold the adapters alone
    lora = saves.disk_need(B, F, "bf16", stage=2, adapters=True, merged_export=True, save_every=10, max_steps=10)
    assert lora.total_bytes == F * 14 + (F * 2 + B * 2)


def test_default_run_disk_bytes_is_unchanged_for_its_callers():
    # benchmarks/phases.py sizes its cases with it: KEEP_CHECKPOINTS + 1 of the largest checkpoint, the export.
    assert saves.run_disk_bytes(B, B, "bf16") == (saves.KEEP_CHECKPOINTS + 1) * B * 14 + B * 2
    assert saves.run_disk_bytes(B, B, "bf16", checkpoints=False) == B * 2


def seven_b_plan(**training) -> Plan:
    """A Mistral-7B-sized full fine-tune at stage 0 in bf16 on one H200 (parameters as the catalog counts them)."""
    params = 7_241_732_096
    return make_plan("0", gpu="H200", gpus_per_node=1, gpu_memory_bytes=141 * 10**9, precision="bf16",
                     params=params, **training)  # fmt: skip


def test_the_issue_example_names_the_setting_that_fits():
    # zero-run plan.json --max-steps 8 --save-steps 100000 on a 64 GiB disk: one checkpoint, at step 8, and the export.
    plan = seven_b_plan(max_steps=8, save_every=100_000)
    params = plan.model.params
    checkpoint, export = params * 14, params * 2
    free = 60 * GIB
    need = run_disk_need(plan)
    assert (need.checkpoints, need.checkpoint_bytes, need.export_bytes) == (1, checkpoint, export)
    line = disk_problem(plan, free, output_dir="out")
    assert line.startswith(f"this run writes up to {(checkpoint + export) / GIB:.1f} GiB under 'out' (1 DeepSpeed "
                           f"checkpoint of {checkpoint / GIB:.1f} GiB, the final model {export / GIB:.1f} GiB; --save "
                           f"steps, --save-steps 100000, --save-total-limit 2); 60.0 GiB is free")  # fmt: skip
    assert line.endswith(f"writing less: --save final {export / GIB:.1f} GiB (fits); or choose --output-dir elsewhere")
    assert "\n" not in line
    plan.training.save = "final"
    assert disk_problem(plan, free, output_dir="out") is None


def test_alternatives_are_listed_largest_first_up_to_the_first_that_fits():
    plan = seven_b_plan(max_steps=100, save_every=10)  # 10 saves, limit 2: 3 at once
    params = plan.model.params
    one, export = params * 14, params * 2
    line = disk_problem(plan, 2 * one, output_dir="out")  # room for two checkpoints, not three plus the export
    assert f"writing less: --save-total-limit 1 {(2 * one + export) / GIB:.1f} GiB, --save-steps 100 " \
           f"{(one + export) / GIB:.1f} GiB (fits); or choose" in line  # fmt: skip
    assert "--save final" not in line  # a setting that keeps more already fits


def test_preflight_counts_the_resume_step_and_qlora_scratch(tmp_path):
    plan = seven_b_plan(max_steps=100, save_every=10, save_total_limit=5)
    full = run_disk_need(plan).total_bytes
    assert run_disk_need(plan, start_step=90).total_bytes == full - 5 * plan.model.params * 14
    roomy = Machine(gpus=[("NVIDIA H200", 150 * 10**9)], host_available_bytes=500 * GIB, disk_free_bytes=full)
    assert preflight.preflight(plan, roomy, output_dir=str(tmp_path)) == []
    short = Machine(gpus=roomy.gpus, host_available_bytes=500 * GIB, disk_free_bytes=full - 1)
    assert len(preflight.preflight(plan, short, output_dir=str(tmp_path))) == 1
    assert preflight.preflight(plan, short, output_dir=str(tmp_path), start_step=90) == []


@pytest.mark.parametrize("num_bytes, text", [(0, "0.00 MiB"), (300 * 2**10, "0.29 MiB"), (22 * 2**20, "22 MiB"),
                                             (2**30 - 1, "1024 MiB"), (2**30, "1.0 GiB"), (int(12.34 * 2**30), "12.3 GiB")])
def test_sizes_are_written_in_the_unit_that_shows_them(num_bytes, text):
    assert saves.size_text(num_bytes) == text


def test_a_small_run_says_mib_not_zero_gib():
    plan = make_plan("2", max_steps=4, save_every=2, params=500_000)
    line = disk_problem(plan, 10 * 2**20, output_dir="out")
    assert "0.0 GiB" not in line and "MiB" in line and "10 MiB is free" in line


@pytest.mark.parametrize("existing, limit, saves_left, new", [(2, 2, 5, 1), (1, 2, 5, 2), (0, 2, 5, 3), (3, 1, 5, 1),
                                                               (2, 2, 1, 1), (0, 2, 1, 1)])
def test_a_resume_counts_the_checkpoints_already_there_as_pruned(existing, limit, saves_left, new):
    need = saves.disk_need(10**6, 10**6, "bf16", save_every=10, max_steps=10 * saves_left, save_total_limit=limit,
                           existing_checkpoints=existing)  # fmt: skip
    assert need.checkpoints == new


def test_a_resume_that_fits_once_older_checkpoints_are_pruned_is_not_refused(tmp_path):
    plan = seven_b_plan(max_steps=100, save_every=10, save_total_limit=2)
    one = plan.model.params * 14
    free = one + plan.model.params * 2  # one more checkpoint and the export; two are on disk already
    assert disk_problem(plan, free, output_dir="out", start_step=50, existing_checkpoints=2) is None
    assert disk_problem(plan, free, output_dir="out", start_step=50) is not None  # counting none there


def test_zero_run_refuses_in_one_line_then_runs_with_the_setting_named(tmp_path, monkeypatch, capsys):
    spawned = []
    monkeypatch.setattr(launcher, "spawn", lambda argv, env, **kw: (spawned.append(argv), (0, 0))[1])
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: Machine(
        gpus=[("NVIDIA H200", 150 * 10**9)], host_available_bytes=500 * GIB, disk_free_bytes=60 * GIB))  # fmt: skip
    path = tmp_path / "plan.json"
    save_plan(seven_b_plan(output_dir=str(tmp_path / "run")), path)
    assert main([str(path), "--max-steps", "8", "--save-steps", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zero-run: refusing to launch: this run writes up to" in err
    assert "--save final" in err and not spawned
    assert main([str(path), "--max-steps", "8", "--save", "final"]) == 0
    assert spawned[0][-4:] == ["--max-steps", "8", "--save", "final"]


# --- the flags ---


@pytest.mark.parametrize(
    "plan_kw, save, save_steps, limit, expected",
    [
        ({}, None, 0, None, ("final", 0, 2)),  # --save-steps 0: the export only
        ({}, None, 40, None, ("steps", 40, 2)),
        ({"save": "final"}, None, 40, None, ("steps", 40, 2)),  # --save-steps N alone implies steps
        ({}, "none", None, 1, ("none", 10, 1)),
        ({"save": "final", "save_every": 0}, "steps", None, None, ("steps", 25, 2)),  # back to the default interval
        ({}, "final", 0, None, ("final", 0, 2)),  # given together, agreeing
    ],
)
def test_save_flags(plan_kw, save, save_steps, limit, expected):
    t = make_plan(**plan_kw).training
    apply_save_args(t, save, save_steps, limit)
    assert (t.save, t.save_every, t.save_total_limit) == expected


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--save", "final", "--save-steps", "5"],
         "--save final writes no step checkpoints; --save-steps 5 needs --save steps"),
        (["--save", "steps", "--save-steps", "0"], "--save steps needs --save-steps above 0"),
        (["--save", "all"], "argument --save: invalid choice: 'all'"),
        (["--save-total-limit", "0"], "argument --save-total-limit: must be a positive integer, got '0'"),
        (["--save-steps", "-1"], "argument --save-steps: '-1' must be 0 or more"),
    ],
)  # fmt: skip
def test_bad_save_flags_exit_2_in_one_line(plan_file, capsys, argv_tail, message):
    assert main([str(plan_file(gpu="cpu")), "--dry-run", *argv_tail]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_save_flags_reach_the_trainer(plan_file, capsys):
    path = plan_file(gpu="cpu")
    assert main([str(path), "--dry-run", "--save", "steps", "--save-steps", "3", "--save-total-limit", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"--plan {path} --save steps --save-steps 3 --save-total-limit 1")


def test_plans_without_a_save_field_keep_their_behaviour():
    data = json.loads(make_plan(save_every=25).model_dump_json())
    for save_every, expected in ((25, "steps"), (0, "final")):
        training = {k: v for k, v in data["training"].items() if k not in ("save", "save_total_limit", "report_to")}
        training["save_every"] = save_every
        t = TrainingInfo.model_validate(training)
        assert (t.save, t.save_total_limit, t.report_to) == (expected, saves.KEEP_CHECKPOINTS, [])
    with pytest.raises(ValueError, match="save 'steps' needs save_every above 0"):
        TrainingInfo.model_validate({**data["training"], "save": "steps", "save_every": 0})


def test_zero_plan_records_the_policy_and_says_what_is_kept(capsys):
    from zero_planner.cli import main as zero_plan

    assert zero_plan(["--model", "llama3.2-1b", "--gpus", "1xH100", "--save", "none", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["training"]["save"] == "none"
    assert any("keeps no checkpoint and no final model" in note for note in plan["notes"])
    assert zero_plan(["--model", "llama3.2-1b", "--gpus", "1xH100", "--save-steps", "100", "--save-total-limit",
                      "3"]) == 0  # fmt: skip
    out = " ".join(capsys.readouterr().out.split())
    assert "zero-run keeps a checkpoint every 100 steps and at the end (newest 3 kept), then the final model" in out


def test_prune_keeps_the_limit_and_never_the_protected(tmp_path):
    from test_train_cpu import fake_checkpoint

    for step in (2, 4, 6, 8):
        fake_checkpoint(tmp_path, step)
    resumed = tmp_path / ckpt.tag_for(4)
    removed = ckpt.prune(tmp_path, keep=1, protect=[resumed, tmp_path / ckpt.tag_for(8)])
    assert sorted(p.name for p in removed) == ["step2", "step6"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step4", "step8"]
    # A newer checkpoint from an earlier, longer run in the same folder never pushes out the one just written.
    fake_checkpoint(tmp_path, 50)
    fake_checkpoint(tmp_path, 10)
    ckpt.prune(tmp_path, keep=1, protect=[tmp_path / ckpt.tag_for(10)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step10", "step50"]


# --- real runs (slow): the files each policy leaves ---


def run_plan(tmp_path: Path, *args: str, **plan_kw) -> tuple[int, Path]:
    out = tmp_path / "run"
    plan_kw.setdefault("max_steps", 4)
    path = tmp_path / "plan.json"
    save_plan(make_plan("2", output_dir=str(out), **plan_kw), path)
    return main([str(path), *args]), out


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.mark.slow
def test_save_steps_keeps_the_limit_and_the_checkpoint_resumed_from(tmp_path):
    # 6 steps, a checkpoint every 2, limit 1: step6 alone remains (step2 and step4 pruned once a newer was complete).
    rc, out = run_plan(tmp_path, "--save-total-limit", "1", max_steps=6, save_every=2)
    assert rc == 0
    checkpoints = out / ckpt.CHECKPOINTS_DIR
    assert tags(checkpoints) == ["step6"]
    # Its files are the size checkpoint_bytes predicts for stage 2 in fp32 (4 B weights + 12 B optimizer per
    # parameter, counted from the exported model), plus DeepSpeed's pickling (a few KB per file).
    from safetensors import safe_open

    with safe_open(str(out / "final" / "model.safetensors"), "pt") as f:
        params = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())
    written = sum(entry["bytes"] for entry in json.loads((checkpoints / "step6" / ckpt.MARKER).read_text())["manifest"].values())
    predicted = saves.checkpoint_bytes(params, params, "fp32", stage=2)
    assert predicted <= written <= predicted * 1.01
    # Resume to step 8, a checkpoint every step, limit 1: step7 comes and goes, step6 (resumed from) stays.
    path = tmp_path / "plan.json"
    assert main([str(path), "--resume", "--max-steps", "8", "--save-steps", "1", "--save-total-limit", "1"]) == 0
    assert tags(checkpoints) == ["step6", "step8"]
    report = json.loads((out / "run_report.json").read_text())
    assert report["steps"] == 8 and len(report["losses"]) == 8 and report["save"] == "steps"
    # --save final resumes from the checkpoints there and adds none: the model at step 10 replaces final/.
    exported = (out / "final" / "model.safetensors").stat().st_mtime_ns
    assert main([str(path), "--resume", "--max-steps", "10", "--save", "final"]) == 0
    report = json.loads((out / "run_report.json").read_text())
    assert report["steps"] == 10 and len(report["losses"]) == 10 and report["save"] == "final"
    assert tags(checkpoints) == ["step6", "step8"]
    assert (out / "final" / "model.safetensors").stat().st_mtime_ns > exported


def tags(checkpoints: Path) -> list[str]:
    """Returns the checkpoint folders (DeepSpeed also writes `latest` and zero_to_fp32.py beside them), oldest first."""
    return [path.name for _, path in reversed(ckpt.tags_by_step(checkpoints))]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.mark.slow
def test_save_final_interrupted_writes_the_model_so_far(tmp_path, capfd):
    """SIGINT under --save final: no checkpoint (the disk check counted none), the model as trained so far in
    final/, and zero-run says a new run starts over (a --save final run that finishes: the last resume of the test
    above). The signal is sent once the CSV monitor has logged 3 steps."""
    import os
    import signal
    import threading
    import time

    out = tmp_path / "run"
    csv = out / "logs" / "zero-run" / "Train_Steps_train_loss.csv"

    def interrupt_after_three_steps():
        deadline = time.time() + 240
        while time.time() < deadline:
            if csv.exists() and len(csv.read_text().splitlines()) >= 4:  # header + 3 steps
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_after_three_steps, daemon=True).start()
    rc, out = run_plan(tmp_path, "--save", "final", "--report-to", "csv", max_steps=5000)
    assert rc == 130
    report = json.loads((out / "run_report.json").read_text())
    assert report["status"] == "interrupted" and 3 <= report["steps"] < 5000
    assert not (out / ckpt.CHECKPOINTS_DIR).exists()
    assert {"model.safetensors", "config.json"} <= set(files_under(out / "final"))
    err = capfd.readouterr().err
    assert f"the model as trained so far is in {out / 'final'}" in err and "continue with" not in err
    # The CSV monitor logged every step the report has, with the same losses.
    rows = [line.split(",") for line in csv.read_text().splitlines()[1:]]
    assert [float(loss) for _, loss in rows] == pytest.approx(report["losses"], rel=1e-6)

"""Nothing lost, whatever happens (issue 63): faults and bad plan files on CPU, two ranks under the real `deepspeed`
launcher (DS_ACCELERATOR=cpu, gloo), each faulted run resumed and compared step by step with a clean run of the same
plan. The disk-full cases fill a small tmpfs (mounted where this process may mount one, skipped elsewhere).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import make_plan, shared_once

from zero_planner.launch import main
from zero_planner.planfile import save_plan
from zero_planner.run import checkpoint as ckpt
from zero_planner.run import faults
from zero_planner.run import lock

STEPS = 6


def write_plan(path: Path, out: Path, **kw) -> Path:
    kw.setdefault("max_steps", STEPS)
    kw.setdefault("save_every", 2)
    save_plan(make_plan("2", output_dir=str(out), **kw), path)
    return path


def report_of(out: Path) -> dict:
    return json.loads((out / "run_report.json").read_text())


def losses_of(out: Path) -> list[float]:
    return report_of(out)["losses"]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """The plan run straight through STEPS steps: (plan path, its losses, its output folder), run once for both
    groups of this file (shared_once). Tests that damage a finished run damage a copy of this folder
    (copy_of_clean) rather than train again; nothing writes to the folder itself."""

    def build(root: Path) -> list:
        plan = write_plan(root / "plan.json", root / "run")
        assert main([str(plan)]) == 0
        assert not (root / "run" / lock.LOCK_NAME).exists()  # released: a copy is a finished run's folder
        return [str(plan), losses_of(root / "run"), str(root / "run")]

    plan, losses, out = shared_once(tmp_path_factory, "faults-clean-run", build)
    return Path(plan), losses, Path(out)


def copy_of_clean(clean_run, where: Path) -> Path:
    """Returns a copy of the clean run's output folder at `where`: checkpoints step4 and step6 (limit 2), final/."""
    shutil.copytree(clean_run[2], where, symlinks=True)
    return where


def when(condition, then, timeout_s: float = 240.0, poll_s: float = 0.02) -> threading.Thread:
    """Runs `then()` in a thread as soon as `condition()` holds (polled every `poll_s`)."""

    def watch():
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if condition():
                then()
                return
            time.sleep(poll_s)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def marked(out: Path, step: int) -> bool:
    return (out / ckpt.CHECKPOINTS_DIR / ckpt.tag_for(step) / ckpt.MARKER).exists()


def rank_pids() -> list[int]:
    """Returns the pids of this test's training ranks (children of the launcher children of this process)."""
    import psutil

    return [p.pid for p in psutil.Process().children(recursive=True)
            if any("zero_planner.train" in part for part in p.cmdline()) and "--local_rank=1" in p.cmdline()]  # fmt: skip


def assert_loads(final: Path) -> None:
    from transformers import AutoModelForCausalLM

    assert ckpt.export_problem(final) is None
    AutoModelForCausalLM.from_pretrained(final)


# --- the final export (the slow cases are in the classes at the end) ---


def damage_export(final: Path, damage: str) -> None:
    if damage == "config-emptied":
        (final / "config.json").write_text("")  # what a disk full during the old, in-place export left
    elif damage == "folder-emptied":
        for path in final.iterdir():
            path.unlink()
    else:
        shutil.rmtree(final)


@pytest.mark.parametrize("damage", ["config-emptied", "folder-emptied", "folder-removed"])
def test_a_damaged_export_is_not_taken_for_a_finished_one(tmp_path, damage):
    """What --resume reads to decide that the export must be written again (the slow test below runs it)."""
    from safetensors.torch import save_file
    import torch

    final = tmp_path / "final"
    staging = ckpt.start_export(final)
    save_file({"w": torch.zeros(4, 4)}, str(staging / "model.safetensors"))
    (staging / "config.json").write_text("{}")
    ckpt.finish_export(staging, final, {"step": STEPS})
    assert ckpt.export_problem(final) is None
    damage_export(final, damage)
    assert ckpt.export_problem(final) is not None


# --- two runs, one folder ---


def test_a_stale_lock_is_taken_over_with_a_word(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    import socket

    (folder / lock.LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": 0}))
    said = []
    held = lock.acquire(folder, command=["zero-run", "p.json"], say=said.append)
    assert said and "taking over the stale lock" in said[0] and "its process is gone" in said[0]
    with pytest.raises(Exception, match="in use by another zero-run"):
        lock.acquire(folder, command=["zero-run", "p.json"])
    held.release()
    assert not (folder / lock.LOCK_NAME).exists()


def test_a_lock_from_another_host_is_respected_until_its_heartbeat_stops(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / lock.LOCK_NAME
    path.write_text(json.dumps({"pid": 1, "host": "other-host", "started": time.time()}))
    with pytest.raises(Exception, match="pid 1 on other-host"):
        lock.acquire(folder, command=["zero-run"])
    old = time.time() - lock.STALE_AFTER_S - 10
    os.utime(path, (old, old))
    said = []
    lock.acquire(folder, command=["zero-run"], say=said.append).release()
    assert "no heartbeat from other-host" in said[0]


# --- the disk fills ---


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs under tmp_path (skipped where this process cannot mount one)."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()[:80]})")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def disk_bytes(folder: Path) -> int:
    """Returns the bytes the files under `folder` take on disk (blocks, as a file system counts them)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def fill(folder: Path, leave_bytes: int) -> None:
    """Fills the file system of `folder` until `leave_bytes` are free."""
    free = shutil.disk_usage(folder).free
    with open(folder / "filler", "wb") as f:
        f.truncate(0)
        os.posix_fallocate(f.fileno(), 0, max(free - leave_bytes, 0))


def test_a_full_disk_while_writing_run_report_keeps_the_previous_report_and_says_so(small_disk):
    """run_report.json is written beside and renamed (write_json_atomic): on a full disk the write fails with the
    previous report whole and no temp file left, and the rank's fault is one line naming the report and the room."""
    out = small_disk / "run"
    out.mkdir()
    previous = {"status": "ok", "losses": [1.0, 0.5]}
    ckpt.write_json_atomic(out / "run_report.json", previous)
    fill(small_disk, 0)
    big = {"step_times_s": [0.123456789] * 100_000}  # more than the blocks a full tmpfs has left
    with pytest.raises(OSError) as raised:
        ckpt.write_json_atomic(out / "run_report.json", big)
    assert report_of(out) == previous
    assert sorted(p.name for p in out.iterdir()) == ["run_report.json"]
    kind, message = faults.classify(raised.value, phase="report", step=6, output_dir=out, rank=0)
    assert kind == "disk-full" and "filled while writing run_report.json at step 6" in message
    (small_disk / "filler").unlink()
    mount = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True)
    if mount.returncode == 0:  # the same write on a folder turned read-only is told apart from a full disk
        try:
            with pytest.raises(OSError) as raised:
                ckpt.write_json_atomic(out / "run_report.json", big)
            kind, message = faults.classify(raised.value, phase="report", step=6, output_dir=out, rank=0)
            assert kind == "read-only" and "could not write while writing run_report.json" in message
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], capture_output=True)


def test_a_rank_leaves_the_fault_line_to_zero_run_only_when_it_recorded_it(tmp_path, monkeypatch):
    monkeypatch.delenv(faults.FAULT_DIR_ENV, raising=False)
    assert faults.record_fault(tmp_path, rank=1, kind="disk-full", message="m", phase="save", step=2)
    assert not faults.zero_run_reports(True)  # another launcher: the rank's own line is the record
    monkeypatch.setenv(faults.FAULT_DIR_ENV, str(tmp_path))
    assert faults.zero_run_reports(True) and not faults.zero_run_reports(False)
    assert faults.read_fault(tmp_path)["message"] == "m"
    # An output folder that cannot take the record: it lands in zero-run's own folder; neither: the rank must speak.
    assert faults.record_fault(tmp_path / "missing", rank=2, kind="read-only", message="m2", phase="save", step=2)
    assert (tmp_path / f"{faults.FAULT_PREFIX}2.json").exists()
    monkeypatch.setenv(faults.FAULT_DIR_ENV, str(tmp_path / "also-missing"))
    assert not faults.record_fault(tmp_path / "missing", rank=3, kind="read-only", message="m", phase="save", step=2)


def test_a_read_only_output_folder_is_refused_before_launch(tmp_path, capsys, monkeypatch):
    from zero_planner.run import preflight

    plan = write_plan(tmp_path / "plan.json", tmp_path / "run")
    monkeypatch.setattr(preflight, "write_problem", lambda folder: f"{folder} is on a read-only file system")
    assert main([str(plan)]) == 2
    err = capsys.readouterr().err
    assert "nothing can be written under" in err and "read-only file system" in err and "this run writes" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a folder without write permission")
def test_a_folder_without_write_permission_is_told_from_a_full_one(tmp_path):
    from zero_planner.run.preflight import write_problem

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert "not writable" in write_problem(folder / "run")
    finally:
        folder.chmod(0o700)


# --- the plan file as input ---


def edited_plan(tmp_path: Path, edit) -> Path:
    path = write_plan(tmp_path / "plan.json", tmp_path / "run")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def _set(keys: str, value):
    def edit(data):
        *parents, last = keys.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


@pytest.mark.parametrize(
    "edit, expected",
    [
        (_set("deepspeed_config.zero_optimization.stage", 7), "deepspeed_config.zero_optimization.stage is 7"),
        (_set("training.micro_batch_size", -1), "training.micro_batch_size"),
        (_set("training.lerning_rate", 1e-4), "unknown key training.lerning_rate (did you mean 'learning_rate'?)"),
        (_set("strategy.offlaod_optimizer", "cpu"), "did you mean 'offload_optimizer'?"),
        (_set("training.lora", {"r": 8, "alhpa": 16}), "unknown key training.lora.alhpa (did you mean 'alpha'?)"),
        (_set("deepspeed_config.train_micro_batch_size_per_gpu", 3), "train_micro_batch_size_per_gpu is 3 but"),
    ],
    ids=["stage-7", "micro-batch--1", "typo", "typo-strategy", "typo-lora", "disagreeing-micro-batch"],
)
def test_a_bad_plan_file_is_refused_before_launch(tmp_path, capsys, edit, expected):
    path = edited_plan(tmp_path, edit)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing launched, nothing written


def test_deepspeeds_own_parser_refuses_what_the_plan_models_cannot_see(tmp_path, capsys):
    """A value only DeepSpeed's config model knows is wrong (a negative bucket size), found before any rank starts."""
    path = edited_plan(tmp_path, _set("deepspeed_config.zero_optimization.reduce_bucket_size", -5))
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "deepspeed_config is invalid" in err and "reduce_bucket_size" in err and "Traceback" not in err


def test_resume_with_nothing_to_resume_stops(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", tmp_path / "run")
    assert main([str(plan), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "no complete checkpoint under" in err and "drop --resume to start from step 0" in err


def test_resume_if_any_starts_over_or_continues(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.json", tmp_path / "run")
    assert main([str(plan), "--resume-if-any", "--dry-run"]) == 0
    assert "--resume" not in capsys.readouterr().out  # nothing to resume: the run starts from step 0
    tag = tmp_path / "run" / ckpt.CHECKPOINTS_DIR / ckpt.tag_for(2)
    tag.mkdir(parents=True)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"x")
    ckpt.write_marker(tag, {"step": 2, "losses": [1.0, 1.0], "world_size": 2})
    assert main([str(plan), "--resume-if-any", "--dry-run"]) == 0
    assert "--resume" in capsys.readouterr().out
    assert main([str(plan), "--resume-if-any", "--resume"]) == 2


# --- the slow cases: two classes, two units of work for pytest-xdist (--dist loadscope), one clean run ---


class TestExportAndFolder:
    """The final export lost, cut or killed, a second run on the folder, a checkpoint damaged later."""

    @pytest.mark.slow
    @pytest.mark.parametrize("damage", ["config-emptied", "folder-removed"])  # the folder there, or not
    def test_a_lost_export_is_written_again_by_resume(self, clean_run, tmp_path, damage, capfd):
        plan, clean, _ = clean_run
        out = copy_of_clean(clean_run, tmp_path / "run")
        final = out / "final"
        damage_export(final, damage)
        capfd.readouterr()
        assert main([str(plan), "--output-dir", str(out), "--resume"]) == 0
        captured = capfd.readouterr()
        assert "exporting again" in captured.out
        assert_loads(final)
        assert losses_of(out) == pytest.approx(clean, abs=1e-5)

    @pytest.mark.slow
    def test_a_rank_killed_during_the_export_loses_nothing(self, clean_run, tmp_path, capfd, monkeypatch):
        plan, clean, _ = clean_run
        out = tmp_path / "run"
        # Rank 0 SIGKILLs itself once the first weights file of the export is written (run/faults.py KILL_AT_ENV):
        # the export of llama-tiny takes tens of milliseconds, which a watcher polling from here missed when the
        # machine was busy.
        monkeypatch.setenv(faults.KILL_AT_ENV, "export")
        rc = main([str(plan), "--output-dir", str(out)])
        monkeypatch.delenv(faults.KILL_AT_ENV)
        captured = capfd.readouterr()
        staged = ckpt.staging_dir(out / "final")
        assert (staged / "model.safetensors").exists() and not (out / "final").exists()  # killed mid-export
        assert rc != 0
        assert not (out / "final").exists() or ckpt.export_problem(out / "final") is None  # never half an export
        # Rank 0 says nothing (killed); rank 1, if the launcher has not stopped it first, lost its peer at the barrier.
        line = [ln for ln in captured.err.splitlines() if ln.startswith("zero-run: ") and "--resume" in ln][-1]
        assert "a rank failed" in line or "lost contact with another rank" in line
        assert f"checkpoints intact up to step {STEPS}" in line and "--resume" in line and str(out) in line
        assert main([str(plan), "--output-dir", str(out), "--resume"]) == 0
        assert_loads(out / "final")
        assert losses_of(out) == pytest.approx(clean, abs=1e-5)

    @pytest.mark.slow
    def test_a_second_run_on_the_same_folder_is_refused(self, clean_run, tmp_path, capfd):
        plan, clean, _ = clean_run
        out = tmp_path / "run"
        second = {}

        def start_second():
            second["rc"] = subprocess.run(["zero-run", str(plan), "--output-dir", str(out), "--lr", "1e-4"],
                                          capture_output=True, text=True)  # fmt: skip

        when(lambda: (out / lock.LOCK_NAME).exists(), start_second)
        rc = main([str(plan), "--output-dir", str(out)])
        deadline = time.time() + 120
        while "rc" not in second and time.time() < deadline:
            time.sleep(0.1)
        assert rc == 0
        refused = second["rc"]
        assert refused.returncode == 2
        assert "is in use by another zero-run: pid" in refused.stderr and str(os.getpid()) in refused.stderr
        assert "Traceback" not in refused.stderr
        assert losses_of(out) == pytest.approx(clean, abs=1e-5)  # the first run's, untouched
        assert not (out / lock.LOCK_NAME).exists()  # released at the end

    @pytest.mark.slow
    def test_same_size_corruption_is_never_resumed_from(self, clean_run, tmp_path, capfd):
        plan, clean, _ = clean_run
        out = copy_of_clean(clean_run, tmp_path / "run")
        newest = out / ckpt.CHECKPOINTS_DIR / ckpt.tag_for(STEPS)
        model = next(newest.glob("*model_states.pt"))
        data = bytearray(model.read_bytes())
        middle = len(data) // 2
        data[middle : middle + 4096] = bytes(b ^ 0xFF for b in data[middle : middle + 4096])  # same size, other bytes
        model.write_bytes(bytes(data))
        capfd.readouterr()
        assert main([str(plan), "--output-dir", str(out), "--resume"]) == 0
        captured = capfd.readouterr()
        assert f"step{STEPS} is corrupt" in captured.out and "checksum differs" in captured.out
        assert "resumed from" in captured.out and f"step{STEPS - 2}" in captured.out
        assert losses_of(out) == pytest.approx(clean, abs=1e-5)

    @pytest.mark.slow
    def test_a_folder_turning_read_only_mid_run_keeps_the_checkpoints_and_resumes(self, clean_run, small_disk):
        # The small disk remounted read-only once step 2 is saved (what a file system does after an I/O error, or
        # an admin's remount): the save of step 4 fails. torch's writer raises RuntimeError there, not OSError, so
        # the rank tells a read-only folder by the state of the disk (faults.classify).
        plan, clean, _ = clean_run
        out = small_disk / "run"

        def remount(mode: str) -> None:
            done = subprocess.run(["mount", "-o", f"remount,{mode}", str(small_disk)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr

        def zero_run(*args: str) -> subprocess.CompletedProcess:  # its own process, as a user runs it
            return subprocess.run([sys.executable, "-m", "zero_planner.launch", *args], capture_output=True,
                                  text=True, timeout=300)  # fmt: skip

        when(lambda: marked(out, 2), lambda: remount("ro"))
        faulted = zero_run(str(plan), "--output-dir", str(out))
        remount("rw")
        assert faulted.returncode != 0
        lines = [ln for ln in faulted.stderr.splitlines() if ln.startswith("zero-run: ") and "continue with: " in ln]
        assert lines, faulted.stderr[-2000:]
        assert "could not write while saving the checkpoint at step 4" in lines[-1]
        assert "read-only" in lines[-1] and "checkpoints intact up to step 2" in lines[-1]
        assert faulted.stderr.count("could not write while") == 1  # zero-run's line, not one per rank besides
        assert "Traceback" not in faulted.stderr
        assert ckpt.problem(out / ckpt.CHECKPOINTS_DIR / ckpt.tag_for(2)) is None
        assert not marked(out, 4) and not (out / "final").exists()
        # The read-only folder kept the run's lock (it could not be removed). The printed command, run as a user
        # runs it (a new process), takes the lock over as stale, with a word, and continues from step 2.
        argv = shlex.split(lines[-1].split("continue with: ")[-1].strip())
        assert argv[:3] == ["zero-run", str(plan), "--resume"] and str(out) in argv
        resumed = zero_run(*argv[1:])
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert "stale" in resumed.stderr + resumed.stdout and "resumed from" in resumed.stdout
        assert_loads(out / "final")
        assert losses_of(out) == pytest.approx(clean, abs=1e-5)


class TestRankDiskAndInterrupt:
    """A rank killed, the disk full at a save or the export, Ctrl-C and the command it prints."""

    @pytest.mark.slow
    def test_a_killed_rank_ends_in_one_line_and_the_resume_matches(self, clean_run, tmp_path, capfd):
        plan, clean, _ = clean_run
        out = tmp_path / "run"
        slow = write_plan(tmp_path / "plan.json", out, max_steps=STEPS)

        def kill_rank1():
            for pid in rank_pids():
                os.kill(pid, signal.SIGKILL)

        when(lambda: marked(out, 2), kill_rank1)
        rc = main([str(slow), "--lr", "3e-3"])
        captured = capfd.readouterr()
        assert rc != 0
        lines = [ln for ln in captured.err.splitlines() if ln.startswith("zero-run: ") and "--resume" in ln]
        assert lines, captured.err[-2000:]
        assert "checkpoints intact up to step" in lines[-1] and f"zero-run {slow} --resume --lr 0.003" in lines[-1]
        assert "Traceback" not in captured.err  # the peer that lost rank 1 says so in one line
        assert main([str(slow), "--resume"]) == 0
        assert losses_of(out) == pytest.approx(clean, abs=1e-5)

    @pytest.mark.slow
    @pytest.mark.parametrize("when_full", ["save", "export"])
    def test_disk_full_keeps_the_checkpoints_and_says_what_is_needed(self, clean_run, tmp_path, small_disk, capfd,
                                                                     when_full):
        plan, clean, _ = clean_run
        out = small_disk / "run"
        if when_full == "save":
            # Full once step 2 is saved: the save of step 4 fails.
            step = 2
            when(lambda: marked(out, 2), lambda: fill(small_disk, 64 * 1024))
        else:
            # Once step 4 is saved, room for one more checkpoint (no pruning: limit 10) and not for the export after it.
            step = STEPS
            plan = write_plan(tmp_path / "plan-keep.json", out, save_total_limit=10)

            def leave_room_for_one_checkpoint():
                fill(small_disk, disk_bytes(out / ckpt.CHECKPOINTS_DIR / "step4") + 2**19)

            when(lambda: marked(out, 4), leave_room_for_one_checkpoint)
        rc = main([str(plan), "--output-dir", str(out)])
        captured = capfd.readouterr()
        assert rc != 0
        line = [ln for ln in captured.err.splitlines() if "filled while" in ln][-1]
        what = "saving the checkpoint" if when_full == "save" else "exporting the model"
        assert what in line and f"checkpoints intact up to step {step}" in line and "--resume" in line
        if when_full == "save":
            assert "the next save needs about" in line
        assert "Traceback" not in captured.err
        assert ckpt.problem(out / ckpt.CHECKPOINTS_DIR / ckpt.tag_for(step)) is None
        assert not (out / "final").exists()  # no half export in its place
        (small_disk / "filler").unlink()
        assert main([str(plan), "--output-dir", str(out), "--resume"]) == 0
        assert_loads(out / "final")
        assert losses_of(out) == pytest.approx(clean, abs=1e-5)

    @pytest.mark.slow
    def test_ctrl_c_saves_and_the_printed_command_resumes_past_a_damaged_checkpoint(self, clean_run, tmp_path, capfd):
        """Interrupted (SIGINT, as a terminal's Ctrl-C) with --output-dir and an override, zero-run saves a checkpoint,
        exports nothing and prints a command. The newest checkpoint is then cut short (its optimizer file truncated):
        run as printed, the command warns, continues from the one before it in that folder (not from step 0 in the
        plan's own folder) with the same override, and replays the clean run's losses."""
        import shlex

        plan, clean, _ = clean_run
        out = tmp_path / "elsewhere"
        long = write_plan(tmp_path / "plan.json", tmp_path / "plan-dir", max_steps=5000)
        when(lambda: marked(out, 4), lambda: os.kill(os.getpid(), signal.SIGINT))  # two checkpoints by then
        assert main([str(long), "--output-dir", str(out), "--seed", "1234"]) == 130
        err = capfd.readouterr().err
        assert "sigkill_handler" not in err and "[ERROR]" not in err  # issue 59: the launcher took the stop for a fault
        interrupted = report_of(out)
        stopped = interrupted["steps"]
        assert interrupted["status"] == "interrupted" and 4 <= stopped < 5000
        (_, newest), (_, previous) = ckpt.tags_by_step(out / ckpt.CHECKPOINTS_DIR)[:2]
        assert newest.name == ckpt.tag_for(stopped) and ckpt.problem(newest) is None  # saved on the way out
        assert not (out / "final").exists()
        command = err.split("continue with ")[-1].strip().splitlines()[0]
        argv = shlex.split(command)
        assert argv[:3] == ["zero-run", str(long), "--resume"] and "--output-dir" in argv and "--seed" in argv

        optim = next(newest.glob("*optim_states.pt"))
        optim.write_bytes(optim.read_bytes()[:100])
        target = max(STEPS, stopped)
        assert main([*argv[1:], "--max-steps", str(target)]) == 0
        captured = capfd.readouterr()
        assert f"{newest.name} is corrupt" in captured.out + captured.err
        assert f"resumed from {previous}" in captured.out
        assert not (tmp_path / "plan-dir").exists()
        resumed = losses_of(out)
        assert len(resumed) == target and resumed[:stopped] == pytest.approx(interrupted["losses"], abs=1e-5)
        assert resumed[:STEPS] == pytest.approx(clean, abs=1e-5)

"""--probe: ranking, OOM step-down, the probed plan file and the commands' options, with the runner injected;
one slow test probes two llama-tiny candidates for real on two CPU ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import GIB, heavy_modules_after, make_candidate, make_plan

from zero_planner import launch
from zero_planner import probe as probe_ranks
from zero_planner.planfile import load_plan, save_plan
from zero_planner.run import launcher, preflight, probe
from zero_planner.run.probe import RunOutcome
from zero_planner.strategies import STRATEGY_FAMILIES

# Candidates as the planner would rank them: 2 chosen (fastest predicted), then 3, then 1; 0 does not fit.
CANDIDATES = [
    make_candidate("0", micro_batch_size=8, checkpointing=False, fits=False, peak_bytes=20 * GIB, tokens_per_second=0),
    make_candidate("1", micro_batch_size=4, checkpointing=True, fits=True, peak_bytes=6 * GIB, tokens_per_second=500),
    make_candidate("2", micro_batch_size=8, checkpointing=False, fits=True, peak_bytes=9 * GIB,
                   tokens_per_second=900, chosen=True),
    make_candidate("3", micro_batch_size=8, checkpointing=False, fits=True, peak_bytes=7 * GIB, tokens_per_second=800),
]  # fmt: skip


def probe_plan(**kw):
    """A GPU plan: the ranking by predicted tokens/s is under test, and CPU plans carry none (issue 16)."""
    kw.setdefault("micro_batch_size", 8)
    kw.setdefault("gpu", "H100")
    return make_plan("2", candidates=[dict(c) for c in CANDIDATES], **kw)


class FakeRunner:
    """Measures nothing: answers from a table {(strategy, micro): outcome}, default ok at `tps[strategy]`."""

    def __init__(self, outcomes=None, tps=None):
        self.outcomes, self.tps, self.calls = outcomes or {}, tps or {}, []

    def __call__(self, plan):
        key = (plan.strategy.name, plan.training.micro_batch_size)
        self.calls.append((key, plan))
        outcome = self.outcomes.get(key) or self.outcomes.get(plan.strategy.name)
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome is not None:
            return outcome
        return RunOutcome("ok", tokens_per_second=self.tps.get(plan.strategy.name, 100.0), host_rss_bytes=GIB,
                          peak_allocated_bytes=2 * GIB, warmup_steps=2, device="fake")  # fmt: skip


def test_fitting_candidates_in_the_planners_order():
    assert probe.ranked_candidates(probe_plan()) == [2, 3, 1]


# Seven strategies x checkpointing, as a CPU plan ranks them (no tokens/s: by strategy order, checkpointing off
# first): the probe of issue 25 took 0, 1 and 2 without checkpointing, three ties of one family.
EVERY_STRATEGY = [make_candidate(name, micro_batch_size=4, checkpointing=ckpt, fits=True, peak_bytes=GIB,
                                 tokens_per_second=None, chosen=(name, ckpt) == ("0", False))
                  for name in ("0", "1", "2", "2-offload", "3", "3-offload", "3-offload-all")
                  for ckpt in (False, True)]  # fmt: skip


def _kinds(plan, order):
    return [(STRATEGY_FAMILIES[plan.candidates[i].strategy.name], plan.candidates[i].gradient_checkpointing) for i in order]


def test_probe_takes_one_candidate_per_family_and_checkpointing():
    plan = make_plan("0", candidates=[dict(c) for c in EVERY_STRATEGY])
    order = probe.probe_order(plan, 3)
    assert [(plan.candidates[i].strategy.name, plan.candidates[i].gradient_checkpointing) for i in order] == [
        ("0", False), ("0", True), ("2-offload", False)]  # fmt: skip
    every = probe.probe_order(plan, 14)
    kinds = _kinds(plan, every)
    assert len(set(kinds[:8])) == 8  # 4 families x checkpointing first: each kind once
    assert sorted(every) == list(range(14))  # then the rest of the ranking, each candidate once
    assert every[8:] == [i for i in probe.ranked_candidates(plan) if i not in every[:8]]


def test_probe_takes_the_fastest_predicted_of_each_kind():
    """Among one kind, the fastest predicted; kinds in order of their fastest member."""
    tps = {("0", False): 900, ("1", False): 950, ("2", False): 940, ("3", False): 700, ("3", True): 500,
           ("2-offload", False): 300, ("1", True): 800}  # fmt: skip
    candidates = [make_candidate(name, micro_batch_size=4, checkpointing=ckpt, fits=True, peak_bytes=GIB,
                                 tokens_per_second=speed, chosen=(name, ckpt) == ("1", False))
                  for (name, ckpt), speed in tps.items()]  # fmt: skip
    plan = make_plan("1", gpu="H100", candidates=[dict(c) for c in candidates])
    order = probe.probe_order(plan, 4)
    names = [(plan.candidates[i].strategy.name, plan.candidates[i].gradient_checkpointing) for i in order]
    assert names == [("1", False), ("1", True), ("3", False), ("3", True)]
    text = probe.selection_text(plan, 4, 6)
    assert text.startswith("probe: running 4 of 7 fitting candidates, 6 steps each (2 warm-up): the fastest "
                           "predicted of each strategy family")  # fmt: skip
    assert "fill the rest" not in text
    assert "5 such kinds fit, the next fastest fill the rest" in probe.selection_text(plan, 7, 6)


def test_oom_steps_the_micro_batch_down_and_failures_do_not_stop_the_probe():
    runner = FakeRunner({("2", 8): RunOutcome("oom", message="CUDA out of memory"),
                         ("2", 4): RunOutcome("oom", message="CUDA out of memory"),
                         "3": RunOutcome("error", message="launcher exit status 1: boom")},
                        tps={"2": 300.0, "1": 400.0})  # fmt: skip
    lines = []
    run = probe.run_probe(probe_plan(), 3, runner, steps=6, emit=lines.append)
    assert [key for key, _ in runner.calls] == [("2", 8), ("2", 4), ("2", 2), ("3", 8), ("1", 4)]
    r2, r3, r1 = run.results[2], run.results[3], run.results[1]
    assert (r2.status, r2.micro_batch_size, [a.micro_batch_size for a in r2.attempts]) == ("ok", 2, [8, 4, 2])
    assert (r3.status, r3.rank, r3.tokens_per_second) == ("error", None, None)
    assert (r1.rank, r2.rank) == (1, 2)  # measured: stage 1 at 400 tokens/s beats stage 2 at 300
    assert probe.fastest(run) == 1 and run.order == [2, 3, 1]
    assert lines[0] == "probe 1/3: stage 2, ckpt off, micro-batch 8: oom, retrying at micro-batch 4"
    assert lines[2].startswith("probe 1/3: stage 2, ckpt off, micro-batch 2: ok  300 tokens/s  peak 2.00 GiB")
    assert lines[3] == "probe 2/3: stage 3, ckpt off, micro-batch 8: error (launcher exit status 1: boom)"


def test_oom_at_micro_batch_one_is_final():
    runner = FakeRunner({"1": RunOutcome("oom", message="CUDA out of memory")})
    plan = probe_plan()
    plan.candidates[1].micro_batch_size = 3
    run = probe.run_probe(plan, 3, runner, steps=6, emit=lambda line: None)
    assert [a.micro_batch_size for a in run.results[1].attempts] == [3, 1]
    assert run.results[1].status == "oom" and run.results[1].rank is None


def test_candidate_plan_builds_each_candidates_deepspeed_json():
    plan = probe_plan(learning_rate=1e-3, gradient_accumulation_steps=2)  # a global batch of 8 x 2 x 2 = 32
    same = probe.candidate_plan(plan, 2, 4)  # the plan's own strategy: its JSON, batch keys changed
    assert same.deepspeed_config == {**plan.deepspeed_config, "train_micro_batch_size_per_gpu": 4,
                                     "gradient_accumulation_steps": 4, "train_batch_size": 32}  # fmt: skip
    other = probe.candidate_plan(plan, 3)
    zero = other.deepspeed_config["zero_optimization"]
    assert zero["stage"] == 3 and "stage3_prefetch_bucket_size" in zero
    assert other.deepspeed_config["optimizer"]["params"]["lr"] == 1e-3  # the plan's hyper-parameters kept
    t = other.training
    assert (other.strategy.name, t.micro_batch_size, t.gradient_accumulation_steps) == ("3", 8, 2)
    assert other.estimate == plan.candidates[3].estimate
    assert [c.chosen for c in other.candidates] == [False, False, False, True]
    ckpt = probe.candidate_plan(plan, 1)
    assert ckpt.training.gradient_checkpointing and ckpt.deepspeed_config["zero_optimization"]["stage"] == 1
    assert probe.accumulation_for(probe_plan(), 2) == 1  # no global batch asked for: none kept


def test_probed_plan_is_written_beside_the_plan_and_runs_the_fastest(plan_file):
    path = plan_file(gpu="H100", micro_batch_size=8, candidates=[dict(c) for c in CANDIDATES])
    before = path.read_bytes()
    runner = FakeRunner({("3", 8): RunOutcome("oom", message="OutOfMemoryError")}, tps={"2": 300.0, "3": 700.0})
    result, out, run = probe.probe_and_write(path, 2, runner=runner, steps=6)
    assert out == path.with_name("plan.probed.json") and path.read_bytes() == before
    written = load_plan(out)
    assert written == result
    assert written.probe.chosen == 3 and written.probe.planned == 2 and written.probe.probed == [2, 3]
    assert written.probe.complete and written.probe.device == "fake"
    assert written.strategy.name == "3" and written.training.micro_batch_size == 4
    assert written.deepspeed_config["train_micro_batch_size_per_gpu"] == 4
    assert [c.chosen for c in written.candidates] == [False, False, False, True]
    assert written.candidates[1].probe is None  # not probed: no record
    assert written.launch.command[-2:] == ["--plan", str(out)]
    assert written.probe.reason == ("stage 3, ckpt off, micro-batch 4: 700 tokens/s measured, 2.33x the planner's "
                                    "choice (stage 2, ckpt off, micro-batch 8: 300)")  # fmt: skip
    assert any("after an out-of-memory at 8" in note for note in written.notes)
    # Plans nobody probed are written as before: no probe keys.
    assert "probe" not in json.loads(path.read_text()) and "probe" not in json.loads(path.read_text())["candidates"][0]


def test_when_nothing_runs_the_analytic_plan_stays(plan_file):
    path = plan_file(gpu="H100", micro_batch_size=8, candidates=[dict(c) for c in CANDIDATES])
    runner = FakeRunner({"2": RunOutcome("error", message="x"), "3": RunOutcome("skipped", message="no GPU")})
    result, _, _ = probe.probe_and_write(path, 2, runner=runner, steps=6)
    assert result.probe.chosen is None and result.strategy.name == "2" and result.candidates[2].chosen
    assert result.probe.reason.startswith("no candidate ran")


def test_ctrl_c_leaves_what_was_measured_written(plan_file):
    path = plan_file(gpu="H100", micro_batch_size=8, candidates=[dict(c) for c in CANDIDATES])
    runner = FakeRunner({"3": KeyboardInterrupt()}, tps={"2": 300.0})
    result, out, run = probe.probe_and_write(path, 3, runner=runner, steps=6)
    assert run.interrupted and [key for key, _ in runner.calls] == [("2", 8), ("3", 8)]
    written = load_plan(out)
    assert not written.probe.complete and written.probe.probed == [2, 3] and written.probe.chosen == 2
    assert written.candidates[3].probe.status == "interrupted" and written.candidates[1].probe is None
    assert written.probe.reason == (
        "stage 2, ckpt off, micro-batch 8: 300 tokens/s measured; the planner's choice, "
        "the only candidate that ran (Ctrl-C stopped the probe: not every candidate ran)"
    )


@pytest.mark.parametrize(
    "outcomes, tps, reason",
    [
        ({}, {"2": 900.0, "3": 600.0, "1": 300.0},
         "stage 2, ckpt off, micro-batch 8: 900 tokens/s measured; the planner's choice, 1.50x the next "
         "(stage 3, ckpt off, micro-batch 8: 600)"),
        ({"2": RunOutcome("oom")}, {"3": 600.0, "1": 300.0},
         "stage 3, ckpt off, micro-batch 8: 600 tokens/s measured; the fastest that ran (the planner's choice: oom), "
         "2.00x the next (stage 1, ckpt on, micro-batch 4: 300)"),
    ],
)  # fmt: skip
def test_why_the_chosen_one_wins(outcomes, tps, reason):
    run = probe.run_probe(probe_plan(), 3, FakeRunner(outcomes, tps), steps=6, emit=lambda line: None)
    assert probe.why_chosen(probe_plan(), run) == reason


def test_tokens_per_second_leaves_the_warm_up_steps_out():
    report = {"world_size": 2, "micro_batch_size": 5, "gradient_accumulation_steps": 1, "seq_len": 1000,
              "step_times_s": [9.0, 3.0, 2.0, 2.0, 2.0, 2.0]}  # 10,000 tokens per step
    assert probe.tokens_per_second_after(report, 2) == pytest.approx(10_000 / 2.0)
    assert probe.tokens_per_second_after(report, 1) == pytest.approx(10_000 * 5 / 11.0)
    assert probe.tokens_per_second_after(dict(report, step_times_s=[9.0, 3.0]), 2) is None  # nothing after them
    assert probe.tokens_per_second_after(dict(report, step_times_s=[]), 2) is None


def write_report(directory: Path, status: str = "ok", **fields) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    ranks = [
        {"rank": 0, "peak_allocated_bytes": 3 * GIB, "peak_reserved_bytes": 4 * GIB, "host_rss_bytes": GIB},
        {"rank": 1, "peak_allocated_bytes": 5 * GIB, "peak_reserved_bytes": 6 * GIB, "host_rss_bytes": 2 * GIB},
    ]
    report = {"status": status, "ranks": ranks, "tokens_per_second": 1234.0, "device": "NVIDIA H100",
              "versions": {"torch": "x"}, **fields}  # fmt: skip
    (directory / "run_report.json").write_text(json.dumps(report))


STEPS_RUN = {"world_size": 2, "micro_batch_size": 5, "gradient_accumulation_steps": 1, "seq_len": 1000,
             "step_times_s": [9, 3, 2, 2, 2, 2]}  # 10,000 tokens per step


@pytest.mark.parametrize(
    "rc, signals, log, files, expected",
    [
        (0, 0, "", "report-steps", ("ok", 5000.0, 5 * GIB, 2 * GIB, 2)),
        (0, 0, "", "report", ("ok", 1234.0, 5 * GIB, 2 * GIB, 1)),  # no step times: train's own figure
        (0, 0, "", "report-zero3", ("ok", 1234.0, 5 * GIB, 2 * GIB, 2)),  # ... after train's own warm-up
        (3, 0, "", "oom", ("oom", None, None, None, 0)),
        (1, 0, "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", "",
         ("oom", None, None, None, 0)),
        (1, 0, "Traceback\n  File \"x.py\"\nValueError: bad shape\nexiting\n", "", ("error", None, None, None, 0)),
        (0, 0, "", "", ("error", None, None, None, 0)),  # exit 0 but no report
        (130, 1, "", "", ("interrupted", None, None, None, 0)),
    ],
)
def test_outcome_of_a_launch(tmp_path, rc, signals, log, files, expected):
    if files == "report":
        write_report(tmp_path)
    elif files == "report-steps":
        write_report(tmp_path, **STEPS_RUN)
    elif files == "report-zero3":
        write_report(tmp_path, **dict(STEPS_RUN, step_times_s=[9, 3]), warmup_steps=2)
    elif files == "oom":
        (tmp_path / "oom_rank1.json").write_text(json.dumps({"message": "rank 1 ran out of GPU memory in backward"}))
    outcome = probe.outcome_of(rc, signals, log, tmp_path, warmup=2)
    got = (outcome.status, outcome.tokens_per_second, outcome.peak_allocated_bytes, outcome.host_rss_bytes,
           outcome.warmup_steps)  # fmt: skip
    assert got[0] == expected[0] and got[2:] == expected[2:]
    assert got[1] == pytest.approx(expected[1], rel=1e-3) if expected[1] else got[1] is None
    if files == "oom":
        assert outcome.message == "rank 1 ran out of GPU memory in backward"
    if "ValueError" in log:
        assert outcome.message == "launcher exit status 1: ValueError: bad shape"


def test_probe_rank_module_skips_what_train_writes():
    from dataclasses import fields

    from zero_planner.run import train

    # The run's own writers are train.py's writing functions; the probe's write nothing (and return None).
    assert [getattr(train.WRITES, f.name) for f in fields(train.Writers)] == [
        train._save, train._export, train._export_adapter, train._export_merged]
    assert all(getattr(train.NO_WRITES, f.name)(object(), step=1) is None for f in fields(train.Writers))
    assert heavy_modules_after("import zero_planner.probe, zero_planner.run.probe") == []


# --- the commands ---


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("value", ["0", "abc", "-2"])
def test_zero_run_bad_probe_count(plan_file, capsys, value):
    assert launch.main([str(plan_file()), "--probe", value]) == 2
    assert one_line_error(capsys) == (f"zero-run: error: --probe {value!r} is not a positive integer: the number of "
                                      f"candidates to run, e.g. --probe 3\n")  # fmt: skip


def test_zero_run_probe_refuses_resume_and_plans_without_candidates(plan_file, capsys):
    assert launch.main([str(plan_file(candidates=[dict(c) for c in CANDIDATES])), "--probe", "2", "--resume"]) == 2
    assert "--resume" in one_line_error(capsys)
    assert launch.main([str(plan_file("bare.json")), "--probe", "2"]) == 2
    assert "lists no candidate that fits" in one_line_error(capsys)
    assert launch.main([str(plan_file()), "--probe", "2", "--script", "missing.py"]) == 2
    assert one_line_error(capsys) == "zero-run: error: --script 'missing.py' does not exist\n"
    assert launch.main([str(plan_file()), "--probe", "2", "--max-steps", "0"]) == 2
    assert one_line_error(capsys) == "zero-run: error: --max-steps 0 must be at least 1\n"


def test_zero_run_probe_dry_run_lists_the_launches(plan_file, capsys):
    path = plan_file(gpu="H100", micro_batch_size=8, candidates=[dict(c) for c in CANDIDATES])
    assert launch.main([str(path), "--probe", "2", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("probe: running 2 of 3 fitting candidates, 6 steps each (2 warm-up): the fastest")
    assert lines[1].startswith("probe 1: stage 2, ckpt off, micro-batch 8: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True deepspeed")
    assert "--module zero_planner.probe --plan PROBE_DIR/plan.json" in lines[2] and "stage 3" in lines[2]


@pytest.fixture
def fake_launches(monkeypatch):
    """Replaces each probe launch with FakeRunner and the final training launch with a recorder."""
    runner = FakeRunner(tps={"2": 300.0, "3": 700.0, "1": 100.0})
    monkeypatch.setattr(probe, "LaunchRunner", lambda *a, **kw: runner)
    spawned = []
    monkeypatch.setattr(launcher, "spawn", lambda argv, env, **kw: spawned.append(argv) or (0, 0))
    machine = preflight.Machine(gpus=None, host_available_bytes=64 * GIB, disk_free_bytes=10**15)
    monkeypatch.setattr(preflight, "probe_machine", lambda plan, output_dir: machine)
    return runner, spawned


def test_zero_run_probe_then_trains_the_fastest(plan_file, fake_launches, capsys):
    runner, spawned = fake_launches
    path = plan_file(gpu="H100", micro_batch_size=8, candidates=[dict(c) for c in CANDIDATES])
    assert launch.main([str(path), "--probe", "2", "--max-steps", "7"]) == 0
    out = capsys.readouterr().out
    probed = path.with_name("plan.probed.json")
    assert "probe 2/2: stage 3, ckpt off, micro-batch 8: ok  700 tokens/s" in out
    assert "Chosen: stage 3, ckpt off, micro-batch 8: 700 tokens/s measured, 2.33x the planner's choice" in out
    assert len(spawned) == 1 and spawned[0][spawned[0].index("--module") + 1] == "zero_planner.train"
    assert spawned[0][-2:] == ["--max-steps", "7"]
    assert spawned[0][spawned[0].index("--plan") + 1] == str(probed.absolute())
    assert load_plan(probed).strategy.name == "3"


def test_zero_run_probe_only_does_not_train(plan_file, fake_launches, capsys):
    runner, spawned = fake_launches
    path = plan_file(gpu="H100", micro_batch_size=8, candidates=[dict(c) for c in CANDIDATES])
    assert launch.main([str(path), "--probe-only"]) == 0
    assert not spawned and len(runner.calls) == 3  # --probe-only alone: DEFAULT_PROBE_COUNT
    assert f"Train with it: zero-run {path.with_name('plan.probed.json')}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--gpus", "2xT4", "-o", "p.json", "--probe", "2"], "use --gpus auto or cpu:N, not '2xT4'"),
        (["--gpus", "cpu:2", "--probe", "2"], "give -o PLAN.json"),
        (["--gpus", "cpu:2", "-o", "p.json", "--probe", "2", "--json"], "without --json"),
        (["--gpus", "cpu:2", "-o", "p.json", "--probe", "0"], "argument --probe: must be a positive integer, got '0'"),
        (["--gpus", "cpu:2", "-o", "p.json", "--probe", "abc"], "must be a positive integer, got 'abc'"),
    ],
)
def test_zero_plan_bad_probe_input(tmp_path, monkeypatch, capsys, extra, message):
    from zero_planner.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["--model", "gpt2", *extra]) == 2
    err = one_line_error(capsys)
    assert err.startswith("zero-plan: error: ") and message in err
    assert not (tmp_path / "p.json").exists()


def test_zero_plan_probe_writes_the_probed_plan(tmp_path, fake_launches, capsys):
    from zero_planner.cli import main

    runner, spawned = fake_launches
    out = tmp_path / "plan.json"
    rc = main(["--model", "gpt2", "--gpus", "cpu:2", "--seq-len", "64", "--micro-batch", "2", "-o", str(out),
               "--probe", "2"])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0 and not spawned and len(runner.calls) == 2
    probed = load_plan(tmp_path / "plan.probed.json")
    planned = load_plan(out)
    assert probed.probe.probed == probe.probe_order(planned, 2)
    assert len(set(_kinds(planned, probed.probe.probed))) == 2  # two kinds of step, not two ties of one family
    assert probed.probe.planned == probe.ranked_candidates(planned)[0]
    assert "the fastest predicted of each strategy family" in " ".join(text.split())
    assert f"Run:  zero-run {tmp_path / 'plan.probed.json'}" in text


# --- for real: two candidates of llama-tiny on two CPU ranks ---


@pytest.mark.slow
def test_probes_two_tiny_candidates_on_two_cpu_ranks(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(probe, "PROBE_STEPS", 3)  # one timed step after the two warm-up steps
    candidates = [
        make_candidate("2", micro_batch_size=2, checkpointing=False, fits=True, peak_bytes=GIB,
                       tokens_per_second=900, chosen=True),
        make_candidate("3", micro_batch_size=2, checkpointing=True, fits=True, peak_bytes=GIB, tokens_per_second=800),
    ]  # fmt: skip
    user_output = tmp_path / "user-run"
    path = tmp_path / "plan.json"
    save_plan(make_plan("2", micro_batch_size=2, seq_len=32, output_dir=str(user_output), candidates=candidates), path)
    assert launch.main([str(path), "--probe", "2", "--probe-only"]) == 0
    out = capsys.readouterr().out
    probed = load_plan(tmp_path / "plan.probed.json")
    results = [probed.candidates[i].probe for i in (0, 1)]
    assert [r.status for r in results] == ["ok", "ok"], out
    assert sorted(r.rank for r in results) == [1, 2]
    for r in results:
        assert r.tokens_per_second > 0 and r.host_rss_bytes > 0 and r.peak_allocated_bytes is None
        assert r.steps == 3 and r.warmup_steps == 2
    best = probed.probe.chosen
    assert probed.strategy.name == ["2", "3"][best] and probed.training.gradient_checkpointing == (best == 1)
    assert probed.probe.device == "cpu" and probed.probe.versions["deepspeed"]
    assert "probe 1/2: stage 2, ckpt off, micro-batch 2: ok" in out and "probe 2/2: stage 3, ckpt on" in out
    # Nothing left behind: no probe folders, no checkpoints, the user's output_dir untouched.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "plan.probed.json"]


def test_probe_ranks_run_train_without_its_writes(monkeypatch):
    from zero_planner.run import train

    seen = {}
    monkeypatch.setattr(train, "main", lambda argv=None, *, writers=None: seen.update(writers=writers) or 0)
    monkeypatch.setattr(train, "_exit_cleanly", lambda code: seen.update(code=code))
    probe_ranks.rank_main()
    assert seen == {"writers": train.NO_WRITES, "code": 0}


def test_launch_failures_are_printed_as_they_are(plan_file, capsys):
    path = plan_file(gpu="H100", micro_batch_size=8, candidates=[dict(c) for c in CANDIDATES])
    runner = FakeRunner({"2": RunOutcome("error", message="[rank0]: RuntimeError: [x] failed"),
                         "3": FileNotFoundError(2, "No such file or directory", "deepspeed")})  # fmt: skip
    result, _, _ = probe.probe_and_write(path, 3, runner=runner, steps=6)
    out = capsys.readouterr().out
    assert "micro-batch 8: error ([rank0]: RuntimeError: [x] failed)" in out
    assert result.candidates[3].probe.message.startswith("could not launch: [Errno 2] No such file or directory")
    assert result.probe.chosen == 1  # the third candidate still ran


def test_probe_launches_get_a_parsable_cuda_arch_list(tmp_path, monkeypatch, capsys):
    """Seen on a lent H100 (TORCH_CUDA_ARCH_LIST=9.0a): zero-run fixed it for training, but every probe
    candidate failed with "invalid literal for int() with base 10: '0a'" in DeepSpeed's fused-Adam build."""
    plan = probe_plan()
    h100 = preflight.Machine(gpus=[("NVIDIA H100 80GB HBM3", 80 * GIB)] * plan.hardware.gpus_per_node,
                          host_available_bytes=100 * GIB, disk_free_bytes=100 * GIB, capabilities=[(9, 0)])  # fmt: skip
    monkeypatch.setattr(probe, "_machine", lambda *a, **kw: h100)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    seen = []
    monkeypatch.setattr(launcher, "spawn", lambda argv, env, **kw: (seen.append(env), (1, 0))[1])
    probe.LaunchRunner(workdir=tmp_path, steps=3)(plan)
    assert seen and seen[0]["TORCH_CUDA_ARCH_LIST"] == "9.0"
    assert "TORCH_CUDA_ARCH_LIST='9.0a'" in capsys.readouterr().err


def test_ranking_table_fits_100_columns(plan_file, monkeypatch):
    """The widest cells a probe writes (3-offload-all, a stepped-down micro-batch, 'interrupted', eight-digit
    tokens/s, three-digit GiB) still fit 100 columns, unabbreviated, as does the line saying what is probed. The
    progress lines and the verdict stay one line each, as long as their error messages (logs to grep)."""
    import io

    from rich.console import Console

    monkeypatch.delenv("COLUMNS", raising=False)
    candidates = [make_candidate(name, micro_batch_size=64, checkpointing=ckpt, fits=True, peak_bytes=123 * GIB,
                                 tokens_per_second=12_345_678 - n, chosen=n == 0)
                  for n, (name, ckpt) in enumerate([("3-offload-all", True), ("2-offload", True), ("3", False)])]  # fmt: skip
    path = plan_file(gpu="H200", micro_batch_size=64, candidates=candidates)
    runner = FakeRunner({("3-offload-all", 64): RunOutcome("oom", message="CUDA out of memory"),
                         ("3-offload-all", 32): RunOutcome("ok", tokens_per_second=12_000_000.0,
                                                           peak_allocated_bytes=140 * GIB, host_rss_bytes=999 * GIB,
                                                           device="NVIDIA H200"),
                         "2-offload": RunOutcome("error", message="x" * 300), "3": KeyboardInterrupt()})  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=100, highlight=False)
    probe.probe_and_write(path, 3, runner=runner, steps=6, console=console)
    lines = [line for line in out.getvalue().splitlines() if not line.startswith(("probe 1/", "probe 2/",
                                                                                  "probe 3/", "Chosen:"))]  # fmt: skip
    assert lines[0].startswith("probe: running 3 of 3 fitting candidates")
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    table = "\n".join(lines)
    for cell in ("3-offload-all", "64->32", "interrupted", "12,345,678", "12,000,000", "123.00", "140.00", "999.00"):
        assert cell in table, cell
    assert "…" not in table
    assert probe._console().width == 100  # written to a pipe (pytest's capture): 100 columns, not 160


@pytest.mark.parametrize("name", ["llama3.2-1b-probe3-s2048-h100-2026-11-23",
                                  "gemma2-2b-eager-probe2-s2048-2xh200-2026-11-28",
                                  "gemma2-2b-eager-2xh100-plan-probe2-on-2xh200-2026-11-28"])  # fmt: skip
def test_the_committed_gpu_probes_trained_with_their_fastest_measured(name):
    # Measured on lent GPUs (docs/speed.md): the H100's three candidates; Gemma 2 on two whole H200s (the analytic
    # pick kept); Gemma 2's plan for two H100s, where the model picks ZeRO-1 at 2 without checkpointing and the probe
    # measured ZeRO-1 at 7 with it 1.04x faster and wrote the plan with it
    plan = load_plan(Path(__file__).parents[1] / "benchmarks" / "zero_run" / f"{name}.probed.json")
    probed = [c for c in plan.candidates if c.probe is not None and c.probe.status == "ok"]
    best = max(probed, key=lambda c: c.probe.tokens_per_second)
    assert len(probed) >= 2 and best.chosen and plan.probe.chosen == plan.candidates.index(best)
    assert (plan.training.micro_batch_size, plan.training.gradient_checkpointing) == (
        best.micro_batch_size, best.gradient_checkpointing)
    for c in probed:  # every probed peak within 2% of the plan's
        assert c.probe.peak_allocated_bytes == pytest.approx(c.estimate.per_gpu.peak_allocated, rel=0.02)
    if "2xh100-plan" in name:
        assert plan.probe.planned != plan.probe.chosen

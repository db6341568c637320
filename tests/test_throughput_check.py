"""The step-time fit and its validation (benchmarks/throughput_fit.py, throughput_check.py) on the committed runs."""

from __future__ import annotations

import statistics

import pytest

from benchmarks import throughput_check
from benchmarks.throughput_check import measured_cases, validate
from benchmarks.throughput_fit import bound, features, fit, predict
from zero_planner.plan.throughput import estimate_step_time, load_calibration
from zero_planner.strategies import STRATEGIES


@pytest.fixture(scope="module")
def cases():
    return measured_cases(4096)


@pytest.fixture(scope="module")
def every_run():
    """The validation throughput_fit.py --write stores (every run, one GPU and several, alone on its host), as committed
    in benchmarks/step_time_validation.json; test_the_committed_validation_is_of_todays_inputs holds it to today's
    runs and model, and `python -m pytest -m refit` recomputes it (test_the_committed_validation_is_what_validate_computes)."""
    return throughput_check.committed_validation()


def test_the_committed_validation_is_of_todays_inputs():
    # the figures zero-plan states come from a validation of 4-5 minutes, committed with the hash of what it read:
    # a new run, a changed fit or step-time formula makes it stale until throughput_fit.py --write-errors runs again
    import json

    data = json.loads(throughput_check.VALIDATION_JSON.read_text())
    assert data["inputs_sha256"] == throughput_check.validation_inputs_sha256(), (
        "benchmarks/step_time_validation.json is stale: run python benchmarks/throughput_fit.py --write-errors "
        "(--write to refit), then python -m pytest -m refit")
    assert throughput_check.committed_validation() == data["validation"]


def test_the_committed_validation_goes_stale_when_a_run_or_the_model_changes(tmp_path, monkeypatch):
    before = throughput_check.validation_inputs_sha256()
    monkeypatch.setattr(throughput_check, "ROOT", tmp_path)  # an empty tree: every input gone
    (tmp_path / "zero_planner" / "catalog").mkdir(parents=True)
    (tmp_path / "zero_planner" / "catalog" / "step_time.json").write_text('{"matmul_fraction": 0.5, "error": {}}')
    empty = throughput_check.validation_inputs_sha256()
    assert empty != before
    (tmp_path / "zero_planner" / "catalog" / "step_time.json").write_text('{"matmul_fraction": 0.5, "error": {"x": 1}}')
    assert throughput_check.validation_inputs_sha256() == empty  # the stated errors are its output, not an input
    (tmp_path / "zero_planner" / "catalog" / "step_time.json").write_text('{"matmul_fraction": 0.6, "error": {}}')
    assert throughput_check.validation_inputs_sha256() != empty  # a constant is an input
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "new-run.jsonl").write_text("{}\n")
    assert throughput_check.validation_inputs_sha256() not in (empty, before)  # so is a new run


def test_every_run_is_predicted_as_when_the_validation_was_computed():
    # the rest of the planner (model specs, kernel classes, the memory model's buffers) is outside the hash: each run's
    # step time at the committed constants, recomputed here in a second, must be the one the validation recorded
    import json

    stored = json.loads(throughput_check.VALIDATION_JSON.read_text())["predicted_step_s"]
    today = throughput_check.run_predictions(throughput_check.validation_cases())
    assert [name for name, _ in today] == [name for name, _ in stored]
    for (name, now), (_, then) in zip(today, stored):
        assert now == pytest.approx(then, rel=1e-9), name


@pytest.mark.refit
def test_the_committed_validation_is_what_validate_computes():
    assert validate(throughput_check.validation_cases(), quiet=True) == throughput_check.committed_validation()


def test_the_fit_predicts_with_the_planners_own_formula():
    cal = load_calibration()
    # one GPU and several (communication, ZeRO-3's gathers), and several GPUs' runs of a user's bucket sizes
    every = measured_cases(4096, gpus=None, own_json=True)
    assert any(c.buffers for c in every)
    for case in every:
        planned = estimate_step_time(case.spec, STRATEGIES[case.strategy], case.gpu, case.workload, cal,
                                     buffers=case.buffers)
        assert predict(features(case), cal) == pytest.approx(planned.step_s, rel=1e-9), case.name
        assert bound(features(case), cal) == planned.bound, case.name  # the split of the stated error, likewise


@pytest.mark.refit
def test_runs_of_other_bucket_sizes_tell_zero3s_buckets_from_its_gathers_without_gpt2():
    # With our JSON's hidden^2 buckets every family but GPT-2 reduces about one bucket per two gathers across ranks,
    # so the fit without GPT-2 could not split the two: it charged the gathers and not the buckets, and GPT-2's
    # several-GPU runs (two buckets per gathered tensor: its biases close a bucket each) came out up to 56% fast. The
    # runs of DeepSpeed's own 5e8 buckets and of 1e5 ones in four other families split them as GPT-2's runs do.
    ours = [features(c) for c in measured_cases(4096, gpus=None) if c.method == "full"]
    both = [features(c) for c in measured_cases(4096, gpus=None, own_json=True) if c.method == "full"]
    variants = [r for r in both if r.name.split("|")[-1].startswith("bucket-")]
    assert {r.family for r in variants} >= {"llama", "qwen2", "qwen3", "mistral", "gpt2"}
    # a run of 5e8 buckets reduces a handful where ours reduces one per weight matrix or more
    assert max(r.stage3_reductions for r in variants if "bucket-5e8" in r.name) <= 5
    without = fit([r for r in ours if r.family != "gpt2"]).calibration
    assert without.stage3_seconds_per_gather > 2 * without.stage3_seconds_per_reduction
    split = fit([r for r in both if r.family != "gpt2"]).calibration
    assert split.stage3_seconds_per_reduction > 0.0003 > split.stage3_seconds_per_gather
    full = fit(both).calibration  # and GPT-2's own runs agree
    assert full.stage3_seconds_per_reduction > 0.0003 > full.stage3_seconds_per_gather


@pytest.mark.refit
def test_one_gpu_runs_of_two_bucket_sizes_give_zero3s_bucket_its_time():
    # Under our hidden^2 buckets a model closes about one per two fetched tensors, so the one-GPU runs of ours alone put
    # every hook's time on the fetches (the bucket's stays 0). One case at DeepSpeed's 5e8 buckets (a handful) or 1e5
    # beside ours on one machine (i26-z3-buckets-h200 twice, i26-z3-user-h200, the one-GPU runs of
    # i26-stage3-world4-h100) tells them apart: a bucket costs the host a fraction of a millisecond.
    ours = [features(c) for c in measured_cases(4096, gpus=1) if c.method == "full"]
    both = [features(c) for c in measured_cases(4096, gpus=1, own_json=True) if c.method == "full"]
    assert len([f for f in both if f.variant and f.strategy == "3"]) >= 20
    assert fit(ours).calibration.stage3_seconds_per_bucket == 0.0
    split = fit(both).calibration
    assert 0.0001 < split.stage3_seconds_per_bucket < split.stage3_seconds_per_fetch
    # the planner's constant is that fit's
    assert load_calibration().stage3_seconds_per_bucket == pytest.approx(split.stage3_seconds_per_bucket, abs=2e-5)


def test_families_are_config_model_types(cases):
    assert {features(c).family for c in cases} >= {"llama", "qwen2", "qwen3", "gemma2", "phi3", "gpt2", "mistral",
                                                    "mixtral"}  # fmt: skip


@pytest.mark.refit
def test_leave_one_family_out_is_deterministic(cases):
    # (its time, a refit per family, is printed by pytest's --durations in CI's log, not bounded here: the same code ran
    # under 20 s where CI last passed and took 32 s on this session's 2-core machine, 2026-12-02)
    first = validate(cases, quiet=True)
    assert validate(cases, quiet=True) == first
    assert first["out_of_family_median"] >= first["in_sample_median"] - 0.01


def test_the_stated_error_is_todays(every_run):
    # What zero-plan prints beside tokens/s (catalog/step_time.json) is what this validation computes; refresh
    # with `python benchmarks/throughput_fit.py --write` when the data or the model changes.
    # computed as throughput_fit.py --write does: over every run, one GPU and several (the fit takes the H200's
    # memory rate and ZeRO-3's terms across ranks from the runs of several)
    computed = every_run
    cal = load_calibration()
    assert cal.median_error == pytest.approx(computed["out_of_family_median"], abs=0.005)
    assert cal.max_error == pytest.approx(computed["out_of_family_max"], abs=0.005)
    assert cal.error_families == tuple(computed["families"])
    # and the figures stated per bound (a plan states its pick's): every one computed is stored, and alike
    assert {key for key, _, _ in cal.bound_errors} == set(computed["by_bound"]) == {"1:gpu", "1:host", "n:gpu", "n:host"}
    for key, median, largest in cal.bound_errors:
        assert (median, largest) == pytest.approx((computed["by_bound"][key]["median"], computed["by_bound"][key]["max"]),
                                                  abs=0.005), key


def test_the_runs_are_split_by_what_sets_their_pace_and_the_host_bound_miss_more(every_run):
    # Each run counted once, one GPU and several apart, by the committed model's StepTime.bound. The runs the host
    # sets the pace of (small micro-batches, ZeRO-3's hooks) carry the spread between machines' hosts (the same nine
    # ZeRO-3 cases ran 1.37x slower on one H200 machine than on four others, 2026-12-02; docs/speed.md): their errors
    # are larger.
    by_bound = every_run["by_bound"]
    assert by_bound["1:gpu"]["cases"] + by_bound["1:host"]["cases"] == every_run["cases"]
    assert by_bound["n:gpu"]["cases"] + by_bound["n:host"]["cases"] == every_run["several_gpus_cases"]
    for key in ("1", "n"):
        gpu, host = by_bound[f"{key}:gpu"], by_bound[f"{key}:host"]
        assert gpu["median"] < host["median"] and gpu["max"] < host["max"]
    assert by_bound["1:host"]["max"] == pytest.approx(every_run["out_of_family_max"])  # the largest miss is host-bound


@pytest.mark.refit
def test_each_host_gets_its_own_cpu_adam_rate(cases):
    from collections import Counter

    rows = [features(c) for c in cases]
    result = fit(rows)
    # The H200's lent host ran CPU Adam faster than the H100's (offload cases of Llama-3.2-3B, alone).
    assert result.host_cpu_adam["H200"] > 1.3 * result.host_cpu_adam["H100-SXM"]
    # the fit's own rate is its reference host's: the H100 host most of the runs came from
    hosts = Counter(r.host for r in rows if r.gpu == "H100-SXM" and r.world_size == 1)
    reference = min(hosts, key=lambda h: (-hosts[h], h))
    assert result.calibration.cpu_adam_params_per_s_per_node == pytest.approx(result.host_cpu_adam[reference], rel=1e-3)


@pytest.mark.refit
def test_a_host_of_several_gpus_gets_its_cpu_adam_rate_from_its_offload_runs():
    rows = [features(c) for c in measured_cases(4096, gpus=None)]
    result = fit(rows)
    several_hosts = {r.host for r in rows if r.world_size > 1 and "offload" in r.strategy}
    assert several_hosts and several_hosts <= set(result.host_cpu_adam)
    # the catalog's rate stays the reference host's, fitted on one GPU
    assert result.calibration.cpu_adam_params_per_s_per_node == fit([r for r in rows if r.world_size == 1]) \
        .calibration.cpu_adam_params_per_s_per_node
    # with its host's rate the offload runs of several GPUs are predicted closer than at the catalog's (in sample:
    # mean |error| of step time 8.4% where 9.2%)
    offload = [r for r in rows if r.world_size > 1 and "offload" in r.strategy]

    def error(calibration_of) -> float:
        return sum(abs(predict(r, calibration_of(r)) / r.measured_s - 1) for r in offload) / len(offload)

    assert error(result.for_case) < error(lambda r: result.calibration) - 0.005


def test_a_rerun_with_more_steps_replaces_the_shorter_run(cases):
    # Llama 3.2 3B at 2 x 2048 (stages 1 and 2) ran 3 timed steps on 2026-11-23 and 15 on two machines on
    # 2026-11-26 (benchmarks/suites/i26-rerun-3b-h100.jsonl): only the longer runs are measured cases.
    rows = [c.row for c in cases if c.name == "llama3.2-3b|2|bf16|mb2|s2048|gc|g1|ga1|cap79.2"]
    assert sorted(r["file"] for r in rows) == ["h100x1-i26-rerun-3b-2026-11-26.jsonl", "h100x1-i26-rerun-3b-b-2026-11-26.jsonl"]
    assert all(len(r["ranks"][0]["step_times_s"]) == 16 for r in rows)


def test_the_fit_sees_one_gpu_and_no_diagnostic_variant(cases):
    assert {c.workload.world_size for c in cases} == {1}
    assert not [c for c in cases if c.row["case"].get("variant")]
    everything = measured_cases(4096, gpus=None)
    assert {c.workload.world_size for c in everything} == {1, 2, 4}


def test_runs_predicted_over_their_card_are_left_out_and_each_retried_through():
    # zero-run's allocator, predicted total above the card: no candidate the planner makes (memory.py counts ZeRO-2's
    # reduction stream's pool); each of these ran only by freeing its cache and retrying
    over = measured_cases(4096, host_shared=True, gpus=None, over_card=True) + \
        measured_cases(4096, host_shared=True, gpus=None, one_sync=True, over_card=True)
    assert {c.name.split("|cap")[0] for c in over} == {
        "qwen2-moe-a2.7b-4l|2|bf16|mb10|s2048|gc|g1|ga1", "phi3-mini|2|bf16|mb8|s2048|nogc|g1|ga1",
        "gemma2-2b|2|bf16|mb28|s1024|gc|g1|ga1", "qwen2.5-7b|2|bf16|mb19|s2048|gc|g2|ga1"}
    assert all(max(rank["num_alloc_retries"] for rank in c.row["ranks"]) >= 3 for c in over)
    kept = {(c.row["file"], c.name) for c in measured_cases(4096, host_shared=True, gpus=None)}
    assert kept and not kept & {(c.row["file"], c.name) for c in over}


def test_tokens_per_second_on_several_gpus_counts_every_gpu():
    two = [c for c in measured_cases(4096, gpus=2)]
    assert len(two) >= 20
    for case in two:
        w = case.workload
        assert case.measured_tokens_per_second == pytest.approx(w.micro_batch_size * w.seq_len * 2 / case.seconds)
        predicted = estimate_step_time(case.spec, STRATEGIES[case.strategy], case.gpu, w)
        assert predicted.tokens_per_step == w.micro_batch_size * w.seq_len * 2


def test_a_sweep_compares_candidates_timed_on_one_machine(cases):
    # The same Llama 3.2 3B candidates ran on two machines on 2026-11-26: two settings, one per results file.
    settings = {c.setting for c in cases if c.setting and c.model == "llama3.2-3b" and c.workload.seq_len == 2048
                and c.gpu.name == "H100-SXM" and c.setting[4] == "default"}
    assert {s[-1] for s in settings} == {"h100x1-i26-rerun-3b-2026-11-26.jsonl", "h100x1-i26-rerun-3b-b-2026-11-26.jsonl"}


@pytest.mark.refit
def test_a_case_run_on_two_machines_counts_twice_in_the_errors(cases):
    from benchmarks.throughput_check import family_errors

    rows, in_sample, out = family_errors(cases)
    assert len(in_sample) == len(out) == len(rows) == len([c for c in cases if c.method == "full"])
    reruns = [i for i, r in enumerate(rows) if r.name == "llama3.2-3b|2|bf16|mb2|s2048|gc|g1|ga1|cap79.2"]
    assert len(reruns) == 2
    # one prediction, two measurements (0.551 and 0.475 s on two machines): two different errors
    assert out[reruns[0]] != pytest.approx(out[reruns[1]], abs=0.05)


def test_a_run_beside_another_case_on_its_machine_is_host_shared():
    from benchmarks.throughput_check import shared_host

    assert shared_host({"provenance": {}, "host_shared": True})  # the harness ran a case on another GPU meanwhile
    assert shared_host({"provenance": {"host_note": "one of 2 harnesses on this host"}})  # SPLIT_GPUS
    assert not shared_host({"provenance": {}, "host_shared": False}) and not shared_host({"provenance": {}})
    # every committed 2026-11-26 run says it ran alone
    alone = [c for c in measured_cases(4096, gpus=None) if c.row["file"].endswith("2026-11-26.jsonl")]
    assert alone and all(c.row.get("host_shared") is False for c in alone)


@pytest.mark.refit
def test_zero3s_gather_is_fitted_on_several_gpus_and_explains_them():
    from dataclasses import replace

    everything = [features(c) for c in measured_cases(4096, gpus=None) if c.method == "full"]
    base = replace(load_calibration(), stage3_seconds_per_gather=0.0, stage3_seconds_per_reduction=0.0)
    one_gpu = fit([f for f in everything if f.world_size == 1], base)
    both = fit(everything, base)
    assert one_gpu.calibration.stage3_seconds_per_gather == 0.0  # nothing to fit it on
    assert one_gpu.calibration.stage3_seconds_per_reduction == 0.0
    assert one_gpu.calibration.stage3_sync_growth_per_doubling == 0.0
    # the step times do not separate a gather's cost from a bucket's (a model's counts of both go together but for
    # GPT-2's): fitted with the buckets and their growth, the gathers' share came to 0 on the runs of 2026-11-27
    assert both.calibration.stage3_seconds_per_reduction > 0
    assert both.calibration.stage3_sync_growth_per_doubling > 0  # the runs of four GPUs took longer than two's
    # two GPUs alone cannot show a growth with the ranks
    two = fit([f for f in everything if f.world_size <= 2], base)
    assert two.calibration.stage3_sync_growth_per_doubling == 0.0 and two.calibration.stage3_seconds_per_reduction > 0
    # the one-GPU constants are the same either way: runs of several GPUs fit the gather, the reduction and their growth
    assert replace(both.calibration, stage3_seconds_per_gather=0.0, stage3_seconds_per_reduction=0.0,
                   stage3_sync_growth_per_doubling=0.0, seconds_per_reduction_across_ranks=0.0) == one_gpu.calibration  # fmt: skip
    zero3 = [f for f in everything if f.world_size > 1 and f.strategy == "3"]
    assert len(zero3) >= 10

    def error(result) -> float:
        return sum(abs(predict(f, result.for_case(f)) / f.measured_s - 1) for f in zero3) / len(zero3)

    assert error(both) < 0.8 * error(one_gpu)


@pytest.mark.refit
def test_zero12s_buckets_across_ranks_are_fitted_on_several_gpus_and_explain_them():
    """ZeRO-1/2 on several GPUs: each gradient bucket reduced across the ranks costs the host time the one-GPU
    constants cannot show (GPT-2 medium's ZeRO-1 at 4 x 1,024 measured as slow on two and four H100s as on one)."""
    from dataclasses import replace

    everything = [features(c) for c in measured_cases(4096, gpus=None) if c.method == "full"]
    base = replace(load_calibration(), seconds_per_reduction_across_ranks=0.0)
    one_gpu = fit([f for f in everything if f.world_size == 1], base)
    both = fit(everything, base)
    assert one_gpu.calibration.seconds_per_reduction_across_ranks == 0.0  # nothing to fit it on
    assert both.calibration.seconds_per_reduction_across_ranks > 0
    # only ZeRO-1/2's runs of several GPUs carry the term
    assert all(f.reductions_across == 0 for f in everything if f.world_size == 1 or f.strategy in ("0", "3"))
    zero12 = [f for f in everything if f.world_size > 1 and f.reductions_across and not f.cpu_adam_params]
    assert len(zero12) >= 50

    def errors(result) -> list[float]:
        return [abs(predict(f, result.for_case(f)) / f.measured_s - 1) for f in zero12]

    assert max(errors(both)) < 0.8 * max(errors(one_gpu))
    assert statistics.median(errors(both)) < statistics.median(errors(one_gpu))


def test_plans_of_several_gpus_state_the_several_gpu_error(every_run, capsys, tmp_path):
    from zero_planner.cli import main
    from zero_planner.planfile import load_plan

    computed = every_run
    cal = load_calibration()
    assert cal.several_gpus_median_error == pytest.approx(computed["several_gpus_out_of_family_median"], abs=0.005)
    assert cal.several_gpus_max_error == pytest.approx(computed["several_gpus_out_of_family_max"], abs=0.005)
    assert cal.stated_error(1) == (cal.median_error, cal.max_error)
    assert cal.stated_error(2) == (cal.several_gpus_median_error, cal.several_gpus_max_error)
    for gpus in ("1xH100", "2xH100"):
        assert main(["--model", "gpt2", "--gpus", gpus, "--seq-len", "512", "-o", str(tmp_path / "plan.json")]) == 0
        out = " ".join(capsys.readouterr().out.split())
        chosen = next(c for c in load_plan(tmp_path / "plan.json").candidates if c.chosen)
        median, largest = cal.stated_error(int(gpus[0]), chosen.bound)
        assert chosen.bound == "gpu"  # its pick, the largest micro-batch that fits, keeps the GPU busy
        assert f"±{median:.0%} median error on architectures left out of its fit" in out
        assert f"for steps the GPU's work bounds, as this one, up to {largest:.0%}" in out
        assert ("on several GPUs" in out) == (gpus == "2xH100")


def test_a_runs_own_deepspeed_json_predicts_it(capsys):
    # The committed ZeRO-2 variant with DeepSpeed's 5e8-element buckets (i26-stage2-3b-h100) ran faster than ours;
    # read with its own JSON, the model predicts it no slower, and within 10%. (At 2 x 2,048 with checkpointing the
    # fitted host time, 2 ms a layer since the per-tensor term, is below the GPU's work with either bucket size, so
    # the two predictions are equal: the model no longer sees ours 7% slower here.)
    from benchmarks.throughput_check import user_configs

    rows = {name: (measured, own, ours) for name, measured, own, ours in user_configs()}
    measured, own, ours = rows["llama3.2-3b|2|bf16|mb2|s2048|gc|g1|ga1|cap79.2|xs|bucket-5e8"]
    assert own <= ours
    assert abs(own / measured - 1) < 0.1
    # DeepSpeed's defaults at 2 x 2,048 without checkpointing: a handful of buckets against ours, hundreds
    measured, own, ours = rows["llama3.2-1b|2|bf16|mb2|s2048|nogc|g1|ga1|cap79.2|xs|ds-defaults"]
    assert own < ours and abs(own / measured - 1) < 0.1
    assert "not modelled" in capsys.readouterr().out  # overlap_comm off is said, not guessed


def test_the_check_flags_a_stale_several_gpu_error(capsys):
    from benchmarks.throughput_check import check_stated

    cal = load_calibration()
    computed = {"out_of_family_median": cal.median_error, "out_of_family_max": cal.max_error,
                "in_sample_median": cal.in_sample_median_error, "in_sample_max": cal.in_sample_max_error,
                "several_gpus_out_of_family_median": cal.several_gpus_median_error,
                "several_gpus_out_of_family_max": cal.several_gpus_max_error,
                "by_bound": {key: {"median": median, "max": largest} for key, median, largest in cal.bound_errors}}  # fmt: skip
    assert check_stated(computed)
    assert check_stated(dict(computed, several_gpus_out_of_family_max=cal.several_gpus_max_error + 0.02)) is False
    assert "several_gpus_out_of_family_max" in capsys.readouterr().out
    # a figure stated per bound goes stale alike, and so does one stored but no longer computed
    moved = {**computed["by_bound"], "1:host": {**computed["by_bound"]["1:host"], "max": cal.max_error + 0.02}}
    assert check_stated(dict(computed, by_bound=moved)) is False
    assert "1:host:max" in capsys.readouterr().out
    assert check_stated(dict(computed, by_bound={k: v for k, v in computed["by_bound"].items() if k != "n:gpu"})) is False


def test_zero3s_bucket_variants_are_predicted_closer_with_their_own_json():
    # i26-stage3-buckets(-b)-2xh100, twice on two machines: host-bound ZeRO-3 on two GPUs at DeepSpeed's 5e8-element
    # reduce buckets (and at 1e5) beside ours. Not fitted: stage3_seconds_per_reduction comes from the runs of our
    # JSON, where only GPT-2 separates reductions from gathers. With their own bucket size the model is closer on
    # two GPUs. (On four, i26-stage3-buckets-4xh100, it is not: there every ZeRO-3 run took longer than predicted
    # and the saving of 5e8 buckets was larger; docs/speed.md.)
    from benchmarks.throughput_check import user_configs

    zero3 = [(m, own, ours) for name, m, own, ours in user_configs() if "|3|" in name and "|g2|" in name]
    assert len(zero3) >= 10
    own_errors = sorted(abs(own / m - 1) for m, own, _ in zero3)
    ours_errors = sorted(abs(ours / m - 1) for m, _, ours in zero3)
    median = len(zero3) // 2
    assert own_errors[median] < 0.75 * ours_errors[median]


def test_zero3_on_four_gpus_of_one_machine_is_predicted_slower_than_on_two():
    # i26-stage3-world4(-b) (2026-11-27): the same host-bound ZeRO-3 cases on 4 GPUs and on 2 (--gpus 0,1) of one
    # four-GPU machine, two machines. Without the growth the model has four GPUs a little faster than two (their
    # collectives shrink); measured, most took longer. The committed growth moves the predicted ratio toward it.
    from dataclasses import replace

    from zero_planner.plan.memory import ZeroBuffers

    cases = {}
    for c in measured_cases(4096, gpus=None):
        if "i26-stage3-world4" in c.row["file"] and c.workload.world_size > 1:
            machine = c.row["file"].replace("-g01-", "-")  # a machine's two-GPU runs are in its -g01 file
            cases[(machine, c.name.replace(f"|g{c.workload.world_size}|", "|"), c.workload.world_size)] = c
    pairs = [(cases[(m, k, 2)], cases[(m, k, 4)]) for m, k, w in cases
             if w == 4 and (m, k, 2) in cases and cases[(m, k, 4)].strategy == "3"]  # fmt: skip
    assert len({m for m, _, _ in cases}) == 2 and len(pairs) >= 10
    committed = load_calibration()
    assert committed.stage3_sync_growth_per_doubling > 0
    flat = replace(committed, stage3_sync_growth_per_doubling=0.0)

    def ratio(two, four, cal) -> float:
        def seconds(c):
            buffers = ZeroBuffers.from_ds_config(c.row["case"]["deepspeed_config"], c.spec.hidden_size)
            return estimate_step_time(c.spec, STRATEGIES["3"], c.gpu, c.workload, cal, buffers=buffers).step_s
        return seconds(four) / seconds(two)

    measured = statistics.median(four.seconds / two.seconds for two, four in pairs)
    assert measured > 1.1
    assert statistics.median(ratio(two, four, flat) for two, four in pairs) < 1.0
    with_growth = statistics.median(ratio(two, four, committed) for two, four in pairs)
    assert 1.0 < with_growth < measured


@pytest.mark.refit
def test_a_gpu_other_than_the_reference_gets_its_memory_rate_from_its_own_runs():
    from dataclasses import replace

    from zero_planner.hardware import find_gpu

    everything = [features(c) for c in measured_cases(4096, gpus=None) if c.method == "full" and not c.host_shared]
    result = fit(everything)
    reference = result.calibration.memory_fraction
    # two H200s ran a mixture of small experts 14-18% slower than the catalog's 4.8 TB/s at the H100's fraction
    # said (2026-11-27): the H200's own fraction is lower, its achieved rate still above the H100's (0.585 against
    # 0.68; 0.615 since ZeRO-1/2's buckets across ranks are counted, which its small steps on several GPUs carry)
    assert result.gpu_memory["H200"] < 0.95 * reference
    h200_bandwidth, h100_bandwidth = (find_gpu(name).memory_bandwidth_bytes_per_s for name in ("H200", "H100"))
    assert result.gpu_memory["H200"] * h200_bandwidth > reference * h100_bandwidth
    assert "H100-SXM" not in result.gpu_memory  # the reference GPU keeps the fitted memory_fraction
    from benchmarks.throughput_fit import gpu_seconds, host_seconds, stage3_hooks_seconds

    # the H200 runs its GPU's work sets (the host's below half of it, as fit_gpu_memory takes them): the host-bound
    # ZeRO-3 suites (i26-z3-user-h200, 36 runs) cannot show a memory rate
    h200 = [f for f in everything if f.gpu == "H200" and not f.cpu_adam_params and f.pcie_s == 0
            and host_seconds(f, result.for_case(f)) + stage3_hooks_seconds(f, result.for_case(f))
            < 0.5 * gpu_seconds(f, result.for_case(f))]
    assert len(h200) >= 30
    without = replace(result, gpu_memory={})

    def error(r) -> float:
        return statistics.median(abs(predict(f, r.for_case(f)) / f.measured_s - 1) for f in h200)

    # (its own fraction cut their median error by more than 30% while one HBM rate took every memory-bound byte; the
    # broadcasting kernels, at their own measured rate per GPU, now carry part of the difference: 5.6% -> 4.2%)
    assert error(result) < 0.8 * error(without)
    # a fit that saw no H200 run has no fraction for it: the catalog's bandwidth at the reference fraction
    assert "H200" not in fit([f for f in everything if f.gpu != "H200"]).gpu_memory


def test_a_step_timed_as_zero_runs_loop_stays_out_of_the_fit_and_is_compared_with_the_harness(capsys):
    # the harness waits after forward, backward and step to time each; zero-run waits once per step. The pairs
    # (timing_suite.py sync_pairs) are reported apart, and their one-wait runs never enter the fit
    from benchmarks.throughput_check import loop_waits

    everything = measured_cases(4096, gpus=None)
    assert not [c for c in everything if "|one-sync-" in c.name]
    assert [c for c in everything if "|phase-sync-" in c.name]
    pairs = {name: (phased, one) for name, phased, one, _ in loop_waits()}
    assert len(pairs) >= 9 and "the harness's waits" in capsys.readouterr().out
    # measured: Gemma 2's small ZeRO-1 step ran 5-12% faster with one wait (2 and 4 H200s), its checkpointed one
    # and Qwen2.5-7B's within 2%
    small = [one / phased - 1 for name, (phased, one) in pairs.items() if name.startswith("gemma2-2b|1|bf16|mb2|")]
    large = [one / phased - 1 for name, (phased, one) in pairs.items() if "|gc|" in name]
    assert len(small) == 3 and max(small) < -0.04
    assert len(large) == 4 and all(abs(d) < 0.02 for d in large)


def test_a_sweep_timed_as_zero_runs_loop_counts_for_plan_quality_but_not_for_the_fit(capsys):
    from benchmarks.throughput_check import several_gpus

    one_sync = [c for c in measured_cases(4096, gpus=None, one_sync=True) if c.setting is not None]
    files = {c.row["file"] for c in one_sync}
    # Gemma 2 on two H200s under SDPA (2026-11-27), and under eager attention on two, on four (twice, two machines)
    # and on two capped at 79.2 GiB (2026-11-28; the capped sweeps' ZeRO-0 at 1 x 2,048 is under the 4,096 tokens
    # the figures take), Qwen2.5-7B on two H200s (2026-11-28, six candidates, its ZeRO-2 at 19 left out as predicted
    # over its card); Qwen2.5-1.5B on one H200 capped at 79.2 GiB (2026-11-28, eight candidates); Mistral-7B planned for
    # four H100s, on four H200s (2026-11-28, six candidates); ZeRO-1's and ZeRO-2's picks where ZeRO-2's moved
    # (2026-11-28, fifteenth session: Llama 3.2 1B and Qwen2.5-1.5B planned for two H100s, Llama 3.2 3B for two
    # H200s, four candidates each, on two H200s); Meta-Llama-3-8B on two H200s (2026-11-28, sixteenth session, six
    # candidates, predicted before it ran), and Qwen3-4B and GPT-2 large on one H200 (the same day, eight candidates
    # each); OPT-1.3B and Pythia-1.4B on one H200 (2026-11-29, seventeenth session: two families no run had timed,
    # eight candidates each); GPT-2 XL on one H200 (2026-11-29, eighteenth session, eight candidates, predicted before
    # it ran); Falcon-7B's pick on one H200 (2026-11-29, nineteenth session: SDPA's math kernel; ZeRO-3 at 5 with
    # checkpointing, alone: the rest of that call and the call before were ladders, or ran out of memory); OPT-6.7B
    # and Qwen3-8B on one H200 (2026-11-29, twentieth session: ZeRO-3 at 4, and at 20 with checkpointing; ZeRO-3 at 2
    # with checkpointing, its only fit; predicted before they ran).
    # The eager/SDPA pairs timed the same way are no planner setting.
    several = {"h200x2-i26-gemma2-one-sync-2026-11-27.jsonl", "h200x2-i26-gemma2-eager-2026-11-28.jsonl",
               "h200x4-i26-gemma2-eager-2026-11-28.jsonl", "h200x2-i26-gemma2-eager-cap-2026-11-28.jsonl",
               "h200x4-i26-gemma2-eager-b-2026-11-28.jsonl", "h200x2-i26-qwen7b-one-sync-2026-11-28.jsonl",
               "h200x4-i26-mistral7b-2026-11-28.jsonl", "h200x2-i26-moved-h100-2026-11-28.jsonl",
               "h200x2-i26-moved-2026-11-28.jsonl", "h200x2-i26-llama8b-2026-11-28.jsonl"}
    assert files == several | {"h200x1-i26-qwen1.5b-cap-2026-11-28.jsonl", "h200x1-i26-qwen3-4b-2026-11-28.jsonl",
                               "h200x1-i26-gpt2-large-2026-11-28.jsonl", "h200x1-i26-opt-1.3b-2026-11-29.jsonl",
                               "h200x1-i26-pythia-1.4b-2026-11-29.jsonl", "h200x1-i26-gpt2-xl-2026-11-29.jsonl",
                               "h200x1-i26-falcon-7b-pick-2026-11-29.jsonl", "h200x1-i26-big-2026-11-29.jsonl"}
    assert len(one_sync) == 37 + 5 + 8 + 6 + 12 + 6 + 8 + 8 + 8 + 8 + 8 + 1 + 3  # fmt: skip
    assert not {c.name for c in one_sync} & {c.name for c in measured_cases(4096, gpus=None)}
    ratios = several_gpus(4096)
    out = capsys.readouterr().out.splitlines()
    # the sweeps of several GPUs timed with the harness's waits, and these (one file holds two settings)
    assert len(ratios) == 12 + len(several) + 1
    line = next(l for l in out if "gemma2-one-sync" in l)
    assert "timed as zero-run's loop" in line
    # Gemma 2 ran SDPA on the GPU machines' transformers (5.17), which drops its attention soft-capping; the plans
    # run eager (5.24 refuses SDPA for it): every Gemma 2 sweep timed with SDPA says so, the eager ones do not
    assert "timed with sdpa; zero-plan's plans run eager" in line
    for name in ("h200x2-i26-gemma2-eager-2026-11-28", "h200x4-i26-gemma2-eager-2026-11-28",
                 "h200x2-i26-gemma2-eager-cap-2026-11-28", "h200x4-i26-gemma2-eager-b-2026-11-28"):
        eager = next(l for l in out if name in l)
        assert "timed as zero-run's loop" in eager and "timed with sdpa" not in eager


def test_the_error_floor_of_repeated_measurements():
    # one prediction p for times a <= b: max(1 - a / p, b / p - 1) is smallest at p = (a + b) / 2
    floor = throughput_check.error_floor([1.0, 1.2, 3.0])
    assert floor == pytest.approx(0.5)
    for p in (1.9, 2.0, 2.1):
        assert max(abs(t / p - 1) for t in (1.0, 3.0)) >= floor - 1e-12


def test_no_model_beats_the_repeats_floor_and_the_stated_errors_respect_it():
    # the same case on several machines (2026-11-22 .. 12-02): one GPU spread median 18%, largest 60% (floor 23.2%;
    # 25.9% with the runs in results/pending/, Pythia-1.4B's ZeRO-3 at 2 x 2,048 on five H200 machines); several GPUs
    # 16% and 72% (floor 26.4%: above issue 26's 25% max target, whatever the model). The stated maxima are over these
    # same cases, so they cannot be below the floors
    from zero_planner.plan.throughput import load_calibration

    spread = throughput_check.repeat_spread(quiet=True)
    cal = load_calibration()
    assert set(spread) == {"one GPU", "several GPUs"} and all(n >= 10 for n, _, _ in spread.values())
    assert cal.max_error >= spread["one GPU"][2] and cal.several_gpus_max_error >= spread["several GPUs"][2]
    assert spread["several GPUs"][2] > 0.25

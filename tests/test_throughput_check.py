"""The step-time fit and its validation (benchmarks/throughput_fit.py, throughput_check.py) on the committed runs."""

from __future__ import annotations

import time

import pytest

from benchmarks.throughput_check import measured_cases, validate
from benchmarks.throughput_fit import features, fit, predict
from zero_planner.plan.throughput import estimate_step_time, load_calibration
from zero_planner.strategies import STRATEGIES


@pytest.fixture(scope="module")
def cases():
    return measured_cases(4096)


def test_the_fit_predicts_with_the_planners_own_formula(cases):
    cal = load_calibration()
    for case in cases:
        planned = estimate_step_time(case.spec, STRATEGIES[case.strategy], case.gpu, case.workload, cal).step_s
        assert predict(features(case), cal) == pytest.approx(planned, rel=1e-9), case.name


def test_families_are_config_model_types(cases):
    assert {features(c).family for c in cases} >= {"llama", "qwen2", "qwen3", "gemma2", "phi3", "gpt2", "mistral",
                                                    "mixtral"}  # fmt: skip


def test_leave_one_family_out_is_deterministic_and_fast(cases):
    start = time.perf_counter()
    first = validate(cases, quiet=True)
    assert time.perf_counter() - start < 20  # refits once per family: CI prints it
    assert validate(cases, quiet=True) == first
    assert first["out_of_family_median"] >= first["in_sample_median"] - 0.01


def test_the_stated_error_is_todays(cases):
    # What zero-plan prints beside tokens/s (catalog/step_time.json) is what this validation computes; refresh
    # with `python benchmarks/throughput_fit.py --write` when the data or the model changes.
    computed = validate([c for c in cases if not c.host_shared], quiet=True)
    cal = load_calibration()
    assert cal.median_error == pytest.approx(computed["out_of_family_median"], abs=0.005)
    assert cal.max_error == pytest.approx(computed["out_of_family_max"], abs=0.005)
    assert cal.error_families == tuple(computed["families"])


def test_each_host_gets_its_own_cpu_adam_rate(cases):
    result = fit([features(c) for c in cases])
    # The H200's lent host ran CPU Adam faster than the H100's (offload cases of Llama-3.2-3B, alone).
    assert result.host_cpu_adam["H200"] > 1.3 * result.host_cpu_adam["H100-SXM"]
    assert result.calibration.cpu_adam_params_per_s_per_node == pytest.approx(result.host_cpu_adam["H100-SXM"], rel=1e-3)

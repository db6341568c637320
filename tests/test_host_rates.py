"""This machine's CPU Adam rate: measured once, cached, used for offload steps with --gpus auto (no GPU needed)."""

from __future__ import annotations

import json

import pytest

from zero_planner import cli
from zero_planner.hardware import parse_gpus
from zero_planner.plan import host_rates
from zero_planner.plan.reference_configs import DS_CONFIGS_DIR
from zero_planner.plan.throughput import load_calibration

FAST_HOST = host_rates.HostRate(cpu_adam_params_per_s=8e9, cpu_model="test CPU", cores=64, threads=64,
                                params=host_rates.BENCH_PARAMS, torch="x", deepspeed="y", date="2026-11-25")  # fmt: skip


@pytest.fixture
def measuring(monkeypatch, tmp_path):
    monkeypatch.setenv("ZERO_PLANNER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(host_rates.MEASURE_ENV, "1")
    calls = []

    def measure():
        calls.append(1)
        return FAST_HOST

    monkeypatch.setattr(host_rates, "measure_in_child", measure)
    return calls


def test_measured_once_then_read_from_the_cache(measuring, tmp_path):
    told = []
    first = host_rates.cpu_adam_rate(say=told.append, measure=host_rates.measure_in_child)
    second = host_rates.cpu_adam_rate(say=told.append, measure=host_rates.measure_in_child)
    assert first == second == FAST_HOST
    assert len(measuring) == 1 and len(told) == 1 and "once" in told[0]
    assert json.loads((tmp_path / host_rates.CACHE_FILE).read_text())[host_rates.host_key()]["cpu_adam_params_per_s"] == 8e9


def test_switched_off_or_failing_measurement_gives_none(monkeypatch, tmp_path):
    monkeypatch.setenv("ZERO_PLANNER_CACHE_DIR", str(tmp_path))
    assert host_rates.cpu_adam_rate(measure=lambda: FAST_HOST) is None  # conftest: ZERO_PLANNER_MEASURE_HOST=0
    monkeypatch.setenv(host_rates.MEASURE_ENV, "1")
    assert host_rates.cpu_adam_rate(measure=lambda: None) is None
    assert not (tmp_path / host_rates.CACHE_FILE).exists()


def _auto_is_one_h100(monkeypatch):
    monkeypatch.setattr(cli, "parse_gpus", lambda spec, mem=None: parse_gpus("1xH100", "200GiB"))


def _offload_tokens(capsys, argv) -> float:
    assert cli.main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    return next(c["tokens_per_second"] for c in plan["candidates"]
                if c["strategy"]["name"] == "2-offload" and c["fits"]), plan["notes"]  # fmt: skip


def test_gpus_auto_plans_offload_with_this_hosts_rate(measuring, monkeypatch, capsys):
    _auto_is_one_h100(monkeypatch)
    argv = ["--model", "meta-llama/Llama-3.2-3B", "--gpus", "auto", "--seq-len", "1024", "--json"]
    fast, notes = _offload_tokens(capsys, argv)
    assert any("CPU Adam on this machine: 8e+09" in n for n in notes)
    monkeypatch.setenv(host_rates.MEASURE_ENV, "0")
    catalog, notes = _offload_tokens(capsys, argv)
    assert any("not measured" in n for n in notes)
    assert fast > catalog  # 8e9 parameters/s against the catalog's H100 host
    assert load_calibration().cpu_adam_params_per_s_per_node < 8e9


def test_named_gpus_never_measure(measuring, capsys):
    assert cli.main(["--model", "meta-llama/Llama-3.2-1B", "--gpus", "1xH100", "--json"]) == 0
    assert not measuring


def test_an_imported_config_at_gpus_auto_uses_this_hosts_rate(measuring, monkeypatch, capsys, tmp_path):
    # The importers once built their own request and so always used the catalog's rate, whatever --gpus said.
    _auto_is_one_h100(monkeypatch)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"output_dir": "out", "per_device_train_batch_size": 1, "bf16": True,
                                "deepspeed": str(DS_CONFIGS_DIR / "zero2_bf16_offload_optimizer.json")}))
    argv = ["--model", "meta-llama/Llama-3.2-3B", "--gpus", "auto", "--seq-len", "1024", "--from-hf-trainer",
            str(args), "--json"]  # fmt: skip

    def tokens_per_second() -> float:
        assert cli.main(argv) == 0
        (only,) = json.loads(capsys.readouterr().out)["candidates"]
        assert only["strategy"]["name"] == "2-offload"
        return only["tokens_per_second"]

    fast = tokens_per_second()
    monkeypatch.setenv(host_rates.MEASURE_ENV, "0")
    assert fast > tokens_per_second()  # 8e9 parameters/s against the catalog's H100 host

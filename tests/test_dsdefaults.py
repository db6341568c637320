"""DeepSpeed's defaults for what a user's JSON leaves out: the catalog against the installed DeepSpeed."""

from __future__ import annotations

import json

import pytest

from zero_planner.models.spec import load_model_spec
from zero_planner.plan import dsdefaults
from zero_planner.plan.memory import GiB, Workload, ZeroBuffers, estimate_memory
from zero_planner.strategies import STRATEGIES


def test_catalog_is_what_the_installed_deepspeed_takes():
    pytest.importorskip("deepspeed")
    catalog = json.loads(dsdefaults.CATALOG.read_text())
    assert catalog == dsdefaults.read_installed_defaults(), "rerun python scripts/deepspeed_defaults.py"


def test_every_memory_key_is_read_from_a_minimal_json():
    settings = dsdefaults.zero_settings({"stage": 3})
    assert set(dsdefaults.MEMORY_KEYS) <= set(settings)
    assert settings["reduce_bucket_size"] == 500_000_000 and settings["overlap_comm"] is True
    assert dsdefaults.zero_settings({"stage": 2})["overlap_comm"] is False  # DeepSpeed's default depends on the stage


def test_stage3_aliases_and_offload_defaults():
    settings = dsdefaults.zero_settings({"stage": 3, "stage3_max_live_parameters": 7, "sub_group_size": 0,
                                         "offload_optimizer": {"device": "cpu"}})  # fmt: skip
    assert settings["max_live_parameters"] == 7 and settings["sub_group_size"] == 0
    assert settings["offload_optimizer"]["pin_memory"] is True  # DeepSpeed 0.19's default
    assert "offload_param" not in settings


def test_the_installed_deepspeed_parses_what_we_read():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    given = {"stage": 3, "stage3_prefetch_bucket_size": 123, "reduce_bucket_size": 4096, "contiguous_gradients": False}
    theirs = DeepSpeedZeroConfig(**given).model_dump()
    ours = dsdefaults.zero_settings(given)
    assert all(ours[key] == theirs[key] for key in dsdefaults.MEMORY_KEYS)


def test_a_minimal_stage3_json_counts_deepspeeds_default_reduce_bucket():
    spec = load_model_spec("meta-llama/Llama-3.2-1B")
    workload = Workload(micro_batch_size=2, seq_len=1024, gradient_checkpointing=False, precision="bf16")
    minimal = ZeroBuffers.from_ds_config({"zero_optimization": {"stage": 3}}, spec.hidden_size)
    ours = ZeroBuffers.for_model(spec.hidden_size)
    assert minimal.reduce_bucket_size == 500_000_000 and ours.reduce_bucket_size == spec.hidden_size**2
    a = estimate_memory(spec, STRATEGIES["3"], workload, minimal, gpu_name="H100")
    b = estimate_memory(spec, STRATEGIES["3"], workload, ours, gpu_name="H100")
    # stage3.py keeps one reduce bucket of reduce_bucket_size bf16 elements from initialize on: 0.93 GiB at 5e8.
    assert a.train_peak_bytes - b.train_peak_bytes == 2 * (500_000_000 - spec.hidden_size**2)
    assert round(2 * 500_000_000 / GiB, 2) == 0.93  # what a minimal JSON adds over no bucket at all

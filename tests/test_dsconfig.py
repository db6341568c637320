"""ds_configs/ is dsconfig.build_ds_config's output (kept in sync by a test) and DeepSpeed's parser accepts it."""

from __future__ import annotations

import json

import pytest

from zero_planner.plan.dsconfig import bucket_sizes, build_ds_config, validate_ds_config
from zero_planner.plan.reference_configs import (
    DS_CONFIGS_DIR,
    REFERENCE_HIDDEN_SIZE,
    reference_ds_configs,
    reference_name,
    write_ds_configs,
)
from zero_planner.plan.userconfig import config_strategy
from zero_planner.strategies import STRATEGIES

REFERENCE = reference_ds_configs()


def test_files_equal_the_generator_output():
    on_disk = {p.name for p in DS_CONFIGS_DIR.glob("*.json")}
    assert on_disk == set(REFERENCE), "run: python -m zero_planner.plan.reference_configs --write-ds-configs"
    assert write_ds_configs(check=True) == [], "run: python -m zero_planner.plan.reference_configs --write-ds-configs"


def test_every_strategy_in_both_16_bit_precisions():
    assert len(REFERENCE) == 2 * len(STRATEGIES)
    assert "zero3_bf16_offload_all.json" in REFERENCE and "zero2_fp16_offload_optimizer.json" in REFERENCE


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_deepspeed_parser_accepts(name):
    validate_ds_config(json.loads((DS_CONFIGS_DIR / name).read_text()))


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_file_names_say_what_the_file_does(name):
    config = REFERENCE[name]
    strategy = config_strategy(config)
    assert reference_name(strategy, "bf16" if "bf16" in config else "fp16") == name
    assert strategy in STRATEGIES.values()


@pytest.mark.parametrize("name", sorted(n for n in REFERENCE if "fp16" in n))
def test_fp16_uses_dynamic_loss_scaling(name):
    fp16 = REFERENCE[name]["fp16"]
    assert fp16["enabled"] is True and fp16["loss_scale"] == 0  # 0 = dynamic in DeepSpeed
    assert "bf16" not in REFERENCE[name]


def test_buckets_derive_from_the_hidden_size():
    zero = REFERENCE["zero3_bf16.json"]["zero_optimization"]
    assert zero["reduce_bucket_size"] == REFERENCE_HIDDEN_SIZE**2
    assert zero["stage3_prefetch_bucket_size"] == int(0.9 * REFERENCE_HIDDEN_SIZE**2)
    assert zero["stage3_param_persistence_threshold"] == 10 * REFERENCE_HIDDEN_SIZE
    assert REFERENCE["zero2_bf16.json"]["zero_optimization"]["allgather_bucket_size"] == REFERENCE_HIDDEN_SIZE**2
    assert bucket_sizes(8192)["reduce_bucket_size"] == 8192**2


def test_no_auto_values():
    assert all("auto" not in json.dumps(config) for config in REFERENCE.values())


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_planned_shapes_are_accepted(name, precision):
    # What the planner emits: accumulation and several GPUs (train_batch_size = micro * accum * world).
    config = build_ds_config(
        STRATEGIES[name],
        micro_batch_size=3,
        gradient_accumulation_steps=5,
        world_size=16,
        precision=precision,
        hidden_size=5120,
    )
    assert config["train_batch_size"] == 240
    validate_ds_config(config)

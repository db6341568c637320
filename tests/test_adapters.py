"""LoRA / QLoRA / seq-cls terms of the memory model, and the two-T4 answer of issue 5."""

from __future__ import annotations

import json

import pytest

from zero_planner.cli import main
from zero_planner.models.spec import load_model_spec
from zero_planner.plan.memory import NF4_BYTES_PER_PARAM, Workload, estimate_memory, trainable_params, weight_bytes
from zero_planner.strategies import STRATEGIES

LLAMA3 = "meta-llama/Meta-Llama-3-8B"


@pytest.fixture(scope="module")
def llama3():
    return load_model_spec(LLAMA3)


def workload(method, **kw):
    values = dict(micro_batch_size=1, seq_len=2048, gradient_checkpointing=True, precision="fp16",
                  world_size=2, gpus_per_node=2, method=method)  # fmt: skip
    values.update(kw)
    return Workload(**values)


def test_lora_trainable_params_match_peft(llama3):
    # peft, LoraConfig(r=16, target_modules="all-linear") on Llama-3-8B: "trainable params: 41,943,040"
    assert trainable_params(llama3, workload("lora")) == 41_943_040
    assert trainable_params(llama3, workload("lora", lora_r=8)) == 41_943_040 // 2
    assert trainable_params(llama3, workload("full")) == llama3.num_params


def test_seq_cls_swaps_the_lm_head(llama3):
    # Llama-3-8B's untied head (128256 x 4096) becomes a 4096 x 3 score head.
    full = trainable_params(llama3, workload("full", task="seq-cls", num_labels=3))
    assert full == llama3.num_params - 128256 * 4096 + 4096 * 3
    lora = trainable_params(llama3, workload("lora", task="seq-cls", num_labels=3))
    assert lora == 41_943_040 + 4096 * 3  # adapters + the trainable score head


def test_qlora_stores_linear_weights_in_nf4(llama3):
    linear = llama3.linear["numel"]
    lora_bytes = weight_bytes(llama3, workload("lora"))
    qlora_bytes = weight_bytes(llama3, workload("qlora"))
    assert lora_bytes == 2 * (llama3.num_params + 41_943_040)
    assert lora_bytes - qlora_bytes == pytest.approx((2 - NF4_BYTES_PER_PARAM) * linear, abs=1)
    assert NF4_BYTES_PER_PARAM == pytest.approx(0.5 + 0.127 / 8, abs=1e-4)  # QLoRA paper: 0.127 bits of constants


@pytest.mark.parametrize("stage", ["0", "2", "3"])
def test_adapters_cut_states_not_weights(llama3, stage):
    full = estimate_memory(llama3, STRATEGIES[stage], workload("full"), gpu_name="T4")
    lora = estimate_memory(llama3, STRATEGIES[stage], workload("lora"), gpu_name="T4")
    qlora = estimate_memory(llama3, STRATEGIES[stage], workload("qlora"), gpu_name="T4")
    assert lora.optimizer_bytes < full.optimizer_bytes / 100
    assert lora.gradients_bytes < full.gradients_bytes / 100
    assert lora.params_bytes >= full.params_bytes  # frozen weights stay, plus the adapters
    # NF4 linear layers (7.0B of Llama-3-8B's 8.0B) at 0.516 B; embedding and untied head stay 16-bit: 2.8x less
    assert lora.params_bytes / 3 < qlora.params_bytes < lora.params_bytes / 2.5
    assert qlora.peak_allocated_bytes < lora.peak_allocated_bytes < full.peak_allocated_bytes


def test_two_t4s_full_fine_tuning_exits_1_with_numbers(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = main(["--model", LLAMA3, "--gpus", "2xT4", "--cpu-mem", "29GiB", "--method", "full", "--json"])
    answer = json.loads(capsys.readouterr().out)
    assert rc == 1 and answer["fits"] is False
    assert any("GiB" in line for line in answer["advice"])
    assert any("--method lora" in line or "--method qlora" in line for line in answer["advice"])


def test_two_t4s_auto_picks_an_adapter_plan_that_fits(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = main(["--model", LLAMA3, "--gpus", "2xT4", "--cpu-mem", "29GiB", "--method", "auto", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert plan["training"]["method"] in ("lora", "qlora")
    assert plan["training"]["precision"] == "fp16" and plan["deepspeed_config"]["fp16"]["enabled"]
    assert plan["estimate"]["per_gpu"]["total"] < plan["hardware"]["gpu_memory_bytes"]
    assert plan["model"]["trainable_params"] == 41_943_040  # the adapters, not the 8B base
    assert plan["training"]["lora"]["r"] == 16
    assert any(note.startswith("--method full: does not fit") for note in plan["notes"])

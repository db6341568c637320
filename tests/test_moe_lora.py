"""LoRA on mixture-of-experts models whose experts transformers 5 stores as fused 3-D parameters (issue 58): what
peft's "all-linear" adapts there (lora.ParamWrapper on the expert stacks and the router), the dropout it refuses,
the trainable count against real peft, the folded-weight term of the memory model, and a real zero-plan then
zero-run of the default LoRA plan on two CPU ranks."""

from __future__ import annotations

import json

import pytest

from zero_planner.cli import main
from zero_planner.models.count import count_params
from zero_planner.models.spec import spec_from_config
from zero_planner.plan.memory import Workload, activation_bytes, param_adapters, trainable_params

QWEN3_MOE_TINY = {
    "model_type": "qwen3_moe", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "tie_word_embeddings": False, "max_position_embeddings": 512, "eos_token_id": 2, "bos_token_id": 1,
}  # fmt: skip
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def lora(**kw) -> Workload:
    values = dict(micro_batch_size=2, seq_len=128, gradient_checkpointing=False, precision="bf16", method="lora",
                  lora_dropout=0.0)  # fmt: skip
    values.update(kw)
    return Workload(**values)


@pytest.fixture(scope="module")
def spec():
    return spec_from_config(dict(QWEN3_MOE_TINY), "qwen3-moe-tiny")


def peft_trainable(r: int, targets) -> int:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**QWEN3_MOE_TINY)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    wrapped = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=targets))
    return sum(p.numel() for p in wrapped.parameters() if p.requires_grad)


def test_the_count_finds_the_stacks_peft_wraps(spec):
    stacks = spec.param_adapters
    assert stacks["names"] == ["mlp.experts.down_proj", "mlp.experts.gate_up_proj", "mlp.gate.weight"]
    assert stacks["count"] == 3 * 2  # three per layer, two layers
    # [experts, 2 x 32, 64] and [experts, 64, 32] stacks and the [experts, 64] router, per layer
    assert stacks["numel"] == 2 * (4 * 64 * 64 + 4 * 64 * 32 + 4 * 64)
    assert stacks["layer_numel"] == stacks["numel"] // 2 and stacks["largest_numel"] == 4 * 64 * 64


@pytest.mark.parametrize("r", [4, 16])
def test_trainable_params_are_what_peft_trains(spec, r):
    assert trainable_params(spec, lora(lora_r=r)) == peft_trainable(r, "all-linear")
    assert trainable_params(spec, lora(lora_r=r, lora_targets=ATTENTION)) == peft_trainable(r, list(ATTENTION))


def test_dense_models_have_no_stacks():
    from conftest import LLAMA_TINY

    assert "param_adapters" not in count_params(dict(LLAMA_TINY))


def test_named_targets_adapt_the_stacks_only_when_they_name_them(spec):
    assert param_adapters(spec, lora(lora_targets=ATTENTION)) is None
    assert param_adapters(spec, lora(lora_targets=("q_proj", "down_proj"))) is spec.param_adapters
    assert param_adapters(spec, lora()) is spec.param_adapters
    assert param_adapters(spec, lora(method="full")) is None


def test_the_folded_stacks_are_kept_only_without_checkpointing(spec):
    stacks = spec.param_adapters
    folded = 2 * stacks["numel"]  # bf16: W + s * lhs @ rhs, every stack, kept for the backward
    # and each adapted stack's input, in every one of the top-k experts (the router's once), for its gradient
    inputs = 2 * 256 * 2 * (2 * stacks["layer_in_routed"] + stacks["layer_in_dense"])  # bf16, tokens, layers
    without = activation_bytes(spec, lora()).saved_bytes - activation_bytes(spec, lora(lora_targets=ATTENTION)).saved_bytes
    assert without == folded + (inputs if "lora" in spec.activations else 0)
    ckpt = activation_bytes(spec, lora(gradient_checkpointing=True))
    frozen = activation_bytes(spec, lora(gradient_checkpointing=True, lora_targets=ATTENTION))
    assert ckpt.saved_bytes == frozen.saved_bytes
    # the recomputed layer's fold and the largest stack's gradient, in the backward
    assert ckpt.backward_peak_bytes - frozen.backward_peak_bytes >= 2 * (
        spec.param_adapters["layer_numel"] + spec.param_adapters["largest_numel"]) - 4 * 2 * 128 * 256


def config_path(tmp_path):
    path = tmp_path / "qwen3-moe-tiny.json"
    path.write_text(json.dumps(QWEN3_MOE_TINY))
    return str(path)


def test_the_default_dropout_is_zero_and_the_plan_says_why(tmp_path, capsys):
    rc = main(["--model", config_path(tmp_path), "--gpus", "1xH100", "--method", "lora", "--seq-len", "128", "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["training"]["lora"]["dropout"] == 0
    assert plan["model"]["trainable_params"] == peft_trainable(16, "all-linear")
    assert any("lora.ParamWrapper" in n and "lora_dropout 0" in n for n in plan["notes"])


@pytest.mark.parametrize("flag", [["--lora-dropout", "0.05"], ["--lora-dropout", "0.1", "--lora-targets", "q_proj,gate_up_proj"]])
def test_a_dropout_peft_refuses_is_one_line(tmp_path, capsys, flag):
    rc = main(["--model", config_path(tmp_path), "--gpus", "1xH100", "--method", "lora", *flag])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"--lora-dropout {flag[1]}: peft's lora.ParamWrapper" in err and "--lora-targets q_proj,k_proj" in err


def test_attention_targets_keep_the_dropout(tmp_path, capsys):
    rc = main(["--model", config_path(tmp_path), "--gpus", "1xH100", "--method", "lora", "--lora-dropout", "0.1",
               "--lora-targets", "q_proj,v_proj", "--json"])  # fmt: skip
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["training"]["lora"]["dropout"] == 0.1


@pytest.mark.slow
def test_the_default_lora_plan_trains_under_zero_run(tmp_path, capsys):
    """The issue's failure: zero-run died in peft ("ParamWrapper does not work with lora_dropout != 0")."""
    from zero_planner.launch import main as zero_run

    plan = tmp_path / "plan.json"
    assert main(["--model", config_path(tmp_path), "--gpus", "cpu:2", "--cpu-mem", "8GiB", "--method", "lora",
                 "--seq-len", "64", "--stage", "2", "--max-steps", "4", "--tokenizer", "bytes", "--init", "random",
                 "-o", str(plan)]) == 0  # fmt: skip
    capsys.readouterr()
    out = tmp_path / "run"
    assert zero_run([str(plan), "--output-dir", str(out)]) == 0
    report = json.loads((out / "run_report.json").read_text())
    assert report["status"] == "ok" and len(report["losses"]) == 4


def test_the_merged_export_holds_the_largest_stack_twice(spec):
    from zero_planner.plan.memory import _linear, export_peak
    from zero_planner.strategies import STRATEGIES

    # peft's ParamWrapper.get_delta_weight keeps the einsum's product while it scales it: two stacks at once
    stage0 = STRATEGIES["0"]
    adapted = export_peak(spec, stage0, lora(), resident=0, ws=0)
    assert adapted == 2 * 2 * max(spec.param_adapters["largest_numel"], _linear(spec)["largest_numel"])
    assert export_peak(spec, stage0, lora(lora_targets=ATTENTION), resident=0, ws=0) == 2 * 2 * _linear(spec)["largest_numel"]
    assert adapted > 2 * 2 * _linear(spec)["largest_numel"]

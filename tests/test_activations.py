"""Activation coefficients: the meta-device trace against the closed form and the catalog's stored values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zero_planner.models.activations import closed_form_coefficients, traced_coefficients
from zero_planner.models.catalog import catalog_entry

ROOT = Path(__file__).resolve().parents[1]


def arch_of(config: dict) -> dict:
    return {
        "hidden_size": config["hidden_size"], "intermediate_size": config["intermediate_size"],
        "num_attention_heads": config["num_attention_heads"],
        "num_key_value_heads": config.get("num_key_value_heads", config["num_attention_heads"]),
        "head_dim": config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
        "vocab_size": config["vocab_size"], "num_experts": 1, "num_experts_per_tok": 1, "gated_mlp": True,
    }  # fmt: skip


@pytest.mark.parametrize("name", ["llama3.2-1b", "mistral-7b-8l", "qwen2.5-0.5b"])
def test_closed_form_matches_trace_for_dense_llama_family(name):
    config = json.loads((ROOT / "benchmarks" / "model_configs" / f"{name}.json").read_text())
    traced = traced_coefficients(config)["16bit"]["sdpa"]["layer"]
    closed = closed_form_coefficients(arch_of(config))["16bit"]["sdpa"]["layer"]
    assert closed == pytest.approx(traced, rel=0.01)


def test_eager_attention_keeps_score_matrices():
    config = json.loads((ROOT / "benchmarks" / "model_configs" / "llama-tiny.json").read_text())
    table = traced_coefficients(config)["16bit"]
    assert table["sdpa"]["layer_per_seq"] == 0
    # eager keeps scores per head and position: at least bf16 probabilities and the fp32 softmax
    assert table["eager"]["layer_per_seq"] >= config["num_attention_heads"] * (2 + 4)


@pytest.mark.parametrize("slug", ["llama-3.2-1b", "gpt2", "qwen2.5-0.5b"])
def test_catalog_coefficients_are_current(slug):
    entry = catalog_entry(slug)
    assert entry is not None, slug
    assert traced_coefficients(entry["config"]) == {k: v for k, v in entry["params"]["activations"].items()}


@pytest.fixture(scope="module")
def llama1b_lora():
    config = json.loads((ROOT / "benchmarks" / "model_configs" / "llama3.2-1b.json").read_text())
    return config, traced_coefficients(config)


def test_lora_trace_counts_adapter_tensors_by_hand(llama1b_lora):
    """Llama, peft all-linear (7 targets per layer), traced on the meta device, checked against a hand count."""
    config, table = llama1b_lora
    h, i = config["hidden_size"], config["intermediate_size"]
    for key, width in (("16bit", 2), ("fp32", 4)):
        lora = table["lora"][key]
        assert lora["layer_per_r"] == 7 * width  # lora_B keeps lora_A's r outputs, per target
        if key == "16bit":
            # Dropout: every target keeps its dropped-out input (2 B) and a 1-byte mask, 3 * (6h + i); the
            # shared inputs lora_A kept without dropout (q/k/v and gate/up at h, down at i) are no longer kept.
            # o's input stays: it is the SDPA kernels' output, which they keep for their own backward.
            assert lora["layer_dropout"] == 3 * (6 * h + i) - 2 * (2 * h + i)
            # ZeRO-3's F.linear keeps those three inputs again.
            assert lora["zero3_layer_extra_dropout"] == 2 * (2 * h + i)
        assert lora["zero3_layer_extra"] == 0  # without dropout lora_A already keeps the same inputs
        # A frozen base keeps less than full fine-tuning: no inputs are kept for weight gradients.
        assert lora["layer"] < table[key]["sdpa"]["layer"]


def test_adapter_activations_use_the_lora_trace(llama1b_lora):
    from zero_planner.models.spec import spec_from_config
    from zero_planner.plan.memory import Workload, activation_bytes

    config, _ = llama1b_lora
    spec = spec_from_config(config, "llama3.2-1b")

    def saved(method, **kw):
        w = Workload(micro_batch_size=1, seq_len=1024, gradient_checkpointing=False, precision="bf16", method=method, **kw)
        return activation_bytes(spec, w).saved_bytes

    h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    assert saved("lora", lora_dropout=0.0) < saved("full")
    assert saved("lora", lora_r=32) - saved("lora", lora_r=16) == 1024 * layers * 16 * 14
    assert saved("qlora") == saved("lora")  # the 4-bit base keeps no more than the 16-bit one
    w = Workload(micro_batch_size=1, seq_len=1024, gradient_checkpointing=False, precision="bf16", method="lora")
    zero3 = activation_bytes(spec, w, zero3_linear=True).saved_bytes - activation_bytes(spec, w).saved_bytes
    assert zero3 == 1024 * layers * 2 * (2 * h + i)


@pytest.mark.parametrize("name, per_head", [("gemma2-2b", 2 + 4 + 2), ("llama3.2-1b", 4 + 2), ("qwen3-1.7b", 4 + 2)])
def test_eager_score_term_is_what_each_head_keeps_per_position(name, per_head):
    # the fp32 softmax output and the 16-bit probabilities, and Gemma 2's soft-cap its tanh output. Gemma 2's four
    # RMSNorms also keep (1 + weight).float() whatever the tokens; read from the two short lengths alone that bent
    # the slope to 59.5 (its eager peaks 1.4-1.6% above the prediction on two and four H200s, 2026-11-28)
    from zero_planner.models.activations import attention_coefficients

    config = json.loads((ROOT / "benchmarks" / "model_configs" / f"{name}.json").read_text())
    eager = attention_coefficients(config, "bfloat16", "eager")
    assert eager["layer_per_seq"] == config["num_attention_heads"] * per_head


def test_gemma2_eager_peaks_are_predicted_where_they_were_measured():
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks.memory_regression import load_cases, predict

    specs: dict = {}
    rows = [row for row in load_cases() if row["status"] == "ok" and row["case"]["model"] == "gemma2-2b"
            and row["ranks"][0].get("attn_implementation") == "eager" and not row["case"]["gradient_checkpointing"]
            and row["case"]["micro_batch_size"] >= 2]  # fmt: skip
    assert len(rows) >= 7
    for row in rows:
        measured = row["ranks"][0]["peak_allocated_bytes"]
        assert predict(row, specs)[1].train_peak_bytes == pytest.approx(measured, rel=0.005), row["id"]

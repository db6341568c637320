"""Activation coefficients: the meta-device trace against the closed form and the catalog's stored values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zero_planner.models.activations import closed_form_coefficients, traced_coefficients
from zero_planner.models.spec import catalog_entry

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

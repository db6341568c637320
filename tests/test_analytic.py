"""models/analytic.py: configs of the covered types (llama-style, phi3, mixtral, gemma2, gpt2, qwen3_moe, olmoe, olmo2,
gpt_neox) counted from config.json agree exactly with the meta-device count, and the activation table borrowed from
a catalog twin or computed in closed form is the one the tracer gives for that config."""

from __future__ import annotations

import json

import pytest
from conftest import LLAMA_TINY, ROOT, heavy_modules_after

from zero_planner.errors import InputError
from zero_planner.models.activations import attention_coefficients, lora_dtype_coefficients
from zero_planner.models.analytic import (
    FAMILIES,
    LORA_CLOSED_FORM,
    analytic_table,
    catalog_activations,
    catalog_twin,
    lora_16bit_activations,
    parameter_order,
    sdpa_16bit_activations,
)
from zero_planner.models.catalog import catalog_entries
from zero_planner.models.count import count_params

BENCHMARK_CONFIGS = {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "benchmarks" / "model_configs").glob("*.json"))}
CONFIGS = {**BENCHMARK_CONFIGS, **{slug: entry["config"] for slug, entry in catalog_entries().items()}}
COVERED = sorted(name for name, config in CONFIGS.items() if config["model_type"] in FAMILIES)


def test_every_config_of_a_covered_type_is_counted():
    assert len(COVERED) >= 45
    assert {CONFIGS[name]["model_type"] for name in COVERED} >= {"phi3", "mixtral", "gemma2", "gpt2", "qwen3_moe",
                                                                  "olmoe", "olmo2", "gpt_neox"}
    assert [name for name in COVERED if analytic_table(CONFIGS[name]) is None] == []


@pytest.mark.parametrize("name", COVERED)
def test_analytic_table_equals_the_meta_device_count(name):
    analytic, meta = analytic_table(CONFIGS[name]), count_params(CONFIGS[name], name)
    assert analytic.pop("built_with") == {"analytic": "zero_planner.models.analytic"}
    meta.pop("built_with")
    assert analytic == meta
    assert list(analytic) == list(meta)  # same key order: cached tables and catalog files stay stable


def test_catalog_twins_share_their_activation_tables():
    for slug, entry in catalog_entries().items():
        borrowed = catalog_activations(entry["config"])
        if entry["config"]["model_type"] in FAMILIES:
            assert borrowed == entry["params"]["activations"], (slug, catalog_twin(entry["config"]))
        else:
            assert borrowed is None


TWINNED = [name for name, config in BENCHMARK_CONFIGS.items() if catalog_twin(config) is not None]


@pytest.mark.parametrize("name", TWINNED)
def test_borrowed_activations_equal_the_trace(name):
    """Other layer counts (mistral-7b-8l), absent defaults and rope keys do not change what a layer keeps."""
    config, borrowed = BENCHMARK_CONFIGS[name], catalog_activations(BENCHMARK_CONFIGS[name])
    for key, dtype in (("16bit", "bfloat16"), ("fp32", "float32")):
        for attn in ("sdpa", "eager"):
            assert attention_coefficients(config, dtype, attn) == borrowed[key][attn], (key, attn)


def test_twins_of_the_benchmark_configs():
    assert {name: catalog_twin(BENCHMARK_CONFIGS[name]) for name in TWINNED} == {
        "llama3.2-1b.json": "llama-3.2-1b", "llama3.2-3b.json": "llama-3.2-3b", "mistral-7b-8l.json": "mistral-7b-v0.1",
        "mistral-7b.json": "mistral-7b-v0.3", "mistral-7b-v0.1.json": "mistral-7b-v0.1",
        "qwen2.5-3b.json": "qwen2.5-3b", "qwen2.5-7b.json": "qwen2.5-7b", "qwen2.5-14b.json": "qwen2.5-14b",
        "qwen2.5-0.5b.json": "qwen2.5-0.5b", "qwen2.5-1.5b.json": "qwen2.5-1.5b", "qwen3-1.7b.json": "qwen3-1.7b",
        "qwen3-8b.json": "qwen3-8b",
        "phi3-mini.json": "phi-3-mini-4k", "gemma2-2b.json": "gemma-2-2b", "gpt2-large.json": "gpt2-large",
        "gpt2-medium.json": "gpt2-medium", "gpt2-xl.json": "gpt2-xl",
        # Meta-Llama-3-8B's layers, vocabulary and widths are Llama-3.1-8B's (only rope scaling differs, which keeps
        # nothing): the catalog's first twin
        "llama3-8b.json": "llama-3.1-8b",
    }  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [{"model_type": "opt"}, {"quantization_config": {"load_in_4bit": True}}, {"auto_map": {"AutoModel": "x.Y"}},
     {"pretraining_tp": 2}, {"hidden_size": 130, "num_attention_heads": 3, "head_dim": None},
     {"num_key_value_heads": 3}, {"hidden_size": "64"}],
    ids=["other-type", "quantized", "remote-code", "tp", "indivisible-heads", "odd-kv-groups", "string-size"],
)  # fmt: skip
def test_what_it_does_not_describe_is_left_to_transformers(change):
    assert analytic_table({**LLAMA_TINY, **change}) is None


def test_other_vocabularies_and_widths_have_no_twin():
    config = BENCHMARK_CONFIGS["llama3.2-1b.json"]
    assert catalog_twin({**config, "num_hidden_layers": 4, "rope_theta": 1.0}) == "llama-3.2-1b"
    assert catalog_twin({**config, "vocab_size": 128258}) is None  # a fine-tune that added tokens: traced
    assert catalog_twin({**config, "attention_dropout": 0.1}) is None  # dropout keeps masks


def test_closed_form_sdpa_entry_equals_the_catalog_trace():
    for slug in COVERED:
        if slug in catalog_entries() and FAMILIES[CONFIGS[slug]["model_type"]].closed_form:
            assert sdpa_16bit_activations(CONFIGS[slug]) == catalog_entries()[slug]["params"]["activations"]["16bit"]["sdpa"]


# Shapes the catalog does not have: biases, multi-head attention, head_dim apart from hidden / heads, odd sizes.
ODD_CONFIGS = [
    LLAMA_TINY,
    {**LLAMA_TINY, "attention_bias": True, "mlp_bias": True},
    {**LLAMA_TINY, "num_key_value_heads": LLAMA_TINY["num_attention_heads"]},
    {**LLAMA_TINY, "model_type": "qwen2"},
    {**LLAMA_TINY, "model_type": "qwen3", "head_dim": 48},
    {**LLAMA_TINY, "model_type": "mistral", "head_dim": 24, "tie_word_embeddings": False},
    {**LLAMA_TINY, "vocab_size": 1001, "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
     "head_dim": None, "intermediate_size": 250},
]  # fmt: skip


@pytest.mark.parametrize("config", ODD_CONFIGS, ids=["tiny", "biases", "mha", "qwen2", "qwen3", "mistral", "odd"])
def test_closed_form_sdpa_entry_equals_the_trace(config):
    assert sdpa_16bit_activations(config) == attention_coefficients(config, "bfloat16", "sdpa")
    meta = count_params(config)
    meta.pop("built_with")
    assert {k: v for k, v in analytic_table(config).items() if k != "built_with"} == meta


def test_a_config_path_of_a_catalog_architecture_plans_without_torch(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BENCHMARK_CONFIGS["mistral-7b-8l.json"]))
    code = (
        "from zero_planner.cli import main\n"
        f"main(['--model', {str(path)!r}, '--gpus', '1xA100-80GB', '--json'])"
    )
    assert heavy_modules_after(code) == []


# The other layouts on shapes their catalog entries do not have: grouped-query phi3, odd sizes, biases, untied
# heads, other expert counts, gpt2's n_inner and positions. Two layers each, counted on the meta device to compare.
def _shape(name: str, **change) -> dict:
    config = BENCHMARK_CONFIGS[name]
    return {**config, ("n_layer" if "n_layer" in config else "num_hidden_layers"): 2, **change}


ODD_LAYOUTS = {
    "phi3-gqa": _shape("phi3-mini.json", hidden_size=192, num_attention_heads=6, num_key_value_heads=2,
                       intermediate_size=250, vocab_size=1001, pad_token_id=1000, tie_word_embeddings=True),
    "phi3-dropout": _shape("phi3-mini.json", hidden_size=128, num_attention_heads=4, num_key_value_heads=4,
                           resid_pdrop=0.1),
    "mixtral-4e-top1": _shape("mixtral-8e-tiny.json", hidden_size=96, num_attention_heads=6, num_key_value_heads=3,
                              head_dim=None, intermediate_size=72, num_local_experts=4, num_experts_per_tok=1,
                              vocab_size=999),
    "mixtral-head-dim": _shape("mixtral-8e-tiny.json", hidden_size=64, num_attention_heads=4, head_dim=24,
                               num_key_value_heads=2, intermediate_size=40, tie_word_embeddings=True),
    "gemma2-bias-untied": _shape("gemma2-2b.json", hidden_size=96, num_attention_heads=4, num_key_value_heads=2,
                                 head_dim=40, intermediate_size=200, vocab_size=1003, attention_bias=True,
                                 tie_word_embeddings=False),
    "gemma2-mha": _shape("gemma2-2b.json", hidden_size=64, num_attention_heads=2, num_key_value_heads=2,
                         head_dim=32, intermediate_size=128, vocab_size=500),
    "gpt2-inner": _shape("gpt2-medium.json", n_embd=96, n_head=6, n_inner=100, n_positions=77, vocab_size=1001),
    "gpt2-untied": _shape("gpt2-medium.json", n_embd=64, n_head=4, n_positions=4096, vocab_size=50,
                          tie_word_embeddings=False),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ODD_LAYOUTS))
def test_other_layouts_equal_the_meta_device_count_on_odd_shapes(name):
    config = ODD_LAYOUTS[name]
    meta = count_params(config, name)
    meta.pop("built_with")
    assert {k: v for k, v in analytic_table(config).items() if k != "built_with"} == meta
    assert catalog_twin(config) is None
    if not FAMILIES[config["model_type"]].closed_form or name == "phi3-dropout":
        assert sdpa_16bit_activations(config) is None  # traced when read


PHI3_SHAPES = {
    "gqa": ODD_LAYOUTS["phi3-gqa"],
    "mha-odd": {**ODD_LAYOUTS["phi3-gqa"], "hidden_size": 96, "num_key_value_heads": 6, "intermediate_size": 77},
    "longrope": {**ODD_LAYOUTS["phi3-gqa"], "max_position_embeddings": 8192, "original_max_position_embeddings": 4096,
                 "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16}},
    "partial-rotary": {**ODD_LAYOUTS["phi3-gqa"], "partial_rotary_factor": 0.5},
    "partial-rotary-in-rope": {**ODD_LAYOUTS["phi3-gqa"], "rope_scaling": {"rope_type": "default",
                                                                           "partial_rotary_factor": 0.75}},
    "gelu": {**ODD_LAYOUTS["phi3-gqa"], "hidden_act": "gelu"},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PHI3_SHAPES))
def test_closed_form_sdpa_entry_of_phi3_equals_the_trace(name):
    """Fused qkv_proj and gate_up_proj keep what llama's separate projections keep; cos and sin are as wide as
    the rotary dimensions."""
    assert sdpa_16bit_activations(PHI3_SHAPES[name]) == attention_coefficients(PHI3_SHAPES[name], "bfloat16", "sdpa")


NOT_DESCRIBED = {
    "phi3-head-dim": _shape("phi3-mini.json", head_dim=64),  # Phi3Attention reads it where present
    "phi3-padding-idx": _shape("phi3-mini.json", vocab_size=32000),  # Phi3Config's pad_token_id 32000 is past it
    "gemma2-null-head-dim": _shape("gemma2-2b.json", head_dim=None),  # its strict config class rejects None
    "gpt2-alias": _shape("gpt2-medium.json", hidden_size=64),
    "gpt2-cross-attention": _shape("gpt2-medium.json", add_cross_attention=True),
    "gpt2-indivisible": _shape("gpt2-medium.json", n_head=7),
    "moe-other-key": _shape("mixtral-8e-tiny.json", num_experts=4),
    # LlamaConfig and Gemma2Config want hidden_size divisible by the heads even with head_dim set
    "gemma2-indivisible": _shape("gemma2-2b.json", hidden_size=80, num_attention_heads=6, num_key_value_heads=3),
    "llama-indivisible": {**LLAMA_TINY, "hidden_size": 130, "num_attention_heads": 3, "num_key_value_heads": 1,
                          "head_dim": 40},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NOT_DESCRIBED))
def test_what_other_layouts_do_not_describe_is_left_to_transformers(name):
    assert analytic_table(NOT_DESCRIBED[name]) is None


@pytest.mark.parametrize("name", ["gemma2-indivisible", "llama-indivisible", "phi3-padding-idx"])
def test_configs_transformers_rejects_are_not_counted(name):
    with pytest.raises(InputError):
        count_params(NOT_DESCRIBED[name], name)


def test_a_config_path_of_a_catalog_phi3_gemma2_or_gpt2_plans_without_torch(tmp_path):
    lines = ["import os; os.environ['ZERO_PLANNER_CACHE_DIR'] = " + repr(str(tmp_path / "cache")),
             "from zero_planner.cli import main"]  # fmt: skip
    for name in ("phi3-mini.json", "gemma2-2b.json", "gpt2-large.json"):
        path = tmp_path / name
        path.write_text(json.dumps(BENCHMARK_CONFIGS[name]))
        lines.append(f"main(['--model', {str(path)!r}, '--gpus', '1xA100-80GB', '--json'])")
    assert heavy_modules_after("\n".join(lines) + "\n") == []


_MOE = {"model_type": "mixtral", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
        "num_experts_per_tok": 2}  # fmt: skip
MIXTRAL_SHAPES = {
    "8e-tiny": BENCHMARK_CONFIGS["mixtral-8e-tiny.json"],
    "3e-top3": {**_MOE, "num_local_experts": 3, "num_experts_per_tok": 3},
    "5e-top1-wide": {**_MOE, "hidden_size": 96, "intermediate_size": 136, "num_local_experts": 5,
                     "num_experts_per_tok": 1},
    "mha-head-dim-tied": {**_MOE, "num_key_value_heads": 4, "head_dim": 24, "num_local_experts": 7,
                          "tie_word_embeddings": True},
    "16e-top4": {**_MOE, "num_local_experts": 16, "num_experts_per_tok": 4},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(MIXTRAL_SHAPES))
def test_closed_form_sdpa_entry_of_mixtral_equals_the_trace(name):
    """Routing tensors per routed copy, the fp32 router softmax per token, the int32 group offsets per micro-batch."""
    config = MIXTRAL_SHAPES[name]
    assert sdpa_16bit_activations(config) == attention_coefficients(config, "bfloat16", "sdpa")


@pytest.mark.parametrize(
    "change", [{"intermediate_size": 100}, {"router_jitter_noise": 0.1}, {"output_router_logits": True}],
    ids=["unaligned-for-grouped-mm", "jitter", "aux-loss"],
)  # fmt: skip
def test_mixtral_shapes_the_closed_form_does_not_describe_are_traced(change):
    assert sdpa_16bit_activations({**_MOE, **change}) is None


_GPT2 = {**BENCHMARK_CONFIGS["gpt2-medium.json"], "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000,
         "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
GPT2_SHAPES = {
    "medium": BENCHMARK_CONFIGS["gpt2-medium.json"],
    "small-default-dropout": _GPT2,
    "inner-odd": {**_GPT2, "n_embd": 96, "n_head": 6, "n_inner": 100, "vocab_size": 1001, "n_positions": 77},
    "no-dropout": {**_GPT2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
    "embedding-dropout-only": {**_GPT2, "n_head": 2, "resid_pdrop": 0.0, "embd_pdrop": 0.2},
    "untied": {**_GPT2, "tie_word_embeddings": False},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GPT2_SHAPES))
def test_closed_form_sdpa_entry_of_gpt2_equals_the_trace(name):
    """LayerNorm mean and rstd, q as a view of c_attn's output, gelu_new's four tensors, 1-byte dropout masks."""
    config = GPT2_SHAPES[name]
    assert sdpa_16bit_activations(config) == attention_coefficients(config, "bfloat16", "sdpa")


@pytest.mark.parametrize(
    "change",
    [{"activation_function": "gelu"}, {"reorder_and_upcast_attn": True}, {"scale_attn_by_inverse_layer_idx": True}],
    ids=["gelu", "upcast", "layer-idx"],
)  # fmt: skip
def test_gpt2_options_the_closed_form_does_not_describe_are_traced(change):
    assert sdpa_16bit_activations({**_GPT2, **change}) is None
    assert analytic_table({**_GPT2, **change}) is not None  # still counted from the config


OUTSIDE_THE_CATALOG = {
    "llama": ODD_CONFIGS[-1],
    "phi3": PHI3_SHAPES["partial-rotary"],
    "mixtral": BENCHMARK_CONFIGS["mixtral-8e-tiny.json"],
    "gpt2": {**BENCHMARK_CONFIGS["gpt2-medium.json"], "vocab_size": 50260},  # three added tokens
    "olmo2": BENCHMARK_CONFIGS["olmo2-1b.json"],
    "gpt_neox": BENCHMARK_CONFIGS["pythia-1.4b.json"],
    # Shapes whose full fine-tune fits one A100: a plan that fits nowhere suggests LoRA (plan/advice.py), whose
    # table is traced for the other types (torch, transformers, peft)
    "qwen3_moe": BENCHMARK_CONFIGS["qwen3-30b-a3b-4l.json"],
    "olmoe": {**BENCHMARK_CONFIGS["olmoe-1b-7b.json"], "num_hidden_layers": 4},
}


LORA_PLANNED_OUTSIDE = ("llama", "mixtral", "olmo2", "gpt_neox", "qwen3_moe", "olmoe")  # one shape per closed-form layout


@pytest.mark.parametrize("family, method", [*((f, "full") for f in sorted(OUTSIDE_THE_CATALOG)),
                                            *((f, "lora") for f in LORA_PLANNED_OUTSIDE)])  # fmt: skip
def test_a_bf16_plan_of_a_config_outside_the_catalog_imports_no_torch_or_peft(tmp_path, family, method):
    """Full fine-tuning's SDPA entry and LoRA's entry come from models/analytic.py (sdpa_16bit_activations,
    lora_16bit_activations), not from a trace on the meta device."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(OUTSIDE_THE_CATALOG[family]))
    code = (
        "import os; os.environ['ZERO_PLANNER_CACHE_DIR'] = " + repr(str(tmp_path / "cache")) + "\n"
        "from zero_planner.cli import main\n"
        f"main(['--model', {str(path)!r}, '--gpus', '1xA100-80GB', '--method', {method!r}, '--json'])"
    )
    assert heavy_modules_after(code) == []


@pytest.mark.parametrize("name", sorted(n for n in BENCHMARK_CONFIGS if BENCHMARK_CONFIGS[n]["model_type"] in FAMILIES))
def test_parameter_order_is_named_parameters_order(name):
    """The order ZeRO-2's reduction count walks (throughput.stage2_reductions) is the model's own."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = BENCHMARK_CONFIGS[name]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    assert parameter_order(config) == [p.numel() for p in model.parameters()]


# qwen3_moe, olmoe, olmo2 and gpt_neox: the benchmark configs and shapes they do not have (grouped-query attention,
# biases on and off, tied and untied heads, head_dim apart from hidden / heads, odd widths, other expert counts and
# top-k, norm_topk_prob both ways, the residual and rotary options of GPT-NeoX). Two layers each.
def _small(name: str, **change) -> dict:
    return {**_shape(name, vocab_size=1001, bos_token_id=None, eos_token_id=None, pad_token_id=None), **change}


NEW_TYPES = {
    "olmo2-1b": BENCHMARK_CONFIGS["olmo2-1b.json"],
    "olmo2-gqa-bias-tied": _small("olmo2-1b.json", hidden_size=96, num_attention_heads=6, num_key_value_heads=2,
                                  intermediate_size=200, attention_bias=True, tie_word_embeddings=True),
    "olmo2-head-dim": _small("olmo2-1b.json", hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                             head_dim=24, intermediate_size=72),
    "olmo2-defaults": {"model_type": "olmo2", "num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256,
                       "num_attention_heads": 4},
    "pythia-1.4b": BENCHMARK_CONFIGS["pythia-1.4b.json"],
    "neox-odd-untied": _small("pythia-1.4b.json", hidden_size=96, num_attention_heads=6, intermediate_size=200),
    "neox-tied-no-bias": _small("pythia-1.4b.json", hidden_size=64, num_attention_heads=4, intermediate_size=256,
                                tie_word_embeddings=True, attention_bias=False),
    "neox-serial-residual": _small("pythia-1.4b.json", hidden_size=64, num_attention_heads=4, intermediate_size=256,
                                   use_parallel_residual=False),
    "neox-full-rotary": _small("pythia-1.4b.json", hidden_size=64, num_attention_heads=4, rotary_pct=1.0),
    "neox-rotary-in-rope": _small("pythia-1.4b.json", hidden_size=96, num_attention_heads=4, rotary_pct=0.5,
                                  rope_scaling={"rope_type": "default", "partial_rotary_factor": 0.3}),
    "neox-defaults": {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256,
                      "num_attention_heads": 4},
    "qwen3-30b-a3b": BENCHMARK_CONFIGS["qwen3-30b-a3b.json"],
    "qwen3-30b-a3b-4l": BENCHMARK_CONFIGS["qwen3-30b-a3b-4l.json"],
    "qwen3-30b-a3b-8l": BENCHMARK_CONFIGS["qwen3-30b-a3b-8l.json"],
    "qwen3moe-mha-bias-tied": _small("qwen3-30b-a3b.json", hidden_size=96, num_attention_heads=6,
                                     num_key_value_heads=6, head_dim=16, moe_intermediate_size=56, num_experts=3,
                                     num_experts_per_tok=3, attention_bias=True, tie_word_embeddings=True),
    "qwen3moe-16e-top4-unnormed": _small("qwen3-30b-a3b.json", hidden_size=64, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=48, moe_intermediate_size=40,
                                         num_experts=16, num_experts_per_tok=4, norm_topk_prob=False),
    "qwen3moe-no-head-dim": {**_small("qwen3-30b-a3b.json", hidden_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, moe_intermediate_size=64, num_experts=4,
                                      num_experts_per_tok=2), "head_dim": 32},
    "qwen3moe-defaults": {"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 128, "num_experts": 8,
                          "num_attention_heads": 8, "moe_intermediate_size": 32},
    "olmoe-1b-7b": BENCHMARK_CONFIGS["olmoe-1b-7b.json"],
    "olmoe-gqa-5e-top3": _small("olmoe-1b-7b.json", hidden_size=96, num_attention_heads=6, num_key_value_heads=3,
                                intermediate_size=40, num_experts=5, num_experts_per_tok=3),
    "olmoe-normed-bias-tied": _small("olmoe-1b-7b.json", hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                     intermediate_size=72,
                                     num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, attention_bias=True,
                                     tie_word_embeddings=True),
    "olmoe-defaults": {"model_type": "olmoe", "num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 64,
                       "num_experts": 4, "num_experts_per_tok": 2},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NEW_TYPES))
def test_new_types_equal_the_meta_device_count_and_the_trace(name):
    """Parameters (with peft's fused-expert adapters for the MoE types) as count_params builds them, and the 16-bit
    SDPA entry as the tracer keeps it: olmo2's fp32 post-norms and full-width q/k norms, GPT-NeoX's shared
    LayerNorm input, rotated q and k and copied dense input, the MoE routing with 16-bit weights."""
    config = NEW_TYPES[name]
    meta = count_params(config, name)
    meta.pop("built_with")
    analytic = analytic_table(config)
    assert analytic.pop("built_with") == {"analytic": "zero_planner.models.analytic"}
    assert analytic == meta and list(analytic) == list(meta)
    assert ("param_adapters" in analytic) == (config["model_type"] in ("qwen3_moe", "olmoe"))
    assert catalog_twin(config) is None
    assert sdpa_16bit_activations(config) == attention_coefficients(config, "bfloat16", "sdpa")


@pytest.mark.parametrize("name", ["olmo2-gqa-bias-tied", "neox-tied-no-bias", "qwen3moe-16e-top4-unnormed",
                                  "olmoe-normed-bias-tied"])  # fmt: skip
def test_new_types_run_their_weight_matrices_in_forward_modules_order(name):
    """forward_modules is named_parameters' order with qwen3_moe's router, registered after the experts, put before
    them: the order a forward runs the weight matrices (norms, 1-D, may run elsewhere)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from zero_planner.models.analytic import forward_modules

    config = NEW_TYPES[name]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.bfloat16)
    ran: list[str] = []
    paths = {id(m): n for n, m in model.named_modules()}
    for module in model.modules():
        if any(p.dim() >= 2 for p in module.parameters(recurse=False)):
            module.register_forward_pre_hook(lambda m, _: ran.append(paths[id(m)]))
    ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
    model(input_ids=ids)
    head, layer, tail, layers = forward_modules(config)
    prefix = {"gpt_neox": "gpt_neox.layers"}.get(config["model_type"], "model.layers")
    listed = [path for path, params in head]
    listed += [f"{prefix}.{k}.{path}" for k in range(layers) for path, params in layer
               if max(n for _, n in params) > config["hidden_size"]]  # the norms' weights are hidden-wide at most
    listed += [path for path, params in tail if path == "lm_head"]
    assert ran == listed


@pytest.mark.parametrize("name", sorted(NEW_TYPES))
def test_new_types_lora_entry_equals_the_trace(name):
    """The 16-bit LoRA entry as peft's all-linear adapters on the frozen base keep it (ten traced runs): frozen
    norms, routers and lm_head keep no inputs for weight gradients, lora_A keeps each target's input, dropout its
    copies and masks, ZeRO-3's F.linear the base layers' inputs; the first layer, fed by the frozen embedding, keeps
    less than the others (rest, rest_dropout)."""
    config = NEW_TYPES[name]
    assert lora_16bit_activations(config) == lora_dtype_coefficients(config, "bfloat16", 0.0)


# Ranks and shapes the trace fits linearly; one more of each dense type with biases off and another head_dim.
LORA_SHAPES = {
    "olmo2-mha-wide-head": _small("olmo2-1b.json", hidden_size=80, num_attention_heads=2, num_key_value_heads=2,
                                  head_dim=56, intermediate_size=120),
    "neox-serial-tied-partial": _small("pythia-1.4b.json", hidden_size=96, num_attention_heads=3,
                                       intermediate_size=136, use_parallel_residual=False, tie_word_embeddings=True,
                                       rotary_pct=0.4),
    "qwen3moe-normed-1e-top1": _small("qwen3-30b-a3b.json", hidden_size=64, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=40, moe_intermediate_size=24, num_experts=1,
                                      num_experts_per_tok=1, norm_topk_prob=True),
    "olmoe-mha-top1": _small("olmoe-1b-7b.json", hidden_size=48, num_attention_heads=3, num_key_value_heads=3,
                             intermediate_size=56, num_experts=3, num_experts_per_tok=1),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(LORA_SHAPES))
def test_lora_entry_equals_the_trace_on_other_shapes(name):
    config = LORA_SHAPES[name]
    assert lora_16bit_activations(config) == lora_dtype_coefficients(config, "bfloat16", 0.0)


LLAMA_STYLE = ("llama", "mistral", "qwen2", "qwen3")
LORA_LLAMA_STYLE = {**{f"odd-{k}": config for k, config in enumerate(ODD_CONFIGS)},
                    **{name: config for name, config in BENCHMARK_CONFIGS.items() if config["model_type"] in LLAMA_STYLE}}


@pytest.mark.parametrize("name", sorted(LORA_LLAMA_STYLE))
def test_lora_entry_of_llama_style_types_equals_the_trace(name):
    """Frozen RMSNorms keep fp32 input and rsqrt only; q/k/v, gate/up and down keep their inputs through lora_A."""
    config = LORA_LLAMA_STYLE[name]
    assert lora_16bit_activations(config) == lora_dtype_coefficients(config, "bfloat16", 0.0)


LORA_MIXTRAL = {**MIXTRAL_SHAPES, **{name: config for name, config in BENCHMARK_CONFIGS.items()
                                    if config["model_type"] == "mixtral"}}  # fmt: skip


@pytest.mark.parametrize("name", sorted(LORA_MIXTRAL))
def test_lora_entry_of_mixtral_equals_the_trace(name):
    """qwen3_moe's count without q/k norms, with mixtral's fp32 routing weight and its gathered copy per routed copy."""
    config = LORA_MIXTRAL[name]
    assert lora_16bit_activations(config) == lora_dtype_coefficients(config, "bfloat16", 0.0)


def test_lora_entry_equals_the_catalogs_traced_lora_tables():
    """Every catalog entry of a type the LoRA closed form covers carries a traced 16-bit LoRA entry (but mixtral's:
    its fp32 LoRA trace fails, which drops the table, lora_why): the same."""
    compared = {slug: (lora_16bit_activations(entry["config"]), entry["params"]["activations"]["lora"]["16bit"])
                for slug, entry in catalog_entries().items()
                if entry["config"]["model_type"] in LORA_CLOSED_FORM and "lora" in entry["params"]["activations"]}
    assert len(compared) >= 20
    assert {slug: pair for slug, pair in compared.items() if pair[0] != pair[1]} == {}


def test_the_lora_entry_is_only_written_where_checked(monkeypatch):
    """Other types (phi3, gemma2, gpt2: their LoRA table is traced), options whose 16-bit entry is traced,
    llama-style options the trace was not compared on, and a machine without peft (where the trace has no LoRA
    table either) return None."""
    others = [name for name in COVERED if CONFIGS[name]["model_type"] not in LORA_CLOSED_FORM]
    assert {CONFIGS[name]["model_type"] for name in others} == {"phi3", "gemma2", "gpt2"}
    assert [name for name in others if lora_16bit_activations(CONFIGS[name]) is not None] == []
    assert [name for name in NEW_TYPES_TRACED if lora_16bit_activations(NEW_TYPES_TRACED[name]) is not None] == []
    for change in ({"hidden_act": "gelu"}, {"attention_dropout": 0.1}):
        assert sdpa_16bit_activations({**LLAMA_TINY, **change}) is not None
        assert lora_16bit_activations({**LLAMA_TINY, **change}) is None
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "peft" else object())
    assert lora_16bit_activations(NEW_TYPES["olmo2-1b"]) is None


NEW_TYPES_TRACED = {
    "neox-hidden-dropout": {**NEW_TYPES["neox-odd-untied"], "hidden_dropout": 0.1},  # masks
    "neox-attention-dropout": {**NEW_TYPES["neox-odd-untied"], "attention_dropout": 0.1},
    "neox-gelu-new": {**NEW_TYPES["neox-odd-untied"], "hidden_act": "gelu_new"},
    "neox-no-cache": {**NEW_TYPES["neox-odd-untied"], "use_cache": False},  # v a view: not traceable on meta
    "olmo2-gelu": {**NEW_TYPES["olmo2-gqa-bias-tied"], "hidden_act": "gelu"},
    "olmo2-attention-dropout": {**NEW_TYPES["olmo2-gqa-bias-tied"], "attention_dropout": 0.1},
    "olmoe-clip-qkv": {**NEW_TYPES["olmoe-gqa-5e-top3"], "clip_qkv": 8.0},
    "olmoe-router-logits": {**NEW_TYPES["olmoe-gqa-5e-top3"], "output_router_logits": True},
    "olmoe-unaligned-for-grouped-mm": {**NEW_TYPES["olmoe-gqa-5e-top3"], "intermediate_size": 42},
    "qwen3moe-router-logits": {**NEW_TYPES["qwen3moe-16e-top4-unnormed"], "output_router_logits": True},
    "qwen3moe-gqa-wide-heads": {**NEW_TYPES["qwen3moe-16e-top4-unnormed"], "head_dim": 272},  # SDPA repeats k, v
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NEW_TYPES_TRACED))
def test_options_the_new_closed_forms_do_not_describe_are_traced(name):
    config = NEW_TYPES_TRACED[name]
    assert sdpa_16bit_activations(config) is None  # the trace path (models/trace_cache.py) takes over
    meta = count_params(config, name)
    meta.pop("built_with")
    assert {k: v for k, v in analytic_table(config).items() if k != "built_with"} == meta  # still counted


def test_the_options_left_to_the_trace_keep_other_tensors():
    """Why None: dropout keeps masks, gelu_new four tensors for gelu's two, router logits in the loss more."""
    for name in ("neox-hidden-dropout", "neox-gelu-new", "olmoe-router-logits"):
        config = NEW_TYPES_TRACED[name]
        base = {k: v for k, v in config.items() if k not in ("hidden_dropout", "hidden_act", "output_router_logits")}
        assert attention_coefficients(config, "bfloat16", "sdpa") != sdpa_16bit_activations(base), name


NEW_TYPES_NOT_DESCRIBED = {
    "qwen3moe-mlp-only-layers": _small("qwen3-30b-a3b.json", hidden_size=64, num_attention_heads=4, head_dim=16,
                                       num_key_value_heads=2, moe_intermediate_size=32, num_experts=4,
                                       num_experts_per_tok=2, mlp_only_layers=[1], intermediate_size=96),
    "qwen3moe-sparse-step": _small("qwen3-30b-a3b.json", hidden_size=64, num_attention_heads=4, head_dim=16,
                                   num_key_value_heads=2, moe_intermediate_size=32, num_experts=4,
                                   num_experts_per_tok=2, decoder_sparse_step=2, intermediate_size=96),
    "qwen3moe-local-experts": _shape("qwen3-30b-a3b.json", num_local_experts=16),  # the alias of num_experts
    "qwen3moe-null-head-dim": _shape("qwen3-30b-a3b.json", head_dim=None),
    "olmoe-head-dim": _shape("olmoe-1b-7b.json", head_dim=64),  # q_norm stays hidden_size wide
    "neox-head-dim": _shape("pythia-1.4b.json", head_dim=64),  # the rotary embedding reads it, the attention not
    "neox-kv-heads": _shape("pythia-1.4b.json", num_key_value_heads=4),
    "olmo2-null-head-dim": _shape("olmo2-1b.json", head_dim=None),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NEW_TYPES_NOT_DESCRIBED))
def test_what_the_new_types_do_not_describe_is_left_to_transformers(name):
    assert analytic_table(NEW_TYPES_NOT_DESCRIBED[name]) is None
    assert parameter_order(NEW_TYPES_NOT_DESCRIBED[name]) is None
    assert sdpa_16bit_activations(NEW_TYPES_NOT_DESCRIBED[name]) is None


@pytest.mark.parametrize("name", ["qwen3moe-mlp-only-layers", "qwen3moe-sparse-step"])
def test_qwen3_moe_dense_layers_are_counted_on_the_meta_device(name):
    """Why: a dense layer among the sparse ones makes layers of two sizes."""
    assert count_params(NEW_TYPES_NOT_DESCRIBED[name], name)["layers_uniform"] is False

"""models/trace_cache.py: configs outside the catalog are counted once, traced per entry on first use, and the
lazily traced table equals the eager one of models/activations.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import LLAMA_TINY, ROOT, heavy_modules_after

from zero_planner.hardware import parse_gpus
from zero_planner.models import activations, trace_cache
from zero_planner.models.activations import activation_coefficients
from zero_planner.models.analytic import lora_16bit_activations
from zero_planner.models.count import count_params, param_table
from zero_planner.models.spec import load_model_spec, spec_from_config
from zero_planner.plan.request import PlanRequest
from zero_planner.plan.search import plan


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv(trace_cache.CACHE_DIR_ENV, str(directory))
    return directory


def _cached(directory) -> dict:
    (path,) = (directory / "models").glob("*.json")
    return json.loads(path.read_text())


MIXTRAL_TINY = json.loads((ROOT / "benchmarks" / "model_configs" / "mixtral-8e-tiny.json").read_text())
GEMMA2_TINY = {**json.loads((ROOT / "benchmarks" / "model_configs" / "gemma2-2b.json").read_text()),
               "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
               "head_dim": 32, "intermediate_size": 128, "vocab_size": 1000}  # fmt: skip
"""Traced on the meta device the first time: no catalog twin, and no closed form for gemma2 (models/analytic.py)."""


# closed-form: a model the tracer cannot run (a mixtral whose intermediate_size the grouped matmuls cannot take
# on meta; not a llama or an aligned mixtral: their 16-bit SDPA entry comes from models/analytic.py without a
# trace, so their table never falls back)
MIXTRAL_UNALIGNED = {**MIXTRAL_TINY, "intermediate_size": 4100}


# Types whose 16-bit SDPA and LoRA entries both come from models/analytic.py: the rest is traced when read
OLMO2_TINY = {"model_type": "olmo2", "num_hidden_layers": 2, "hidden_size": 96, "num_attention_heads": 6,
              "num_key_value_heads": 2, "intermediate_size": 200, "vocab_size": 1001, "eos_token_id": None,
              "pad_token_id": None}  # fmt: skip
QWEN3_MOE_TINY = {"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 48, "moe_intermediate_size": 40, "num_experts": 16,
                  "num_experts_per_tok": 4, "vocab_size": 1001, "bos_token_id": None, "eos_token_id": None}  # fmt: skip


@pytest.mark.parametrize("config, untraceable",
                         [(LLAMA_TINY, False), (MIXTRAL_TINY, False), (MIXTRAL_UNALIGNED, True), (OLMO2_TINY, False),
                          (QWEN3_MOE_TINY, False)],
                         ids=["dense", "moe", "closed-form", "olmo2-lora-closed", "qwen3-moe-lora-closed"])  # fmt: skip
def test_lazy_table_equals_the_eager_one(cache, monkeypatch, config, untraceable):
    if untraceable:  # as a model the meta device cannot run: both fall back to the closed form
        def fail(*args, **kwargs):
            raise RuntimeError("cannot run on meta")

        monkeypatch.setattr(activations, "_saved_bytes", fail)
    spec = spec_from_config(config, "tiny")
    assert spec.activations["method"] == ("closed-form" if untraceable else "traced")
    eager = activation_coefficients(config, count_params(config)["architecture"])
    assert spec.activations.materialise() == eager
    assert dict(spec.activations) == eager  # iterating traces whatever is missing, then reads the cache
    assert spec_from_config(config, "tiny").activations.materialise() == eager


def test_counts_equal_param_table(cache):
    table = trace_cache.cached_table(LLAMA_TINY)
    eager = param_table(LLAMA_TINY)
    # built_with differs: a llama config is counted by models/analytic.py, which says so there
    assert {k: v for k, v in table.items() if k not in ("activations", "built_with")} == {
        k: v for k, v in eager.items() if k not in ("activations", "built_with")
    }
    assert list(table) == list(eager)  # same key order as the catalog files


def test_a_plan_traces_only_what_it_reads(cache, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_TINY))
    result = plan(load_model_spec(str(config)), parse_gpus("1xA100-80GB"), PlanRequest(seq_len=128))
    assert result.fits and result.precision == "bf16"
    activations = _cached(cache)["activations"]
    # the closed forms' entries (16-bit SDPA and LoRA, models/analytic.py) and nothing traced: no fp32, no eager
    assert set(activations) == {"method", "16bit", "lora"} and set(activations["16bit"]) == {"sdpa"}
    assert activations["lora"] == {"16bit": lora_16bit_activations(LLAMA_TINY)}


def test_a_lora_plan_traces_the_lora_table_of_its_width_only(cache):
    spec = spec_from_config(GEMMA2_TINY, "gemma2-tiny")  # traced (a llama's LoRA entry is a closed form)
    result = plan(spec, parse_gpus("1xA100-80GB"), PlanRequest(seq_len=128, method="lora"))
    assert result.fits and not any("closed-form" in note for note in result.plan.notes)
    activations = _cached(cache)["activations"]
    assert set(activations["lora"]) == {"16bit"} and "fp32" not in activations


@pytest.mark.parametrize("config", [OLMO2_TINY, QWEN3_MOE_TINY], ids=["olmo2", "qwen3_moe"])
def test_a_lora_plan_of_a_new_type_reads_the_closed_form(cache, config):
    """The cache holds the 16-bit SDPA and LoRA entries of models/analytic.py, equal to the trace; nothing else
    is traced."""
    result = plan(spec_from_config(config, "tiny"), parse_gpus("1xA100-80GB"), PlanRequest(seq_len=128, method="lora"))
    assert result.fits
    acts = _cached(cache)["activations"]
    assert set(acts) == {"method", "16bit", "lora"}
    assert set(acts["16bit"]) == {"sdpa"} and set(acts["lora"]) == {"16bit"}
    assert acts["lora"]["16bit"] == activations.lora_dtype_coefficients(config, "bfloat16", 0.0)


def test_second_plan_of_a_config_imports_no_heavy_library(cache, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(GEMMA2_TINY))  # a llama, phi3, mixtral or gpt2 config plans without torch
    code = f"from zero_planner.cli import main\nmain(['--model', {str(config)!r}, '--gpus', '1xA100-80GB', '--json'])"
    assert "torch" in heavy_modules_after(code)  # the first counts and traces on the meta device
    assert heavy_modules_after(code) == []  # the second reads the cache


def test_normal_plan_of_a_config_imports_no_peft_or_bitsandbytes(cache, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(GEMMA2_TINY))  # traced on the meta device (a llama config would not be)
    program = (
        "import sys\nfrom zero_planner.cli import main\n"
        f"main(['--model', {str(config)!r}, '--gpus', '1xA100-80GB'])\n"
        "print('LOADED', sorted(m for m in ('peft', 'bitsandbytes', 'deepspeed') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout
    assert done.stderr == ""  # torch and transformers warnings are silenced where they arise


@pytest.mark.parametrize("damage", ["corrupt", "unwritable"])
def test_a_broken_cache_only_costs_time(tmp_path, monkeypatch, damage):
    directory = tmp_path / "cache"
    if damage == "unwritable":
        directory.write_text("a file where the cache folder should be")
    monkeypatch.setenv(trace_cache.CACHE_DIR_ENV, str(directory))
    if damage == "corrupt":
        trace_cache.cached_table(LLAMA_TINY)
        (path,) = (directory / "models").glob("*.json")
        path.write_text("{not json")
    table = trace_cache.cached_table(LLAMA_TINY)
    assert table["num_params"] == param_table(LLAMA_TINY)["num_params"]
    assert table["activations"]["16bit"]["sdpa"]["layer"] > 0


def test_key_changes_with_the_config():
    other = {**LLAMA_TINY, "num_hidden_layers": LLAMA_TINY["num_hidden_layers"] + 1}
    assert trace_cache.cache_key(LLAMA_TINY) == trace_cache.cache_key(dict(reversed(list(LLAMA_TINY.items()))))
    assert trace_cache.cache_key(LLAMA_TINY) != trace_cache.cache_key(other)

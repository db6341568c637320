"""Model catalog, exact parameter counts, and ModelSpec loading (catalog, folder, file, hub)."""

from __future__ import annotations

import json

import pytest

from zero_planner.errors import InputError
from zero_planner.models import spec as spec_module
from zero_planner.models.catalog import catalog_entry, list_catalog
from zero_planner.models.count import param_table
from zero_planner.models.spec import load_model_spec

CATALOG = list_catalog()
PUBLISHED = [(name, catalog_entry(name)["published_params"]) for name in CATALOG if catalog_entry(name)["published_params"]]

# A tiny Llama whose count is checked against the formula below, independent of transformers.
TINY_LLAMA = {
    "model_type": "llama", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": False,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-05, "hidden_act": "silu",
}
TINY_LLAMA_PARAMS = (
    2 * 512 * 128  # embed_tokens + untied lm_head
    + 2 * (
        128 * 4 * 32 * 2  # q_proj, o_proj
        + 128 * 2 * 32 * 2  # k_proj, v_proj (2 KV heads)
        + 3 * 128 * 344  # gate, up, down
        + 2 * 128  # input and post-attention RMSNorm
    )
    + 128  # final norm
)


def test_catalog_has_the_popular_models():
    assert len(CATALOG) >= 30
    for name in ["llama-2-7b", "meta-llama-3-8b", "llama-3.1-405b", "mistral-7b-v0.3", "mixtral-8x7b", "qwen2.5-72b",
                 "gemma-2-27b", "phi-3-mini-4k", "gpt2-xl", "falcon-7b", "opt-6.7b", "tinyllama-1.1b", "qwen3-8b"]:
        assert name in CATALOG


@pytest.mark.parametrize("name, published", PUBLISHED, ids=[name for name, _ in PUBLISHED])
def test_published_parameter_counts(name, published):
    # Exact: every published_params in the catalog is an exact count (model card / hub safetensors metadata).
    assert load_model_spec(name).num_params == published


@pytest.mark.parametrize(
    "name, num_params",
    [
        ("meta-llama-3-8b", 8030261248), ("llama-3.2-1b", 1235814400), ("llama-3.2-3b", 3212749824),
        ("gpt2", 124439808), ("gpt2-medium", 354823168), ("gpt2-large", 774030080), ("gpt2-xl", 1557611200),
        ("mistral-7b-v0.1", 7241732096), ("llama-2-7b", 6738415616), ("qwen2.5-0.5b", 494032768),
        ("gemma-2-2b", 2614341888), ("phi-3-mini-4k", 3821079552), ("mixtral-8x7b", 46702792704),
    ],
)
def test_well_known_counts(name, num_params):
    assert load_model_spec(name).num_params == num_params


@pytest.mark.parametrize("name", CATALOG)
def test_stored_table_reconciles(name):
    """The table's leaves add up: tensor multiset = total; embeddings + layers + final norms = total."""
    spec = load_model_spec(name)
    assert sum(numel * count for numel, count in spec.tensor_sizes) == spec.num_params
    assert [n for n, _ in spec.tensor_sizes] == sorted((n for n, _ in spec.tensor_sizes), reverse=True)
    rest = spec.num_params - spec.num_embedding_params - spec.num_layers * spec.num_layer_params
    assert 0 <= rest <= 4 * spec.hidden_size  # final norm weight (+ bias), nothing else
    assert spec.largest_tensor_numel == spec.tensor_sizes[0][0]
    assert spec.largest_layer_numel >= spec.num_layer_params
    assert spec.attn_implementation in {"sdpa", "eager"}


@pytest.mark.parametrize("name", CATALOG)
def test_stored_table_matches_a_fresh_meta_count(name):
    """Fails when transformers builds the model differently: rerun python -m zero_planner.models.build_catalog."""
    entry = catalog_entry(name)
    fresh = param_table(entry["config"])
    stored = dict(entry["params"])
    fresh.pop("built_with"), stored.pop("built_with")
    assert fresh == stored


@pytest.mark.parametrize("name", [n for n in CATALOG if catalog_entry(n)["config"]["model_type"] in {"llama", "mistral", "qwen2"}])
def test_llama_family_matches_the_formula(name):
    """Independent count: V*h (x2 untied) + L * (attention + 3*h*i + 2 norms) + final norm (+ Qwen2 qkv biases)."""
    s = load_model_spec(name)
    q, kv = s.num_attention_heads * s.head_dim, s.num_key_value_heads * s.head_dim
    bias = q + 2 * kv if s.model_type == "qwen2" else 0
    layer = s.hidden_size * (2 * q + 2 * kv) + bias + 3 * s.hidden_size * s.intermediate_size + 2 * s.hidden_size
    embeddings = s.vocab_size * s.hidden_size * (1 if s.tie_word_embeddings else 2)
    assert s.num_layer_params == layer
    assert s.num_params == embeddings + s.num_layers * layer + s.hidden_size


@pytest.mark.parametrize(
    "name, fields",
    [
        ("gpt2", dict(model_type="gpt2", hidden_size=768, num_layers=12, num_attention_heads=12, num_key_value_heads=12,
                      head_dim=64, intermediate_size=3072, vocab_size=50257, max_position_embeddings=1024,
                      tie_word_embeddings=True, gated_mlp=False, num_embedding_params=50257 * 768 + 1024 * 768)),
        ("falcon-7b", dict(hidden_size=4544, num_attention_heads=71, num_key_value_heads=1, head_dim=64,
                           intermediate_size=4 * 4544, max_position_embeddings=2048, tie_word_embeddings=True, gated_mlp=False)),
        ("opt-1.3b", dict(hidden_size=2048, intermediate_size=8192, num_layers=24, max_position_embeddings=2048,
                          tie_word_embeddings=True, gated_mlp=False, num_embedding_params=50272 * 2048 + 2050 * 2048)),
        ("mixtral-8x7b", dict(num_experts=8, num_experts_per_tok=2, intermediate_size=14336, num_key_value_heads=8, gated_mlp=True)),
        ("gemma-2-27b", dict(hidden_size=4608, head_dim=128, num_attention_heads=32, num_key_value_heads=16,
                             tie_word_embeddings=True, attn_implementation="eager")),
        ("gemma-2-2b", dict(head_dim=256, attn_implementation="eager", largest_layer_name="model.embed_tokens")),
        ("phi-3-medium-4k", dict(num_key_value_heads=10, head_dim=128, gated_mlp=True, tie_word_embeddings=False)),
        ("llama-3.2-1b", dict(tie_word_embeddings=True, num_embedding_params=128256 * 2048, num_experts=1,
                              num_experts_per_tok=1, attn_implementation="sdpa", max_position_embeddings=131072)),
        ("meta-llama-3-8b", dict(hub_id="meta-llama/Meta-Llama-3-8B", num_layers=32, head_dim=128, source="catalog",
                                 has_weights=False, weights_path=None, num_embedding_params=2 * 128256 * 4096,
                                 largest_tensor_numel=128256 * 4096, largest_layer_name="model.embed_tokens")),
    ],
)
def test_normalised_fields(name, fields):
    spec = load_model_spec(name)
    for field, value in fields.items():
        assert getattr(spec, field) == value, field


@pytest.mark.parametrize(
    "text, slug",
    [
        ("meta-llama/Meta-Llama-3-8B", "meta-llama-3-8b"),
        ("META-LLAMA/meta-llama-3-8b", "meta-llama-3-8b"),
        ("Meta-Llama-3-8B", "meta-llama-3-8b"),
        ("llama3-8b", "meta-llama-3-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("gpt2", "gpt2"),
        ("openai-community/gpt2", "gpt2"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("mistralai/Mistral-7B-v0.3", "mistral-7b-v0.3"),
        (" TinyLlama ", "tinyllama-1.1b"),
    ],
)
def test_catalog_lookup(text, slug):
    assert load_model_spec(text).name == slug


@pytest.mark.parametrize("text, suggestion", [("llama3-8bb", "meta-llama-3-8b"), ("qwen2.5-7", "qwen2.5-7b"), ("gpt3", "gpt2")])
def test_unknown_name_suggests(text, suggestion):
    with pytest.raises(InputError) as error:
        load_model_spec(text)
    assert repr(text) in str(error.value) and suggestion in str(error.value)


def test_catalog_has_every_model_type_unique_hub_ids():
    hub_ids = [catalog_entry(n)["hub_id"].lower() for n in CATALOG]
    assert len(hub_ids) == len(set(hub_ids))


def _write_tiny_llama(folder, weights=False):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    if weights:
        (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize("weights", [False, True])
def test_spec_from_folder(tmp_path, weights):
    folder = _write_tiny_llama(tmp_path / "tiny-llama", weights)
    spec = load_model_spec(str(folder))
    assert (spec.source, spec.name, spec.hub_id) == ("folder", "tiny-llama", None)
    assert spec.num_params == TINY_LLAMA_PARAMS
    assert (spec.has_weights, spec.weights_path) == (weights, str(folder) if weights else None)
    assert (spec.num_layers, spec.num_key_value_heads, spec.head_dim, spec.gated_mlp) == (2, 2, 32, True)
    assert spec.config == TINY_LLAMA


def test_spec_from_config_file(tmp_path):
    folder = _write_tiny_llama(tmp_path / "ckpt", weights=True)
    spec = load_model_spec(str(folder / "config.json"))
    assert (spec.source, spec.name, spec.has_weights, spec.weights_path) == ("file", "ckpt", False, None)
    assert spec.num_params == TINY_LLAMA_PARAMS
    assert spec.tensor_sizes[0] == (512 * 128, 2)


def test_spec_from_hub_uses_only_config(tmp_path, monkeypatch):
    config_path = _write_tiny_llama(tmp_path / "cache") / "config.json"
    asked = []
    monkeypatch.setattr(spec_module, "_download_config", lambda hub_id: asked.append(hub_id) or str(config_path))
    spec = load_model_spec("some-org/tiny-llama")
    assert asked == ["some-org/tiny-llama"]
    assert (spec.source, spec.name, spec.hub_id, spec.has_weights) == ("hub", "some-org/tiny-llama", "some-org/tiny-llama", False)
    assert spec.num_params == TINY_LLAMA_PARAMS


def test_offline_hub_id_is_an_input_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError) as error:
        load_model_spec("zero-planner-tests/no-such-model-llama")
    message = str(error.value)
    assert "'zero-planner-tests/no-such-model-llama'" in message and "\n" not in message
    assert "catalog" in message and "offline" in message and "config.json" in message


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "no-such-architecture", "hidden_size": 8}, "no-such-architecture"),
        ({"hidden_size": 8}, "model_type"),
    ],
)
def test_unbuildable_config_is_an_input_error(tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=message):
        load_model_spec(str(path))


@pytest.mark.parametrize("text, message", [("./missing/config.json", "no such file"), ("/nope/model", "no such file")])
def test_missing_paths(text, message):
    with pytest.raises(InputError, match=message):
        load_model_spec(text)


def test_folder_without_config(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        load_model_spec(str(tmp_path))


@pytest.mark.parametrize("name", ["gemma-2-2b", "llama-3.2-1b", "gpt2"])
def test_attn_implementation_agrees_with_modeling(name):
    from zero_planner.run.modeling import attn_implementation_for

    assert load_model_spec(name).attn_implementation == attn_implementation_for(catalog_entry(name)["config"])


def test_imports_stay_light():
    from conftest import heavy_modules_after

    code = (
        "from zero_planner.models import load_model_spec; from zero_planner.hardware import parse_gpus\n"
        "load_model_spec('meta-llama/Meta-Llama-3-8B'); parse_gpus('2x8xH100', '1TiB')"
    )
    assert heavy_modules_after(code) == []


def test_invalid_config_values_are_an_input_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_LLAMA, "hidden_size": 130, "num_attention_heads": 3, "head_dim": None}))
    with pytest.raises(InputError) as error:
        load_model_spec(str(path))
    assert "\n" not in str(error.value) and "llama" in str(error.value)


def test_unreachable_hub_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(spec_module, "_hub_reachable", lambda: False)
    with pytest.raises(InputError, match="cannot be fetched .*PATH/TO/config.json"):
        load_model_spec("zero-planner-tests/no-such-model")

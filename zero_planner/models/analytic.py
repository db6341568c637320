"""Parameter tables of llama-style models counted from config.json alone, and their activation tables borrowed
from the catalog: a config.json or a model folder of a known architecture plans without torch or transformers.

    analytic_table(config)        -> spec.count_params(config) without its "built_with", or None
    catalog_activations(config)   -> the activation table of a catalog model of the same architecture, or None
    sdpa_16bit_activations(config) -> the table's 16-bit SDPA entry (what a bf16/fp16 plan reads), or None

Covered: the dense decoders whose Hugging Face modules are `LlamaForCausalLM`'s (llama, mistral, qwen2, qwen3):
embedding, per layer q/k/v/o projections, a gated MLP (gate, up, down) and two RMSNorms (qwen3 adds q/k
RMSNorms over head_dim), a final RMSNorm and an lm_head unless tied. Anything else (other model types,
quantization, remote code, an option this module does not know) returns None and is counted on the meta device
as before. tests/test_analytic.py checks every table here against that meta-device count, for every catalog and
benchmark config of these types.

The activation tables (models/activations.py) are traced per token from one and two decoder layers, so they do
not depend on num_hidden_layers, nor on keys that only set numerics, positions or masks (rope, norm epsilon,
sliding windows: a mask is never saved for backward). Two configs that agree on everything else keep the same
tensors; a config that agrees with a catalog entry (a fine-tune's folder, the hub's config.json of a catalog
model, the same architecture with fewer layers) takes the catalog's traced table. tests/test_analytic.py traces
the benchmark configs and compares. Any other covered config gets the entry a 16-bit plan reads from
sdpa_16bit_activations (equal to the trace for every catalog, benchmark and test config); the other entries are
traced when read (models/trace_cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class _Family:
    """How one model_type builds its modules (transformers' configuration_*.py and modeling_*.py)."""

    defaults: dict[str, Any]
    """The config class's defaults for every key that shapes a tensor or the forward pass."""
    qkv_bias: str | bool
    """Bias on q/k/v: a config key (`attention_bias`) or a constant (qwen2: always)."""
    o_bias: str | bool
    mlp_bias: str | bool
    qk_norm: bool = False
    """qwen3: RMSNorm over head_dim on q and on k."""


_COMMON = {"hidden_act": "silu", "attention_dropout": 0.0, "tie_word_embeddings": False, "head_dim": None,
           "num_key_value_heads": None}  # fmt: skip
FAMILIES = {
    "llama": _Family({**_COMMON, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                      "num_attention_heads": 32, "max_position_embeddings": 2048, "attention_bias": False,
                      "mlp_bias": False, "pretraining_tp": 1}, "attention_bias", "attention_bias", "mlp_bias"),  # fmt: skip
    "mistral": _Family({**_COMMON, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32},
                       False, False, False),  # fmt: skip
    "qwen2": _Family({**_COMMON, "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768},
                     True, False, False),  # fmt: skip
    "qwen3": _Family({**_COMMON, "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
                      "max_position_embeddings": 32768, "attention_bias": False},
                     "attention_bias", "attention_bias", False, qk_norm=True),  # fmt: skip
}

# Keys that change no tensor's shape and nothing autograd keeps: metadata, token ids, numerics of the norm and
# the rotary embedding, and masks (sliding windows). num_hidden_layers is counted, but the activation tables
# are per layer.
_NEUTRAL = {"_name_or_path", "architectures", "transformers_version", "torch_dtype", "dtype", "use_cache",
            "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps", "rope_theta",
            "rope_scaling", "rope_parameters", "max_position_embeddings", "sliding_window", "use_sliding_window",
            "max_window_layers", "layer_types", "tokenizer_class", "output_attentions", "output_hidden_states",
            "return_dict", "model_type", "num_hidden_layers"}  # fmt: skip
# Keys whose presence means a model this module does not describe (weights stored otherwise, custom code).
_FOREIGN = {"quantization_config", "auto_map", "num_local_experts", "num_experts", "n_routed_experts"}


def _resolved(config: dict[str, Any]) -> dict[str, Any] | None:
    """Returns config over its family's defaults, head_dim and num_key_value_heads filled in as the config class
    fills them; None for a model_type not covered or a config with a key this module does not describe."""
    family = FAMILIES.get(config.get("model_type"))
    if family is None or _FOREIGN & config.keys() or (config.get("pretraining_tp") or 1) != 1:
        return None
    c = {**family.defaults, **{k: v for k, v in config.items() if v is not None or k not in family.defaults}}
    sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    if not all(type(c.get(k)) is int and c[k] > 0 for k in sizes):
        return None
    if c["head_dim"] is None and c["hidden_size"] % c["num_attention_heads"]:
        return None  # transformers rejects it; let it say so (spec.count_params turns that into an InputError)
    c["head_dim"] = c["head_dim"] or c["hidden_size"] // c["num_attention_heads"]
    c["num_key_value_heads"] = c["num_key_value_heads"] or c["num_attention_heads"]
    for k in ("head_dim", "num_key_value_heads"):
        if type(c[k]) is not int or c[k] <= 0:
            return None
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        return None  # grouped-query attention needs whole groups; anything odd is left to transformers
    return c


def _flag(c: dict[str, Any], rule: str | bool) -> bool:
    return bool(c.get(rule, False)) if isinstance(rule, str) else rule


def analytic_table(config: dict[str, Any]) -> dict[str, Any] | None:
    """Returns count_params(config)'s table (less "built_with", which says "analytic" instead), counted from the
    config alone; None where the model_type or an option is not covered (then count on the meta device)."""
    c = _resolved(config)
    if c is None:
        return None
    family = FAMILIES[c["model_type"]]
    h, i, v, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    q = c["num_attention_heads"] * c["head_dim"]  # width of q and of o_proj's input
    kv = c["num_key_value_heads"] * c["head_dim"]
    tied = bool(c["tie_word_embeddings"])
    qkv_bias, o_bias, mlp_bias = (_flag(c, rule) for rule in (family.qkv_bias, family.o_bias, family.mlp_bias))

    # One decoder layer's parameter tensors, in registration order (first of equals wins below, as in spec.py).
    # linears: (name, in_features, out_features, bias).
    linears = [("self_attn.q_proj", h, q, qkv_bias), ("self_attn.k_proj", h, kv, qkv_bias),
               ("self_attn.v_proj", h, kv, qkv_bias), ("self_attn.o_proj", q, h, o_bias),
               ("mlp.gate_proj", h, i, mlp_bias), ("mlp.up_proj", h, i, mlp_bias), ("mlp.down_proj", i, h, mlp_bias)]  # fmt: skip
    layer: list[tuple[str, int]] = []
    for name, n_in, n_out, bias in linears[:4]:
        layer += [(f"{name}.weight", n_in * n_out)] + ([(f"{name}.bias", n_out)] if bias else [])
    if family.qk_norm:
        layer += [("self_attn.q_norm.weight", c["head_dim"]), ("self_attn.k_norm.weight", c["head_dim"])]
    for name, n_in, n_out, bias in linears[4:]:
        layer += [(f"{name}.weight", n_in * n_out)] + ([(f"{name}.bias", n_out)] if bias else [])
    layer += [("input_layernorm.weight", h), ("post_attention_layernorm.weight", h)]
    num_layer_params = sum(n for _, n in layer)

    tensors = [("model.embed_tokens.weight", v * h)]
    tensors += [(f"model.layers.{k}.{name}", n) for k in range(min(layers, 1)) for name, n in layer]
    tensors += [("model.norm.weight", h)] + ([] if tied else [("lm_head.weight", v * h)])
    largest_tensor = max(tensors, key=lambda t: t[1])
    blocks = [("model.embed_tokens", v * h)] + [(f"model.layers.{k}", num_layer_params) for k in range(min(layers, 1))]
    blocks += [] if tied else [("lm_head", v * h)]
    largest_layer = max(blocks, key=lambda b: b[1])

    sizes: dict[int, int] = {}
    for numel, count in [(v * h, 1 if tied else 2), (h, 1)] + [(n, layers) for _, n in layer]:
        sizes[numel] = sizes.get(numel, 0) + count
    num_embedding_params = v * h * (1 if tied else 2)
    shapes = [(n_in, n_out) for _, n_in, n_out, _ in linears]
    return {
        "built_with": {"analytic": "zero_planner.models.analytic"},
        "attn_implementation": "sdpa",  # transformers builds every covered family with SDPA
        "num_params": num_embedding_params + h + layers * num_layer_params,
        "num_embedding_params": num_embedding_params,
        "num_layer_params": num_layer_params,
        "num_layers": layers,
        "layers_uniform": True,
        "largest_tensor": {"name": largest_tensor[0], "numel": largest_tensor[1]},
        "largest_layer": {"name": largest_layer[0], "numel": largest_layer[1]},
        "architecture": {
            "hidden_size": h,
            "intermediate_size": i,
            "num_attention_heads": c["num_attention_heads"],
            "num_key_value_heads": c["num_key_value_heads"],
            "head_dim": c["head_dim"],
            "vocab_size": v,
            "max_position_embeddings": int(c["max_position_embeddings"]),
            "tie_word_embeddings": tied,
            "num_experts": 1,
            "num_experts_per_tok": 1,
            "gated_mlp": True,
        },
        "tensors": [[numel, count] for numel, count in sorted(sizes.items(), reverse=True)],
        "linear": {  # peft "all-linear": every projection of every layer, the head left out (spec.py)
            "count": len(shapes) * layers,
            "in_out_sum": layers * sum(a + b for a, b in shapes),
            "in_sum": layers * sum(a for a, _ in shapes),
            "numel": layers * sum(a * b for a, b in shapes),
            "largest_numel": max(a * b for a, b in shapes) if layers else 0,
        },
    }


def _signature(config: dict[str, Any]) -> tuple | None:
    """Returns what the activation trace of `config` depends on (model_type and every non-neutral key, defaults
    filled in), or None where the config is not covered."""
    c = _resolved(config)
    if c is None:
        return None
    return (c["model_type"], tuple(sorted((k, repr(v)) for k, v in c.items() if k not in _NEUTRAL)))


@lru_cache(maxsize=1)
def _catalog_by_signature() -> dict[tuple, str]:
    from zero_planner.models.spec import _catalog

    index: dict[tuple, str] = {}
    for slug, entry in _catalog().items():
        signature = _signature(entry["config"])
        if signature is not None and entry.get("params", {}).get("activations"):
            index.setdefault(signature, slug)
    return index


def catalog_twin(config: dict[str, Any]) -> str | None:
    """Returns the slug of a catalog model whose activation table `config` shares, or None."""
    signature = _signature(config)
    return None if signature is None else _catalog_by_signature().get(signature)


def catalog_activations(config: dict[str, Any]) -> dict[str, Any] | None:
    """Returns the traced activation table of the catalog model `config` shares it with (catalog_twin), or None."""
    from zero_planner.models.spec import _catalog

    slug = catalog_twin(config)
    return None if slug is None else _catalog()[slug]["params"]["activations"]


def sdpa_16bit_activations(config: dict[str, Any]) -> dict[str, float] | None:
    """Returns {layer, layer_per_seq, rest}: bytes per token autograd keeps in bf16/fp16 with SDPA, as
    models/activations.py traces them (attention_coefficients(config, "bfloat16", "sdpa")); None where not covered.

    Per decoder layer: two RMSNorms keep their fp32 input (4h), the fp32 rsqrt of each row (4) and the 16-bit
    normalised input of the weight multiply (2h); q/k/v keep their input (h), the SDPA kernels keep q, k, v, the
    output and an fp32 logsumexp per head (4 * heads), o_proj its own copy of the output (q); the gated MLP keeps
    its input, gate, act(gate), up and their product (h + 4i). qwen3's q/k RMSNorms keep the same three per head
    row. Outside the layers: the final RMSNorm, lm_head's input (h), the fp32 logits (4V), rotary cos and sin
    (16-bit, head_dim each, shared by all layers), the int64 input ids of the embedding and the shifted labels of
    the loss (8 + 8), and per sequence the labels' padding element and the loss's fp32 total weight (12 bytes),
    which the traced per-token figure spreads over the TRACE_SEQ[0]-token trace.
    """
    from zero_planner.models.activations import TRACE_SEQ

    c = _resolved(config)
    if c is None:
        return None
    h, i, v, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    q, kv = heads * hd, kv_heads * hd
    norm = 4 * h + 4 + 2 * h  # fp32 input, fp32 rsqrt, 16-bit normalised input (bytes per row)
    layer = 2 * norm + 2 * (h + 3 * q + 2 * kv) + 4 * heads + 2 * (h + 4 * i)
    if FAMILIES[c["model_type"]].qk_norm:
        layer += 6 * (q + kv) + 4 * (heads + kv_heads)
    rest = norm + 2 * h + 4 * v + 2 * 2 * hd + 8 + 8 + 12 / TRACE_SEQ[0]
    return {"layer": round(float(layer), 3), "layer_per_seq": 0.0, "rest": round(rest, 3)}

"""Parameter tables of the common decoder families counted from config.json alone, and their activation tables
borrowed from the catalog: a config.json or a model folder of a known architecture plans without torch or
transformers.

    analytic_table(config)        -> count.count_params(config) without its "built_with", or None
    parameter_order(config)       -> every parameter tensor's numel in named_parameters' order, or None
    catalog_activations(config)   -> the activation table of a catalog model of the same architecture, or None
    sdpa_16bit_activations(config) -> the table's 16-bit SDPA entry (what a bf16/fp16 plan reads), or None
    lora_16bit_activations(config) -> the LoRA table's 16-bit entry (all but phi3, gemma2 and gpt2), or None

Covered, as transformers' modeling_*.py builds them (_modules lists each layout's tensors):
- the dense decoders whose modules are `LlamaForCausalLM`'s (llama, mistral, qwen2, qwen3): embedding, per layer
  q/k/v/o projections, a gated MLP (gate, up, down) and two RMSNorms (qwen3 adds q/k RMSNorms over head_dim), a
  final RMSNorm and an lm_head unless tied;
- phi3: the same with q/k/v fused into qkv_proj and gate/up into gate_up_proj, no biases;
- mixtral: llama's attention, and for the MLP a router (experts x hidden) and every expert's gate_up and down
  matrices stacked in one tensor each;
- qwen3_moe: the same with qwen3's q/k RMSNorms over head_dim and moe_intermediate_size wide experts, registered
  before the router; every layer sparse (mlp_only_layers or a decoder_sparse_step other than 1, which make dense
  layers among them, are left to transformers);
- olmoe: mixtral's modules with q/k RMSNorms over q's and k's whole width;
- olmo2: llama's modules with q/k RMSNorms over the whole width and the two per-layer RMSNorms after attention
  and after the MLP (post_attention_layernorm, post_feedforward_layernorm) instead of before;
- gpt_neox: LayerNorms with biases (both registered first), the fused query_key_value and dense (biases with
  attention_bias), an ungated MLP dense_h_to_4h / dense_4h_to_h with biases, a final LayerNorm, lm_head untied by
  default;
- gemma2: llama's modules with four RMSNorms per layer (before and after attention and MLP), tied by default;
  built with eager attention (soft-capping), as count._build_on_meta gets it;
- gpt2: learned positions, Conv1D c_attn (fused q/k/v) / c_proj / c_fc / c_proj with biases, LayerNorms with
  biases, lm_head tied to wte.
Anything else (other model types, quantization, remote code, an option or a null this module does not know)
returns None and is counted on the meta device as before. tests/test_analytic.py checks every table here against
that meta-device count, for every catalog and benchmark config of these types and odd shapes of each layout.

The activation tables (models/activations.py) are traced per token from one and two decoder layers, so they do
not depend on num_hidden_layers, nor on keys that only set numerics, positions or masks (rope, norm epsilon,
sliding windows: the traced sequences never reach a window, and memory.py adds the mask SDPA keeps once a
sequence does). Two configs that agree on everything else keep the same
tensors; a config that agrees with a catalog entry (a fine-tune's folder, the hub's config.json of a catalog
model, the same architecture with fewer layers) takes the catalog's traced table. tests/test_analytic.py traces
the benchmark configs and compares. Any other config of a llama-style type, phi3, mixtral, qwen3_moe, olmoe,
olmo2, gpt_neox or gpt2 gets the entry a 16-bit plan reads from sdpa_16bit_activations (equal to the trace for
every catalog, benchmark and test config of each type; options it was not checked against return None), and a
llama-style type, mixtral, olmo2, gpt_neox, qwen3_moe or olmoe the 16-bit entry of the LoRA table from
lora_16bit_activations (the same checks); the other entries (fp32, eager attention, the LoRA table of phi3 and
gpt2), and every entry of a gemma2 (its
plans read eager attention, whose closed form is not written), are traced when read (models/trace_cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from zero_planner.models.activations import TRACE_SEQ
from zero_planner.models.catalog import catalog_entries

Layout = Literal["llama", "phi3", "moe", "gemma2", "gpt2", "olmo2", "gpt_neox"]


@dataclass(frozen=True)
class _Family:
    """How one model_type builds its modules (transformers' configuration_*.py and modeling_*.py)."""

    defaults: dict[str, Any]
    """The config class's defaults for every key that shapes a tensor or the forward pass."""
    qkv_bias: str | bool = False
    """Bias on q/k/v: a config key (`attention_bias`) or a constant (qwen2: always)."""
    o_bias: str | bool = False
    mlp_bias: str | bool = False
    qk_norm: Literal["", "head", "full"] = ""
    """RMSNorms on q and on k after their projections: over head_dim, shared by the heads (qwen3, qwen3_moe), or
    over the projection's whole width (olmo2, olmoe: q_norm over heads x head_dim, k_norm over kv_heads x head_dim)."""
    layout: Layout = "llama"
    """Which modules a layer has: llama (q, k, v, o; gate, up, down; 2 RMSNorms), phi3 (fused qkv_proj and
    gate_up_proj), moe (llama's attention; a router and stacked experts for the MLP: mixtral, qwen3_moe, olmoe),
    gemma2 (4 RMSNorms), gpt2 (Conv1D c_attn, c_proj, c_fc, LayerNorms with biases, learned positions), olmo2
    (llama's modules with the two RMSNorms after attention and after the MLP), gpt_neox (LayerNorms with biases,
    fused query_key_value, dense, an ungated MLP with biases)."""
    experts: str = ""
    """moe: the config key of the expert count (mixtral: num_local_experts; qwen3_moe, olmoe: num_experts)."""
    expert_width: str = "intermediate_size"
    """moe: the config key of each expert's intermediate width (qwen3_moe: moe_intermediate_size)."""
    router_first: bool = True
    """moe: the sparse block registers its router before the experts (Qwen3MoeSparseMoeBlock: the experts first)."""
    norm_topk: str | bool = True
    """moe: whether the router divides the top-k weights by their sum: always (mixtral) or a config key
    (norm_topk_prob)."""
    fp32_routing_weights: bool = True
    """moe: the routing weights stay fp32 (mixtral) or are cast to the logits' 16-bit dtype (qwen3_moe, olmoe)."""
    reads_head_dim: bool = True
    """Whether the attention reads a config's head_dim: phi3, olmoe and gpt_neox size heads as hidden / heads and
    read head_dim elsewhere (rope, norms) where the config sets one, which this module does not describe."""
    attn_implementation: str = "sdpa"
    """What count._build_on_meta gets from transformers for this type (gemma2 is built with eager attention)."""
    keys: frozenset[str] = frozenset()
    """Keys of _FOREIGN this type reads itself (mixtral: num_local_experts; qwen3_moe, olmoe: num_experts)."""
    neutral: frozenset[str] = frozenset()
    """Keys this type's modules never read, beyond _NEUTRAL (gemma2 reads hidden_activation, not hidden_act)."""
    reads: frozenset[str] = frozenset()
    """Keys of _NEUTRAL that change what this type keeps (gpt_neox: use_cache, see _gpt_neox_sdpa_16bit)."""
    closed_form: bool = False
    """Whether sdpa_16bit_activations is checked against the trace for this type (tests/test_analytic.py)."""


_COMMON = {"hidden_act": "silu", "attention_dropout": 0.0, "tie_word_embeddings": False, "head_dim": None,
           "num_key_value_heads": None}  # fmt: skip
FAMILIES = {
    "llama": _Family({**_COMMON, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                      "num_attention_heads": 32, "max_position_embeddings": 2048, "attention_bias": False,
                      "mlp_bias": False, "pretraining_tp": 1}, "attention_bias", "attention_bias", "mlp_bias",
                     closed_form=True),  # fmt: skip
    "mistral": _Family({**_COMMON, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32},
                       closed_form=True),  # fmt: skip
    "qwen2": _Family({**_COMMON, "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768},
                     True, closed_form=True),  # fmt: skip
    "qwen3": _Family({**_COMMON, "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
                      "max_position_embeddings": 32768, "attention_bias": False},
                     "attention_bias", "attention_bias", qk_norm="head", closed_form=True),  # fmt: skip
    # Phi3Attention reads no head_dim and no attention_bias (hidden_size // heads, no biases): a config that sets
    # head_dim is left to transformers (_resolved).
    "phi3": _Family({**_COMMON, "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
                     "num_attention_heads": 32, "max_position_embeddings": 4096, "resid_pdrop": 0.0,
                     "embd_pdrop": 0.0, "partial_rotary_factor": 1.0, "pad_token_id": 32000},
                    layout="phi3", reads_head_dim=False, closed_form=True),  # fmt: skip
    "mixtral": _Family({**_COMMON, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                        "num_local_experts": 8, "num_experts_per_tok": 2, "output_router_logits": False,
                        "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0},
                       layout="moe", keys=frozenset({"num_local_experts"}), experts="num_local_experts",
                       closed_form=True),  # fmt: skip
    "gemma2": _Family({**_COMMON, "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                       "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                       "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
                       "tie_word_embeddings": True, "attention_bias": False, "query_pre_attn_scalar": 256,
                       "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
                       "use_bidirectional_attention": None, "pad_token_id": 0},
                      "attention_bias", "attention_bias", layout="gemma2", attn_implementation="eager",
                      neutral=frozenset({"hidden_act"})),  # fmt: skip
    "gpt2": _Family({"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
                     "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
                     "attn_pdrop": 0.1, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                     "reorder_and_upcast_attn": False, "add_cross_attention": False, "tie_word_embeddings": True},
                    layout="gpt2", closed_form=True,
                    neutral=frozenset({"n_layer", "n_positions", "n_ctx", "summary_type", "summary_use_proj",
                                       "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
                                       "layer_norm_epsilon"})),  # fmt: skip
    # Qwen3MoeConfig: 4 key/value heads unless set; Qwen3MoeAttention reads head_dim where the config has one
    # (getattr), hidden / heads otherwise. Layers that are dense (mlp_only_layers, decoder_sparse_step) are left to
    # transformers (_resolved).
    "qwen3_moe": _Family({**_COMMON, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
                          "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 32768,
                          "attention_bias": False, "decoder_sparse_step": 1, "moe_intermediate_size": 768,
                          "num_experts_per_tok": 8, "num_experts": 128, "norm_topk_prob": False,
                          "output_router_logits": False, "router_aux_loss_coef": 0.001, "mlp_only_layers": None},
                         "attention_bias", "attention_bias", qk_norm="head", layout="moe",
                         keys=frozenset({"num_experts"}), experts="num_experts", expert_width="moe_intermediate_size",
                         router_first=False, norm_topk="norm_topk_prob", fp32_routing_weights=False,
                         closed_form=True),  # fmt: skip
    "olmoe": _Family({**_COMMON, "vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048,
                      "num_attention_heads": 16, "max_position_embeddings": 4096, "attention_bias": False,
                      "clip_qkv": None, "num_experts_per_tok": 8, "num_experts": 64, "output_router_logits": False,
                      "router_aux_loss_coef": 0.01, "norm_topk_prob": False},
                     "attention_bias", "attention_bias", qk_norm="full", layout="moe", keys=frozenset({"num_experts"}),
                     experts="num_experts", norm_topk="norm_topk_prob", fp32_routing_weights=False,
                     reads_head_dim=False, closed_form=True),  # fmt: skip
    "olmo2": _Family({**_COMMON, "vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008,
                      "num_attention_heads": 32, "max_position_embeddings": 2048, "attention_bias": False},
                     "attention_bias", "attention_bias", qk_norm="full", layout="olmo2", closed_form=True),  # fmt: skip
    # GPTNeoXConfig: rotary_pct (a kwarg its rope conversion reads, 0.25 when absent) and rotary_emb_base; the
    # attention reads neither head_dim nor num_key_value_heads (hidden / heads, multi-head).
    "gpt_neox": _Family({"vocab_size": 50432, "hidden_size": 6144, "intermediate_size": 24576,
                         "num_attention_heads": 64, "hidden_act": "gelu", "attention_dropout": 0.0,
                         "hidden_dropout": 0.0, "max_position_embeddings": 2048, "tie_word_embeddings": False,
                         "use_parallel_residual": True, "attention_bias": True, "rotary_pct": 0.25,
                         "use_cache": True, "head_dim": None, "num_key_value_heads": None},
                        "attention_bias", "attention_bias", True, layout="gpt_neox", reads_head_dim=False,
                        neutral=frozenset({"rotary_emb_base", "layer_norm_eps", "classifier_dropout"}),
                        reads=frozenset({"use_cache"}), closed_form=True),  # fmt: skip
}

# Keys that change no tensor's shape and nothing autograd keeps: metadata, token ids, numerics of the norm and
# the rotary embedding, and masks (sliding windows). num_hidden_layers is counted, but the activation tables
# are per layer.
_NEUTRAL = {"_name_or_path", "architectures", "transformers_version", "torch_dtype", "dtype", "use_cache",
            "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps", "rope_theta",
            "rope_scaling", "rope_parameters", "max_position_embeddings", "sliding_window", "use_sliding_window",
            "max_window_layers", "layer_types", "tokenizer_class", "output_attentions", "output_hidden_states",
            "return_dict", "model_type", "num_hidden_layers", "original_max_position_embeddings",
            "cache_implementation", "task_specific_params"}  # fmt: skip
# Keys whose presence means a model this module does not describe (weights stored otherwise, custom code).
_FOREIGN = {"quantization_config", "auto_map", "num_local_experts", "num_experts", "n_routed_experts"}
# Config classes whose validate_architecture wants hidden_size divisible by the heads even where head_dim is set.
_HEADS_DIVIDE_HIDDEN = {"llama", "gemma2"}
# Config classes without a head_dim field whose attention reads getattr(config, "head_dim", hidden // heads).
_HEAD_DIM_ATTRIBUTE = {"qwen3_moe", "olmo2"}
# GPT2Config's aliases (attribute_map): a config spelling them is left to transformers.
_GPT2_ALIASES = {"hidden_size", "num_attention_heads", "num_hidden_layers", "max_position_embeddings"}


def _resolved(config: dict[str, Any]) -> dict[str, Any] | None:
    """Returns config over its family's defaults, head_dim and num_key_value_heads filled in as the config class
    fills them (gpt2: under the llama names as well); None for a model_type not covered or a config with a key
    this module does not describe."""
    family = FAMILIES.get(config.get("model_type"))
    if family is None or (_FOREIGN - family.keys) & config.keys() or (config.get("pretraining_tp") or 1) != 1:
        return None
    if not family.reads_head_dim and "head_dim" in config:
        return None  # e.g. Phi3Attention reads a head_dim attribute where the config has one; not described here
    if config.get("model_type") in _HEAD_DIM_ATTRIBUTE and "head_dim" in config and config["head_dim"] is None:
        return None  # getattr(config, "head_dim", ...) reads the null; let transformers say so
    if family.layout != "llama" and any(config[k] is None and v is not None for k, v in family.defaults.items()
                                        if k in config):  # fmt: skip
        return None  # e.g. gemma2's head_dim: int; its strict config class rejects None, let it say so
    if family.layout == "gpt2" and (_GPT2_ALIASES & config.keys() or config.get("add_cross_attention")):
        return None
    if family.layout == "gpt_neox" and "num_key_value_heads" in config:
        return None  # GPTNeoXAttention has no key/value heads of its own; a config naming some is not described
    if family.layout == "moe" and family.experts == "num_experts" and (config.get("mlp_only_layers")
                                                                     or config.get("decoder_sparse_step", 1) != 1):
        return None  # qwen3_moe's dense layers among the sparse ones: layers of two sizes, counted on the meta device
    c = {**family.defaults, **{k: v for k, v in config.items() if v is not None or k not in family.defaults}}
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if family.layout == "phi3" and isinstance(rope, dict) and "partial_rotary_factor" in rope:
        c["partial_rotary_factor"] = rope["partial_rotary_factor"]  # Phi3Config takes the rope dict's first
    if family.layout == "gpt_neox":  # GPTNeoXConfig.convert_rope_params_to_dict: the rope dict's, else rotary_pct
        c["rotary_pct"] = rope["partial_rotary_factor"] if isinstance(rope, dict) and "partial_rotary_factor" in rope \
            else c["rotary_pct"]
        if type(c["rotary_pct"]) not in (int, float) or not 0 < c["rotary_pct"] <= 1:
            return None
    if family.layout == "gpt2":
        if not all(type(c.get(k)) is int and c[k] > 0 for k in ("n_embd", "n_head", "n_layer", "n_positions")):
            return None
        inner = c["n_inner"] if c["n_inner"] is not None else 4 * c["n_embd"]
        c = {**c, "hidden_size": c["n_embd"], "num_attention_heads": c["n_head"], "num_hidden_layers": c["n_layer"],
             "intermediate_size": inner, "max_position_embeddings": c["n_positions"], "num_key_value_heads": None,
             "head_dim": None}  # fmt: skip
    sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    if not all(type(c.get(k)) is int and c[k] > 0 for k in sizes):
        return None
    pad = c.get("pad_token_id")  # the embedding's padding_idx (gpt2's wte has none)
    if family.layout != "gpt2" and type(pad) is int and not -c["vocab_size"] <= pad < c["vocab_size"]:
        return None  # nn.Embedding rejects it; let transformers say so
    if family.layout == "moe" and not all(type(c.get(k)) is int and c[k] > 0
                                          for k in (family.experts, family.expert_width, "num_experts_per_tok")):
        return None  # (qwen3_moe with no experts builds dense layers: not described here)
    checked = c["head_dim"] is None or c["model_type"] in _HEADS_DIVIDE_HIDDEN
    if checked and c["hidden_size"] % c["num_attention_heads"]:
        return None  # transformers rejects it; let it say so (count.count_params turns that into an InputError)
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


def _linear(name: str, n_in: int, n_out: int, bias: bool) -> list[tuple[str, int]]:
    """Returns the parameter tensors of nn.Linear(n_in, n_out) (or Conv1D(n_out, n_in)) named `name`."""
    return [(f"{name}.weight", n_in * n_out)] + ([(f"{name}.bias", n_out)] if bias else [])


@dataclass(frozen=True)
class _Modules:
    """The parameter tensors of one model, as named_parameters lists them; numels in elements."""

    embed: str
    """Module path of the input embedding (lm_head ties to its weight)."""
    layers: str
    """Module path of the decoder layers' ModuleList."""
    pre: list[tuple[str, int]]
    """Top-level tensors between the input embedding and the layers (gpt2: learned positions)."""
    layer: list[tuple[str, int]]
    """One decoder layer, in registration order (first of equals wins for the largest, as in count.py)."""
    post: list[tuple[str, int]]
    """The final norm."""
    linears: list[tuple[int, int]]
    """(in_features, out_features) of each layer's nn.Linear / Conv1D: what peft's "all-linear" adapts."""


def _modules(c: dict[str, Any], family: _Family) -> _Modules:
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]  # width of q and of o_proj's input
    kv = c["num_key_value_heads"] * c["head_dim"]
    if family.layout == "gpt2":  # GPT2Block: Conv1D weights stored [in, out], every one with a bias
        convs = [("attn.c_attn", h, 3 * h), ("attn.c_proj", h, h), ("mlp.c_fc", h, i), ("mlp.c_proj", i, h)]
        attn = [t for conv in convs[:2] for t in _linear(*conv, True)]
        mlp = [t for conv in convs[2:] for t in _linear(*conv, True)]
        layer = [("ln_1.weight", h), ("ln_1.bias", h), *attn, ("ln_2.weight", h), ("ln_2.bias", h), *mlp]
        return _Modules("transformer.wte", "transformer.h", [("transformer.wpe.weight", c["n_positions"] * h)],
                        layer, [("transformer.ln_f.weight", h), ("transformer.ln_f.bias", h)],
                        [(a, b) for _, a, b in convs])  # fmt: skip
    if family.layout == "gpt_neox":  # GPTNeoXLayer registers both LayerNorms before the attention and the MLP
        linears = [("attention.query_key_value", h, 3 * h, _flag(c, family.qkv_bias)),
                   ("attention.dense", h, h, _flag(c, family.o_bias)), ("mlp.dense_h_to_4h", h, i, True),
                   ("mlp.dense_4h_to_h", i, h, True)]  # fmt: skip
        norms = ("input_layernorm", "post_attention_layernorm")
        layer = [(f"{norm}.{p}", h) for norm in norms for p in ("weight", "bias")]
        layer += [t for linear in linears for t in _linear(*linear)]
        return _Modules("gpt_neox.embed_in", "gpt_neox.layers", [], layer,
                        [("gpt_neox.final_layer_norm.weight", h), ("gpt_neox.final_layer_norm.bias", h)],
                        [(a, b) for _, a, b, _ in linears])  # fmt: skip
    qkv_bias, o_bias, mlp_bias = (_flag(c, rule) for rule in (family.qkv_bias, family.o_bias, family.mlp_bias))
    # linears: (name, in_features, out_features, bias), in registration order
    if family.layout == "phi3":  # Phi3Attention registers o_proj before the fused qkv_proj
        attn = [("self_attn.o_proj", q, h, False), ("self_attn.qkv_proj", h, q + 2 * kv, False)]
        mlp = [("mlp.gate_up_proj", h, 2 * i, False), ("mlp.down_proj", i, h, False)]
    else:
        attn = [("self_attn.q_proj", h, q, qkv_bias), ("self_attn.k_proj", h, kv, qkv_bias),
                ("self_attn.v_proj", h, kv, qkv_bias), ("self_attn.o_proj", q, h, o_bias)]  # fmt: skip
        mlp = [] if family.layout == "moe" else [("mlp.gate_proj", h, i, mlp_bias), ("mlp.up_proj", h, i, mlp_bias),
                                                     ("mlp.down_proj", i, h, mlp_bias)]  # fmt: skip
    layer = [t for name, n_in, n_out, bias in attn for t in _linear(name, n_in, n_out, bias)]
    if family.qk_norm == "head":
        layer += [("self_attn.q_norm.weight", c["head_dim"]), ("self_attn.k_norm.weight", c["head_dim"])]
    elif family.qk_norm == "full":  # Olmo2Attention / OlmoeAttention: over q's and k's whole width
        layer += [("self_attn.q_norm.weight", q), ("self_attn.k_norm.weight", kv)]
    if family.layout == "moe":  # the sparse block: the router's weight and every expert's matrices stacked
        e, i = c[family.experts], c[family.expert_width]
        router = [("mlp.gate.weight", e * h)]
        experts = [("mlp.experts.gate_up_proj", e * 2 * i * h), ("mlp.experts.down_proj", e * h * i)]
        layer += router + experts if family.router_first else experts + router
    layer += [t for name, n_in, n_out, bias in mlp for t in _linear(name, n_in, n_out, bias)]
    norms = ["input_layernorm", "post_attention_layernorm"]
    if family.layout == "gemma2":
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    if family.layout == "olmo2":  # Olmo2DecoderLayer: no norm before attention or MLP, one after each
        norms = ["post_attention_layernorm", "post_feedforward_layernorm"]
    layer += [(f"{norm}.weight", h) for norm in norms]
    return _Modules("model.embed_tokens", "model.layers", [], layer, [("model.norm.weight", h)],
                    [(n_in, n_out) for _, n_in, n_out, _ in attn + mlp])  # fmt: skip


def analytic_table(config: dict[str, Any]) -> dict[str, Any] | None:
    """Returns count_params(config)'s table (less "built_with", which says "analytic" instead), counted from the
    config alone; None where the model_type or an option is not covered (then count on the meta device)."""
    c = _resolved(config)
    if c is None:
        return None
    family = FAMILIES[c["model_type"]]
    h, v, layers = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    tied = bool(c["tie_word_embeddings"])
    m = _modules(c, family)
    num_layer_params = sum(n for _, n in m.layer)

    tensors = [(f"{m.embed}.weight", v * h), *m.pre]
    tensors += [(f"{m.layers}.{k}.{name}", n) for k in range(min(layers, 1)) for name, n in m.layer]
    tensors += m.post + ([] if tied else [("lm_head.weight", v * h)])
    largest_tensor = max(tensors, key=lambda t: t[1])
    blocks = [(m.embed, v * h)] + [(f"{m.layers}.{k}", num_layer_params) for k in range(min(layers, 1))]
    blocks += [] if tied else [("lm_head", v * h)]
    largest_layer = max(blocks, key=lambda b: b[1])

    sizes: dict[int, int] = {}
    top = [(v * h, 1 if tied else 2)] + [(n, 1) for _, n in m.pre + m.post]
    for numel, count in top + [(n, layers) for _, n in m.layer]:
        sizes[numel] = sizes.get(numel, 0) + count
    num_embedding_params = v * h * (1 if tied else 2) + sum(n for _, n in m.pre)  # every nn.Embedding (count.py)
    experts = c[family.experts] if family.layout == "moe" else 1
    table = {
        "built_with": {"analytic": "zero_planner.models.analytic"},
        "attn_implementation": family.attn_implementation,
        "num_params": num_embedding_params + sum(n for _, n in m.post) + layers * num_layer_params,
        "num_embedding_params": num_embedding_params,
        "num_layer_params": num_layer_params,
        "num_layers": layers,
        "layers_uniform": True,
        "largest_tensor": {"name": largest_tensor[0], "numel": largest_tensor[1]},
        "largest_layer": {"name": largest_layer[0], "numel": largest_layer[1]},
        "architecture": {
            "hidden_size": h,
            "intermediate_size": c[family.expert_width],
            "num_attention_heads": c["num_attention_heads"],
            "num_key_value_heads": c["num_key_value_heads"],
            "head_dim": c["head_dim"],
            "vocab_size": v,
            "max_position_embeddings": int(c["max_position_embeddings"]),
            "tie_word_embeddings": tied,
            "num_experts": experts,
            "num_experts_per_tok": c["num_experts_per_tok"] if experts > 1 else 1,
            "gated_mlp": family.layout not in ("gpt2", "gpt_neox"),
        },
        "tensors": [[numel, count] for numel, count in sorted(sizes.items(), reverse=True)],
        "linear": {  # peft "all-linear": every projection of every layer, the head left out (count.py)
            "count": len(m.linears) * layers,
            "in_out_sum": layers * sum(a + b for a, b in m.linears),
            "in_sum": layers * sum(a for a, _ in m.linears),
            "numel": layers * sum(a * b for a, b in m.linears),
            "largest_numel": max(a * b for a, b in m.linears) if layers else 0,
        },
    }
    if family.layout == "moe":
        table["param_adapters"] = _moe_param_adapters(h, c[family.expert_width], experts, layers)
    return table


def _moe_param_adapters(h: int, i: int, e: int, layers: int) -> dict[str, Any]:
    """count.py _param_adapters for Mixtral, Qwen3-MoE and OLMoE, without importing peft: peft 0.21 ("all-linear",
    which it maps onto transformers 5's fused experts for the three alike) wraps the router [e, h], the gate_up stack
    [e, 2i, h] at twice the rank (gate and up fused) and the down stack [e, h, i]; A [r * experts, in] and B
    [out, r * experts] each. The installed peft's version is recorded as count.py records it;
    tests/test_analytic.py checks the two agree for every benchmark config and odd shape of the three types."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        peft_version = version("peft")
    except PackageNotFoundError:
        return {"peft": None}
    in_out = 2 * e * (h + 2 * i) + e * (i + h) + (h + e)
    layer = e * 2 * i * h + e * h * i + e * h
    return {"peft": peft_version, "count": 3 * layers, "in_out_sum": layers * in_out, "numel": layers * layer,
            "layer_numel": layer, "largest_numel": e * 2 * i * h, "layer_in_routed": h + i, "layer_in_dense": h,
            "names": ["mlp.experts.down_proj", "mlp.experts.gate_up_proj", "mlp.gate.weight"]}  # fmt: skip


def parameter_order(config: dict[str, Any]) -> list[int] | None:
    """Returns the numel of every parameter tensor in named_parameters' order (a tied lm_head once, as the
    embedding), or None where the config is not covered: the order in which DeepSpeed's gradient hooks see them,
    reversed, fills its reduction buckets (throughput.stage2_reductions)."""
    c = _resolved(config)
    if c is None:
        return None
    m = _modules(c, FAMILIES[c["model_type"]])
    h, v = c["hidden_size"], c["vocab_size"]
    order = [v * h] + [n for _, n in m.pre] + [n for _, n in m.layer] * c["num_hidden_layers"]
    order += [n for _, n in m.post] + ([] if c["tie_word_embeddings"] else [v * h])
    return order


def forward_modules(config: dict[str, Any]) -> tuple[list, list, list, int] | None:
    """Returns the modules that hold parameters, as (head, layer, tail, layers): the first three each a list of
    (module path, ((parameter name, numel), ...)) in registration order, which is the order one forward runs the
    weight matrices (norms, too small to be fetched, may run earlier or later; qwen3_moe's router, registered after
    the experts, is put before them). `head` is the embedding (and learned
    positions), `layer` one decoder layer (paths relative to it), `tail` the final norm and the lm_head, whose
    parameter is the embedding's where tied; `layers` the number of decoder layers. None where the config is not
    covered. ZeRO-3's coordinator fetches and releases parameters module by module in this order
    (throughput.stage3_gathers)."""
    c = _resolved(config)
    if c is None:
        return None
    m = _modules(c, FAMILIES[c["model_type"]])

    def grouped(tensors: list[tuple[str, int]], prefix: str = "") -> list:
        modules: dict[str, list[tuple[str, int]]] = {}
        for name, numel in tensors:
            modules.setdefault(prefix + name.rsplit(".", 1)[0], []).append((prefix + name, numel))
        return [(path, tuple(params)) for path, params in modules.items()]

    embed = f"{m.embed}.weight"
    head = [(m.embed, ((embed, c["vocab_size"] * c["hidden_size"]),))] + grouped(m.pre)
    lm_head = embed if c["tie_word_embeddings"] else "lm_head.weight"
    tail = grouped(m.post) + [("lm_head", ((lm_head, c["vocab_size"] * c["hidden_size"]),))]
    layer = grouped(m.layer)
    if not FAMILIES[c["model_type"]].router_first:  # Qwen3MoeSparseMoeBlock registers the experts first, runs the
        # router first (its top-k picks the experts' rows)
        k = next(n for n, (path, _) in enumerate(layer) if path == "mlp.experts")
        layer[k], layer[k + 1] = layer[k + 1], layer[k]
    return head, layer, tail, c["num_hidden_layers"]


def _signature(config: dict[str, Any]) -> tuple | None:
    """Returns what the activation trace of `config` depends on (model_type and every non-neutral key, defaults
    filled in), or None where the config is not covered."""
    c = _resolved(config)
    if c is None:
        return None
    neutral = (_NEUTRAL | FAMILIES[c["model_type"]].neutral) - FAMILIES[c["model_type"]].reads
    return (c["model_type"], tuple(sorted((k, repr(v)) for k, v in c.items() if k not in neutral)))


@lru_cache(maxsize=1)
def _catalog_by_signature() -> dict[tuple, str]:
    index: dict[tuple, str] = {}
    for slug, entry in catalog_entries().items():
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
    slug = catalog_twin(config)
    return None if slug is None else catalog_entries()[slug]["params"]["activations"]


def sdpa_16bit_activations(config: dict[str, Any]) -> dict[str, float] | None:
    """Returns {layer, layer_per_seq, rest}: bytes per token autograd keeps in bf16/fp16 with SDPA, as
    models/activations.py traces them (attention_coefficients(config, "bfloat16", "sdpa")); None where not covered
    (gemma2, and options of the other layouts named below). gpt2: _gpt2_sdpa_16bit; olmo2: _olmo2_sdpa_16bit;
    gpt_neox: _gpt_neox_sdpa_16bit.

    moe (transformers' grouped_mm experts, integrations/moe.py) keeps, in place of the dense MLP's 2(h + 4i):
    the router's input (h, shared with the norm), the fp32 softmax of the router logits (4E) and, where the router
    divides the top-k weights by their sum (mixtral always, qwen3_moe and olmoe with norm_topk_prob), that fp32 sum
    (4); per routed copy of the token (top-k of them) its gathered input and the down projection's output
    (2h + 2h), the gated MLP inside the expert (8i, as the dense one), 32 bytes of routing indices (top-k indices,
    the sort's permutation, its // k gather index and inverse, int64 8 each) and the routing weight: mixtral keeps
    the fp32 weight (the division's output) and its gathered copy (4 + 4); qwen3_moe and olmoe cast the weights to
    16-bit and keep the gathered copy (2), and the fp32 top-k value the division keeps where they divide (4).
    Per micro-batch the grouped matmuls' int32 offsets (4E bytes, one storage for both), which the trace's fit over
    its two lengths reports per token as 4E / TRACE_SEQ[0] + 4E / TRACE_SEQ[1]. Where the meta device cannot run
    the grouped matmuls (h or i not a multiple of 8: 16-byte strides), the whole table is the closed form of
    activations.py, so None here; router jitter noise and router logits in the loss keep more, so None too, and so
    does olmoe's clip_qkv (in-place clamps).

    phi3 keeps the same tensors (its fused qkv_proj and gate_up_proj outputs are split into the same widths), with
    cos and sin over the rotary dimensions only (partial_rotary_factor); a phi3 with dropout (resid_pdrop,
    embd_pdrop) keeps masks besides and is traced.

    Per decoder layer: two RMSNorms keep their fp32 input (4h), the fp32 rsqrt of each row (4) and the 16-bit
    normalised input of the weight multiply (2h); q/k/v keep their input (h), the SDPA kernels keep q, k, v, the
    output and an fp32 logsumexp per head (4 * heads), and o_proj keeps that same output (the kernels write it as
    (batch, seq, heads, dim), so transformers' transpose-and-contiguous makes no copy; phi3: a copy, q), the gated MLP keeps
    its input, gate, act(gate), up and their product (h + 4i). The q/k RMSNorms of qwen3 and qwen3_moe keep the
    same three per head row (a rsqrt per head), olmoe's the same three per token over q's and k's whole width (one
    rsqrt each). Outside the layers: the final RMSNorm, lm_head's input (h), the fp32 logits (4V), rotary cos and
    sin (16-bit, head_dim each, shared by all layers), the int64 input ids of the embedding and the shifted labels
    of the loss (8 + 8), and per sequence the labels' padding element and the loss's fp32 total weight (12 bytes),
    which the traced per-token figure spreads over the TRACE_SEQ[0]-token trace.

    qwen3_moe, olmoe, olmo2 and gpt_neox (_CHECKED_OPTIONS) return None besides for what their closed forms were
    not checked against: attention or hidden dropout, an activation other than the checked one (silu; gpt_neox:
    gelu), and grouped-query attention with head_dim over 256 (transformers' SDPA then repeats k and v instead of
    passing enable_gqa: integrations/sdpa_attention.py use_gqa_in_sdpa).
    """
    c = _resolved(config)
    if c is None or not FAMILIES[c["model_type"]].closed_form:
        return None
    family = FAMILIES[c["model_type"]]
    h, i, v, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    if c["model_type"] in _CHECKED_OPTIONS and (c["attention_dropout"] or (heads != kv_heads and hd > 256)):
        return None
    rotary = hd  # width of cos and sin
    if family.layout == "phi3":
        if c["resid_pdrop"] or c["embd_pdrop"] or not isinstance(c["partial_rotary_factor"], (int, float)):
            return None
        # cos and sin: inv_freq over every other rotary dimension, concatenated twice (modeling_rope_utils.py)
        rotary = 2 * len(range(0, int(hd * c["partial_rotary_factor"]), 2))
    if family.layout == "gpt2":
        return _gpt2_sdpa_16bit(c)
    if family.layout == "gpt_neox":
        return _gpt_neox_sdpa_16bit(c)
    if c["model_type"] in _CHECKED_OPTIONS and c["hidden_act"] != "silu":
        return None
    if family.layout == "olmo2":
        return _olmo2_sdpa_16bit(c)
    q, kv = heads * hd, kv_heads * hd
    mlp = 2 * (h + 4 * i)  # input, gate, act(gate), up, their product
    if family.layout == "moe":
        e, i, k = c[family.experts], c[family.expert_width], c["num_experts_per_tok"]
        if h % 8 or i % 8 or k > e or c.get("router_jitter_noise") or c["output_router_logits"] or c.get("clip_qkv"):
            return None
        divides = 4 if _flag(c, family.norm_topk) else 0  # the fp32 sum per token; the fp32 top-k value per copy
        weight = 4 + 4 if family.fp32_routing_weights else 2  # mixtral: the weight and its gathered copy, fp32
        routing = 32 + weight + (0 if family.fp32_routing_weights else divides)
        offsets = 4 * e * (1 / TRACE_SEQ[0] + 1 / TRACE_SEQ[1])
        mlp = 2 * h + 4 * e + divides + k * (2 * h + 2 * h + 8 * i + routing) + offsets
    norm = 4 * h + 4 + 2 * h  # fp32 input, fp32 rsqrt, 16-bit normalised input (bytes per row)
    # o_proj's input is the kernels' output (no copy) where q comes from its own projection; phi3 slices q from
    # the fused qkv output, rope then writes it head-major and the kernels' output follows: transformers copies it.
    o_proj_copy = q if family.layout == "phi3" else 0
    layer = 2 * norm + 2 * (h + 2 * q + 2 * kv + o_proj_copy) + 4 * heads + mlp
    if family.qk_norm == "head":
        layer += 6 * (q + kv) + 4 * (heads + kv_heads)
    elif family.qk_norm == "full":
        layer += 6 * (q + kv) + 4 + 4
    rest = norm + 2 * h + 4 * v + 2 * 2 * rotary + 8 + 8 + 12 / TRACE_SEQ[0]
    return {"layer": round(float(layer), 3), "layer_per_seq": 0.0, "rest": round(rest, 3)}


# Types whose closed forms return None for any option tests/test_analytic.py did not trace (named above).
_CHECKED_OPTIONS = {"qwen3_moe", "olmoe", "olmo2", "gpt_neox"}


def _olmo2_sdpa_16bit(c: dict[str, Any]) -> dict[str, float]:
    """Returns sdpa_16bit_activations for a resolved olmo2 config (silu, no dropout: checked by the caller).

    Olmo2RMSNorm multiplies its weight by the fp32 normalised input and casts after, so each of its norms keeps
    the fp32 input, the fp32 rsqrt per row and the fp32 normalised input (8w + 4 bytes for a w-wide row), where
    llama's keeps the normalised input in 16 bits. Per layer: q/k/v keep the layer's input itself (h: no norm
    before attention), q_norm and k_norm over q's and k's whole width (8q + 4, 8kv + 4), the SDPA kernels q, k, v,
    the output (also o_proj's input: q_norm's output is (batch, seq, heads, dim), as llama's q_proj's) and the
    logsumexp (4 * heads), the norm after attention (8h + 4) over o_proj's output, the gated MLP its input (the
    residual sum) and its four i-wide tensors (2h + 8i), the norm after the MLP (8h + 4). Outside the layers: the
    final norm (8h + 4), lm_head's input (2h), the fp32 logits (4V), cos and sin in fp32 (Olmo2RotaryEmbedding does
    not cast them: 4 x head_dim each), the input ids and the labels (8 + 8) and per sequence the loss's 12 bytes."""
    h, i, v, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    heads, q, kv = c["num_attention_heads"], c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    norm = 4 * h + 4 + 4 * h  # fp32 input, fp32 rsqrt, fp32 normalised input (bytes per row)
    attn = 2 * h + (8 * q + 4) + (8 * kv + 4) + 2 * q + 2 * kv + 2 * kv + 2 * q + 4 * heads
    layer = attn + norm + 2 * h + 8 * i + norm
    rest = norm + 2 * h + 4 * v + 2 * 4 * hd + 8 + 8 + 12 / TRACE_SEQ[0]
    return {"layer": round(float(layer), 3), "layer_per_seq": 0.0, "rest": round(rest, 3)}


def _gpt_neox_sdpa_16bit(c: dict[str, Any]) -> dict[str, float] | None:
    """Returns sdpa_16bit_activations for a resolved gpt_neox config, or None for an option the closed form was not
    checked against (hidden or attention dropout, an activation other than gelu, use_cache false).

    Per layer, with the parallel residual (Pythia's): both LayerNorms read the layer's input, kept once (2h), and
    each keeps an fp32 mean and rstd per row (8 + 8); their outputs are the inputs of query_key_value and
    dense_h_to_4h (2h + 2h). q and k after the partial rotary embedding are new tensors (torch.cat of the rotated
    and the passed-through dimensions: 2h + 2h); v is a view of the fused output, which the trace's forward
    (use_cache on: DynamicCache concatenates k and v) replaces by a copy of its own (2h); the kernels keep their
    output and logsumexp (2h + 4 * heads), and dense takes a copy of that output (2h: q is head-major after the cat,
    the output follows and transformers' reshape copies it). The MLP keeps gelu's input and output (2i + 2i).
    With use_parallel_residual false the second LayerNorm reads the sum after attention, its own input (2h more).
    With use_cache false v would stay a view keeping query_key_value's whole output, but the trace does not run on
    the meta device then (the causal mask calls .item()), so the table is activations.py's fallback: None here.
    Outside the layers: the input ids (8), final_layer_norm (2h + 8), lm_head's input (2h), the fp32 logits (4V),
    cos and sin in 16 bits over the rotary dimensions (rotary_pct of head_dim), the labels (8) and per sequence the
    loss's 12 bytes."""
    if c["hidden_dropout"] or c["hidden_act"] != "gelu" or not c["use_cache"]:
        return None
    h, i, v, heads = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_attention_heads"]
    # cos and sin: inv_freq over every other rotary dimension, concatenated twice (GPTNeoXRotaryEmbedding)
    rotary = 2 * len(range(0, int(c["head_dim"] * c["rotary_pct"]), 2))
    norms = 2 * h + 2 * (4 + 4) + (0 if c["use_parallel_residual"] else 2 * h)
    attn = 2 * h + 2 * h + 2 * h + 2 * h + 2 * h + 4 * heads + 2 * h  # qkv in, q, k, v, out, lse, dense in
    layer = norms + attn + 2 * h + 2 * i + 2 * i  # dense_h_to_4h in, gelu in, gelu out
    rest = 8 + (2 * h + 8) + 2 * h + 4 * v + 2 * 2 * rotary + 8 + 12 / TRACE_SEQ[0]
    return {"layer": round(float(layer), 3), "layer_per_seq": 0.0, "rest": round(rest, 3)}


def _gpt2_sdpa_16bit(c: dict[str, Any]) -> dict[str, float] | None:
    """Returns sdpa_16bit_activations for a resolved gpt2 config, or None for an activation or attention option
    the closed form was not checked against (tests/test_analytic.py traces the catalog GPT-2s and odd shapes).

    Per block: two LayerNorms keep their 16-bit input and fp32 mean and rstd per row (2h + 8 each); c_attn, c_proj,
    c_fc keep their inputs (2h each), the second c_proj its own (2i); SDPA keeps q (a view of c_attn's whole
    output: 6h), k and v (their own storages: 2h each), the output and an fp32 logsumexp per head (2h + 4 * heads),
    the output being c_proj's input too (merging the heads makes a view of the kernels' (batch, seq, heads, dim));
    gelu_new, written out as 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), keeps four i-wide 16-bit tensors
    (8i); resid_pdrop keeps a 1-byte mask after each c_proj (h each). Outside the blocks: ln_f (2h + 8), lm_head's
    input (2h), the fp32 logits (4V), the int64 token and position ids of wte and wpe and the loss's labels (8
    each), embd_pdrop's mask (h) and per sequence the loss's 12 bytes, as in the llama form.
    """
    if c["activation_function"] != "gelu_new" or c["scale_attn_by_inverse_layer_idx"] or c["reorder_and_upcast_attn"]:
        return None
    h, i, v, heads = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_attention_heads"]
    norm = 2 * h + 4 + 4  # 16-bit input, fp32 mean, fp32 rstd (bytes per row)
    masks = h if c["resid_pdrop"] else 0  # one per residual branch
    attn = 2 * h + 6 * h + 2 * h + 2 * h + 2 * h + 4 * heads  # c_attn in, q, k, v, out (= c_proj in), lse
    mlp = 2 * h + 8 * i + 2 * i  # c_fc in, gelu_new's four, c_proj in
    layer = 2 * norm + attn + mlp + 2 * masks
    rest = norm + 2 * h + 4 * v + 8 + 8 + 8 + (h if c["embd_pdrop"] else 0) + 12 / TRACE_SEQ[0]
    return {"layer": round(float(layer), 3), "layer_per_seq": 0.0, "rest": round(rest, 3)}


LORA_CLOSED_FORM = {"llama", "mistral", "qwen2", "qwen3", "mixtral", "olmo2", "gpt_neox", "qwen3_moe", "olmoe"}
"""Types whose LoRA entry lora_16bit_activations writes (checked against the trace in tests/test_analytic.py; the
LoRA tables of phi3, gpt2 and gemma2 are traced)."""


def lora_16bit_activations(config: dict[str, Any]) -> dict[str, float] | None:
    """Returns the 16-bit entry of the LoRA table, {layer, layer_per_r, layer_dropout, rest, rest_dropout,
    zero3_layer_extra, zero3_layer_extra_dropout} in bytes per token, as models/activations.py traces it
    (lora_dtype_coefficients(config, "bfloat16", 0.0): peft's all-linear adapters at ranks 8 and 16, dropout 0.05,
    on a frozen base, SDPA); None where not covered: types other than LORA_CLOSED_FORM's, options
    sdpa_16bit_activations does not cover (and for llama-style types an activation other than silu or attention
    dropout, which it does not check), or no peft installed (the trace then fails: no LoRA table).

    peft's Linear runs base(x) + lora_B(lora_A(dropout(x))) * scale. The frozen base keeps nothing (the weight
    gradient is not wanted; the input gradient needs only the weight); lora_A keeps its input (the target's
    input, a storage often kept anyway) and lora_B its r-wide input: 2r bytes per target, the layer_per_r term
    (2 x the targets a layer has). Frozen norms no longer keep what only their weight's gradient needs (llama-style
    RMSNorm its 16-bit normalised input, olmo2's its fp32 one), nor frozen routers and lm_head their inputs, nor the
    frozen embedding its ids.
    - layer_dropout: each target's dropout keeps a 1-byte mask and lora_A the dropped copy (3 bytes per input
      element of each target), less the inputs that lora_A alone kept (their storage is freed).
    - zero3_layer_extra(_dropout): deepspeed.zero.Init's F.linear keeps every input of the base layers (and of the
      routers: MoE 2h), of which lora_A keeps the targets' already, unless dropout copied them.
    - rest: the head (final norm, fp32 logits, labels, per sequence the loss's 12 bytes, rotary cos and sin) plus
      what the first layer keeps apart from the others: its input comes from the frozen embedding and needs no
      gradient, so the norms that read it keep nothing, and the dropout that reads it keeps no mask
      (rest_dropout: one mask per target reading it, and the dropped copies where lora_A alone kept the input).
    """
    c = _resolved(config)
    if c is None or c["model_type"] not in LORA_CLOSED_FORM or sdpa_16bit_activations(config) is None:
        return None
    if FAMILIES[c["model_type"]].layout == "llama" and (c["hidden_act"] != "silu" or c["attention_dropout"]):
        return None  # (the others' 16-bit entries check these; llama-style ones do not)
    from importlib.util import find_spec

    if find_spec("peft") is None:
        return None
    family = FAMILIES[c["model_type"]]
    h, i, v, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    q, kv = heads * hd, kv_heads * hd
    sdpa = 2 * q + 2 * kv + 2 * kv + 2 * q + 4 * heads  # the kernels' q, k, v, output and fp32 logsumexp
    loss = 8 + 12 / TRACE_SEQ[0]  # the shifted labels, and per sequence the padding element and total weight
    if family.layout == "olmo2":
        # Olmo2RMSNorm (weight x fp32 normalised): fp32 input and rsqrt (4w + 4), the fp32 product no longer kept.
        # q/k/v read the layer's input itself, kept by their lora_A alone; o_proj's the kernels' output; gate and
        # up the residual sum, down the gated product: both kept by their lora_A alone. 7 targets.
        norm = 4 * h + 4
        layer = 2 * h + (4 * q + 4) + (4 * kv + 4) + sdpa + norm + 2 * h + 8 * i + norm
        targets_in = 5 * h + q + i
        alone = 2 * h + 2 * h + 2 * i  # the layer's input, the residual sum, the gated product
        zero3 = 0
        # the first layer's input (the embedding's) needs no gradient: q/k/v's dropout keeps no masks
        first_dropout = -3 * h
        # final norm, fp32 logits, cos and sin in fp32 (Olmo2RotaryEmbedding)
        rest = norm + 4 * v + 2 * 4 * hd + loss
        per_r = 2 * 7
    elif family.layout == "gpt_neox":
        # Both LayerNorms (frozen) keep their input and fp32 mean and rstd: the parallel residual reads the layer's
        # input twice (2h + 16), the serial one the sum after attention too (2h more). Everything else as in full
        # fine-tuning: lora_A keeps the inputs query_key_value, dense, dense_h_to_4h and dense_4h_to_h kept.
        # The two LayerNorms' outputs, dense's copy of the kernels' output and gelu's output are kept by lora_A
        # alone. 4 targets.
        full = _gpt_neox_sdpa_16bit(c)
        layer = full["layer"]
        targets_in = 3 * h + i
        alone = 2 * h + 2 * h + 2 * h + 2 * i
        zero3 = 0
        rotary = 2 * len(range(0, int(hd * c["rotary_pct"]), 2))
        parallel = c["use_parallel_residual"]
        # the first layer's LayerNorms that read its input keep nothing (2h + 16, or 2h + 8 serial: the second
        # reads the sum after attention, which needs a gradient); their outputs' dropout keeps no mask
        first = -(2 * h + 16) if parallel else -(2 * h + 8)
        first_dropout = -2 * h if parallel else -h
        # final LayerNorm (input, mean, rstd), fp32 logits, cos and sin in 16 bits
        rest = (2 * h + 8) + 4 * v + 2 * 2 * rotary + loss + first
        per_r = 2 * 4
    elif family.layout == "llama":
        # llama, mistral, qwen2, qwen3: the two RMSNorms (frozen) keep fp32 input and rsqrt (4h + 4); q/k/v read
        # the first one's output and gate/up the second one's, each kept by their lora_A alone; o_proj reads the
        # kernels' output; the MLP keeps gate (silu's input), act(gate) and up (their product's inputs) and the
        # product, down_proj's input, kept by its lora_A alone. qwen3's q/k norms: fp32 input and rsqrt per head
        # row. 7 targets.
        norm = 4 * h + 4
        qk_norms = 4 * (q + kv) + 4 * (heads + kv_heads) if family.qk_norm == "head" else 0
        layer = norm + 2 * h + qk_norms + sdpa + norm + 2 * h + 8 * i
        targets_in = 5 * h + q + i
        alone = 2 * h + 2 * h + 2 * i
        zero3 = 0
        first_dropout = -3 * h
        # final norm, fp32 logits, cos and sin in 16 bits; the first layer's input norm keeps nothing
        rest = norm + 4 * v + 2 * 2 * hd + loss - norm
        per_r = 2 * 7
    else:  # moe: mixtral, qwen3_moe, olmoe (the trace adapts the attention's nn.Linear layers, the experts frozen)
        # The two RMSNorms (frozen) keep fp32 input and rsqrt (4h + 4); q/k/v read the first one's output, kept by
        # their lora_A alone; o_proj the kernels' output. q/k norms: none (mixtral), fp32 input and rsqrt per head
        # row (qwen3_moe) or per token (olmoe). The sparse block as in full fine-tuning (sdpa_16bit_activations)
        # less what only the frozen weights' gradients need: the router's input, the gathered input of each routed
        # copy and the gated product (down_proj's input); kept: per copy gate_up's output (4i), act(gate) (2i), the
        # down projection's output (2h), the indices and the weight (mixtral: fp32, and its gathered copy); the
        # grouped matmuls' int32 offsets once per micro-batch (4E bytes per layer, per token of the one traced
        # length). 4 targets.
        e, i, k = c[family.experts], c[family.expert_width], c["num_experts_per_tok"]
        norm = 4 * h + 4
        qk_norms = {"": 0, "head": 4 * (q + kv) + 4 * (heads + kv_heads), "full": 4 * (q + kv) + 4 + 4}[family.qk_norm]
        divides = 4 if _flag(c, family.norm_topk) else 0
        weight = 4 + 4 if family.fp32_routing_weights else 2  # as in sdpa_16bit_activations
        routing = 32 + weight + (0 if family.fp32_routing_weights else divides)
        moe = 4 * e + divides + k * (2 * h + 4 * i + 2 * i + routing) + 4 * e / TRACE_SEQ[0]
        layer = norm + 2 * h + qk_norms + sdpa + norm + moe
        targets_in = 3 * h + q
        alone = 2 * h
        zero3 = 2 * h  # the router's input, the second norm's output
        first_dropout = -3 * h
        # final norm, fp32 logits, cos and sin in 16 bits; the first layer's input norm keeps nothing
        rest = norm + 4 * v + 2 * 2 * hd + loss - norm
        per_r = 2 * 4
    out = {"layer": layer, "layer_per_r": per_r, "layer_dropout": 3 * targets_in - alone, "rest": rest,
           "rest_dropout": first_dropout, "zero3_layer_extra": zero3, "zero3_layer_extra_dropout": zero3 + alone}
    return {key: round(float(value), 3) for key, value in out.items()}

"""Exact parameter counts of a config.json, from the model transformers builds on the meta device (no memory, no
weights): torch and transformers are imported inside these functions only.

    count_params(config, name)   -> the parameter table: counts, largest tensor and layer, tensor sizes, the
                                    normalised architecture, what LoRA adapts (no activations)
    param_table(config, name)    -> count_params with every activation table traced (what the catalog stores)
    with_activations(table, a)   -> the table with its "activations" entry set, keys in the catalog's order
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from zero_planner.errors import InputError
from zero_planner.models.activations import activation_coefficients
from zero_planner.models.analytic import parameter_order
from zero_planner.models.hf import hf_config
from zero_planner.quiet import quiet_libraries

# Parameter names of the gate half of a gated MLP (SwiGLU/GeGLU): llama-style gate_proj, fused gate_up_proj
# (phi3, transformers 5 MoE experts), original Mixtral w1/w3.
_GATED_MLP_RE = re.compile(r"(^|\.)(gate_proj|gate_up_proj|w3)(\.|$)")


def param_table(config: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """Returns the parameter table of a config.json dict, counted on a meta-device model (no memory, no weights).

    Keys: num_params, num_embedding_params, num_layer_params, num_layers, layers_uniform, largest_tensor,
    largest_layer, tensors ([numel, count], largest first), attn_implementation, architecture (normalised
    config fields), built_with (library versions), activations (every table traced now: what the catalog
    stores), linear. Raises InputError when transformers cannot build the model.
    """
    table = count_params(config, name)
    with quiet_libraries():
        activations = activation_coefficients(config, table["architecture"])
    return with_activations(table, activations)


def with_activations(table: dict[str, Any], activations: Any) -> dict[str, Any]:
    """Returns `table` with its "activations" entry set, in param_table's key order (catalog files stay stable)."""
    out = {k: v for k, v in table.items() if k not in ("activations", "linear", "param_adapters")}
    out["activations"] = activations
    out["linear"] = table["linear"]
    if "param_adapters" in table:
        out["param_adapters"] = table["param_adapters"]
    return out


def count_params(config: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """Returns param_table without "activations": the counts alone (one meta-device build, no tracing)."""
    with quiet_libraries():
        return _count_params(config, name)


def _count_params(config: dict[str, Any], name: str | None) -> dict[str, Any]:
    import torch
    import transformers

    label = name or config.get("model_type", "model")
    try:
        hf = hf_config(config)
    except Exception as error:  # unknown model_type, or values the config class validates away (huggingface_hub
        # strict dataclasses raise their own error type): either way the user's config.json is the problem
        known = "does not know architecture" if "Unrecognized model" in str(error) else "rejects the config of"
        raise InputError(
            f"--model {label!r}: transformers {transformers.__version__} {known} "
            f"{config.get('model_type')!r} ({_first_line(error)})"
        ) from None
    model, attn = _build_on_meta(hf, label)

    params = dict(model.named_parameters())  # deduplicated: a tied lm_head appears once
    num_params = sum(p.numel() for p in params.values())
    name_of = {id(p): n for n, p in params.items()}

    embed_in = model.get_input_embeddings()
    embed_out = model.get_output_embeddings()
    tied = embed_out is not None and embed_out.weight is embed_in.weight
    embedding_tensors = {id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    embedding_tensors[id(embed_in.weight)] = embed_in.weight
    if embed_out is not None:
        embedding_tensors[id(embed_out.weight)] = embed_out.weight
    num_embedding_params = sum(t.numel() for t in embedding_tensors.values())

    layers_name, layers = _decoder_layers(model, hf)
    layer_counts = [sum(p.numel() for p in layer.parameters()) for layer in layers]

    module_name = {id(m): n for n, m in model.named_modules()}
    blocks = [(module_name[id(embed_in)], embed_in.weight.numel())]
    blocks += [(f"{layers_name}.{i}", n) for i, n in enumerate(layer_counts)]
    if embed_out is not None and not tied:
        blocks.append((module_name[id(embed_out)], sum(p.numel() for p in embed_out.parameters())))
    largest_layer = max(blocks, key=lambda b: b[1])  # first of equals: layer 0 rather than layer 31
    largest_tensor = max(params.values(), key=lambda p: p.numel())

    sizes = Counter(p.numel() for p in params.values())
    linears = _adapter_targets(model, embed_out)
    table = {
        "built_with": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
        "attn_implementation": attn,
        "num_params": num_params,
        "num_embedding_params": num_embedding_params,
        "num_layer_params": max(layer_counts),
        "num_layers": len(layers),
        "layers_uniform": len(set(layer_counts)) == 1,
        "largest_tensor": {"name": name_of[id(largest_tensor)], "numel": largest_tensor.numel()},
        "largest_layer": {"name": largest_layer[0], "numel": largest_layer[1]},
        "architecture": _architecture(hf, tied, params),
        "tensors": [[numel, count] for numel, count in sorted(sizes.items(), reverse=True)],
        # Where models/analytic.py cannot give it: every tensor's numel in named_parameters' order, the reverse of
        # which fills DeepSpeed's gradient buckets (plan/throughput.py stage2_reductions)
        **({} if parameter_order(config) is not None else {"parameter_order": [p.numel() for p in params.values()]}),
        # What LoRA / QLoRA sizing needs, over peft's "all-linear" targets (every linear layer but the head):
        "linear": {
            "count": len(linears),
            "in_out_sum": sum(i + o for i, o in linears),  # LoRA adds r * (in + out) per target
            "in_sum": sum(i for i, _ in linears),  # dropout copies of each target's input
            "numel": sum(i * o for i, o in linears),  # weights QLoRA stores in 4 bits
            "largest_numel": max((i * o for i, o in linears), default=0),  # one dequantised at a time
        },
    }
    stacks = _param_adapters(model, layers_name)  # last: it wraps the model in peft adapters
    if stacks is not None:
        table["param_adapters"] = stacks
    return table


def _param_adapters(model, layers_name: str) -> dict[str, Any] | None:
    """Returns what peft's "all-linear" adapts beyond nn.Linear, for models with 3-D parameters; None for others.

    transformers 5 stores mixture-of-experts weights as fused [experts, ., .] parameters; for the model types peft
    converts from transformers 4 (Mixtral, Qwen3-MoE, OLMoE, DeepSeek-V3, ...) "all-linear" puts lora.ParamWrapper
    adapters on those stacks, and on the router, at ranks it may multiply (a fused gate_up gets 2r). Which ones is
    peft's decision, so peft is asked: the meta-device model is wrapped at r=1. Keys: peft (its version, None
    when peft is not installed and nothing is known), count (wrapped parameters), in_out_sum (trainable elements
    at r=1: rank r has r times as many), numel (elements of the wrapped parameters), layer_numel (the most of one
    decoder layer), largest_numel, layer_in_routed and layer_in_dense (one layer's input widths of the expert
    stacks, which each token meets in its top-k experts, and of the 2-D ones such as the router, met once), names
    (the wrapped parameters' paths inside a layer).
    """
    if not any(p.dim() == 3 for p in model.parameters()):
        return None
    try:
        import peft
        from peft import LoraConfig, get_peft_model
        from peft.tuners.lora.layer import ParamWrapper
    except ImportError:
        return {"peft": None}
    wrapped = get_peft_model(model, LoraConfig(r=1, lora_alpha=1, lora_dropout=0.0, target_modules="all-linear"))
    prefix = re.compile(rf"(^|\.){re.escape(layers_name)}\.(\d+)\.")
    per_layer: Counter = Counter()
    inputs: dict[str, Counter] = {"routed": Counter(), "dense": Counter()}
    names: set[str] = set()
    count = in_out = numel = largest = 0
    for name, module in wrapped.named_modules():
        if not isinstance(module, ParamWrapper):
            continue
        n = module.get_param().numel()
        count += 1
        kind = "routed" if module.num_experts > 1 else "dense"
        in_out += module.lora_A["default"].weight.numel() + module.lora_B["default"].weight.numel()
        numel += n
        largest = max(largest, n)
        owner = name.replace(".base_layer", "")
        found = prefix.search(owner)
        if found:
            per_layer[found.group(2)] += n
            inputs[kind][found.group(2)] += module.in_features
            names.add(f"{owner[found.end():]}.{module.parameter_name}")
        else:
            names.add(f"{owner.removeprefix('base_model.model.')}.{module.parameter_name}")
    if not count:
        return None
    return {"peft": peft.__version__, "count": count, "in_out_sum": in_out, "numel": numel,
            "layer_numel": max(per_layer.values(), default=largest), "largest_numel": largest,
            "layer_in_routed": max(inputs["routed"].values(), default=0),
            "layer_in_dense": max(inputs["dense"].values(), default=0), "names": sorted(names)}  # fmt: skip


def _adapter_targets(model, output_embeddings) -> list[tuple[int, int]]:
    """Returns (in_features, out_features) of each linear layer peft's "all-linear" would adapt.

    nn.Linear and transformers' Conv1D (GPT-2, weight stored [in, out]); the output head is left out, as
    peft leaves it out.
    """
    import torch

    targets = []
    for module in model.modules():
        if module is output_embeddings:
            continue
        if isinstance(module, torch.nn.Linear):
            targets.append((module.in_features, module.out_features))
        elif type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
            rows, cols = module.weight.shape
            targets.append((int(rows), int(cols)))
    return targets


def _first_line(error: BaseException, limit: int = 200) -> str:
    """Returns the gist of a library error for a one-line message (transformers lists every known model_type)."""
    line = " ".join(str(error).split()) or type(error).__name__
    line = line.split(". Should contain one of")[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _build_on_meta(hf, label: str):
    """Returns (model, attn_implementation): the causal LM on the meta device, with SDPA where accepted.

    Same rule as zero_planner.run.modeling.attn_implementation_for, with one instantiation instead of two.
    """
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            try:
                return AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa"), "sdpa"
            except (ValueError, ImportError):
                return AutoModelForCausalLM.from_config(hf, attn_implementation="eager"), "eager"
    except Exception as error:  # any failure to build from a user's config is bad input, not a crash
        raise InputError(
            f"--model {label!r}: transformers cannot build a causal LM for model_type {hf.model_type!r} "
            f"({_first_line(error)})"
        ) from None


def _decoder_layers(model, hf):
    """Returns (qualified name, ModuleList) of the decoder layers: the ModuleList with num_hidden_layers blocks."""
    import torch

    want = getattr(hf, "num_hidden_layers", None)
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
    exact = [(n, m) for n, m in lists if len(m) == want]
    candidates = exact or lists
    if not candidates:
        raise InputError(f"cannot find the decoder layers of model_type {hf.model_type!r}")
    # The decoder stack is the list holding the most parameters (not per-layer expert lists).
    return max(candidates, key=lambda nm: sum(p.numel() for p in nm[1].parameters()))


def _first(values: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if values.get(key) is not None:
            return values[key]
    return default


def _architecture(hf, tied: bool, params: dict) -> dict[str, Any]:
    """Returns the config fields the memory model uses, normalised across families (gpt2 n_embd, opt ffn_dim, ...).

    Read from the transformers config object, so the family's defaults are filled in.
    """
    c = hf.to_dict()
    hidden = _first(c, "hidden_size", "n_embd", "d_model")
    heads = _first(c, "num_attention_heads", "n_head", "num_heads")
    experts = int(_first(c, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", default=1) or 1)
    if c.get("model_type") == "falcon":
        # Falcon-7B is multi-query (one K/V head); the 40B/180B "new decoder architecture" has num_kv_heads.
        if c.get("new_decoder_architecture"):
            kv_heads = c.get("num_kv_heads") or heads
        else:
            kv_heads = 1 if c.get("multi_query") else heads
    else:
        kv_heads = _first(c, "num_key_value_heads", "num_kv_heads", default=heads)
    if experts > 1:
        intermediate = _first(c, "moe_intermediate_size", "intermediate_size", "ffn_hidden_size")
    else:
        intermediate = _first(c, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", default=4 * hidden)
    return {
        "hidden_size": int(hidden),
        "intermediate_size": int(intermediate),
        "num_attention_heads": int(heads),
        "num_key_value_heads": int(kv_heads),
        "head_dim": int(_first(c, "head_dim", default=hidden // heads)),
        "vocab_size": int(_first(c, "vocab_size", "padded_vocab_size")),
        "max_position_embeddings": int(
            _first(c, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_seq_len", default=2048)
        ),
        "tie_word_embeddings": bool(tied),
        "num_experts": experts,
        "num_experts_per_tok": int(_first(c, "num_experts_per_tok", "moe_top_k", "top_k", default=1)) if experts > 1 else 1,
        "gated_mlp": any(_GATED_MLP_RE.search(name) for name in params),
    }

"""Building the Hugging Face model that zero-run trains and the GPU harness measures.

Everything here imports torch and transformers lazily: the planner's import path must stay light.
"""

from __future__ import annotations

import contextlib
from typing import Any

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def hf_config(config_dict: dict[str, Any]):
    """Returns a transformers PretrainedConfig built from a plain config.json dict."""
    from transformers import AutoConfig

    values = dict(config_dict)
    model_type = values.pop("model_type")
    values.pop("architectures", None)
    values.pop("transformers_version", None)
    return AutoConfig.for_model(model_type, **values)


def attn_implementation_for(config_dict: dict[str, Any], task: str = "causal-lm") -> str:
    """Returns "sdpa" where transformers accepts it for this architecture, else "eager".

    Decided by asking transformers itself on the meta device (no memory, no weights): Gemma 2 is accepted
    by some releases and refused by others, so no hard-coded list would stay right.
    """
    import torch

    auto = _auto_class(task)
    try:
        with torch.device("meta"):
            auto.from_config(hf_config(config_dict), attn_implementation="sdpa")
        return "sdpa"
    except (ValueError, ImportError):
        return "eager"


def _auto_class(task: str):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    return AutoModelForSequenceClassification if task == "seq-cls" else AutoModelForCausalLM


def build_model(
    config_dict: dict[str, Any],
    *,
    precision: str,
    ds_config: dict[str, Any] | None = None,
    device: str | None = None,
    attn_implementation: str | None = None,
    task: str = "causal-lm",
    gradient_checkpointing: bool = False,
    weights_path: str | None = None,
):
    """Returns (model, attn_implementation): a randomly initialised (or loaded) model ready for deepspeed.

    The model is created in the training dtype directly on `device` for stages 0-2, and under
    `deepspeed.zero.Init` for stage 3 so that no rank ever holds the whole model.
    """
    import torch

    attn = attn_implementation or attn_implementation_for(config_dict, task)
    dtype = getattr(torch, TORCH_DTYPES[precision])
    zero_stage = (ds_config or {}).get("zero_optimization", {}).get("stage", 0)
    config = hf_config(config_dict)
    auto = _auto_class(task)
    # Resolve the model class before any zero.Init scope: importing a modeling module inside it breaks
    # DeepSpeed's tensor-constructor patching ("Signature mismatch ... tensor_pynew").
    auto._model_mapping[type(config)]
    if zero_stage == 3 and weights_path is None and config.pad_token_id is not None:
        # Random init zeroes embedding[padding_idx], which fails on a ZeRO-3 partitioned (empty) tensor
        # (measured: every Gemma 2 stage-3 case on transformers 5.17). The padding row is only an init
        # detail: no parameter or activation changes size.
        config.pad_token_id = None
    if zero_stage == 3:
        import deepspeed

        scope = deepspeed.zero.Init(config_dict_or_path=ds_config, dtype=dtype)
    elif device is not None:
        scope = torch.device(device)
    else:
        scope = contextlib.nullcontext()

    with scope:
        if weights_path is not None:
            model = auto.from_pretrained(weights_path, dtype=dtype, attn_implementation=attn)
        else:
            model = auto.from_config(config, dtype=dtype, attn_implementation=attn)
    if zero_stage == 3 and weights_path is None:
        _init_partitioned_weights(model)
    if task == "seq-cls" and model.config.pad_token_id is None:
        model.config.pad_token_id = 0
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model, attn


def _init_partitioned_weights(model) -> None:
    """Re-runs the model's own weight init with each module's parameters gathered (ZeRO-3 random init).

    Under deepspeed.zero.Init, transformers' _init_weights runs on already partitioned (empty) tensors and
    does nothing, leaving torch's defaults: a tied embedding with std 1 as the LM head gave a first loss of
    1653 instead of ln(vocab) = 11.8 (Llama-3.2-1B, H100). Rank 0's values are broadcast to every rank.
    """
    import deepspeed

    for module in model.modules():
        params = list(module.parameters(recurse=False))
        if not params:
            continue
        with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
            model._init_weights(module)

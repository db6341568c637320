"""A config.json dict as transformers reads it: the one place a plain dict becomes a PretrainedConfig, for counting
(models/count.py), tracing (models/activations.py) and building the model zero-run trains (run/modeling.py)."""

from __future__ import annotations

from typing import Any


def hf_config(config_dict: dict[str, Any]):
    """Returns a transformers PretrainedConfig built from a plain config.json dict."""
    from transformers import AutoConfig

    values = dict(config_dict)
    model_type = values.pop("model_type")
    values.pop("architectures", None)
    values.pop("transformers_version", None)
    return AutoConfig.for_model(model_type, **values)

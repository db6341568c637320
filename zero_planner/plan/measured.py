"""What the memory model was measured on: the GPU runs of each model family and method (catalog/measured.json,
written by benchmarks/measured_set.py from the runs benchmarks/memory_regression.py holds the model to).

    measured_note("llama", "lora")  -> "memory: llama with LoRA measured in 30 GPU runs ..."
    measured_note("olmo2", "lora")  -> "memory: olmo2 with LoRA never measured on a GPU ..."

A family or method never measured is planned by the same closed forms, whose terms were derived on the families
that were; the plan says so rather than calling its figures checked. Pure: no torch.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

MEASURED_FILE = "catalog/measured.json"
METHOD_WORDS = {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA"}


@lru_cache(maxsize=1)
def measured_runs() -> dict[str, dict[str, int]]:
    """Returns {model_type: {method: GPU runs}} of the committed measurements."""
    text = resources.files("zero_planner").joinpath(MEASURED_FILE).read_text(encoding="utf-8")
    return json.loads(text)["memory"]


def measured_note(model_type: str, method: str) -> str:
    """Returns the plan's line on whether its memory figures were measured for this family and method."""
    table = measured_runs()
    words = METHOD_WORDS.get(method, method)
    runs = table.get(model_type, {}).get(method, 0)
    if runs:
        return (f"memory: {model_type} with {words} measured in {runs} GPU run{'s' if runs > 1 else ''} "
                f"(benchmarks/memory_regression.py holds them within 3% median, 10% each)")
    with_method = sorted(t for t, methods in table.items() if methods.get(method))
    others = table.get(model_type, {})
    family = (f"{model_type} measured with " + ", ".join(f"{METHOD_WORDS.get(m, m)} ({n})" for m, n in others.items())
              if others else f"{model_type} never measured at all")
    return (f"memory: {model_type} with {words} never measured on a GPU ({family}): the figures are the closed "
            f"forms derived on the families that were ({', '.join(with_method) or 'none'} with {words}), "
            f"not a check; a fit near the limit is not confirmed")

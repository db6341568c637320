"""The measured case matrix. A case names a model config, a strategy and shapes; `expand_case` turns it
into the full, self-contained record (model config and DeepSpeed JSON inline) that is run and stored."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from zero_planner.plan.dsconfig import build_ds_config
from zero_planner.strategies import STRATEGIES

CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"
ALL_STRATEGIES = list(STRATEGIES)


@cache
def model_config(name: str) -> dict:
    return json.loads((CONFIG_DIR / f"{name}.json").read_text())


def hidden_size(config: dict) -> int:
    return config.get("hidden_size") or config["n_embd"]


def case(model, strategy, *, mb=2, seq=1024, gc=False, gpus=1, precision="bf16", accum=1, method="full",
         task="causal-lm", lora_r=16, lora_dropout=0.05, num_labels=3) -> dict:
    """Returns a case. Adapter (method lora/qlora: peft all-linear, alpha 2r) and seq-cls fields are set only
    where they apply, so full causal-LM cases keep the shape of the records already measured."""
    c = {
        "model": model, "strategy": strategy, "precision": precision, "micro_batch_size": mb, "seq_len": seq,
        "gradient_checkpointing": gc, "num_gpus": gpus, "gradient_accumulation_steps": accum,
    }  # fmt: skip
    if method != "full":
        c.update(method=method, lora_r=lora_r, lora_alpha=2 * lora_r, lora_dropout=lora_dropout)
    if task != "causal-lm":
        c.update(task=task, num_labels=num_labels)
    return c


def append_cases(path: Path, batches: Iterable[tuple[str, list[dict]]]) -> int:
    """Appends every case of `batches` ((label, cases) each, made as they are read) to the JSONL file `path`, one
    case a line, saying on stderr how many each label gave and where they went; returns the number of cases."""
    cases = []
    for label, found in batches:
        print(f"{label}: {len(found)} cases", file=sys.stderr)
        cases += found
    with path.open("a") as out:
        for c in cases:
            out.write(json.dumps(c) + "\n")
    print(f"{len(cases)} cases -> {path}", file=sys.stderr)
    return len(cases)


def case_id(c: dict) -> str:
    cid = (
        f"{c['model']}|{c['strategy']}|{c['precision']}|mb{c['micro_batch_size']}|s{c['seq_len']}"
        f"|{'gc' if c['gradient_checkpointing'] else 'nogc'}|g{c['num_gpus']}|ga{c['gradient_accumulation_steps']}"
    )
    if c.get("method", "full") != "full":
        cid += f"|{c['method']}-r{c['lora_r']}-d{c['lora_dropout']}"
    if c.get("task", "causal-lm") != "causal-lm":
        cid += f"|{c['task']}{c['num_labels']}"
    return cid


def expand_case(c: dict) -> dict:
    """Returns the case with its id, model config and the DeepSpeed JSON zero-run would use for it."""
    config = model_config(c["model"])
    ds = build_ds_config(
        STRATEGIES[c["strategy"]],
        micro_batch_size=c["micro_batch_size"],
        gradient_accumulation_steps=c["gradient_accumulation_steps"],
        world_size=c["num_gpus"],
        precision=c["precision"],
        hidden_size=hidden_size(config),
    )
    return {"id": case_id(c), **c, "model_config": config, "deepspeed_config": ds}


BASE_MODELS = [
    "llama3.2-1b", "qwen2.5-0.5b", "gpt2-medium", "mistral-7b-8l", "gemma2-2b", "mixtral-8e-tiny",
    "phi3-mini", "qwen3-1.7b", "llama3.2-3b", "qwen2.5-1.5b",
]  # fmt: skip


def smoke() -> list[dict]:
    return [case("llama-tiny", "2", mb=1, seq=128)] + [case("llama3.2-1b", s) for s in ALL_STRATEGIES]


def core() -> list[dict]:
    """Single GPU: every architecture under every strategy, then shapes varied on a few."""
    cases = [case(m, s) for m in BASE_MODELS for s in ALL_STRATEGIES]
    for model, strategy in [("llama3.2-1b", "2"), ("qwen2.5-1.5b", "3"), ("gemma2-2b", "2"), ("gpt2-medium", "0")]:
        cases += [case(model, strategy, mb=mb, seq=seq) for mb, seq in [(1, 512), (4, 1024), (2, 2048), (8, 2048)]]
        cases += [case(model, strategy, mb=mb, seq=seq, gc=True) for mb, seq in [(2, 1024), (8, 2048)]]
    cases += [case("llama3.2-1b", s, precision="fp16") for s in ["0", "1", "2", "3", "2-offload"]]
    cases += [case("qwen2.5-0.5b", s, precision="fp32") for s in ["0", "2", "3"]]
    cases += [case("mistral-7b-8l", s, mb=4, seq=2048, gc=True) for s in ["0", "2", "3"]]
    cases += [case("llama3.2-1b", "2", accum=2), case("llama3.2-1b", "0", accum=2)]
    return cases


def limits() -> list[dict]:
    """Ladders that cross the memory limit of one GPU: cases just under and just over it."""
    cases = [case("llama3.2-3b", "0", mb=mb, seq=4096) for mb in (2, 4, 6, 8, 12)]
    cases += [case("llama3.2-1b", "3", mb=mb, seq=4096) for mb in (8, 12, 16, 24)]
    cases += [case("phi3-mini", "0", mb=mb, seq=2048) for mb in (1, 4, 8)]
    cases += [case("qwen2.5-1.5b", "2-offload", mb=mb, seq=4096, gc=True) for mb in (16, 32, 48)]
    return [{**c, "exclusive": True} for c in cases]


def multi() -> list[dict]:
    """2 and 4 GPUs: the sharded terms."""
    cases = []
    for gpus in (2, 4):
        cases += [case("llama3.2-1b", s, gpus=gpus) for s in ALL_STRATEGIES]
        cases += [case("mistral-7b-8l", s, gpus=gpus) for s in ["1", "2", "3", "3-offload"]]
        cases += [case("qwen2.5-1.5b", s, gpus=gpus, mb=4, seq=2048, gc=True) for s in ["2", "3"]]
        cases += [case("mixtral-8e-tiny", s, gpus=gpus) for s in ["2", "3"]]
        cases += [case("gemma2-2b", s, gpus=gpus) for s in ["2", "3"]]
    return cases


def shapes() -> list[dict]:
    """Single GPU: micro-batch, sequence length, checkpointing and precision varied (activation terms)."""
    cases = [case("llama3.2-1b", "2", mb=mb, seq=seq, gc=gc)
             for mb, seq in [(1, 512), (4, 1024), (1, 4096), (4, 4096)] for gc in (False, True)]
    for model in ["qwen2.5-0.5b", "gemma2-2b", "mistral-7b-8l", "gpt2-medium", "mixtral-8e-tiny", "phi3-mini", "qwen3-1.7b"]:
        cases += [case(model, "3", mb=4, seq=1024, gc=gc) for gc in (False, True)]
    cases += [case("gemma2-2b", "3"), case("gemma2-2b", "2", mb=1, seq=4096)]
    cases += [case("llama3.2-1b", s, precision="fp16") for s in ["0", "2", "3"]]
    cases += [case("qwen2.5-0.5b", s, precision="fp32") for s in ["0", "2"]]
    cases += [case("llama3.2-1b", "2", accum=2), case("llama3.2-1b", "0", accum=2)]
    return cases


def limits_h100() -> list[dict]:
    """Ladders crossing an 80 GB GPU's limit; each runs alone on its GPU."""
    cases = [case("llama3.2-3b", "0", mb=mb, seq=2048) for mb in (2, 4, 6)]
    cases += [case("phi3-mini", "0", mb=mb, seq=1024) for mb in (1, 2)]
    cases += [case("llama3.2-1b", "2", mb=mb, seq=4096) for mb in (8, 12)]
    return [{**c, "exclusive": True} for c in cases]


def adapters() -> list[dict]:
    """One GPU: LoRA and QLoRA (peft all-linear, bitsandbytes NF4) and seq-cls on a 1B and a 3B model."""
    cases = []
    for model in ("llama3.2-1b", "llama3.2-3b"):
        cases += [case(model, s, method="lora", gc=gc) for s in ["0", "2", "3"] for gc in (False, True)]
        cases += [case(model, s, method="qlora", gc=gc) for s in ["0", "2"] for gc in (False, True)]
        cases += [case(model, "3", method="qlora", gc=True)]
        cases += [case(model, "0", method="lora", lora_dropout=0.0)]  # isolates peft's dropout copies
        cases += [case(model, "0", method="lora", mb=4, seq=2048, gc=True), case(model, "0", method="qlora", mb=4, seq=2048, gc=True)]
        cases += [case(model, "2-offload", method="lora", gc=True), case(model, "0", method="lora", lora_r=64)]
        cases += [case(model, s, method=m, task="seq-cls", gc=True) for s, m in [("0", "lora"), ("0", "qlora")]]
        cases += [{**case(model, "2", task="seq-cls", gc=True), "exclusive": True}]
        cases += [case(model, "0", method=m, precision="fp16", gc=True) for m in ("lora", "qlora")]  # the T4 path
    cases += [case("qwen2.5-1.5b", "0", method=m) for m in ("lora", "qlora")]  # tied embeddings, q/k/v biases
    return cases


def adapters_multi() -> list[dict]:
    """Two GPUs: LoRA and QLoRA with sharded states (QLoRA's 4-bit base partitioned by ZeRO-3)."""
    cases = [case("llama3.2-1b", s, method="lora", gpus=2) for s in ["2", "3"]]
    cases += [case("llama3.2-1b", s, method="qlora", gpus=2, gc=True) for s in ["0", "3"]]
    cases += [case("llama3.2-3b", "3", method="lora", gpus=2, gc=True)]
    return cases


def precision() -> list[dict]:
    """One GPU: fp16 and fp32 under the offload strategies (host memory of fp32 master and 32-bit weights)."""
    cases = [case("qwen2.5-0.5b", s, precision="fp32") for s in ["2-offload", "3-offload", "3-offload-all"]]
    cases += [case("llama3.2-1b", s, precision="fp16") for s in ["2-offload", "3-offload-all"]]
    return cases


SUITES = {"adapters": adapters, "adapters_multi": adapters_multi, "precision": precision, "shapes": shapes, "limits_h100": limits_h100, "smoke": smoke, "core": core, "limits": limits, "multi": multi, "all": lambda: core() + limits() + multi()}

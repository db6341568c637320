"""The operating-point suite: the cases `zero-plan` itself lands on, written as harness cases.

For each (model, sequence length) setting the planner is run for one GPU; every candidate it calls fitting is
a case at the micro-batch it picked ("pick") and at the next one up ("next", which it says does not fit under
its margin). That is where `auto` operates, so that is where the memory model must hold: a pick that runs out
of memory is a broken promise, and the error of a next-up case says how much margin is left.

A GPU smaller than the one the harness runs on is emulated by capping PyTorch's caching allocator
(`memory_limit_bytes` = capacity - CUDA context, set with torch.cuda.set_per_process_memory_fraction in
gpu_step.py): the run then fails exactly where a card of that capacity would, and several such cases share
one physical GPU. `--capacity` None plans for the whole GPU and runs each case alone.

    python benchmarks/operating_point.py --gpu H100 --out op.jsonl [--capacity 24GiB] [--settings a:1024,b:4096]
    python benchmarks/operating_point.py --capacity-use      # CI: the chosen plans use the GPU they are given
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cases import append_cases, case, expand_case, model_config  # noqa: E402
from zero_planner.hardware import parse_gpus, parse_size  # noqa: E402
from zero_planner.models.spec import spec_from_config  # noqa: E402
from zero_planner.plan.memory import ALLOC_CONF, CUDA_CONTEXT_BYTES, GiB  # noqa: E402
from zero_planner.plan.request import PlanRequest  # noqa: E402
from zero_planner.plan.search import plan  # noqa: E402

# Ten architectures, two sequence lengths each: 128k (Llama), 152k (Qwen2.5, Qwen3) and 256k (Gemma 2)
# vocabularies, fused projections (Phi-3), mixture of experts (Mixtral), learned positions (GPT-2).
SETTINGS = [
    ("llama3.2-1b", 2048), ("llama3.2-1b", 4096), ("llama3.2-3b", 1024), ("llama3.2-3b", 2048),
    ("qwen2.5-0.5b", 1024), ("qwen2.5-0.5b", 4096), ("qwen2.5-1.5b", 1024), ("qwen2.5-1.5b", 4096),
    ("gemma2-2b", 1024), ("gemma2-2b", 2048), ("phi3-mini", 1024), ("phi3-mini", 4096),
    ("mixtral-8e-tiny", 1024), ("mixtral-8e-tiny", 4096), ("gpt2-medium", 512), ("gpt2-medium", 1024),
    ("qwen3-1.7b", 1024), ("qwen3-1.7b", 4096), ("mistral-7b-8l", 1024), ("mistral-7b-8l", 4096),
]  # fmt: skip


def operating_cases(model: str, seq_len: int, *, gpu: str, capacity: int | None, host: int,
                    roles: tuple[str, ...] = ("pick", "next"), chosen_only: bool = False,
                    num_gpus: int = 1) -> list[dict]:
    """Returns the harness cases of one setting: each fitting candidate at its micro-batch and one above, on
    `num_gpus` GPUs of one host (`host` is that host's memory)."""
    cluster = parse_gpus(f"{num_gpus}x{gpu}", host)
    if capacity is not None:
        cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, memory_bytes=capacity))
    spec = spec_from_config(model_config(model), model)
    result = plan(spec, cluster, PlanRequest(seq_len=seq_len))
    options = [result.chosen] if chosen_only and result.chosen else [o for o in result.options if o.fits]
    cases = []
    for option in options:
        for role in roles:
            micro = option.micro_batch_size + (role == "next")
            c = expand_case(case(model, option.strategy.name, mb=micro, seq=seq_len, gc=option.gradient_checkpointing,
                                 gpus=num_gpus, precision=result.precision))  # fmt: skip
            cap = cluster.gpu.memory_bytes
            c["id"] += f"|cap{cap / GiB:.1f}|xs"
            c["alloc_conf"] = ALLOC_CONF  # as zero-run launches
            if capacity is not None:
                c["memory_limit_bytes"] = capacity - CUDA_CONTEXT_BYTES
            c["planned"] = {
                "role": role, "gpu": cluster.gpu.name, "gpu_capacity_bytes": cap, "host_bytes": host,
                "chosen": option is result.chosen, "planner_micro_batch": option.micro_batch_size,
                # What the harness keeps free on the host while it runs (several cases share a lent machine):
                # gpu_step.py loads, initialises and trains, it neither saves nor resumes.
                "predicted_host_bytes": option.memory.cpu_training_bytes,
            }  # fmt: skip
            cases.append(c)
    return cases


# "No safety bought by waste": where GPU memory is what stops the micro-batch from growing, the chosen plan's
# predicted total uses at least this share of the GPU.
CAPACITY_USE_TARGET = 0.90


def _memory(result, option, micro: int) -> int:
    """Returns the predicted total of `option` at another micro-batch, by the planner's own evaluator."""
    from zero_planner.plan.options import Evaluator
    from zero_planner.plan.request import PlanRequest

    ev = Evaluator(result.spec, result.cluster, PlanRequest(seq_len=result.seq_len, precision=result.precision))
    return ev.memory(option.strategy, option.gradient_checkpointing, micro).total_bytes


def capacity_use(settings=SETTINGS, *, gpu: str = "H100", host: int = 120 * 2**30) -> int:
    """Prints, per setting, the chosen plan's predicted total against the GPU and returns the number of settings
    where the safety margin alone cost a micro-batch (the next one fits the full GPU) and less than
    CAPACITY_USE_TARGET of the GPU is used. Below the target for granularity alone (one more sequence needs
    more than the GPU has left, as at 1-2 long sequences) is reported, not counted."""
    from zero_planner.plan.fit import gpu_limit_bytes
    from zero_planner.plan.search import MAX_MICRO_BATCH

    short = 0
    cluster = parse_gpus(f"1x{gpu}", host)
    limit = gpu_limit_bytes(cluster.gpu.memory_bytes)
    print(f"capacity use on 1x{gpu} ({cluster.gpu.memory_bytes / GiB:.1f} GiB, limit {limit / GiB:.1f}); target >= "
          f"{CAPACITY_USE_TARGET:.0%} where memory binds")  # fmt: skip
    for model, seq_len in settings:
        spec = spec_from_config(model_config(model), model)
        result = plan(spec, cluster, PlanRequest(seq_len=seq_len))
        chosen = result.chosen
        if chosen is None:
            print(f"  {model:16s} s{seq_len:<5d} nothing fits")
            continue
        use = chosen.memory.total_bytes / cluster.gpu.memory_bytes
        binds = chosen.micro_batch_size < MAX_MICRO_BATCH
        flag = "ok"
        if binds and use < CAPACITY_USE_TARGET:
            bigger = _memory(result, chosen, chosen.micro_batch_size + 1)
            if bigger <= cluster.gpu.memory_bytes:
                flag = f"margin (+1: {bigger / GiB:.1f} GiB fits the GPU, not the margin)"
            else:
                flag = f"granular (+1: {bigger / GiB:.1f} GiB)"
        short += flag.startswith("margin")
        print(f"  {model:16s} s{seq_len:<5d} stage {chosen.strategy.name:13s} {'gc' if chosen.gradient_checkpointing else 'nogc':4s} "
              f"mb {chosen.micro_batch_size:2d}: {chosen.memory.total_bytes / GiB:5.1f} GiB = {use:5.1%} "
              f"{'(memory binds)' if binds else '(micro-batch cap)'} {flag}")  # fmt: skip
    return short


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H100", help="catalog GPU the harness runs on")
    parser.add_argument("--capacity", default=None, help="emulated GPU capacity (24GiB); default the whole GPU")
    parser.add_argument("--host", default="120GiB", help="host memory the plans may use (per case)")
    parser.add_argument("--num-gpus", type=int, default=1, help="GPUs of one host each case runs on")
    parser.add_argument("--settings", default=None, help="model:seq,... (default: all of SETTINGS)")
    parser.add_argument("--roles", default="pick,next")
    parser.add_argument("--chosen-only", action="store_true", help="only the candidate the planner chooses")
    parser.add_argument("--out", type=Path, help="JSONL the cases are appended to")
    parser.add_argument("--capacity-use", action="store_true",
                        help="no cases: print how much of the GPU each setting's chosen plan uses (CI benchmark)")
    args = parser.parse_args(argv)
    if args.capacity_use:
        short = capacity_use(gpu=args.gpu)
        print(f"{short} settings where the safety margin cost a micro-batch and under {CAPACITY_USE_TARGET:.0%} is used")
        return 0  # a figure to read, like the speed benchmark; the memory regression is the gate
    if args.out is None:
        parser.error("--out is required to write cases")
    settings = SETTINGS
    if args.settings:
        settings = [(m, int(s)) for m, s in (item.rsplit(":", 1) for item in args.settings.split(","))]
    capacity = parse_size(args.capacity) if args.capacity else None
    roles = tuple(args.roles.split(","))
    append_cases(args.out, ((f"{model} s{seq}", operating_cases(model, seq, gpu=args.gpu, capacity=capacity,
                                                                   host=parse_size(args.host), roles=roles,
                                                                   chosen_only=args.chosen_only,
                                                                   num_gpus=args.num_gpus))
                            for model, seq in settings))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())


USER_CONFIGS = ROOT / "benchmarks" / "user_configs"
# HF Trainer, Axolotl and LLaMA-Factory JSONs carry no optimizer section: the trainer supplies AdamW (the same
# two fp32 moments as DeepSpeed's), so the harness names DeepSpeed's AdamW, as zero-run does.
DEFAULT_OPTIMIZER = {"type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}}


def user_config_cases(model: str, seq_len: int, *, gpu: str, host: int, gc: bool = False,
                      roles: tuple[str, ...] = ("pick",), names: list[str] | None = None) -> list[dict]:
    """Returns cases for DeepSpeed JSONs as users have them (benchmarks/user_configs), each at the largest
    micro-batch `--ds-config` says fits (no margin) and optionally one above."""
    from zero_planner.plan.search import MAX_MICRO_BATCH
    from zero_planner.plan.request import PlanRequest
    from zero_planner.plan.userconfig import estimate_config

    cluster = parse_gpus(f"1x{gpu}", host)
    spec = spec_from_config(model_config(model), model)
    cases = []
    for path in sorted(USER_CONFIGS.glob("*.json")):
        if names and path.stem not in names:
            continue
        user = json.loads(path.read_text())
        asked = PlanRequest(seq_len=seq_len, grad_ckpt=gc)
        fits = [mb for mb in range(1, MAX_MICRO_BATCH + 1)
                if estimate_config(spec, cluster, user, asked.model_copy(update={"micro_batch": mb})).option.fits]
        if not fits:
            continue
        for role in roles:
            micro = max(fits) + (role == "next")
            estimate = estimate_config(spec, cluster, user, asked.model_copy(update={"micro_batch": micro}))
            ds = dict(estimate.plan.deepspeed_config)
            ds.setdefault("optimizer", DEFAULT_OPTIMIZER)
            strategy = estimate.plan.strategy.name
            c = case(model, strategy, mb=micro, seq=seq_len, gc=gc, precision=estimate.plan.training.precision)
            c = {**expand_case(c), "deepspeed_config": ds, "user_config": path.name, "alloc_conf": ALLOC_CONF}
            c["id"] += f"|cap{cluster.gpu.memory_bytes / GiB:.1f}|xs|{path.stem}"
            c["planned"] = {"role": role, "gpu": cluster.gpu.name, "gpu_capacity_bytes": cluster.gpu.memory_bytes,
                            "host_bytes": host, "chosen": False, "planner_micro_batch": max(fits)}  # fmt: skip
            cases.append(c)
    return cases

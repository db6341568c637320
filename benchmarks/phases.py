"""The phases suite: real zero-runs (and their resumes) of plans `zero-plan` writes, every phase measured.

A run is more than its step (docs/design.md): loading, deepspeed.initialize, the first and steady steps, eval,
checkpoint save, the final export and a resume each have a peak. Each case here is a plan file made by zero-plan
for a real GPU type (`--gpus 1xT4`, `1xRTX4090`, ...), run by benchmarks/phase_case.py under the harness: when
the type is smaller than the machine's GPU, on an emulated card of that type (ZERO_RUN_MEMORY_LIMIT_BYTES: the
allocator capped at its capacity less the CUDA context, and the free-memory queries of DeepSpeed and
transformers answering for that card), several per GPU.

    python benchmarks/phases.py --out suite.jsonl SETTING [SETTING ...]

A SETTING is `model:gpu:seq[:key=value,...]`, keys: gpus (GPUs of one node, 1 unless given), method
(full|lora|qlora), precision, stage (one strategy,
or `fits` for every candidate the planner calls fitting, the default), gc (on|off|auto), mb (micro-batch, or
`pick`/`next`: the planner's pick or one above it), task, steps, resume (0|1), lora_r, save_steps (0: no checkpoint),
cpu_mem, chosen (1: only the planner's choice), ds (a DeepSpeed JSON under benchmarks/user_configs/ or a path,
estimated with --ds-config at micro-batch mb: a user's JSON as written).
Examples:  qwen2.5-0.5b:H100:1024:stage=fits   llama3.2-3b:T4:1024:method=lora,mb=pick   llama3.2-1b:RTX4090:1024:gpus=2
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cases import append_cases  # noqa: E402
from zero_planner.hardware import parse_gpus  # noqa: E402
from zero_planner.plan.memory import CUDA_CONTEXT_BYTES, GiB  # noqa: E402
from zero_planner.plan.saves import run_disk_bytes  # noqa: E402

CONFIGS = ROOT / "benchmarks" / "model_configs"
HARNESS_GPU_BYTES = {"H100": 85_017_493_504, "H200": 150_754_820_096}  # torch's total_memory on the lent GPUs


def emulated_limit(capacity: int, gpu_total: int) -> int | None:
    """Returns the allocator limit (ZERO_RUN_MEMORY_LIMIT_BYTES) a case planned for a card of `capacity` bytes takes on
    a GPU of `gpu_total` (both torch's total_memory): that card less the CUDA context where the card is smaller,
    else None (the whole GPU)."""
    return capacity - CUDA_CONTEXT_BYTES if capacity < gpu_total - 2 * GiB else None


def zero_plan(argv: list[str]) -> tuple[int, dict | None, dict | None]:
    """Runs zero-plan in this process with --json; returns (exit status, the plan or None when nothing fits, the
    JSON printed: a plan, or every candidate with what would fit)."""
    from zero_planner.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main([*argv, "--json"])
    text = out.getvalue().strip()
    data = json.loads(text) if text.startswith("{") else None
    return rc, (data if rc == 0 else None), data


def parse_setting(text: str) -> dict:
    model, gpu, seq, *rest = text.split(":")
    options = dict(item.split("=", 1) for item in rest[0].split(",")) if rest and rest[0] else {}
    return {"model": model, "gpu": gpu, "seq": int(seq), **options}


def gpus_of(s: dict) -> str:
    """Returns the setting's --gpus value: `gpus` GPUs of its type on one node (1 unless given)."""
    return f"{int(s.get('gpus', 1))}x{s['gpu']}"


def base_argv(s: dict, work_root: str) -> list[str]:
    argv = ["--model", str(CONFIGS / f"{s['model']}.json"), "--gpus", gpus_of(s), "--seq-len", str(s["seq"]),
            "--init", "random", "--tokenizer", "bytes", "--eval-split", "0.05", "--save-steps", s.get("save_steps", "1000"),
            "--method", s.get("method", "full"), "--task", s.get("task", "causal-lm"),
]  # fmt: skip
    if "precision" in s:
        argv += ["--precision", s["precision"]]
    if "lora_r" in s:
        argv += ["--lora-r", s["lora_r"]]
    if s.get("cpu_mem"):
        argv += ["--cpu-mem", s["cpu_mem"]]
    return argv


def ds_config_path(name: str) -> str:
    path = Path(name)
    return str(path if path.exists() else ROOT / "benchmarks" / "user_configs" / f"{name}.json")


def setting_cases(s: dict, *, harness_gpu: str, work_root: str = "/tmp") -> list[dict]:
    """Returns the phase cases of one setting (see the module docstring)."""
    argv = base_argv(s, work_root)
    if s.get("ds"):
        # A user's JSON as written: --ds-config estimates it (DeepSpeed's defaults for what it leaves out) and the
        # plan it writes is what zero-run runs.
        forced = argv + ["--ds-config", ds_config_path(s["ds"]), "--micro-batch", s.get("mb", "1"),
                         "--grad-checkpointing" if s.get("gc") == "on" else "--no-grad-checkpointing"]  # fmt: skip
        rc, plan, answer = zero_plan(forced)
        if plan is None and (answer or {}).get("plan"):
            # A JSON that does not fit still runs, as the user would run it: zero-plan writes no plan file then,
            # so the training flags it would have recorded are set here.
            plan = answer["plan"]
            plan["model"].update(init="random", load_path=None)
            plan["training"].update(tokenizer="bytes", eval_split="0.05", save_every=int(s.get("save_steps", "1000")))
        if plan is None:
            print(f"{s}: --ds-config gave no plan (exit {rc})", file=sys.stderr)
            return []
        cand = dict(plan["candidates"][0], chosen=True)
        return [_case(s, plan, cand, int(s.get("mb", "1")), cand["gradient_checkpointing"], harness_gpu, work_root,
                      tag=f"ds-{Path(s['ds']).stem}")]  # fmt: skip
    rc, _, listing = zero_plan(argv + (["--stage", s["stage"]] if s.get("stage", "fits") != "fits" else []))
    if listing is None:
        print(f"{s}: zero-plan gave no plan (exit {rc})", file=sys.stderr)
        return []
    wanted_gc = {"on": [True], "off": [False]}.get(s.get("gc", "auto"))
    candidates = [c for c in listing["candidates"] if c["fits"] and (wanted_gc is None or c["gradient_checkpointing"] in wanted_gc)]
    if s.get("stage", "fits") != "fits":
        candidates = [c for c in candidates if c["strategy"]["name"] == s["stage"]]
    if s.get("chosen") == "1":
        candidates = [c for c in candidates if c.get("chosen")] or candidates[:1]
    cases = []
    seen = set()
    for cand in candidates:
        name = cand["strategy"]["name"]
        gc = cand["gradient_checkpointing"]
        mb = s.get("mb", "pick")
        micro = cand["micro_batch_size"] + (mb == "next") if mb in ("pick", "next") else int(mb)
        key = (name, gc, micro)
        if key in seen:
            continue
        seen.add(key)
        forced = argv + ["--stage", name, "--micro-batch", str(micro), "--grad-checkpointing" if gc else "--no-grad-checkpointing"]
        rc, plan, _ = zero_plan(forced)
        if plan is None:
            # A next-up that does not fit writes no plan: take the pick's plan at the larger micro-batch.
            rc, plan, _ = zero_plan(argv + ["--stage", name, "--micro-batch", str(micro - 1),
                                         "--grad-checkpointing" if gc else "--no-grad-checkpointing"])  # fmt: skip
            if plan is None:
                print(f"{s} {key}: no plan (exit {rc})", file=sys.stderr)
                continue
            plan = with_micro_batch(plan, micro)
        cases.append(_case(s, plan, cand, micro, gc, harness_gpu, work_root, tag=mb))
    return cases


def with_micro_batch(plan: dict, micro: int) -> dict:
    """Returns the plan at another micro-batch (the DeepSpeed JSON's batch sizes with it), as a user would run
    one micro-batch above what zero-plan picked; its estimate stays the pick's (the regression re-estimates)."""
    plan = json.loads(json.dumps(plan))
    plan["training"]["micro_batch_size"] = micro
    ds = plan["deepspeed_config"]
    accum = ds.get("gradient_accumulation_steps", 1)
    ds["train_micro_batch_size_per_gpu"] = micro
    ds["train_batch_size"] = micro * accum * plan["hardware"]["gpus_per_node"] * plan["hardware"]["nodes"]
    return plan


def _case(s: dict, plan: dict, cand: dict, micro: int, gc: bool, harness_gpu: str, work_root: str, *,
          tag: str) -> dict:
    """Returns one harness case (kind zero-run) for `plan`."""
    name = plan["strategy"]["name"]
    cluster = parse_gpus(gpus_of(s), 128 * GiB)
    num_gpus = cluster.world_size
    capacity = cluster.gpu.memory_bytes
    limit = emulated_limit(capacity, HARNESS_GPU_BYTES[harness_gpu])
    t, est = plan["training"], plan["estimate"]
    method = t["method"]
    adapters = method in ("lora", "qlora")
    disk = run_disk_bytes(plan["model"]["params"], plan["model"]["trainable_params"], t["precision"],
                          adapters=adapters, merged_export=adapters and plan["strategy"]["stage"] < 3,
                          checkpoints=t.get("save_every", 25) > 0)  # fmt: skip
    if method == "qlora" and plan["model"].get("init") == "random":
        disk += 2 * plan["model"]["params"]  # the random 16-bit base QLoRA quantises from (run/preflight.py)
    where = s["gpu"] if num_gpus == 1 else f"{num_gpus}x{s['gpu']}"  # one GPU: the ids committed before `gpus`
    case = {
        "kind": "zero-run",
        "id": f"{s['model']}|{name}|{t['precision']}|{method}|mb{micro}|s{s['seq']}|{'gc' if gc else 'nogc'}|{where}|{tag}",
        "model": s["model"], "strategy": name, "precision": t["precision"], "method": method, "task": t["task"],
        "micro_batch_size": micro, "seq_len": s["seq"], "gradient_checkpointing": gc, "num_gpus": num_gpus,
        "gradient_accumulation_steps": t["gradient_accumulation_steps"],
        "model_config": plan["model"]["config"], "deepspeed_config": plan["deepspeed_config"],
        "plan": plan, "max_steps": int(s.get("steps", 3)), "resume": s.get("resume", "1") == "1",
        "work_root": work_root, "timeout_s": 420,
        "planned": {
            "role": tag, "gpu": s["gpu"], "gpu_capacity_bytes": capacity, "fits": cand["fits"] and tag != "next",
            "predicted_peak_allocated_bytes": est["per_gpu"]["peak_allocated"],
            "predicted_phases": est["per_gpu"].get("phases", {}),
            "predicted_host_bytes": est["cpu"]["total"], "disk_bytes": disk,
        },
    }  # fmt: skip
    if adapters:
        lora = t.get("lora") or {}
        case.update(lora_r=lora.get("r", 16), lora_alpha=lora.get("alpha", 32), lora_dropout=lora.get("dropout", 0.05))
    if limit:
        case["memory_limit_bytes"] = limit
    if s.get("ds"):
        case["user_config"] = Path(s["ds"]).name
    return case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="+", help="model:gpu:seq[:key=value,...]")
    parser.add_argument("--out", type=Path, required=True, help="JSONL the cases are appended to")
    parser.add_argument("--harness-gpu", default="H100", choices=sorted(HARNESS_GPU_BYTES))
    args = parser.parse_args(argv)
    append_cases(args.out, ((text, setting_cases(parse_setting(text), harness_gpu=args.harness_gpu))
                            for text in args.settings))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

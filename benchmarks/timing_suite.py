"""Timing suites for the step-time model (issue 26): every fitting candidate of a setting, each alone on its GPU.

A sweep is one (model, sequence length, GPU) setting with every candidate the planner calls fitting, at the
micro-batch it picks (operating_point.operating_cases, role "pick", no memory cap: each case has the GPU to
itself), so that plan quality (benchmarks/throughput_check.py) can compare the planner's choice with the
measured best. A ladder adds micro-batches below a pick (role "ladder": timed and validated, not a candidate).
Every case runs STEPS steps (ZeRO-3 leaves two out, the others one): enough for a median that has settled.

    python benchmarks/timing_suite.py --write          # regenerates benchmarks/suites/i26-*.jsonl
    python benchmarks/timing_suite.py                  # prints each suite's cases and predicted seconds

The suites (benchmarks/suites/i26.md says how to run them and how long they take):
  i26-moe-small-h100       a mixture of many small experts (Mixtral layout, 32 experts, top 8, width 512),
                           2,048 tokens, every fitting candidate on one H100
  i26-moe-shared-h100      a Qwen2-MoE layout with a shared expert (60 experts, top 4, width 1,408, shared
                           5,632), 2,048 tokens, every fitting candidate on one H100
  i26-mistral7b-h200       full-depth Mistral-7B (v0.3 config), 2,048 tokens, one H200: only ZeRO-3 fits
                           (no offload within 128 GiB of host); its candidates and a micro-batch ladder with
                           checkpointing (1, 2, 4, 8) and without (1)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cases import case, expand_case, model_config  # noqa: E402
from benchmarks.operating_point import operating_cases  # noqa: E402
from zero_planner.hardware import parse_gpus  # noqa: E402
from zero_planner.models.spec import spec_from_config  # noqa: E402
from zero_planner.plan.memory import ALLOC_CONF, GiB, Workload  # noqa: E402
from zero_planner.plan.throughput import estimate_step_time  # noqa: E402
from zero_planner.strategies import STRATEGIES  # noqa: E402

SUITES_DIR = ROOT / "benchmarks" / "suites"
STEPS = 7
"""Steps per case: 6 timed (5 for ZeRO-3), where the committed cases had 3 (2): their ZeRO-3 steps were still
falling when the case ended."""
HOST_BYTES = 120 * GiB
"""Host memory the plans may use: the lent machines have 128 GiB (offload candidates beyond it are dropped by
the planner itself)."""

SUITES = {
    "i26-moe-small-h100": {"gpu": "H100", "settings": [("mixtral-32e-top8", 2048)], "ladders": []},
    "i26-moe-shared-h100": {"gpu": "H100", "settings": [("qwen2-moe-a2.7b-4l", 2048)], "ladders": []},
    "i26-mistral7b-h200": {
        "gpu": "H200",
        "settings": [("mistral-7b", 2048)],
        # (model, seq, strategy, checkpointing, micro-batches below the pick)
        "ladders": [("mistral-7b", 2048, "3", True, (1, 2, 4, 8))],
    },
}


def _ladder_case(model: str, seq: int, strategy: str, gc: bool, micro: int, gpu: str) -> dict:
    c = expand_case(case(model, strategy, mb=micro, seq=seq, gc=gc, precision="bf16"))
    cluster = parse_gpus(f"1x{gpu}", HOST_BYTES)
    c["id"] += f"|cap{cluster.gpu.memory_bytes / GiB:.1f}|xs"
    c["alloc_conf"] = ALLOC_CONF
    c["planned"] = {"role": "ladder", "gpu": cluster.gpu.name, "gpu_capacity_bytes": cluster.gpu.memory_bytes,
                    "host_bytes": HOST_BYTES, "chosen": False}  # fmt: skip
    return c


def suite_cases(name: str) -> list[dict]:
    """Returns the cases of one timing suite: each setting's fitting candidates, then its ladders."""
    spec = SUITES[name]
    cases = []
    for model, seq in spec["settings"]:
        cases += operating_cases(model, seq, gpu=spec["gpu"], capacity=None, host=HOST_BYTES, roles=("pick",))
    picked = {c["id"].split("|cap")[0] for c in cases}
    for model, seq, strategy, gc, micros in spec["ladders"]:
        for micro in micros:
            c = _ladder_case(model, seq, strategy, gc, micro, spec["gpu"])
            if c["id"].split("|cap")[0] not in picked:
                cases.append(c)
    for c in cases:
        c["steps"] = STEPS
        c["suite"] = name
    return cases


def predicted_seconds(c: dict, gpu: str) -> float:
    """Returns the step-time model's seconds for the case's timed steps (a lower bound on its wall time, which
    adds the model build, deepspeed.initialize and, for offload, pinning the host's optimizer states)."""
    spec = spec_from_config(model_config(c["model"]), c["model"])
    w = Workload(micro_batch_size=c["micro_batch_size"], seq_len=c["seq_len"], gradient_checkpointing=c["gradient_checkpointing"],
                 precision=c["precision"])  # fmt: skip
    step = estimate_step_time(spec, STRATEGIES[c["strategy"]], parse_gpus(f"1x{gpu}").gpu, w).step_s
    return step * (c["steps"] + 1)  # the warm-up steps run slower: count one more


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write benchmarks/suites/<suite>.jsonl")
    parser.add_argument("--suite", choices=sorted(SUITES), action="append", help="only these suites")
    args = parser.parse_args(argv)
    for name in args.suite or SUITES:
        cases = suite_cases(name)
        gpu = SUITES[name]["gpu"]
        print(f"{name}: {len(cases)} cases on one {gpu}")
        total = 0.0
        for c in cases:
            seconds = predicted_seconds(c, gpu)
            total += seconds
            print(f"  {c['id']:72s} {c['planned']['role']:6s} steps ~{seconds:5.1f} s")
        print(f"  predicted step time in all: {total:.0f} s (plus per case: build + initialize, 5-40 s)")
        if args.write:
            path = SUITES_DIR / f"{name}.jsonl"
            path.write_text("".join(json.dumps(c) + "\n" for c in cases))
            print(f"  -> {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

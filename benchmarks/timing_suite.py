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
  i26-llama1b-2xh100       Llama 3.2 1B, 2,048 tokens, every fitting candidate on two H100s of one host: plan
                           quality and ZeRO's collectives with several GPUs, each case alone on the machine
  i26-qwen1.5b-2xh100      Qwen2.5-1.5B, 1,024 tokens, the same on two H100s
  i26-mistral7b-4xh100     full-depth Mistral-7B, 2,048 tokens, every candidate without offload planned for four
                           H100s, one wait per step, five steps
  i26-rerun-3b-h100        the two committed candidates of Llama 3.2 3B at 2 x 2,048 tokens (stages 1 and 2,
                           checkpointing, default allocator; 3 timed steps each on 2026-11-23) again with 15
                           timed steps: their 4.7% gap is the worst plan-quality ratio; run with --gpus 0 on a
                           machine of several GPUs so that each runs alone on the host
  i26-stage2-3b-h100       why ZeRO-2 ran 16-33% slower than ZeRO-1 on one GPU in those reruns: Llama 3.2 3B,
                           2,048 tokens, checkpointing, 16 steps each: stages 0, 1, 2 at micro-batch 2 and 1, 2 at
                           8; ZeRO-2 at 2 with overlap_comm off, and with 5e8-element buckets (DeepSpeed's default:
                           7 reductions per backward where ours, hidden^2, make about 200)
  i26-stage2-ladder-h100   ZeRO-2 synchronizes the device once per gradient bucket it reduces: stages 1 and 2 up
                           the micro-batches of Qwen3-1.7B (4,096 tokens), GPT-2 medium (1,024) and Mistral-7B's
                           first 8 layers (4,096), no checkpointing, 10 steps: where the host's work per
                           reduction outlasts the GPU's backward and where it stops binding; --gpus 0
  i26-stage2-ladder-2xh100 the Qwen3-1.7B ladder on two H100s (the reductions also carry NCCL traffic)
  i26-host-h100            host-bound cases (small micro-batches: the layer floor, ZeRO-2's buckets, ZeRO-3's
                           fetches) run beside benchmarks/host_probe.py on one machine; --gpus 0
  i26-qwen3-2xh100         every fitting candidate of Qwen3-1.7B at 2,048 tokens on two H100s, 8 steps
  i26-gemma2-2xh100        every fitting candidate of Gemma 2 2B at 2,048 tokens on two H100s, 8 steps
  i26-moe-small-2xh100     the same of the small-expert mixture (i26-moe-small-h100's model) on two H100s
  i26-llama1b-z3-2xh100    Llama 3.2 1B's ZeRO-3 at 9 and 10 x 2,048 and ZeRO-1 at 10 on two H100s, again
  i26-rates-2xh200, -h200  five of those two sweeps' cases on two GPUs and on one of one machine, then
                           benchmarks/kernel_rates.py: the GPU's rates or the second GPU
  i26-stage3-world-2xh100  host-bound ZeRO-3 (small micro-batches of GPT-2 medium, Mistral-7B 8 layers, Llama 3.2
                           1B, Qwen3-1.7B, Gemma 2 2B) on two H100s: the gather's host time per fetch
  i26-stage3-world-h100    the same cases on one GPU of that machine (--gpus 0), run right after
  i26-stage3-gpt2-2xh100   GPT-2 medium's ZeRO-3 at 8 and 16 x 1,024 on two GPUs
  i26-stage3-buckets-2xh100, -b  ZeRO-3's host-bound cases on two H100s at DeepSpeed's 5e8-element reduce buckets
                           (and 1e5) beside ours: the host's time per gradient bucket reduced across ranks
  i26-stage3-buckets-4xh100  the same pairs on four H100s
  i26-stage3-world4-4xh100, -2xh100, -h100  host-bound ZeRO-3 (the stage3-world cases, Qwen3's pick at 6 x 2,048)
                           with ours and with 5e8 buckets, on 4, 2 and 1 GPUs of one four-GPU machine: whether the
                           costs per gather and per bucket grow with the ranks
  i26-stage3-world4-b-2xh100, -b-4xh100  the same less Gemma 2 and Mistral's micro-batch 2, on a second machine
  i26-qwen7b-2xh200        every fitting candidate without offload of Qwen2.5-7B at 2,048 tokens on two H200s, 8 steps
  i26-llama3b-2xh200       the same of Llama 3.2 3B
  i26-phi3-h200            every fitting candidate without offload of Phi-3-mini at 2,048 tokens on one H200, 6 steps
  i26-gemma2-eager-2xh200, -4xh100, -2xh100  every no-offload candidate of Gemma 2 2B at 2,048 tokens under eager attention
                           (what zero-run trains), one wait per step, on two H200s and four and two GPUs capped at 79.2 GiB
  i26-eager-pairs-h100     Gemma 2 2B and Llama 3.2 1B shapes each under eager and under SDPA on one H100, one wait
                           per step: the score bytes' rate there, and their count on a second family
  i26-user-zero2-h100      a minimal user stage-2 JSON (DeepSpeed's defaults: overlap_comm off, 5e8 buckets) beside
                           ours and ZeRO-1, Llama 3.2 1B, Qwen3-1.7B, GPT-2 medium, small and larger micro-batches
  i26-llama8b-2xh200       every candidate without offload of Meta-Llama-3-8B at 2,048 tokens on two H200s, one
                           wait per step, 6 steps: a setting predicted before it ran
  i26-qwen3-4b-h200        the same of Qwen3-4B on one H200
  i26-gpt2-large-h200      the same of GPT-2 large at 1,024 tokens on one H200
  i26-sync-pairs-h200      the harness's waits against one wait per step on one H200 (Qwen3-4B and GPT-2 large at
                           their picks, Llama 3.2 1B's ZeRO-1 at 2 x 2,048)
  i26-opt-1.3b-h200        OPT-1.3B (a family never timed) at 2,048 tokens, every candidate without offload on one
                           H200, one wait per step, predicted before it ran
  i26-pythia-1.4b-h200     Pythia-1.4B (GPT-NeoX, a family never timed), the same way
  i26-kinds-pythia-h200    Pythia-1.4B's ZeRO-0 at 13 and at 32 with checkpointing, profiled by kernel kind
  i26-kinds-pythia3-h200   the same two Pythia-1.4B steps under ZeRO-3
  i26-kinds-opt-h200       OPT-1.3B's ZeRO-0 at 16 and at 32 with checkpointing on one H200, profiled by kernel kind
  i26-gpt2-xl-h200         GPT-2 XL (48 layers, hidden 1,600; its 50,257-token head on misaligned GEMMs) at 1,024
                           tokens, every candidate without offload on one H200, one wait per step, predicted before it ran
  i26-kinds-gpt2xl-h200    GPT-2 XL's ZeRO-0 at 11 x 1,024 (half its pick) on one H200, profiled by kernel kind
  i26-falcon-path-h200     Falcon-7B trimmed to 4 layers (multi-query: one K/V head, which SDPA's fused kernels refuse)
                           at 2,048 tokens on one H200: ZeRO-0 at 1, 2 and 4, and at 4 and 8 with checkpointing
  i26-falcon-7b-h200       Falcon-7B (SDPA's math kernel) at 2,048 tokens, every candidate without offload on one H200
                           (ZeRO-3 at 7 with checkpointing), at 4 and at 8 too, one wait per step, predicted before it ran
  i26-falcon-7b-pick-h200  Falcon-7B's pick on one H200 once the math kernel's backward is counted (ZeRO-3 at 5 with
                           checkpointing), and 6 above it
  i26-z3-host-h200         host-bound ZeRO-3 with checkpointing on one H200 (16 host cores) at 2 and 4 x 2,048 of
                           four families (Llama 3.2 3B, Qwen3-4B, Qwen2.5-7B, Llama 3 8B): the host's time per
                           fetch there came from Mistral-7B alone
  i26-big-h200             two 7-8B models of families timed smaller, at 2,048 tokens on one H200, predicted
                           before they ran: OPT-6.7B (ZeRO-3 at 4, and 20 with checkpointing) and Qwen3-8B (ZeRO-3
                           at 2 with checkpointing), every candidate without offload and the micro-batch above each
  i26-z3-buckets-h200      host-bound ZeRO-3 of four families on one H200 at our reduce buckets, DeepSpeed's 5e8
                           and 1e5: the buckets' host time on one GPU
  i26-z3-user-h200         ZeRO-3 of seven other families on one H200 at ours and at a minimal user JSON's stage-3
                           defaults (5e8 buckets), host-bound and GPU-bound: the one-GPU bucket term out of sample
  i26-machine-h200         i26-z3-user-h200's cases at our JSON again, twice on each fresh H200, with
                           benchmarks/machine_probe.py and host_probe.py between: does a probe taken on the machine
                           tell a slow host from a fast one (benchmarks/machine_gpu.sh)
  i26-kinds-h200           GPU-bound ZeRO-0 steps on one H200 profiled by kernel kind and idle time (Qwen3-4B at
                           5 and at 21 with checkpointing, GPT-2 large at 37, Llama 3.2 3B and Phi-3 at 8)
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
"""Host memory the plans may use per GPU: the lent machines have 128 GiB per GPU (2 x H100: 256 GiB; offload
candidates beyond it are dropped by the planner itself)."""
RERUN_STEPS = 16
"""Steps of a rerun (15 timed, 14 under ZeRO-3): a median that three steps could not settle."""

STAGE3_WORLD_LADDERS = [("gpt2-medium", 1024, "3", False, (4,)), ("mistral-7b-8l", 4096, "3", False, (1, 2)),
                        ("llama3.2-1b", 2048, "3", False, (2,)), ("qwen3-1.7b", 4096, "3", False, (1,)),
                        ("gemma2-2b", 1024, "3", False, (4,))]
"""Host-bound ZeRO-3 cases (model, seq, stage, checkpointing, micro-batches) run on one GPU and on two."""

RATES_LADDERS = [("mixtral-32e-top8", 2048, "0", False, (18,)), ("gemma2-2b", 2048, "0", False, (1, 2)),
                 ("gemma2-2b", 2048, "1", False, (2,)), ("gemma2-2b", 2048, "2", False, (2,))]
"""Cases of the two-H200 sweeps (2026-11-27) run on one GPU and on two of one machine (i26-rates-*)."""

NO_OFFLOAD = ("0", "1", "2", "3")
"""A suite's `strategies` where its offload candidates are left out (predicted far slower per token)."""

USER_ZERO2 = [("llama3.2-1b", 2048, (2, 8)), ("qwen3-1.7b", 4096, (1, 2)), ("gpt2-medium", 1024, (8,))]
DS_DEFAULT_ZERO2 = {"overlap_comm": False, "contiguous_gradients": True, "reduce_scatter": True,
                    "reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000}
"""DeepSpeed 0.19.8's stage-2 settings where a JSON is silent (deepspeed/runtime/zero/config.py)."""
DS_DEFAULT_BUCKET = {"reduce_bucket_size": 500_000_000}
"""DeepSpeed 0.19.8's reduce_bucket_size where a JSON is silent (deepspeed/runtime/zero/config.py), every stage."""

DS_DEFAULT_ZERO3 = {"reduce_bucket_size": 500_000_000, "stage3_prefetch_bucket_size": 50_000_000,
                    "stage3_param_persistence_threshold": 100_000}
"""DeepSpeed 0.19.8's stage-3 sizes where a JSON is silent (deepspeed/runtime/zero/config.py; overlap_comm and
contiguous_gradients default on at stage 3, max live parameters and reuse distance 1e9, as ours)."""
Z3_USER_CASES = [("phi3-mini", (2,)), ("gemma2-2b", (2,)), ("qwen2.5-1.5b", (2, 8)), ("opt-1.3b", (2,)),
                 ("pythia-1.4b", (2,)), ("llama3.2-3b", (2, 8)), ("qwen3-4b", (2,))]
"""i26-z3-user-h200's ZeRO-3 cases (model, micro-batches at 2,048 tokens)."""

STAGE3_BUCKET_PAIRS = [("llama3.2-1b", 2048, 2, "bucket-5e8", DS_DEFAULT_BUCKET),
                       ("gpt2-medium", 1024, 4, "bucket-5e8", DS_DEFAULT_BUCKET),
                       ("qwen2.5-0.5b", 4096, 1, "bucket-1e5", {"reduce_bucket_size": 100_000}),
                       ("qwen3-1.7b", 4096, 1, "bucket-5e8", DS_DEFAULT_BUCKET),
                       ("mistral-7b-8l", 4096, 1, "bucket-5e8", DS_DEFAULT_BUCKET)]
"""Host-bound ZeRO-3 cases (model, seq, micro-batch) with another reduce bucket (name, zero_optimization over ours):
DeepSpeed's default 5e8 (what a minimal JSON gets: a handful of buckets) and 1e5 (a bucket per tensor above it)."""


def _bucket_suite(pairs: list[tuple], num_gpus: int) -> dict:
    """Returns a timing suite of `pairs` (STAGE3_BUCKET_PAIRS) on `num_gpus` H100s: each case at our JSON, then
    each at its other bucket size."""
    return {"gpu": "H100", "num_gpus": num_gpus, "settings": [], "steps": 10,
            "ladders": [(model, seq, "3", False, (micro,)) for model, seq, micro, _, _ in pairs],
            "variants": [(model, seq, "3", False, micro, name, zero) for model, seq, micro, name, zero in pairs]}  # fmt: skip


def _world_suite(num_gpus: int, short: bool = False) -> dict:
    """Returns the world-size suite on `num_gpus` H100s of one 4-GPU machine: the host-bound ZeRO-3 cases
    (STAGE3_WORLD_LADDERS, GPT-2's ZeRO-1 for the host floor, Qwen3's pick at 6 x 2,048) at our JSON, then the
    5e8-bucket pairs of STAGE3_BUCKET_PAIRS (a handful of buckets: the gathers' cost alone). `short`: without
    Gemma 2 and Mistral's micro-batch 2 (the slowest to start; both worlds must fit one device call)."""
    ladders = [("gpt2-medium", 1024, "1", False, (4,))] + STAGE3_WORLD_LADDERS + [("qwen3-1.7b", 2048, "3", False, (6,))]
    if short:
        ladders = [(m, seq, st, gc, (1,) if m == "mistral-7b-8l" else micros) for m, seq, st, gc, micros in ladders
                   if m != "gemma2-2b"]  # fmt: skip
    variants = [(model, seq, "3", False, micro, name, zero) for model, seq, micro, name, zero in STAGE3_BUCKET_PAIRS
                if name == "bucket-5e8"]  # fmt: skip
    return {"gpu": "H100", "num_gpus": num_gpus, "settings": [], "steps": 10, "ladders": ladders, "variants": variants}


IDLE_PROFILES = [("gemma2-2b", 2048, "1", False, 2), ("gemma2-2b", 2048, "1", True, 7), ("llama3.2-1b", 2048, "1", False, 2),
                 ("qwen2.5-1.5b", 2048, "1", False, 2), ("gemma2-2b", 2048, "0", False, 2)]

SUITES = {
    "i26-moe-small-h100": {"gpu": "H100", "settings": [("mixtral-32e-top8", 2048)], "ladders": []},
    "i26-moe-shared-h100": {"gpu": "H100", "settings": [("qwen2-moe-a2.7b-4l", 2048)], "ladders": []},
    "i26-mistral7b-h200": {
        "gpu": "H200",
        "settings": [("mistral-7b", 2048)],
        # (model, seq, strategy, checkpointing, micro-batches below the pick)
        "ladders": [("mistral-7b", 2048, "3", True, (1, 2, 4, 8))],
    },
    "i26-llama1b-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [("llama3.2-1b", 2048)], "ladders": []},
    # 12 steps: on two GPUs the first steps after warm-up ran up to 50% slower while the allocator still retried
    # (i26-llama1b-2xh100, 2026-11-26), so a 7-step median sits between the two speeds
    "i26-qwen1.5b-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [("qwen2.5-1.5b", 1024)], "ladders": [], "steps": 12},
    "i26-rerun-3b-h100": {
        "gpu": "H100",
        "settings": [],
        "ladders": [],
        # (committed results file, case id): the case as it ran then, with RERUN_STEPS steps
        "reruns": [("h100x1-op-2026-11-23.jsonl", "llama3.2-3b|1|bf16|mb2|s2048|gc|g1|ga1|cap79.2"),
                   ("h100x1-op-2026-11-23.jsonl", "llama3.2-3b|2|bf16|mb2|s2048|gc|g1|ga1|cap79.2")],
    },
    "i26-stage2-3b-h100": {
        "gpu": "H100",
        "settings": [],
        "steps": RERUN_STEPS,
        "ladders": [("llama3.2-3b", 2048, "0", True, (2,)), ("llama3.2-3b", 2048, "1", True, (2, 8)),
                    ("llama3.2-3b", 2048, "2", True, (2, 8))],
        # (model, seq, strategy, checkpointing, micro-batch, name, zero_optimization settings over ours)
        "variants": [("llama3.2-3b", 2048, "2", True, 2, "no-overlap", {"overlap_comm": False}),
                     ("llama3.2-3b", 2048, "2", True, 2, "bucket-5e8", {"reduce_bucket_size": 500_000_000,
                                                                         "allgather_bucket_size": 500_000_000})],
    },
    # ZeRO-2's synchronized reductions against the GPU's backward, out of sample: families whose ZeRO-2 runs never
    # ran where the host could bind (qwen3, gpt2, mistral), stages 1 and 2 side by side up the micro-batches
    "i26-stage2-ladder-h100": {
        "gpu": "H100",
        "settings": [],
        "steps": 10,
        "ladders": [(model, seq, stage, False, micros) for model, seq, micros in
                    (("qwen3-1.7b", 4096, (1, 2, 4)), ("gpt2-medium", 1024, (4, 8, 16, 32)),
                     ("mistral-7b-8l", 4096, (1, 2)))
                    for stage in ("1", "2")],  # fmt: skip
    },
    # host-bound cases to hold benchmarks/host_probe.py's measurement against, on the machine it ran on: the
    # host floor (GPT-2 medium, Llama 3.2 1B at small micro-batches), ZeRO-2's buckets (Qwen3-1.7B at 1 x 4,096)
    # and ZeRO-3's fetches (Mistral-7B 8 layers, Qwen3-1.7B, Llama 3.2 1B at 1-2 sequences)
    "i26-host-h100": {
        "gpu": "H100",
        "settings": [],
        "steps": 10,
        "ladders": [("gpt2-medium", 1024, "0", False, (4,)), ("gpt2-medium", 1024, "1", False, (4, 8)),
                    ("llama3.2-1b", 2048, "1", False, (2,)), ("llama3.2-1b", 2048, "3", False, (2,)),
                    ("qwen3-1.7b", 4096, "1", False, (1,)), ("qwen3-1.7b", 4096, "2", False, (1,)),
                    ("qwen3-1.7b", 4096, "3", False, (1,)), ("mistral-7b-8l", 4096, "3", False, (1, 2))],
    },
    # every fitting candidate of a third family on two GPUs (out of sample: the constants are fitted on one GPU)
    "i26-qwen3-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [("qwen3-1.7b", 2048)], "ladders": [], "steps": 8},
    # the two-GPU sweeps' settings on four GPUs of one host: the world size the several-GPU figures had not seen
    "i26-qwen3-4xh100": {"gpu": "H100", "num_gpus": 4, "settings": [("qwen3-1.7b", 2048)], "ladders": [], "steps": 8},
    "i26-llama1b-4xh100": {"gpu": "H100", "num_gpus": 4, "settings": [("llama3.2-1b", 2048)], "ladders": [], "steps": 8},
    # the families with fewest cases on several GPUs, at every fitting candidate: Gemma 2 (a 256k vocabulary: its
    # picks are micro-batches of 1-10) and a mixture of small experts (no MoE had run on several GPUs)
    "i26-gemma2-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [("gemma2-2b", 2048)], "ladders": [], "steps": 8},
    # on two H200s the small-expert mixture ran 14-18% slower than predicted at every candidate (Gemma 2 5-8%) and
    # Gemma 2's ZeRO-1 at 2 x 2,048 30%: the same cases on one GPU of one machine and on two (--gpus 0, then both),
    # then benchmarks/kernel_rates.py there: the GPU's rate, or the second GPU?
    "i26-rates-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [], "steps": 10, "ladders": RATES_LADDERS},
    "i26-rates-h200": {"gpu": "H200", "settings": [], "steps": 10, "ladders": RATES_LADDERS},
    # the ZeRO-3 candidate the model has 37% short on two H100s (Llama 3.2 1B at 10 x 2,048, 3 allocator retries in
    # the sweep of 2026-11-26) beside the pick it is ranked against and the micro-batch below, on another machine;
    # 8 steps as that sweep, so that both machines' runs count
    "i26-llama1b-z3-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [], "steps": 8,
                              "ladders": [("llama3.2-1b", 2048, "1", False, (10,)), ("llama3.2-1b", 2048, "3", False, (9, 10))]},
    "i26-moe-small-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [("mixtral-32e-top8", 2048)], "ladders": [],
                             "steps": 8},
    "i26-stage2-ladder-2xh100": {
        "gpu": "H100",
        "num_gpus": 2,
        "settings": [],
        "steps": 10,
        "ladders": [("qwen3-1.7b", 4096, stage, False, (1, 2, 4)) for stage in ("1", "2")],
    },
    # ZeRO-3 on two GPUs ran its largest micro-batches without checkpointing 37-41% slower than predicted, where
    # one GPU's fetch time fits: on one rank DeepSpeed skips the gather (partition_parameters.py
    # all_gather_coalesced returns _no_gather_coalesced), on two it allocates, launches and waits on an all-gather
    # per fetch. Host-bound ZeRO-3 (small micro-batches) of five families on two GPUs, with GPT-2's ZeRO-1 for
    # the host floor at world 2, and the same ZeRO-3 cases on one GPU of the same machine (--gpus 0)
    "i26-stage3-world-2xh100": {
        "gpu": "H100",
        "num_gpus": 2,
        "settings": [],
        "steps": 10,
        "ladders": [("gpt2-medium", 1024, "1", False, (4,))] + STAGE3_WORLD_LADDERS,
        # two picks of the two-GPU sweeps again with RERUN_STEPS: ZeRO-3's 41% miss (steady, or still settling?)
        # and ZeRO-0's, whose allocator retried in the first three of six timed steps
        "reruns": [("h100x2-i26-qwen3-2026-11-26.jsonl", "qwen3-1.7b|3|bf16|mb6|s2048|nogc|g2|ga1|cap79.2|xs"),
                   ("h100x2-i26-llama1b-2026-11-26.jsonl", "llama3.2-1b|0|bf16|mb9|s2048|nogc|g2|ga1|cap79.2|xs")],
    },
    "i26-stage3-world-h100": {"gpu": "H100", "settings": [], "steps": 10, "ladders": STAGE3_WORLD_LADDERS},
    # GPT-2 medium's ZeRO-3 took 2.4 ms more per gather on two GPUs where the other families took 0.45-0.87: up its
    # micro-batches on two GPUs, to see whether that extra is the host's (constant) or grows with the work
    # a user's minimal stage-2 JSON leaves DeepSpeed's defaults: overlap_comm off, 5e8-element buckets. Stages 1 and
    # 2 as ours write them and stage 2 at those defaults, host-bound and GPU-bound micro-batches of three families
    "i26-user-zero2-h100": {
        "gpu": "H100",
        "settings": [],
        "steps": 10,
        "ladders": [(model, seq, stage, False, micros) for model, seq, micros in USER_ZERO2
                    for stage in ("1", "2")],  # fmt: skip
        "variants": [(model, seq, "2", False, micro, "ds-defaults", DS_DEFAULT_ZERO2)
                     for model, seq, micros in USER_ZERO2 for micro in micros],  # fmt: skip
    },
    "i26-stage3-gpt2-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [], "steps": 10,
                               "ladders": [("gpt2-medium", 1024, "3", False, (8, 16))]},
    # ZeRO-3's backward on two GPUs grew by about 0.5 ms per gradient bucket reduced across the ranks (the
    # stage3-world runs against one GPU), a term only GPT-2 (98 gathers, 195 buckets) separates from the gathers
    # in the sweeps. The same host-bound cases at other reduce_bucket_size, nothing else changed, side by side on
    # one machine (STAGE3_BUCKET_PAIRS). Run as variants: not fitted, predicted with their own JSON
    # (throughput_check.user_configs)
    "i26-stage3-buckets-2xh100": _bucket_suite(STAGE3_BUCKET_PAIRS[:3], num_gpus=2),
    # the same five pairs on four GPUs of one host: the bucket's cost where each rank keeps a quarter
    "i26-stage3-buckets-4xh100": _bucket_suite(STAGE3_BUCKET_PAIRS, num_gpus=4),
    "i26-stage3-buckets-b-2xh100": _bucket_suite(STAGE3_BUCKET_PAIRS[3:], num_gpus=2),
    # Every four-GPU ZeRO-3 run was slower than the constants (fitted on two GPUs of other machines) say, by up to
    # 31%, the pick of Qwen3-1.7B at 6 x 2,048 by 20%: do the costs per gather and per bucket grow with the ranks,
    # or was it the machine? The same cases on 4, 2 (--gpus 0,1) and 1 (--gpus 0) GPUs of one machine, in turn
    "i26-stage3-world4-4xh100": _world_suite(4),
    "i26-stage3-world4-2xh100": _world_suite(2),
    "i26-stage3-world4-h100": _world_suite(1),
    # the same on a second four-GPU machine, two GPUs first
    "i26-stage3-world4-b-2xh100": _world_suite(2, short=True),
    "i26-stage3-world4-b-4xh100": _world_suite(4, short=True),
    # settings no sweep had run on several GPUs, where a candidate without checkpointing at a few sequences meets
    # one with it at many (the choice Gemma 2's two-H200 sweeps got wrong): a 7B-class dense model and a 3B, every
    # fitting candidate without offload (the offload candidates are predicted 1.6-3x slower per token)
    "i26-qwen7b-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [("qwen2.5-7b", 2048)], "ladders": [], "steps": 8,
                          "strategies": NO_OFFLOAD},
    "i26-llama3b-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [("llama3.2-3b", 2048)], "ladders": [], "steps": 8,
                           "strategies": NO_OFFLOAD},
    # the family with fewest timed runs (two): Phi-3-mini at 2,048 tokens, where its 2,047-token sliding window makes
    # SDPA take a masked kernel (4.6-4.9 x the model's attention time in recompute_profile), every candidate without
    # offload on one H200
    "i26-phi3-h200": {"gpu": "H200", "settings": [("phi3-mini", 2048)], "ladders": [], "steps": 6, "strategies": NO_OFFLOAD},
    # does the harness's wait after each phase (for the phases' times) slow the step that zero-run's loop, waiting
    # once per step, runs? Gemma 2's small ZeRO-1 step idles its GPUs 40-76 ms (step-profile-2xh200): the cases
    # whose order the model gets wrong, and Llama 3.2 1B at 2 at ZeRO-1 and 3
    "i26-phase-sync-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [], "ladders": [], "steps": 8,
                              "sync_pairs": [("gemma2-2b", 2048, "1", False, 2, 2), ("gemma2-2b", 2048, "1", True, 7, 1),
                                             ("llama3.2-1b", 2048, "1", False, 2, 1),
                                             ("llama3.2-1b", 2048, "3", False, 2, 1)]},
    # the same on four GPUs: the two sweeps' picks against their best (Gemma 2 ZeRO-1 at 2 against 8 with
    # checkpointing; Qwen2.5-7B ZeRO-1 against ZeRO-2 at 9 with checkpointing)
    "i26-phase-sync-4xh100": {"gpu": "H100", "num_gpus": 4, "settings": [], "ladders": [], "steps": 8,
                              "sync_pairs": [("gemma2-2b", 2048, "1", False, 2, 1), ("gemma2-2b", 2048, "1", True, 8, 1),
                                             ("qwen2.5-7b", 2048, "1", True, 9, 1),
                                             ("qwen2.5-7b", 2048, "2", True, 9, 1)]},
    # Gemma 2 at the H200's whole memory on two of them, timed as zero-run's loop runs (one wait per step): the
    # model picks ZeRO-1 at 5 without checkpointing, 12% ahead of 16 with it
    "i26-gemma2-2xh200-one-sync": {"gpu": "H200", "num_gpus": 2, "settings": [("gemma2-2b", 2048)], "ladders": [],
                                   "steps": 8, "strategies": NO_OFFLOAD, "phase_sync": False},
    # the first settings on four GPUs outside Llama 3.2 1B and Qwen3-1.7B, every no-offload candidate: Gemma 2 2B,
    # whose plan quality on two H200s is the worst measured (0.765, 0.851; here the model has ZeRO-1 at 2 without
    # checkpointing 3% ahead of 8 with it), and Qwen2.5-7B, where ZeRO-1 and 3 with checkpointing are predicted tied
    "i26-gemma2-4xh100": {"gpu": "H100", "num_gpus": 4, "settings": [("gemma2-2b", 2048)], "ladders": [], "steps": 8,
                          "strategies": NO_OFFLOAD},
    "i26-qwen7b-4xh100": {"gpu": "H100", "num_gpus": 4, "settings": [("qwen2.5-7b", 2048)], "ladders": [], "steps": 8,
                          "strategies": NO_OFFLOAD},
    # Gemma 2 as zero-run trains it: eager attention with its soft-cap (the harness takes the planner's attention,
    # gpu_step.planned_attention), one wait per step; every no-offload candidate on two whole H200s and on four
    # GPUs capped at the H100's memory
    "i26-gemma2-eager-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [("gemma2-2b", 2048)], "ladders": [],
                                "steps": 8, "strategies": NO_OFFLOAD, "phase_sync": False},
    "i26-gemma2-eager-4xh100": {"gpu": "H100", "num_gpus": 4, "settings": [("gemma2-2b", 2048)], "ladders": [],
                                "steps": 8, "strategies": NO_OFFLOAD, "phase_sync": False},
    # the same on two H100s (or two GPUs capped at their memory): the eager plan-quality miss measured on four
    # (ZeRO-1 at 2 without checkpointing picked, 8 with it 9% faster) on the GPU the cap stood for
    "i26-gemma2-eager-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [("gemma2-2b", 2048)], "ladders": [],
                                "steps": 8, "strategies": NO_OFFLOAD, "phase_sync": False},
    # the rate of eager attention's score bytes on the H100 (measured on the H200 alone: 0.53 of its bandwidth), and
    # the byte count on a second family (Llama 3.2 1B: 32 heads of 64, no soft-cap): each shape under eager and under
    # SDPA, one wait per step, on one GPU (ZeRO-0 at the largest micro-batch eager fits without checkpointing, and a
    # checkpointed one)
    "i26-eager-pairs-h100": {"gpu": "H100", "settings": [], "ladders": [], "steps": 7, "phase_sync": False,
                             "attn_pairs": [("gemma2-2b", 2048, "0", False, 1), ("gemma2-2b", 2048, "0", True, 4),
                                            ("llama3.2-1b", 2048, "0", False, 3), ("llama3.2-1b", 2048, "0", True, 8)]},
    # does eager attention's cost beyond its score bytes stay fixed as the scores shrink? (the pairs of 2 x 2,048
    # without checkpointing took 23-27 ms more than the bytes at the pairs' median share; those of 4 or more did
    # not): Gemma 2 at 1, 2 and 3 sequences and Llama 3.2 1B (32 heads of 64, no soft-cap) at 1 and 2, each under
    # eager and under SDPA, ZeRO-0 on one H200, one wait per step
    "i26-eager-small-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 7, "phase_sync": False,
                             "attn_pairs": [("gemma2-2b", 2048, "0", False, 1), ("gemma2-2b", 2048, "0", False, 2),
                                            ("gemma2-2b", 2048, "0", False, 3), ("llama3.2-1b", 2048, "0", False, 1),
                                            ("llama3.2-1b", 2048, "0", False, 2)]},
    # the same on two H200s, both attentions on one machine: the pairs at 2 x 2,048 on two and four GPUs paired an
    # eager sweep with SDPA runs of another day's machine (76-81 ms apart), where one H200 running both took 33 ms
    "i26-eager-pairs-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [], "ladders": [], "steps": 7,
                               "phase_sync": False,
                               "attn_pairs": [("gemma2-2b", 2048, "1", False, 2), ("gemma2-2b", 2048, "1", False, 5),
                                              ("gemma2-2b", 2048, "1", True, 7)]},
    # Qwen2.5-7B on two whole H200s as zero-run's loop runs it (one wait per step), every candidate without offload:
    # its phase-synced sweep (2026-11-27) is one of two settings below 0.98 (ZeRO-1 at 19 with checkpointing picked,
    # ZeRO-2 at 4 measured 2.3% faster)
    "i26-qwen7b-2xh200-one-sync": {"gpu": "H200", "num_gpus": 2, "settings": [("qwen2.5-7b", 2048)], "ladders": [],
                                   "steps": 8, "strategies": NO_OFFLOAD, "phase_sync": False},
    # how much of ZeRO-2's gradient all-reduce (overlap_comm, on its own stream) runs under backward's kernels, where
    # ZeRO-1's (no overlap_comm) runs after: Qwen2.5-7B at 4 x 2,048 on two H200s, the two candidates 0.5% apart,
    # profiled (busy time against the sum of each kind's kernels)
    "i26-idle-qwen7b-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [], "ladders": [], "steps": 5,
                               "phase_sync": False,
                               "profiles": [("qwen2.5-7b", 2048, "1", False, 4), ("qwen2.5-7b", 2048, "2", False, 4)]},
    # full-depth Mistral-7B on four H100s (H100-planned, run on four H200s as the other 4 x H100 suites), every
    # candidate without offload, one wait per step, five steps so that six 7B cases fit one device call: the model
    # picks ZeRO-1 at 31 with checkpointing, unmeasured
    "i26-mistral7b-4xh100": {"gpu": "H100", "num_gpus": 4, "settings": [("mistral-7b", 2048)], "ladders": [],
                             "steps": 5, "strategies": NO_OFFLOAD, "phase_sync": False},
    # where whole ZeRO steps leave the GPU idle (idle_profile.py): Gemma 2 at 2 without checkpointing (the pick the
    # model gets wrong) and at 7 with it, at ZeRO-0 and 1, beside Llama 3.2 1B (16 layers, 146 tensors: idled half
    # Gemma 2's 49 ms) and Qwen2.5-1.5B (28 layers, 338 tensors, a narrow hidden size), one wait per step, each
    # profiled over two steps without and with Python stacks; on one GPU and on two
    "i26-idle-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 6, "phase_sync": False,
                      "profiles": IDLE_PROFILES},
    "i26-idle-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [], "ladders": [], "steps": 7, "phase_sync": False,
                        "profiles": IDLE_PROFILES},
    # the first setting whose pick the per-gradient-tensor term changed (2026-11-28): Qwen2.5-1.5B at 2,048 on one
    # H100 (or an H200 capped at its memory), ZeRO-0 at 15 with checkpointing where the model picked 6 without;
    # every candidate without offload, one wait per step
    "i26-qwen1.5b-h100": {"gpu": "H100", "settings": [("qwen2.5-1.5b", 2048)], "ladders": [], "steps": 7,
                          "strategies": NO_OFFLOAD, "phase_sync": False},
    # the same for ZeRO-3 and ZeRO-2 (a per-tensor cost in stages 0-2's step, fitted alone, made ZeRO-3 the pick
    # where it is slower: where do ZeRO-3's steps idle?)
    "i26-idle3-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 6, "phase_sync": False,
                       "profiles": [("gemma2-2b", 2048, "3", False, 2), ("llama3.2-1b", 2048, "3", False, 2),
                                    ("qwen2.5-1.5b", 2048, "3", False, 2), ("gemma2-2b", 2048, "3", True, 7),
                                    ("gemma2-2b", 2048, "2", False, 2)]},
    # the ZeRO-2 picks that ZeRO-2's reduction-stream pool moved one micro-batch down (2026-11-28) beside ZeRO-1's, in
    # one call each: Llama 3.2 1B (21 -> 20 with checkpointing) and Qwen2.5-1.5B (34 -> 33) on two H100s, Llama 3.2 3B
    # (33 -> 32) on two H200s; stages 1 and 2 only, one wait per step
    "i26-moved-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [("llama3.2-1b", 2048), ("qwen2.5-1.5b", 1024)],
                         "ladders": [], "steps": 8, "strategies": ("1", "2"), "phase_sync": False},
    "i26-moved-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [("llama3.2-3b", 2048)], "ladders": [], "steps": 8,
                         "strategies": ("1", "2"), "phase_sync": False},
    # the 0.965 of i26-moved-2xh100: Qwen2.5-1.5B's ZeRO-1 and ZeRO-2 at 13 x 1,024 without checkpointing, each timed
    # with the harness's waits and with one wait per step, alternating, twice: is ZeRO-2's 3.7% lead the machine's
    # noise, the timing, or the overlap?
    "i26-qwen1.5b-pair-2xh100": {"gpu": "H100", "num_gpus": 2, "settings": [], "ladders": [], "steps": 8,
                                 "sync_pairs": [("qwen2.5-1.5b", 1024, "1", False, 13, 2),
                                                ("qwen2.5-1.5b", 1024, "2", False, 13, 2)]},
    # a setting no sweep had run, predicted before it ran (2026-11-28, sixteenth session): Meta-Llama-3-8B, the
    # README's model, from its catalog config at 2,048 tokens on two H200s, every candidate without offload, one wait
    # per step; the model has five of them within 2% (ZeRO-1 at 4 the pick), where Qwen2.5-7B's ZeRO-2 led ZeRO-1 by
    # 2-3% on two and four H200s
    "i26-llama8b-2xh200": {"gpu": "H200", "num_gpus": 2, "settings": [("llama3-8b", 2048)], "ladders": [], "steps": 6,
                           "strategies": NO_OFFLOAD, "phase_sync": False},
    # the same on one H200 for Qwen3-4B (a size of a timed family no run had: 36 layers, hidden 2,560), full
    # fine-tuning at 2,048 tokens; the model picks ZeRO-0 at 5 and has seven candidates within 5%
    "i26-qwen3-4b-h200": {"gpu": "H200", "settings": [("qwen3-4b", 2048)], "ladders": [], "steps": 6,
                          "strategies": NO_OFFLOAD, "phase_sync": False},
    # and GPT-2 large (36 layers, hidden 1,280; GPT-2 medium's family holds the largest one-GPU error) at 1,024 tokens:
    # the model has ZeRO-0 to 3 at 37 sequences tied (46,555 tokens/s) and checkpointing 15% behind
    "i26-gpt2-large-h200": {"gpu": "H200", "settings": [("gpt2-large", 1024)], "ladders": [], "steps": 6,
                            "strategies": NO_OFFLOAD, "phase_sync": False},
    # the harness's waits on one GPU (every committed pair ran on two or four): the one-wait runs of one H200 came out
    # 5-7% faster than the model fitted on the harness's runs; the picks of the two sweeps above, and Llama 3.2 1B's
    # small ZeRO-1 step, each with the harness's waits and with one wait per step
    "i26-sync-pairs-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 8,
                            "sync_pairs": [("qwen3-4b", 2048, "0", False, 5, 1), ("gpt2-large", 1024, "0", False, 37, 1),
                                           ("llama3.2-1b", 2048, "1", False, 2, 2)]},
    # a family no run has timed: OPT-1.3B (facebook/opt-1.3b's config: 24 layers, hidden 2,048, ReLU MLP of 8,192,
    # LayerNorm with biases, learned positions, dropout 0.1, tied 50k embeddings), every candidate without offload at
    # 2,048 tokens on one H200, one wait per step, predicted (with the smooth maximum) before it ran
    "i26-opt-1.3b-h200": {"gpu": "H200", "settings": [("opt-1.3b", 2048)], "ladders": [], "strategies": NO_OFFLOAD,
                          "phase_sync": False},
    # a second family no run has timed: Pythia-1.4B (GPT-NeoX: parallel attention and MLP off one input, rotary on a
    # quarter of each head, fused qkv with biases, GELU MLP of 8,192, LayerNorm, untied 50k embeddings; 24 layers,
    # hidden 2,048), the same way, predicted before it ran
    "i26-pythia-1.4b-h200": {"gpu": "H200", "settings": [("pythia-1.4b", 2048)], "ladders": [],
                             "strategies": NO_OFFLOAD, "phase_sync": False},
    # and Pythia's steps by kernel kind, the same way as OPT's (half the sweep's micro-batches)
    "i26-kinds-pythia-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 6, "phase_sync": False,
                              "profiles": [("pythia-1.4b", 2048, "0", False, 13), ("pythia-1.4b", 2048, "0", True, 32)]},
    # Pythia's ZeRO-3 with checkpointing ran 13% slower than its other stages at 64 (the model has them equal): the
    # same two steps as i26-kinds-pythia-h200 under ZeRO-3, beside those ZeRO-0 profiles
    "i26-kinds-pythia3-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 6, "phase_sync": False,
                               "profiles": [("pythia-1.4b", 2048, "3", False, 13), ("pythia-1.4b", 2048, "3", True, 32)]},
    # a GPT-2 size no run has timed, predicted before it ran (by the model before the kernel classes; its 50,257-token
    # head runs CUTLASS's align1 kernels at 0.12-0.19 of the roofline, benchmarks/kernel_rates.py): GPT-2 XL at 1,024
    # tokens, every candidate without offload on one H200, one wait per step
    "i26-gpt2-xl-h200": {"gpu": "H200", "settings": [("gpt2-xl", 1024)], "ladders": [], "strategies": NO_OFFLOAD,
                         "phase_sync": False},
    # and its step by kernel kind, at half the pick (clear of the card's edge): the head's align1 GEMMs at a third width
    # (1,600), and the rate of GPT-2's vectorized elementwise kernels
    "i26-kinds-gpt2xl-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 6, "phase_sync": False,
                              "profiles": [("gpt2-xl", 1024, "0", False, 11)]},
    # where that sweep's 9-16% over-prediction goes: OPT-1.3B's ZeRO-0 step profiled by kernel kind, without
    # checkpointing at 16 and with it at 32 (half the sweep's micro-batches: clear of the allocator's retries)
    "i26-kinds-opt-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 6, "phase_sync": False,
                           "profiles": [("opt-1.3b", 2048, "0", False, 16), ("opt-1.3b", 2048, "0", True, 32)]},
    # Falcon-7B's multi-query attention hands SDPA one K/V head for 71 query heads without enable_gqa: torch's fused
    # kernels refuse those shapes and the math kernel keeps fp32 scores, which the memory model's trace (fused
    # kernels) does not count. The memory per phase of a trimmed Falcon up the micro-batches, one wait per step
    "i26-falcon-path-h200": {"gpu": "H200", "settings": [], "phase_sync": False,
                             "ladders": [("falcon-7b-4l", 2048, "0", False, (1, 2, 4)),
                                         ("falcon-7b-4l", 2048, "0", True, (4, 8))]},
    # the whole Falcon-7B where zero-plan puts it, once the memory and step-time models count the math kernel:
    # every candidate without offload at the largest micro-batch that fits, one wait per step, predicted before it ran
    # (only ZeRO-3 with checkpointing fits: 7 x 2,048 by the model of that call, which ran out of memory; written
    # again now, the pick is 5), with the micro-batch above it and one at about half
    "i26-falcon-7b-h200": {"gpu": "H200", "settings": [("falcon-7b", 2048)], "strategies": NO_OFFLOAD,
                           "ladders": [("falcon-7b", 2048, "3", True, (4, 8))], "phase_sync": False},
    # the pick once the backward's three fp32 score gradients are counted (5), and the micro-batch above it (6)
    "i26-falcon-7b-pick-h200": {"gpu": "H200", "settings": [("falcon-7b", 2048)], "strategies": NO_OFFLOAD,
                                "ladders": [("falcon-7b", 2048, "3", True, (6,))], "phase_sync": False},
    # the H200 host's ZeRO-3 time per fetch came from Mistral-7B's ladder alone (left out of its family's fold, its
    # micro-batch 2 is 30% slower in the model than measured): the same host-bound shapes of four other families
    "i26-z3-host-h200": {"gpu": "H200", "settings": [],
                         "ladders": [("llama3.2-3b", 2048, "3", True, (2, 4)), ("qwen3-4b", 2048, "3", True, (2, 4)),
                                     ("qwen2.5-7b", 2048, "3", True, (2, 4)), ("llama3-8b", 2048, "3", True, (2,))]},
    # OPT and Qwen3 were timed at 1.3B and up to 4B: their 7-8B models where zero-plan puts them on one H200 (only
    # ZeRO-3 fits without offload; offload needs more host memory than the lent machine has), one wait per step
    # as zero-run, with the micro-batch above each candidate (outside the planner's margin: does it run?)
    "i26-big-h200": {"gpu": "H200", "settings": [("opt-6.7b", 2048), ("qwen3-8b", 2048)], "strategies": NO_OFFLOAD,
                     "ladders": [("opt-6.7b", 2048, "3", False, (5,)), ("opt-6.7b", 2048, "3", True, (21,)),
                                 ("qwen3-8b", 2048, "3", True, (3,))], "phase_sync": False},
    # ZeRO-3's gradient buckets on one GPU: the model counts them only across ranks (on one GPU they sit in the time
    # per fetch), yet on one H100 DeepSpeed's 5e8 buckets ran these host-bound steps 8-29% faster than predicted. Ours,
    # then 5e8 (a handful), then 1e5 (a bucket per tensor above it: more than ours) on one H200, side by side
    "i26-z3-buckets-h200": {"gpu": "H200", "settings": [], "steps": 10,
                            "ladders": [(m, seq, "3", False, (mb,)) for m, seq, mb, _, _ in STAGE3_BUCKET_PAIRS[:4]],
                            "variants": [(m, seq, "3", False, mb, "bucket-5e8", DS_DEFAULT_BUCKET)
                                         for m, seq, mb, _, _ in STAGE3_BUCKET_PAIRS[:4] if m != "qwen2.5-0.5b"]
                            + [(m, seq, "3", False, mb, "bucket-1e5", {"reduce_bucket_size": 100_000})
                               for m, seq, mb, _, _ in STAGE3_BUCKET_PAIRS[:4]]},
    # A user's minimal ZeRO-3 JSON on one GPU (DS_DEFAULT_ZERO3: 5e8 reduce buckets, DeepSpeed's prefetch bucket and
    # persistence threshold) beside ours, in families the bucket runs above never had, host-bound (2 x 2,048) and two
    # GPU-bound (8 x 2,048): predicted with the one-GPU bucket term before they ran, and the runs' memory at that JSON
    "i26-z3-user-h200": {"gpu": "H200", "settings": [], "steps": 8,
                         "ladders": [(m, 2048, "3", False, mbs) for m, mbs in Z3_USER_CASES],
                         "variants": [(m, 2048, "3", False, mb, "ds-defaults", DS_DEFAULT_ZERO3)
                                      for m, mbs in Z3_USER_CASES for mb in mbs]},
    # the same ZeRO-3 cases at our JSON on more machines, each pass between probes of the host and the GPU
    # (benchmarks/machine_gpu.sh): the second machine of 2026-12-02 ran them a median 37% slower, unexplained
    "i26-machine-h200": {"gpu": "H200", "settings": [], "steps": 8,
                         "ladders": [(m, 2048, "3", False, mbs) for m, mbs in Z3_USER_CASES]},
    # where the model's one-GPU step time goes wrong at the GPU-bound micro-batches auto picks: each step's kernel
    # seconds by kind (GEMMs, attention, the memory-bound rest, the fused optimizer) and its idle time, beside the
    # model's parts. The model is 4-9% slow on Qwen3-4B, GPT-2 large and Llama 3.2 3B's picks, 4% fast on Phi-3's
    "i26-kinds-h200": {"gpu": "H200", "settings": [], "ladders": [], "steps": 6, "phase_sync": False,
                       "profiles": [("qwen3-4b", 2048, "0", False, 5), ("gpt2-large", 1024, "0", False, 37),
                                    ("llama3.2-3b", 2048, "0", False, 8), ("phi3-mini", 2048, "0", False, 8),
                                    ("qwen3-4b", 2048, "0", True, 21)]},
}


def _ladder_case(model: str, seq: int, strategy: str, gc: bool, micro: int, gpu: str, num_gpus: int = 1) -> dict:
    c = expand_case(case(model, strategy, mb=micro, seq=seq, gc=gc, gpus=num_gpus, precision="bf16"))
    cluster = parse_gpus(f"{num_gpus}x{gpu}", HOST_BYTES * num_gpus)
    c["id"] += f"|cap{cluster.gpu.memory_bytes / GiB:.1f}|xs"
    c["alloc_conf"] = ALLOC_CONF
    c["planned"] = {"role": "ladder", "gpu": cluster.gpu.name, "gpu_capacity_bytes": cluster.gpu.memory_bytes,
                    "host_bytes": HOST_BYTES, "chosen": False}  # fmt: skip
    return c


def _rerun_case(results_file: str, case_id: str) -> dict:
    """Returns a committed case as it ran (its planned role and allocator kept), to run again with more steps."""
    path = ROOT / "benchmarks" / "results" / results_file
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("id") == case_id:
            return dict(row["case"], steps=RERUN_STEPS)
    raise ValueError(f"no case {case_id!r} in {path}")


def suite_cases(name: str) -> list[dict]:
    """Returns the cases of one timing suite: each setting's fitting candidates, then its ladders and reruns."""
    spec = SUITES[name]
    num_gpus = spec.get("num_gpus", 1)
    host = HOST_BYTES * num_gpus
    cases = []
    for model, seq in spec["settings"]:
        cases += [c for c in operating_cases(model, seq, gpu=spec["gpu"], capacity=None, host=host, roles=("pick",),
                                             num_gpus=num_gpus)
                  if c["strategy"] in spec.get("strategies", STRATEGIES)]  # fmt: skip
    picked = {c["id"].split("|cap")[0] for c in cases}
    for model, seq, strategy, gc, micros in spec["ladders"]:
        for micro in micros:
            c = _ladder_case(model, seq, strategy, gc, micro, spec["gpu"], num_gpus)
            if c["id"].split("|cap")[0] not in picked:
                cases.append(c)
    for model, seq, strategy, gc, micro, variant, zero in spec.get("variants", []):
        c = _ladder_case(model, seq, strategy, gc, micro, spec["gpu"], num_gpus)
        c["deepspeed_config"]["zero_optimization"].update(zero)
        c["id"] += f"|{variant}"
        c["variant"] = variant
        cases.append(c)
    for model, seq, strategy, gc, micro, repeats in spec.get("sync_pairs", []):
        # the same case timed as the harness does (a wait after forward, backward and step) and as zero-run's loop
        # does (one wait per step, phase_sync False), alternating, `repeats` times each
        for k in range(1, repeats + 1):
            for phase_sync in (True, False):
                c = _ladder_case(model, seq, strategy, gc, micro, spec["gpu"], num_gpus)
                c["id"] += f"|{'phase-sync' if phase_sync else 'one-sync'}-{k}"
                c["phase_sync"] = phase_sync
                cases.append(c)
    for model, seq, strategy, gc, micro in spec.get("attn_pairs", []):
        # the same shape under each attention, alternating (the harness takes the case's attn_implementation)
        for attn in ("eager", "sdpa"):
            c = _ladder_case(model, seq, strategy, gc, micro, spec["gpu"], num_gpus)
            c["id"] += f"|{attn}"
            c["attn_implementation"] = attn
            cases.append(c)
    for model, seq, strategy, gc, micro in spec.get("profiles", []):
        c = _ladder_case(model, seq, strategy, gc, micro, spec["gpu"], num_gpus)
        c["id"] += "|idle"
        c.update(profile_steps=2, idle_trace=True)
        cases.append(c)
    for c in cases:
        c["steps"] = spec.get("steps", STEPS)
        if spec.get("phase_sync") is False and "phase_sync" not in c:
            c["phase_sync"] = False  # timed as zero-run's loop runs: one wait per step
            c["id"] += "|one-sync"
    cases += [_rerun_case(results_file, case_id) for results_file, case_id in spec.get("reruns", [])]
    for c in cases:
        c["suite"] = name
    return cases


def predicted_seconds(c: dict, gpu: str) -> float:
    """Returns the step-time model's seconds for the case's timed steps (a lower bound on its wall time, which
    adds the model build, deepspeed.initialize and, for offload, pinning the host's optimizer states)."""
    spec = spec_from_config(model_config(c["model"]), c["model"])
    n = c["num_gpus"]
    w = Workload(micro_batch_size=c["micro_batch_size"], seq_len=c["seq_len"], gradient_checkpointing=c["gradient_checkpointing"],
                 precision=c["precision"], world_size=n, gpus_per_node=n)  # fmt: skip
    step = estimate_step_time(spec, STRATEGIES[c["strategy"]], parse_gpus(f"{n}x{gpu}").gpu, w).step_s
    return step * (c["steps"] + 1)  # the warm-up steps run slower: count one more


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write benchmarks/suites/<suite>.jsonl")
    parser.add_argument("--suite", choices=sorted(SUITES), action="append", help="only these suites")
    args = parser.parse_args(argv)
    for name in args.suite or SUITES:
        cases = suite_cases(name)
        gpu = SUITES[name]["gpu"]
        print(f"{name}: {len(cases)} cases on {SUITES[name].get('num_gpus', 1)} x {gpu}")
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

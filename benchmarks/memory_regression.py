"""Holds the memory model to every measured GPU case in benchmarks/results/*.jsonl.

Prints, per case, measured and predicted peak allocated memory with the error, beside two anchors people
use today: DeepSpeed's own estimate_zero*_model_states_mem_needs and the 16-bytes-per-parameter rule. Fails
(exit 1) when the median |error| of peak_allocated exceeds 3%, any case exceeds 10%, a case measured to fit
needs more than the GPU even without the allocator's cache (floor), or a case that ran out of memory is
predicted to fit, or a case's trainable parameter count (recorded by the run) differs from the prediction.
Cases that ran with a predicted total above the GPU but a floor below it are listed.

    python benchmarks/memory_regression.py [--verbose]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zero_planner.models.spec import spec_from_config  # noqa: E402
from zero_planner.plan.fit import gpu_limit_bytes  # noqa: E402
from zero_planner.plan.memory import (  # noqa: E402
    ALLOC_CONF,
    CUDA_CONTEXT_BYTES,
    GiB,
    Workload,
    ZeroBuffers,
    estimate_memory,
    trainable_params,
    working_bytes,
)
from zero_planner.strategies import STRATEGIES  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MEDIAN_LIMIT = 0.03
MAX_LIMIT = 0.10
# Where the planner operates (benchmarks/operating_point.py: its picks and the micro-batch above): tighter.
OP_MEDIAN_LIMIT = 0.02
OP_MAX_LIMIT = 0.05
PICK_ROLES = ("pick", "next", "rerun-xs")
"""Planned roles that are the planner's own picks (a rerun of one with the expandable allocator) or the micro-batch
above one; timing ladders (`ladder`) sit below the picks."""
HOST_LIMIT = 0.10  # host RSS of the operating-point cases, per rank ...
# ... beyond the spread of the bare process, which no term models: 1.84-2.27 GiB across architectures.
HOST_SLACK_BYTES = 256 * 2**20
# Measured host RSS beyond HOST_LIMIT whose cause is not found yet: printed on every run, never silently passed.
KNOWN_HOST_MISSES: dict[str, str] = {  # id prefix -> why a host miss beyond the limit is known and not yet fixed
    "qwen2-moe-a2.7b-4l|3-offload|": (
        "ZeRO-3's optimizer sub-groups close on the first tensor that reaches sub_group_size (stage3.py "
        "_create_fp16_sub_groups), so with 346M-element expert tensors two groups hold 1.24e9 and 1.14e9 "
        "elements and their pinned fp32 gradient buffers round to 8 GiB, not 4: 26.0 GiB pinned, exactly the "
        "27,917,287,424 bytes measured (greedy over the model's parameter order on the meta device); the model "
        "assumes groups of at most sub_group_size (20 GiB): ModelSpec has tensor sizes but not their order"
    ),
}
# id prefix -> why a case that ran is known to be predicted (conservatively) not to fit, and not yet fixed
KNOWN_FIT_MISSES: dict[str, str] = {}


def host_rss_peak(rank: dict) -> int:
    """Returns a rank's host RSS peak of training (0 where it cannot be told): a rank that ran profiled steps after
    the timed ones (gpu_step.py profile_steps) held torch.profiler's events in the same process, so its lifetime peak
    is not the training's; the peak before profiling is used where recorded (runs from 2026-11-27 on), else none."""
    if "profile" in rank:
        return rank.get("host_rss_peak_before_profile_bytes") or 0
    return rank.get("host_rss_peak_bytes") or 0


def known_miss(misses: dict[str, str], case_id: str) -> str | None:
    """Returns why a case is a known miss: the reason of the first id prefix in `misses` that it starts with."""
    return next((why for prefix, why in misses.items() if case_id.startswith(prefix)), None)


def case_outcome(row: dict) -> str:
    """Returns a harness row's outcome: its status, except that a case whose rank ran out of memory while its
    peers waited in a collective until the harness's timeout (before gpu_step.py ended them) ran out of memory."""
    if row["status"] == "timeout" and any(r.get("status") == "oom" for r in row["ranks"]):
        return "oom"
    return row["status"]


def load_cases() -> list[dict]:
    rows = []
    for path in sorted(RESULTS.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if "case" not in row:  # not a GPU harness result (benchmarks/cpu_rss.py writes its own rows)
                    continue
                row["file"] = path.name
                row["status"] = case_outcome(row)
                rows.append(row)
    # An OOM on a GPU that another case shared says nothing about this case's own memory, unless the case ran
    # capped (an emulated smaller GPU in its own reserved slice) and it was that cap that refused: PyTorch's
    # message then reads "N GiB allowed" while the GPU itself had room.
    def own_oom(row: dict) -> bool:
        capped = row["case"].get("memory_limit_bytes") and all(
            "allowed" in (r.get("error") or "") for r in row["ranks"] if r.get("status") == "oom")
        return not row.get("gpu_shared") or bool(capped)

    return [r for r in rows if r["status"] == "ok" or (r["status"] == "oom" and own_oom(r))]


def gpu_short_name(device_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100' (what workspace sizing needs)."""
    return device_name.replace("NVIDIA ", "").split()[0]


def run_capacity(row: dict) -> int:
    """Returns the device bytes a run could use: its allocator cap plus the context where it emulated a smaller
    card (the card whose capacity it was planned for), else the whole GPU it ran on."""
    limit = row["case"].get("memory_limit_bytes")
    return limit + CUDA_CONTEXT_BYTES if limit else row["provenance"]["gpu_memory_bytes"]


def predict(row: dict, specs: dict) -> tuple:
    case = row["case"]
    key = json.dumps(case["model_config"], sort_keys=True)
    if key not in specs:
        specs[key] = spec_from_config(case["model_config"], case["model"])
    spec = specs[key]
    workload = workload_of(row, spec)
    buffers = ZeroBuffers.from_ds_config(case["deepspeed_config"], spec.hidden_size)
    # (DeepSpeed decides ZeRO-1/2's flattening by the free memory it sees; the model counts the worse branch on every
    # card, so the card a case emulated does not enter its prediction.)
    estimate = estimate_memory(spec, STRATEGIES[case["strategy"]], workload, buffers,
                               row["provenance"]["gpu"].replace("NVIDIA ", ""))  # fmt: skip
    return spec, estimate


def workload_of(row: dict, spec) -> Workload:
    """Returns the Workload a measured row ran (attention as recorded by the run)."""
    case = row["case"]
    attn = next((r.get("attn_implementation") for r in row["ranks"] if r.get("attn_implementation")), None)
    return Workload(
        micro_batch_size=case["micro_batch_size"],
        seq_len=case["seq_len"],
        gradient_checkpointing=case["gradient_checkpointing"],
        precision=case["precision"],
        world_size=case["num_gpus"],
        gpus_per_node=case["num_gpus"],
        attn_implementation=attn or spec.attn_implementation or "sdpa",
        gradient_accumulation_steps=case["gradient_accumulation_steps"],
        method=case.get("method", "full"),
        task=case.get("task", "causal-lm"),
        lora_r=case.get("lora_r", 16),
        lora_dropout=case.get("lora_dropout", 0.05),
        num_labels=case.get("num_labels", 2),
        expandable_segments=case.get("alloc_conf") == ALLOC_CONF or case.get("kind") == "zero-run",
        keeps_outputs=bool(case.get("keep_outputs")),
        pretrained=(case.get("plan") or {}).get("model", {}).get("init") == "pretrained",
    )


def anchors(spec, case) -> tuple[int, int]:
    """Returns (DeepSpeed's model-states estimate per GPU, 16 bytes per parameter) in bytes."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    strategy = STRATEGIES[case["strategy"]]
    n = case["num_gpus"]
    if strategy.stage == 3:
        _, gpu, _ = estimate_zero3_model_states_mem_needs(
            spec.num_params, spec.largest_layer_numel, num_gpus_per_node=n, num_nodes=1,
            cpu_offload=strategy.offload_optimizer != "none", cpu_offload_params=strategy.offload_param != "none",
            zero_init=True)  # fmt: skip
    else:
        _, gpu = estimate_zero2_model_states_mem_needs(
            spec.num_params, num_gpus_per_node=n, num_nodes=1, cpu_offload=strategy.offload_optimizer != "none")
    return int(gpu), 16 * spec.num_params


def zero_run_host_check() -> list[str]:
    """Prints zero-run's measured host RSS per phase against the host figures of its plan, re-estimated with
    today's model; returns failures (either figure beyond HOST_LIMIT and HOST_SLACK_BYTES).

    benchmarks/zero_run/*host-phases*.json are run reports with ranks[].host_rss_marks (the peak RSS up to the
    end of each phase) beside the plan they ran (*.plan.json): the mark before the first checkpoint save is
    compared with cpu_training_bytes (loading and training), the run's peak with cpu_total_bytes (a checkpoint
    save and the final export included).
    """
    from zero_planner.models.spec import load_model_spec
    from zero_planner.planfile import load_plan

    failures = []
    reports = sorted((ROOT / "benchmarks" / "zero_run").glob("*host-phases*[0-9].json"))
    if reports:
        print("\nzero-run host RSS per phase (GiB; measured / predicted):")
    for path in reports:
        report = json.loads(path.read_text())
        plan = load_plan(path.with_suffix(".plan.json"))
        t = plan.training
        spec = load_model_spec(plan.model.name)
        workload = Workload(micro_batch_size=t.micro_batch_size, seq_len=t.seq_len,
                            gradient_checkpointing=t.gradient_checkpointing, precision=t.precision,
                            world_size=plan.hardware.world_size, gpus_per_node=plan.hardware.gpus_per_node,
                            attn_implementation=t.attn_implementation, method=t.method, task=t.task,
                            expandable_segments=True)  # fmt: skip
        est = estimate_memory(spec, STRATEGIES[plan.strategy.name], workload, gpu_name=plan.hardware.gpu)
        rank = max(report["ranks"], key=lambda r: r["host_rss_bytes"])
        training, peak = rank["host_rss_marks"]["before_first_save"], rank["host_rss_bytes"]
        saved = max(v for k, v in est.host_phase_peaks.items() if k != "resume")  # these runs did not resume
        pairs = [("training", training, est.cpu_training_bytes), ("with save", peak, saved)]
        if plan.model.init == "pretrained" and plan.strategy.stage != 3:
            # Loading maps the checkpoint (safetensors, mmap): its file-backed pages count in RSS while they are
            # read, but are page cache the kernel reclaims, so the model does not count them (as for QLoRA).
            print(f"  {path.name[:58]:58s} training {training / GiB:.2f} / {est.cpu_training_bytes / GiB:.2f}: "
                  f"pretrained load, memory-mapped checkpoint pages not counted (informational)")
            pairs = pairs[1:]
        print(f"  {path.name[:58]:58s} " + "  ".join(
            f"{name} {m / GiB:.2f} / {p / GiB:.2f} ({(p - m) / m:+.1%})" for name, m, p in pairs))  # fmt: skip
        for name, measured, predicted in pairs:
            if abs(predicted - measured) / measured > HOST_LIMIT and abs(predicted - measured) > HOST_SLACK_BYTES:
                failures.append(f"{path.name}: host RSS {name} {measured / GiB:.2f} GiB, predicted {predicted / GiB:.2f}")
    return failures


STEP_CASE_PHASES = ("load", "initialize", "train")
"""The phases benchmarks/gpu_step.py runs (it neither evaluates, saves, exports nor resumes)."""
PHASE_LIMIT = 0.02  # every phase's peak of a whole zero-run (issue 24's target), median <= PHASE_MEDIAN_LIMIT
PHASE_MEDIAN_LIMIT = 0.01
PHASE_SLACK_BYTES = 64 * 2**20  # phases that hold next to nothing (3-offload-all's resume: 2 MiB) are compared in bytes
KNOWN_PHASE_MISSES: dict[tuple[str, str], str] = {
    # (prefix of a case id, phase) -> why a phase beyond PHASE_LIMIT (GPU) or HOST_LIMIT (host) is known
    ("qwen2.5-3b|2-offload|fp16|", "host train"): "measured = predicted less CPU Adam's two moments (8 B/param, "
    "23.0 GiB) within 1 GiB: consistent with fp16's dynamic loss scale (from 2^16) skipping both of this two-step "
    "run's steps, so the moments were never made; not confirmed (the run's log was not kept). Over-predicted",
    ("qwen2.5-3b|2-offload|fp16|", "host export"): "the same as its train phase: no Adam moments in host memory",
    ("qwen3-30b-a3b-8l|0|bf16|lora|", "host train"): "the bare process after its first steps: 2.36 GiB at stage 0 "
    "LoRA, where the host holds no state the plan counts (OLMoE, the same path without checkpointing, 2.21 GiB); "
    "beyond the 1.84-2.27 GiB spread PROCESS_RSS_BYTES stands for by 0.26 GiB, 10 MiB past the slack. Cause not "
    "found (candidates: CUDA modules loaded lazily for grouped_mm experts and the recompute; not measured apart). "
    "Under-predicted",
}

# Whole runs whose eval forward built a KV cache (zero-run's evaluate before it passed use_cache=False,
# 2026-11-27): with gradient checkpointing off, a causal LM in eval mode kept every layer's keys and values
# (with it on, transformers 5.17 built none). Their eval is held to the prediction plus that cache
# (eval_kv_cache_bytes): the runs still check every other term of eval.
EVAL_KV_CACHE_FILES = frozenset({
    "h100x1-phases-r1-2026-11-25.jsonl", "h100x1-phases-r2-2026-11-25.jsonl", "h100x1-phases-r3-2026-11-25.jsonl",
    "h100x1-phases-r5-2026-11-25.jsonl", "h100x1-phases-r5b-2026-11-25.jsonl", "h200x1-phases-r4-2026-11-25.jsonl",
    "h100x2-phases-r6-2026-11-26.jsonl", "h100x4-phases-r7-2026-11-27.jsonl", "h100x4-phases-r7-next-2026-11-27.jsonl",
})  # fmt: skip


def eval_kv_cache_bytes(spec, workload: Workload) -> int:
    """Returns the KV cache an eval forward with use_cache on keeps: keys and values of every layer, in the
    working precision, for each token of the micro-batch."""
    tokens = workload.micro_batch_size * workload.seq_len
    return 2 * spec.num_key_value_heads * spec.head_dim * spec.num_layers * tokens * working_bytes(workload)


SUPERSEDED_PHASES: dict[tuple[str, str], str] = {
    # (results file, case id) -> why its load and initialize were measured with code zero-run no longer runs
    ("h100x1-phases-r2-2026-11-25.jsonl", "llama3.2-1b|0|fp16|qlora|mb2|s1024|gc|T4|2"): (
        "measured with peft's prepare_model_for_kbit_training, which upcast the kept 16-bit weights to fp32 "
        "(load 1.936, initialize 1.957 GiB); zero-run no longer upcasts (modeling.prepare_for_kbit_training) and "
        "phases-r5 measured the same case at load 1.446, initialize 1.146 GiB, its other phases unchanged"
    ),
}


def run_total(est, phases) -> int:
    """Returns `total` over only `phases` (peak of those + the same overhead)."""
    return max(est.phase_peaks[p] for p in phases) + est.total_bytes - est.peak_allocated_bytes


def after_init_check(rows: list[dict], specs: dict, verbose: bool) -> list[str]:
    """Prints gpu_step's peak from the start of the process to the end of deepspeed.initialize (after_init)
    against the larger of the predicted load and initialize peaks; returns failures (beyond OP_MAX_LIMIT and
    PHASE_SLACK_BYTES).

    ZeRO-1/2 reset the peak counters inside initialize (deepspeed/runtime/utils.py empty_cache() calls
    reset_peak_memory_stats before flattening the weights), so for those stages only the initialize phase is
    in the figure; zero-run's meter keeps both (meter.PhaseMeter folds the peak before each reset)."""
    errors: dict[str, list[float]] = defaultdict(list)
    failures, shown = [], []
    for row in rows:
        case = row["case"]
        rank = row["ranks"][0] if row["ranks"] else {}
        if case.get("kind") == "zero-run" or row["status"] != "ok" or not rank.get("after_init"):
            continue
        _, est = predict(row, specs)
        reset_inside = STRATEGIES[case["strategy"]].stage in (1, 2)
        predicted = est.phase_peaks["initialize"] if reset_inside else max(est.phase_peaks["load"], est.phase_peaks["initialize"])
        measured = rank["after_init"]["peak_allocated_bytes"]
        error = (predicted - measured) / measured
        method = case.get("method", "full")
        errors[method].append(error)
        # a GPU that holds next to nothing after initialize (3-offload-all: 0.13-0.14 GiB) is compared in bytes
        beyond = abs(error) > OP_MAX_LIMIT and abs(predicted - measured) > PHASE_SLACK_BYTES
        known = (KNOWN_INIT_MISSES.get(method) or known_miss(KNOWN_INIT_CASE_MISSES, row["id"])
                 if beyond else None)
        if beyond and not known:
            failures.append(f"{row['id']}: load + initialize peak {measured / GiB:.2f} GiB, predicted "
                            f"{predicted / GiB:.2f} ({error:+.1%})")  # fmt: skip
        if verbose or abs(error) > OP_MAX_LIMIT:
            shown.append(f"  {row['id'][:70]:70s} {measured / GiB:7.2f} {predicted / GiB:7.2f} {error:+7.1%}"
                         + (f"  known: {known}" if known else ""))  # fmt: skip
    print("\nloading + deepspeed.initialize (gpu_step after_init; peak allocated, predicted vs measured):")
    for method, values in sorted(errors.items()):
        abs_values = [abs(e) for e in values]
        print(f"  {method:6s} {len(values):4d} cases: median |error| {statistics.median(abs_values):5.1%}, "
              f"range {min(values):+.1%} .. {max(values):+.1%}")
    for line in shown:
        print(line)
    return failures


KNOWN_INIT_MISSES = {
    "qlora": "gpu_step.py built QLoRA's 16-bit random base on this GPU in the same process (once per machine) "
    "and, until 2026-11-25, kept that build in the peak counter; at stages 1-2 DeepSpeed's reset hides the load "
    "and the cast back. zero-run's meter measures QLoRA's phases alone (phases suite: within 1.4%)",
}


# id prefix -> why this case's load + initialize peak is known to be missed, and not yet explained
KNOWN_INIT_CASE_MISSES = {
    "mixtral-8e-tiny|3-offload|bf16|mb46|s1024|gc|g2|": (
        "91.5 MiB above the model at initialize (1.26 of 1.17 GiB), on both ranks: the same model and strategy on "
        "one GPU is within 5 MiB (six cases), stage 3 without offload on 2 and 4 GPUs and the dense models' "
        "3-offload on 2 and 4 GPUs are exact; MoE with the optimizer offloaded on 2 GPUs alone (4 x H100, "
        "2026-11-26; not re-measured). Its training peak is within 0.3%, 17x larger, so no plan's fit depends on it"
    ),
}


def phase_check(rows: list[dict], specs: dict, verbose: bool) -> list[str]:
    """Prints every phase of the whole zero-runs (benchmarks/phases.py, kind "zero-run") against the memory
    model, GPU and host; returns failures: a phase beyond PHASE_LIMIT (and PHASE_SLACK_BYTES), a median beyond
    PHASE_MEDIAN_LIMIT, an out-of-memory in any phase of a case called fitting, a host phase beyond HOST_LIMIT."""
    from zero_planner.phases import PHASES

    failures: list[str] = []
    errors: dict[str, list[float]] = defaultdict(list)
    host_errors: list[float] = []
    lines, known_lines, ooms = [], [], []
    for row in rows:
        case = row["case"]
        if case.get("kind") != "zero-run":
            continue
        superseded = SUPERSEDED_PHASES.get((row.get("file"), row["id"]))
        if superseded:
            known_lines.append(f"  {row['id']} ({row['file']}) load and initialize not compared: {superseded}")
        spec, est = predict(row, specs)
        planned = case.get("planned", {})
        capacity = run_capacity(row)
        rank = row["ranks"][0] if row["ranks"] else {}
        if row["status"] != "ok":
            phase = rank.get("oom_phase") or "?"
            called_fit = est.total_bytes <= capacity
            ooms.append(f"  {row['id'][:70]}: {row['status']} in {phase}; predicted {est.total_bytes / GiB:.2f} GiB "
                        f"({est.binding_phase}) of {capacity / GiB:.2f} ({'called fitting' if called_fit else 'called not fitting'})")  # fmt: skip
            if row["status"] == "oom" and called_fit:
                failures.append(f"{row['id']}: out of memory in {phase}, predicted to fit ({est.total_bytes / GiB:.2f} GiB)")
            elif row["status"] != "oom":
                failures.append(f"{row['id']}: {row['status']} (not an out-of-memory): see its log")
            continue
        cells = []
        for phase in PHASES:
            figures = rank.get("phases", {}).get(phase)
            if not figures or not figures.get("peak_allocated_bytes"):
                continue
            if superseded and phase in ("load", "initialize"):
                continue
            measured, predicted = figures["peak_allocated_bytes"], est.phase_peaks[phase]
            if phase == "eval" and row.get("file") in EVAL_KV_CACHE_FILES and not case["gradient_checkpointing"]:
                predicted += eval_kv_cache_bytes(spec, workload_of(row, spec))
            error = (predicted - measured) / measured
            errors[phase].append(error)
            cells.append(f"{phase} {error:+.1%}")
            if abs(error) > PHASE_LIMIT and abs(predicted - measured) > PHASE_SLACK_BYTES:
                known = next((why for (prefix, name), why in KNOWN_PHASE_MISSES.items()
                              if name == phase and row["id"].startswith(prefix)), None)  # fmt: skip
                message = (f"{row['id']}: {phase} peak {measured / GiB:.3f} GiB, predicted {predicted / GiB:.3f} "
                           f"({error:+.1%})")  # fmt: skip
                if known:
                    known_lines.append(f"  {message}: {known}")
                else:
                    failures.append(message)
        # the host model is per node: a run of several ranks is compared with their sum (phase_case.rank_phases)
        host_key = "node_host_rss_peak_bytes" if case["num_gpus"] > 1 else "host_rss_peak_bytes"
        host_cells: list[str] = []
        for phase, predicted in est.host_phase_peaks.items():
            figures = rank.get("phases", {}).get(phase)
            if figures and figures.get(host_key):
                measured = figures[host_key]
                error = (predicted - measured) / measured
                host_errors.append(error)
                host_cells.append(f"{phase} {error:+.1%}")
                if abs(error) > HOST_LIMIT and abs(predicted - measured) > HOST_SLACK_BYTES:
                    message = (f"{row['id']}: host RSS in {phase} {measured / GiB:.2f} GiB, predicted "
                               f"{predicted / GiB:.2f} ({error:+.1%})")  # fmt: skip
                    known = next((why for (prefix, name), why in KNOWN_PHASE_MISSES.items()
                                  if name == f"host {phase}" and row["id"].startswith(prefix)), None)  # fmt: skip
                    if known:
                        known_lines.append(f"  {message}: {known}")
                    else:
                        failures.append(message)
        lines.append(f"  {row['id'][:62]:62s} " + " ".join(cells) + ("  | host " + " ".join(host_cells) if host_cells else ""))
    if not lines and not ooms:
        return failures
    print("\nwhole zero-runs, every phase (benchmarks/phases.py; peak allocated, predicted vs measured):")
    for phase in PHASES:
        if errors[phase]:
            abs_values = [abs(e) for e in errors[phase]]
            print(f"  {phase:10s} {len(abs_values):4d} cases: median |error| {statistics.median(abs_values):5.1%}, "
                  f"range {min(errors[phase]):+.1%} .. {max(errors[phase]):+.1%}")
    every = [abs(e) for values in errors.values() for e in values]
    if every:
        print(f"  {'all':10s} {len(every):4d} phase peaks: median |error| {statistics.median(every):5.1%}")
        if statistics.median(every) > PHASE_MEDIAN_LIMIT:
            failures.append(f"phase peaks: median |error| {statistics.median(every):.1%} exceeds {PHASE_MEDIAN_LIMIT:.0%}")
    if host_errors:
        print(f"  host RSS per phase {len(host_errors)} figures: median |error| "
              f"{statistics.median([abs(e) for e in host_errors]):5.1%}, range {min(host_errors):+.1%} .. {max(host_errors):+.1%}")
    if verbose:
        print("\n".join(lines))
    if ooms:
        print("  did not finish:")
        print("\n".join(ooms))
    if known_lines:
        print("  known phase misses (KNOWN_PHASE_MISSES) and runs superseded by newer code (SUPERSEDED_PHASES):")
        print("\n".join(known_lines))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print every case, not only the summary")
    args = parser.parse_args(argv)

    specs: dict = {}
    errors: dict[str, list[float]] = defaultdict(list)
    failures: list[str] = []
    all_errors: list[float] = []
    anchor_errors: dict[str, list[float]] = defaultdict(list)
    total_errors: list[float] = []
    adapter_errors: list[float] = []
    cache_band: list[str] = []
    margin_ooms: list[str] = []
    default_allocator_ooms: list[str] = []
    op_errors: list[float] = []
    op_roles: list[str | None] = []
    op_fits = op_oom = 0
    host_errors: dict[str, list[float]] = defaultdict(list)
    known_misses: list[str] = []
    trainable_checked = 0
    print(f"{'case':58s} {'gpu':5s} {'measured':>9s} {'ours':>9s} {'err':>7s} {'DS est':>8s} {'16B/P':>8s}  fit")
    rows = load_cases()
    for row in rows:
        case = row["case"]
        if case.get("kind") == "zero-run":
            continue  # whole runs, every phase: phase_check below
        spec, est = predict(row, specs)
        capacity = run_capacity(row)
        gpu = gpu_short_name(row["provenance"]["gpu"])
        # gpu_step.py runs loading, deepspeed.initialize and four steps: the phases its fit is judged by.
        est = dataclasses.replace(est, total_bytes=run_total(est, STEP_CASE_PHASES))
        predicted_fit = est.total_bytes <= capacity
        operating = "planned" in case
        if row["status"] == "oom":
            ok = not predicted_fit
            if not ok and operating and est.total_bytes > gpu_limit_bytes(capacity):
                # A micro-batch above the planner's pick, inside the margin it keeps (fit.gpu_limit_bytes): the
                # planner calls it not fitting, and this is why it keeps the margin.
                margin_ooms.append(f"{row['id']}: predicted {est.total_bytes / GiB:.2f} GiB of {capacity / GiB:.2f}, "
                                   f"over the planner's limit {gpu_limit_bytes(capacity) / GiB:.2f}")  # fmt: skip
                continue
            if not ok and not case.get("alloc_conf"):
                # Run with PyTorch's default allocator, which zero-run no longer uses (memory.ALLOC_CONF): its
                # fragmented cache is not a promise the planner makes. Kept as the measurement behind the switch.
                default_allocator_ooms.append(f"{row['id']}: ran out of memory with the default allocator; peak "
                                              f"{est.peak_allocated_bytes / GiB:.2f} GiB + context fits "
                                              f"{capacity / GiB:.2f} GiB (expandable segments: ran)")  # fmt: skip
                continue
            if not ok:
                failures.append(f"{row['id']}: ran out of memory on {gpu} but predicted to fit "
                                f"({est.total_bytes / GiB:.2f} GiB <= {capacity / GiB:.2f})")  # fmt: skip
            print(f"{row['id']:58s} {gpu:5s} {'OOM':>9s} {est.total_bytes / GiB:9.2f} {'':>7s} {'':>8s} {'':>8s}  "
                  f"{'ok' if ok else 'WRONG'}")  # fmt: skip
            continue
        counted = [r["trainable_params"] for r in row["ranks"] if r.get("trainable_params") is not None]
        expected = trainable_params(spec, workload_of(row, spec))
        if counted and counted[0] != expected:
            failures.append(f"{row['id']}: {counted[0]:,} trainable parameters, predicted {expected:,}")
        trainable_checked += bool(counted)
        measured = max(r["peak_allocated_bytes"] for r in row["ranks"])
        error = (est.train_peak_bytes - measured) / measured  # gpu_step measures the steps after initialize
        if operating:
            op_errors.append(error)
            op_roles.append(case["planned"].get("role"))
            op_fits += 1
            if abs(error) > OP_MAX_LIMIT:
                failures.append(f"{row['id']}: operating-point error {error:+.1%} exceeds {OP_MAX_LIMIT:.0%}")
        rss = max(host_rss_peak(r) for r in row["ranks"])
        # QLoRA's RSS holds the memory-mapped 16-bit checkpoint it quantises (file-backed, reclaimable): not
        # modelled as memory that must be free (memory.py), so not compared.
        if rss and case["num_gpus"] == 1 and case.get("method") != "qlora":
            host_error = (est.cpu_training_bytes - rss) / rss
            host_errors["operating point" if operating else "other"].append(host_error)
            known = known_miss(KNOWN_HOST_MISSES, row["id"])
            if known and abs(host_error) > HOST_LIMIT:
                known_misses.append(f"{row['id']}: host RSS {rss / GiB:.2f} GiB, predicted "
                                    f"{est.cpu_training_bytes / GiB:.2f} ({host_error:+.1%}): {known}")  # fmt: skip
            elif operating and abs(host_error) > HOST_LIMIT and abs(est.cpu_training_bytes - rss) > HOST_SLACK_BYTES:
                failures.append(f"{row['id']}: host RSS {rss / GiB:.2f} GiB, predicted {est.cpu_training_bytes / GiB:.2f} "
                                f"({host_error:+.1%}) beyond {HOST_LIMIT:.0%} and 256 MiB")  # fmt: skip
        errors[case["strategy"]].append(error)
        # total = reserved + context: compared with the measured peak reserved plus the measured context.
        reserved = max(r["peak_reserved_bytes"] for r in row["ranks"])
        if not case.get("alloc_conf"):  # expandable segments: total is no longer a prediction of reserved
            total_errors.append((est.total_bytes - reserved - CUDA_CONTEXT_BYTES) / (reserved + CUDA_CONTEXT_BYTES))
        all_errors.append(error)
        ds_gpu, rule16 = anchors(spec, case)
        if case.get("method", "full") == "full":  # both anchors are rules for full fine-tuning
            anchor_errors["deepspeed"].append((ds_gpu - measured) / measured)
            anchor_errors["16B/param"].append((rule16 - measured) / measured)
        else:
            adapter_errors.append(error)
        if abs(error) > MAX_LIMIT:
            failures.append(f"{row['id']}: error {error:+.1%} exceeds {MAX_LIMIT:.0%}")
        known_fit = known_miss(KNOWN_FIT_MISSES, row["id"])
        if not predicted_fit and est.floor_bytes > capacity and known_fit:
            known_misses.append(f"{row['id']}: ran at {measured / GiB:.2f} GiB peak, predicted {est.total_bytes / GiB:.2f} "
                                f"GiB total > {capacity / GiB:.2f} ({error:+.1%}): {known_fit}")  # fmt: skip
        elif not predicted_fit and est.floor_bytes > capacity:
            failures.append(f"{row['id']}: measured to fit on {gpu} but predicted not to "
                            f"({est.total_bytes / GiB:.2f} GiB > {capacity / GiB:.2f})")  # fmt: skip
        elif not predicted_fit:
            # total counts the allocator's cache, which PyTorch releases when memory runs short; between
            # the floor and total the outcome depends on fragmentation (planned as not fitting).
            cache_band.append(f"{row['id']}: ran on {gpu} ({capacity / GiB:.2f} GiB) with predicted total "
                              f"{est.total_bytes / GiB:.2f} GiB and floor {est.floor_bytes / GiB:.2f} GiB")  # fmt: skip
        if args.verbose or abs(error) > MEDIAN_LIMIT:
            print(f"{row['id']:58s} {gpu:5s} {measured / GiB:9.2f} {est.train_peak_bytes / GiB:9.2f} "
                  f"{error:+7.1%} {ds_gpu / GiB:8.2f} {rule16 / GiB:8.2f}  {'ok' if predicted_fit else 'WRONG'}")  # fmt: skip

    print("\nper strategy: cases, median |error|, max |error| of peak_allocated")
    for name in STRATEGIES:
        if errors[name]:
            abs_err = [abs(e) for e in errors[name]]
            print(f"  {name:14s} {len(abs_err):4d}  {statistics.median(abs_err):6.1%}  {max(abs_err):6.1%}")
    abs_all = [abs(e) for e in all_errors]
    median, worst = statistics.median(abs_all), max(abs_all)
    print(f"  {'all':14s} {len(abs_all):4d}  {median:6.1%}  {worst:6.1%}")
    print(f"  trainable parameters: {trainable_checked} cases recorded their count; each must equal the prediction")
    if adapter_errors:
        abs_adapter = [abs(e) for e in adapter_errors]
        print(f"  {'lora/qlora':14s} {len(abs_adapter):4d}  {statistics.median(abs_adapter):6.1%}  {max(abs_adapter):6.1%}")
    if op_errors:
        abs_op = [abs(e) for e in op_errors]
        print(f"  {'operating pt':14s} {len(abs_op):4d}  {statistics.median(abs_op):6.1%}  {max(abs_op):6.1%}"
              f"   (planned cases: the planner's picks, the micro-batch above, timing ladders below; limits "
              f"{OP_MEDIAN_LIMIT:.0%} / {OP_MAX_LIMIT:.0%}; signed {min(op_errors):+.1%} .. {max(op_errors):+.1%})")
        picks = [e for e, role in zip(op_errors, op_roles) if role in PICK_ROLES]
        if picks:
            print(f"  {'  picks, next':14s} {len(picks):4d}  {statistics.median(abs(e) for e in picks):6.1%}  "
                  f"{max(abs(e) for e in picks):6.1%}   (the planner's picks and the micro-batch above alone; signed "
                  f"{min(picks):+.1%} .. {max(picks):+.1%})")
        if statistics.median(abs_op) > OP_MEDIAN_LIMIT:
            failures.append(f"operating-point median |error| {statistics.median(abs_op):.1%} exceeds {OP_MEDIAN_LIMIT:.0%}")
    for name, values in host_errors.items():
        abs_host = [abs(e) for e in values]
        print(f"  host RSS, {name:15s} {len(values):4d} cases: median |error| {statistics.median(abs_host):5.1%}, "
              f"range {min(values):+.1%} .. {max(values):+.1%}")
    print(f"  default-allocator total (reserved + context, informational, {len(total_errors)} cases): median error {statistics.median(total_errors):+.1%}, "
          f"range {min(total_errors):+.0%} .. {max(total_errors):+.0%}")
    for name, values in anchor_errors.items():
        print(f"  anchor {name:9s} median error {statistics.median(values):+7.1%} "
              f"(range {min(values):+.0%} .. {max(values):+.0%})")  # fmt: skip
    if default_allocator_ooms:
        print("\nran out of memory with PyTorch's default allocator although peak + context fits (zero-run sets "
              "expandable segments since):")
        for line in default_allocator_ooms:
            print(f"  {line}")
    if margin_ooms:
        print("\nran out of memory inside the planner's safety margin (called not fitting):")
        for line in margin_ooms:
            print(f"  {line}")
    if cache_band:
        print(f"\nran although predicted total exceeds the GPU (within the allocator-cache band, planned as not fitting):")
        for line in cache_band:
            print(f"  {line}")
    if known_misses:
        print("\nknown misses (KNOWN_HOST_MISSES: host RSS beyond the limit; KNOWN_FIT_MISSES: ran though predicted not "
              "to fit): not failures, issue 10 open")
        for line in known_misses:
            print(f"  {line}")
    failures += zero_run_host_check()
    failures += after_init_check(rows, specs, args.verbose)
    failures += phase_check(rows, specs, args.verbose)
    if median > MEDIAN_LIMIT:
        failures.append(f"median |error| {median:.1%} exceeds {MEDIAN_LIMIT:.0%}")
    if failures:
        print(f"\nFAIL ({len(failures)}):")
        for failure in failures:
            print(f"  {failure}")
        return 1
    print("\nPASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

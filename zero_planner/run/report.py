"""zero-run's reports: run_report.json (measured vs predicted), its printed table, and OOM advice.

Bytes become text only here (2**30 is GiB). No torch import: the data comes from the ranks as numbers.
"""

from __future__ import annotations

from typing import Any

from zero_planner.planfile import Candidate, Plan
from zero_planner.strategies import STRATEGIES

GIB = 2**30
STAGE_ORDER = list(STRATEGIES)  # least sharded first, as strategies.py lists them


def gib(num_bytes: int | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / GIB:.2f} GiB"


def error_pct(measured: int | float | None, predicted: int | float | None) -> float | None:
    """Returns (predicted - measured) / measured in %, positive when the plan over-predicts; None if unknown."""
    if not measured or predicted is None:
        return None
    return 100.0 * (predicted - measured) / measured


def build_run_report(
    plan: Plan,
    ranks: list[dict[str, Any]],
    losses: list[float],
    tokens_per_second: float | None,
    *,
    steps: int,
    device: str,
    status: str = "ok",
    versions: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Returns run_report.json's content: per-rank measured peaks next to the plan's predicted peak."""
    predicted = plan.estimate.per_gpu.peak_allocated
    predicted_phases = plan.estimate.per_gpu.phases
    rows = []
    for r in sorted(ranks, key=lambda r: r["rank"]):
        rows.append(
            {
                "rank": r["rank"],
                "node": r.get("node", 0),
                "host": r.get("host"),
                "peak_allocated_bytes": r.get("peak_allocated_bytes"),
                "peak_reserved_bytes": r.get("peak_reserved_bytes"),
                "host_rss_bytes": r.get("host_rss_bytes"),
                "predicted_peak_allocated_bytes": predicted,
                "error_pct": error_pct(r.get("peak_allocated_bytes"), predicted),
                "phases": phase_rows(r.get("phases") or {}, predicted_phases),
                "step_peak_allocated_bytes": r.get("step_peak_allocated_bytes") or [],
                "alloc_retry_steps": r.get("alloc_retry_steps") or [],
            }
        )
    return {
        "status": status,
        "predicted_host_bytes_per_node": plan.estimate.cpu.total,
        "predicted_host_phases_per_node": dict(plan.estimate.cpu.phases),
        "ranks_per_node": plan.hardware.gpus_per_node,
        "save": plan.training.save,
        "model": plan.model.name,
        "strategy": plan.strategy.name or str(plan.strategy.stage),
        "method": plan.training.method,
        "task": plan.training.task,
        "micro_batch_size": plan.training.micro_batch_size,
        "gradient_accumulation_steps": plan.training.gradient_accumulation_steps,
        "seq_len": plan.training.seq_len,
        "device": device,
        "world_size": len(rows),
        "steps": steps,
        "ranks": rows,
        "losses": losses,
        "tokens_per_second": tokens_per_second,
        "predicted_tokens_per_second": _chosen_tokens_per_second(plan),
        "predicted_total_bytes": plan.estimate.per_gpu.total,
        "versions": versions or {},
    }


ALLOC_RETRY_SEEN = ("Llama 3.2 1B's ZeRO-2 at 4 x 1,024 on an H200, its allocator capped 1-3% above its peak, flushed "
                    "3-4 times a step and made 14,050-15,217 tokens/s where it made 18,589 uncapped")
"""What the memory edge cost in a measured run (benchmarks/zero_run/alloc-retry-h200-2026-11-27.log)."""


def alloc_retry_warning(plan: Plan, *, step: int, retries: int, peak_bytes: int | None,
                        card_bytes: int | None = None) -> str:  # fmt: skip
    """Returns the one warning zero-run prints when PyTorch's allocator retried during a training step that counts
    for speed: what happened, the peak beside what the allocator may hold (`card_bytes`: the GPU's or the emulated
    card's; the plan's GPU when unknown), what it cost in a measured run and the smaller micro-batch that leaves
    room."""
    card = card_bytes or plan.hardware.gpu_memory_bytes
    peak = f"peak {peak_bytes / GIB:.1f} of {card / GIB:.1f} GiB; " if peak_bytes else ""
    micro = plan.training.micro_batch_size
    advice = (f"If it repeats, a smaller micro-batch leaves room: zero-plan ... --micro-batch {micro - 1}" if micro > 1
              else "If it repeats, gradient checkpointing or the next stage leaves room")  # fmt: skip
    return (f"zero-run: step {step}: PyTorch's allocator found no room {retries} time(s) and flushed its cache to retry "
            f"({peak}the memory edge). Each flush waits for the GPU and maps memory again: {ALLOC_RETRY_SEEN}. "
            f"{advice}.")  # fmt: skip


def phase_rows(measured: dict[str, dict[str, int]], predicted: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Returns each measured phase's peaks beside the plan's prediction for it (None where the plan has none)."""
    rows = {}
    for name, figures in measured.items():
        guess = predicted.get(name)
        rows[name] = {**figures, "predicted_peak_allocated_bytes": guess,
                      "error_pct": error_pct(figures.get("peak_allocated_bytes"), guess)}  # fmt: skip
    return rows


def _chosen_tokens_per_second(plan: Plan) -> float | None:
    for candidate in plan.candidates:
        if candidate.chosen:
            return candidate.tokens_per_second
    return None


def report_table(report: dict[str, Any]):
    """Returns a rich Table: one row per rank, measured vs predicted peak allocated with the error in %."""
    from rich.table import Table

    title = (
        f"zero-run {report['model']} · stage {report['strategy']} · {report['world_size']} ranks on "
        f"{report['device']} · {report['steps']} steps"
    )
    table = Table(title=title)
    for name in ("rank", "peak allocated", "predicted", "error", "peak reserved", "host RSS"):
        table.add_column(name, justify="right")
    for row in report["ranks"]:
        err = row["error_pct"]
        table.add_row(
            str(row["rank"]),
            gib(row["peak_allocated_bytes"]),
            gib(row["predicted_peak_allocated_bytes"]),
            "-" if err is None else f"{err:+.1f}%",
            gib(row["peak_reserved_bytes"]),
            gib(row["host_rss_bytes"]),
        )
    tps = report.get("tokens_per_second")
    losses = report.get("losses") or []
    caption = [f"tokens/s {tps:,.0f}" if tps else "tokens/s -"]
    predicted = report.get("predicted_tokens_per_second")
    caption.append(f"(predicted {predicted:,.0f})" if predicted else "(predicted n/a: not modelled on CPU)"
                   if report.get("device") == "cpu" else "(predicted n/a)")  # fmt: skip
    if losses:
        caption.append(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    busiest = max(report["ranks"], key=lambda row: sum(n for _, n in row.get("alloc_retry_steps") or []), default={})
    if steps := busiest.get("alloc_retry_steps"):
        caption.append(f"· allocator flushed its cache {sum(n for _, n in steps)} time(s) in {len(steps)} training "
                       f"step(s) on rank {busiest['rank']} (the memory edge: slower steps)")  # fmt: skip
    table.caption = " ".join(caption)
    return table


def phase_table(report: dict[str, Any]):
    """Returns a rich Table of the busiest rank's peak per phase, measured vs predicted; None without phases."""
    from rich.table import Table

    ranks = [r for r in report["ranks"] if r.get("phases")]
    if not ranks:
        return None
    busiest = max(ranks, key=lambda r: r.get("peak_allocated_bytes") or r.get("host_rss_bytes") or 0)
    table = Table(title=f"memory per phase, rank {busiest['rank']}")
    for name in ("phase", "peak allocated", "predicted", "error", "host RSS"):
        table.add_column(name, justify="right")
    for name, row in busiest["phases"].items():
        err = row.get("error_pct")
        table.add_row(name, gib(row.get("peak_allocated_bytes")), gib(row.get("predicted_peak_allocated_bytes")),
                      "-" if err is None else f"{err:+.1f}%", gib(row.get("host_rss_peak_bytes")))  # fmt: skip
    return table


STEP_PHASES = frozenset({"train", "forward", "backward", "step", "eval"})
"""The phases (PhaseMeter's and the training loop's names) whose memory the micro-batch and checkpointing move;
loading, deepspeed.initialize, resume, checkpoint save and export hold the model's states, whatever the batch."""


def next_choice(plan: Plan, phase: str = "train") -> str:
    """Returns what the planner would choose after an OOM in `phase`: the fastest fitting candidate with a lower
    predicted peak in that phase, else (in a step) a smaller micro-batch, else gradient checkpointing, else the next
    stage; in a phase the batch does not touch, the next stage."""
    step = phase in STEP_PHASES

    def peak(estimate) -> int:
        phases = estimate.per_gpu.phases
        return estimate.per_gpu.peak_allocated if step or phase not in phases else phases[phase]

    ceiling = peak(plan.estimate)
    lower = [c for c in plan.candidates if c.fits and peak(c.estimate) < ceiling]
    if lower:
        # Fastest first; CPU plans carry no tokens/s, so there the least change: the highest peak still lower.
        best = max(lower, key=lambda c: (c.tokens_per_second or 0.0, peak(c.estimate)
                                         if c.tokens_per_second is None else -peak(c.estimate)))  # fmt: skip
        where = "" if step else f" in {phase}"
        return f"{describe(best)} (predicted peak{where} {gib(peak(best.estimate))}): " + _replan_hint(plan, best)
    micro = plan.training.micro_batch_size
    if step and micro > 1:
        return f"micro-batch {micro // 2} instead of {micro}: zero-plan ... --micro-batch {micro // 2}"
    if step and not plan.training.gradient_checkpointing:
        return "gradient checkpointing: zero-plan ... --grad-checkpointing"
    name = plan.strategy.name or str(plan.strategy.stage)
    later = STAGE_ORDER[STAGE_ORDER.index(name) + 1 :] if name in STAGE_ORDER else []
    if later:
        why = "" if step else f" ({phase} holds the model's states: the micro-batch does not change it)"
        return f"stage {later[0]}{why}: zero-plan ... --stage {later[0]}"
    return "more GPUs, LoRA/QLoRA or a shorter sequence: nothing smaller is left at this size"


def describe(candidate: Candidate) -> str:
    ckpt = "with" if candidate.gradient_checkpointing else "without"
    name = candidate.strategy.name or str(candidate.strategy.stage)
    return f"stage {name}, micro-batch {candidate.micro_batch_size}, {ckpt} gradient checkpointing"


def _replan_hint(plan: Plan, candidate: Candidate) -> str:
    name = candidate.strategy.name or str(candidate.strategy.stage)
    ckpt = "--grad-checkpointing" if candidate.gradient_checkpointing else "--no-grad-checkpointing"
    return f"zero-plan ... --stage {name} --micro-batch {candidate.micro_batch_size} {ckpt}"


def oom_message(plan: Plan, *, rank: int, phase: str, step: int) -> str:
    """Returns the one-paragraph OOM explanation printed and written to oom.json."""
    return (
        f"rank {rank} ran out of GPU memory in {phase} at step {step} "
        f"(plan predicted a peak of {gib(plan.estimate.per_gpu.peak_allocated)}, total "
        f"{gib(plan.estimate.per_gpu.total)}). Next choice: {next_choice(plan, phase)}"
    )

"""--probe: run the plan's top candidates a few steps each on this machine and keep the fastest measured.

    zero-run PLAN.json --probe K [--probe-only]      # probe, write PLAN.probed.json, then train with it
    zero-plan --model M --gpus auto|cpu:N -o PLAN.json --probe K

The step-time model ranks candidates; it cannot see kernels, overlap or the allocator. The probe measures K
candidates that fit: the fastest predicted of each strategy family x checkpointing (strategies.step_kind; the
planner's ranking, its choice first, then by predicted tokens/s), then the next in that ranking if K is larger; each
in a fresh process under the real `deepspeed` launcher (plan/command.py build_launch and zero_planner.train, with the
candidate's DeepSpeed JSON, micro-batch and checkpointing), PROBE_STEPS steps, the first WARMUP_STEPS left
out of tokens/s. A candidate that runs out of GPU memory is retried at half the micro-batch, down to 1.
The measured ranking is written to PLAN.probed.json beside the plan (every candidate's `probe` record, the
plan's top level switched to the fastest that ran, `probe` saying how and where it was measured); the
analytic plan file is left as it was. Failures of one candidate never stop the probe; Ctrl-C stops it
with what was measured written.

Each candidate runs in its own temporary folder beside the plan, removed afterwards; the ranks run
`python -m zero_planner.probe` (the entry module zero_planner/probe.py), which is zero_planner.train without
checkpoints or the final export (an 8B model would write ~130 GB per candidate for nothing). The user's
output_dir is never touched. zero-run's --probe is zero_planner/launch.py's probe_then_run; zero-plan's is
`zero_plan` here. No torch import here: the ranks import it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from zero_planner.errors import InputError
from zero_planner.plan.command import Rendezvous, build_launch, launch_command
from zero_planner.plan.dsconfig import build_ds_config, with_monitor
from zero_planner.planfile import Candidate, Plan, ProbeAttempt, ProbeResult, ProbeSummary, load_plan, save_plan
from zero_planner.run import launcher, preflight
from zero_planner.run.training_args import apply_training_args
from zero_planner.strategies import STRATEGIES, Strategy, step_kind

PROBE_STEPS = 6
"""Optimizer steps per candidate: enough for a steady step time after the warm-up, short enough for K runs."""
WARMUP_STEPS = 2
"""Steps left out of tokens/s: the first allocates optimizer states and buffers, the second still settles
kernels and the caching allocator."""
DEFAULT_PROBE_COUNT = 3
"""Candidates probed by --probe-only given without --probe K."""
RANK_MODULE = "zero_planner.probe"
"""What the launcher runs on each rank during a probe (zero_planner/probe.py): zero_planner.train without
checkpoint writes. Printed by zero-run --probe --dry-run, so it stays."""
OOM_PATTERN = re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED")
"""A rank's CUDA OOM as it reaches the launcher's output: torch's message and exception name, and cuBLAS
failing to allocate its workspace (an OOM in disguise). train.py also writes oom_rank{N}.json when the step
loop catches one; an OOM in deepspeed.initialize shows up only in the output."""
STAGE_ORDER = list(STRATEGIES)
GIB = 2**30


# --- input ---------------------------------------------------------------------------------------------------


def probe_count(text: str | int) -> int:
    """Returns the K of `--probe K`; InputError (one line) unless it is a positive integer."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(
            f"--probe {str(text)!r} is not a positive integer: the number of candidates to run, e.g. --probe 3"
        )
    return value


def probed_path(plan_path: str | Path) -> Path:
    """Returns where the probe writes its plan: plan.json -> plan.probed.json, beside it."""
    path = Path(plan_path)
    return path.with_name(f"{path.stem}.probed.json")


# --- which candidates, and each one's plan ------------------------------------------------------------------


def _strategy(candidate: Candidate) -> Strategy:
    s = candidate.strategy
    return Strategy(s.stage, offload_optimizer=s.offload_optimizer, offload_param=s.offload_param)


def _name(candidate: Candidate) -> str:
    return candidate.strategy.name or _strategy(candidate).name


def ranked_candidates(plan: Plan) -> list[int]:
    """Returns the indices of the candidates that fit, in the planner's ranking order.

    The planner's choice first; then search._rank_key on the recorded fields: predicted tokens/s, then the
    simpler strategy, no checkpointing, the larger micro-batch."""

    def key(i: int) -> tuple:
        c = plan.candidates[i]
        order = STAGE_ORDER.index(_name(c)) if _name(c) in STAGE_ORDER else len(STAGE_ORDER)
        return (not c.chosen, -round(c.tokens_per_second or 0.0, 6), order, c.gradient_checkpointing, -c.micro_batch_size)

    return sorted((i for i, c in enumerate(plan.candidates) if c.fits), key=key)


def probe_order(plan: Plan, count: int) -> list[int]:
    """Returns the indices of the `count` candidates a probe runs, in the order it runs them.

    The fastest predicted candidate (the planner's ranking, its choice first) of each distinct (strategy family
    x checkpointing), in ranking order, so that K runs measure K different kinds of step rather than ties of one
    family; when there are fewer kinds than `count`, the next in the ranking fill the rest."""
    ranked = ranked_candidates(plan)
    firsts, seen = [], set()
    for i in ranked:
        if _kind(plan.candidates[i]) not in seen:
            seen.add(_kind(plan.candidates[i]))
            firsts.append(i)
    rest = [i for i in ranked if i not in firsts]
    return (firsts + rest)[:count]


def _kind(candidate: Candidate) -> tuple[str, bool]:
    """Returns (strategy family, checkpointing): what probe_order takes one of each (strategies.step_kind)."""
    return step_kind(_name(candidate), candidate.gradient_checkpointing)


def hidden_size(plan: Plan) -> int:
    """Returns the model's hidden size from the plan's config (the bucket sizes derive from it)."""
    for config in (plan.model.config, plan.model.config.get("text_config") or {}):
        for key in ("hidden_size", "n_embd", "d_model"):
            if isinstance(config.get(key), int):
                return config[key]
    raise InputError(f"plan model {plan.model.name!r}: its config has no hidden_size (or n_embd, d_model)")


def accumulation_for(plan: Plan, micro_batch_size: int) -> int:
    """Returns the gradient accumulation a candidate runs with at `micro_batch_size`.

    The plan file records accumulation for its choice only. Accumulation above 1 there means a global batch
    was asked for, which every candidate keeps (micro x accumulation x GPUs, rounded as the planner does);
    otherwise there is none."""
    t, world = plan.training, plan.hardware.world_size
    if t.gradient_accumulation_steps <= 1:
        return 1
    global_batch = t.micro_batch_size * t.gradient_accumulation_steps * world
    return max(1, round(global_batch / (micro_batch_size * world)))


def _same_strategy(plan: Plan, candidate: Candidate) -> bool:
    a, b = plan.strategy, candidate.strategy
    return (a.stage, a.offload_optimizer, a.offload_param) == (b.stage, b.offload_optimizer, b.offload_param)


def candidate_plan(plan: Plan, index: int, micro_batch_size: int | None = None) -> Plan:
    """Returns the plan that trains candidate `index` (at `micro_batch_size`, default its own) the plan's way.

    Its DeepSpeed JSON: the plan's own where the strategy is the plan's (so edits and a --ds-config survive),
    otherwise build_ds_config as the planner builds it, keeping the plan's optimizer, scheduler and clipping.
    Training settings other than micro-batch, accumulation and checkpointing are the plan's."""
    c = plan.candidates[index]
    micro = micro_batch_size or c.micro_batch_size
    accum = accumulation_for(plan, micro)
    world = plan.hardware.world_size
    if _same_strategy(plan, c):
        ds = json.loads(json.dumps(plan.deepspeed_config))
    else:
        ds = build_ds_config(
            _strategy(c),
            micro_batch_size=micro,
            gradient_accumulation_steps=accum,
            world_size=world,
            precision=plan.training.precision,
            hidden_size=hidden_size(plan),
        )
        for key in ("optimizer", "scheduler", "gradient_clipping"):
            if key in plan.deepspeed_config:
                ds[key] = json.loads(json.dumps(plan.deepspeed_config[key]))
    ds["train_micro_batch_size_per_gpu"] = micro
    ds["gradient_accumulation_steps"] = accum
    ds["train_batch_size"] = micro * accum * world
    out = plan.model_copy(deep=True)
    out.training.micro_batch_size = micro
    out.training.gradient_accumulation_steps = accum
    out.training.gradient_checkpointing = c.gradient_checkpointing
    out.strategy = c.strategy.model_copy(deep=True)
    out.estimate = c.estimate.model_copy(deep=True)
    out.deepspeed_config = ds
    out.probe = None
    for i, other in enumerate(out.candidates):
        other.chosen = i == index
    return out


def for_probe(plan: Plan, output_dir: Path, steps: int) -> Plan:
    """Returns `plan` set up for a probe run: output in `output_dir`, `steps` steps, a progress line per step
    (the probe reads them), no intermediate checkpoint."""
    out = plan.model_copy(deep=True)
    t = out.training
    t.output_dir, t.max_steps, t.log_every, t.save_every = str(output_dir), steps, 1, steps + 1
    t.report_to = []  # a few steps per candidate are not the run to watch (and would open a W&B run each)
    out.deepspeed_config = with_monitor(out.deepspeed_config, [], str(output_dir))
    return out


# --- one run's outcome ---------------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """How one probe launch ended and what it measured (bytes; tokens/s of the whole cluster)."""

    status: str
    """ok | oom | error | interrupted | skipped"""
    tokens_per_second: float | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    host_rss_bytes: int | None = None
    warmup_steps: int = 0
    message: str = ""
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)


Runner = Callable[[Plan], RunOutcome]
"""Runs one candidate plan (from candidate_plan) and returns its outcome; injected in tests."""


def tokens_per_second_after(report: dict[str, Any], warmup: int) -> float | None:
    """Returns tokens/s over the steps after the first `warmup`, from the step times zero-run records
    (run_report.json step_times_s); None when no step ran after them."""
    times = report.get("step_times_s") or []
    if len(times) <= warmup:
        return None
    tokens_per_step = (report["world_size"] * report["micro_batch_size"] * report["gradient_accumulation_steps"]
                       * report["seq_len"])  # fmt: skip
    return tokens_per_step * (len(times) - warmup) / sum(times[warmup:])


def _largest(ranks: list[dict[str, Any]], key: str) -> int | None:
    values = [r[key] for r in ranks if r.get(key) is not None]
    return max(values) if values else None


def _error_line(log_text: str) -> str:
    """Returns the line that best says why a run failed: the last exception or error line of the log."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"(Error|Exception|error:)", line) and not line.startswith("File "):
            return line[:300]
    return lines[-1][:300] if lines else ""


def outcome_of(rc: int, signals: int, log_text: str, output_dir: Path, warmup: int) -> RunOutcome:
    """Returns the outcome of one launch from its exit status, signals forwarded, output and output folder."""
    ooms = sorted(output_dir.glob("oom_rank*.json"))
    if ooms:
        try:
            message = json.loads(ooms[0].read_text()).get("message", "out of memory")
        except (OSError, ValueError):
            message = "out of memory"
        return RunOutcome("oom", message=message)
    if rc != 0 and OOM_PATTERN.search(log_text):
        return RunOutcome("oom", message=next(l.strip() for l in log_text.splitlines() if OOM_PATTERN.search(l))[:300])
    if signals:
        return RunOutcome("interrupted", message="Ctrl-C")
    report_path = output_dir / "run_report.json"
    if rc != 0 or not report_path.is_file():
        why = _error_line(log_text) or "no output"
        return RunOutcome("error", message=f"launcher exit status {rc}: {why}")
    report = json.loads(report_path.read_text())
    ranks = report.get("ranks") or []
    tps, used = tokens_per_second_after(report, warmup), warmup
    if tps is None:  # too few steps: train's own figure, after its own warm-up
        tps, used = report.get("tokens_per_second"), report.get("warmup_steps", 1)
    return RunOutcome(
        "ok" if report.get("status") == "ok" else "error",
        tokens_per_second=tps,
        peak_allocated_bytes=_largest(ranks, "peak_allocated_bytes"),
        peak_reserved_bytes=_largest(ranks, "peak_reserved_bytes"),
        host_rss_bytes=_largest(ranks, "host_rss_bytes"),
        warmup_steps=used,
        message="" if report.get("status") == "ok" else f"run status {report.get('status')!r}",
        device=report.get("device", ""),
        versions=report.get("versions") or {},
    )


# --- the real runner: one launcher per candidate ---------------------------------------------------------------


@dataclass
class LaunchRunner:
    """Runs each candidate plan through the `deepspeed` launcher in its own folder under `workdir`."""

    workdir: Path
    steps: int
    warmup: int = WARMUP_STEPS
    hostfile: str | None = None
    hosts: list[tuple[str, int]] | None = None
    master_addr: str | None = None
    count: int = 0

    def argv(self, plan: Plan, plan_path: Path, output_dir: Path, port: int) -> tuple[list[str], dict[str, str]]:
        """Returns (argv, env) of one probe launch: zero-run's command with the probe's rank module."""
        where = Rendezvous(hostfile=self.hostfile, hosts=self.hosts, master_addr=self.master_addr, master_port=port)
        argv, env = build_launch(plan, plan_path=str(plan_path), max_steps=self.steps, output_dir=str(output_dir),
                                 where=where)  # fmt: skip
        argv[argv.index("--module") + 1] = RANK_MODULE
        return argv, env

    def __call__(self, plan: Plan) -> RunOutcome:
        self.count += 1
        name = plan.strategy.name or plan.strategy.stage
        folder = self.workdir / f"run{self.count}-stage{name}-mb{plan.training.micro_batch_size}"
        output_dir = folder / "out"
        output_dir.mkdir(parents=True)
        probe_plan = for_probe(plan, output_dir, self.steps)
        plan_path = folder / "plan.json"
        save_plan(probe_plan, plan_path)
        machine = _machine(probe_plan, output_dir)
        problems = preflight.preflight(probe_plan, machine, output_dir=str(output_dir))
        if problems:
            return RunOutcome("skipped", message="; ".join(problems))
        argv, env = self.argv(probe_plan, plan_path, output_dir, launcher.free_port())
        note = preflight.fix_launch_env(probe_plan, env, machine)
        if note and self.count == 1:
            print(f"probe: note: {note}", file=sys.stderr)
        log_path = folder / "launcher.log"
        with open(log_path, "wb") as log:
            rc, signals = launcher.spawn(argv, env, multi_node=bool(self.hostfile), log=log)
        log_text = log_path.read_text(errors="replace")
        return outcome_of(rc, signals, log_text, output_dir, self.warmup)


def _machine(plan: Plan, output_dir: Path):
    """Returns this node as preflight sees it, minus the disk check: probe ranks write no checkpoints."""
    return replace(preflight.probe_machine(plan, str(output_dir)), disk_free_bytes=sys.maxsize)


# --- the probe -------------------------------------------------------------------------------------------------


@dataclass
class ProbeRun:
    """What a probe did: the candidates in the order run, each one's result, and whether Ctrl-C stopped it."""

    order: list[int]
    results: dict[int, ProbeResult]
    interrupted: bool = False
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)


def describe(candidate: Candidate, micro_batch_size: int | None = None) -> str:
    ckpt = "ckpt on" if candidate.gradient_checkpointing else "ckpt off"
    return f"stage {_name(candidate)}, {ckpt}, micro-batch {micro_batch_size or candidate.micro_batch_size}"


def _measured_text(outcome: RunOutcome) -> str:
    parts = [f"{outcome.tokens_per_second:,.0f} tokens/s" if outcome.tokens_per_second else "tokens/s -"]
    parts.append(f"peak {_gib(outcome.peak_allocated_bytes)}")
    if outcome.peak_allocated_bytes is None and outcome.host_rss_bytes is not None:
        parts.append(f"host RSS {_gib(outcome.host_rss_bytes)}")
    return "  ".join(parts)


def _gib(num_bytes: int | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / GIB:.2f} GiB"


def run_probe(plan: Plan, count: int, runner: Runner, *, steps: int, emit: Callable[[str], None] = print) -> ProbeRun:
    """Returns the ProbeRun of the `count` best-ranked candidates that fit, each run by `runner` for `steps`
    steps; a candidate out of memory is retried at half its micro-batch down to 1. One progress line per
    launch goes to `emit`."""
    order = probe_order(plan, count)
    run = ProbeRun(order=[], results={})
    for n, index in enumerate(order, 1):
        candidate = plan.candidates[index]
        micro, attempts = candidate.micro_batch_size, []
        while True:
            try:
                outcome = runner(candidate_plan(plan, index, micro))
            except KeyboardInterrupt:
                outcome = RunOutcome("interrupted", message="Ctrl-C")
            except InputError as error:  # this candidate's plan cannot be built or launched
                outcome = RunOutcome("error", message=str(error))
            except OSError as error:  # no launcher, a folder that cannot be written
                outcome = RunOutcome("error", message=f"could not launch: {error}")
            attempts.append(ProbeAttempt(micro_batch_size=micro, status=outcome.status, message=outcome.message))
            line = f"probe {n}/{len(order)}: {describe(candidate, micro)}: {outcome.status}"
            if outcome.status == "ok":
                line += f"  {_measured_text(outcome)}"
                run.device, run.versions = run.device or outcome.device, run.versions or outcome.versions
            elif outcome.status == "oom" and micro > 1:
                line += f", retrying at micro-batch {micro // 2}"
            elif outcome.message:
                line += f" ({outcome.message})"
            emit(line)
            if outcome.status == "oom" and micro > 1:
                micro //= 2
                continue
            break
        run.order.append(index)
        run.results[index] = ProbeResult(
            status=outcome.status,
            micro_batch_size=micro,
            gradient_accumulation_steps=accumulation_for(plan, micro),
            tokens_per_second=outcome.tokens_per_second,
            peak_allocated_bytes=outcome.peak_allocated_bytes,
            peak_reserved_bytes=outcome.peak_reserved_bytes,
            host_rss_bytes=outcome.host_rss_bytes,
            steps=steps if outcome.status == "ok" else 0,
            warmup_steps=outcome.warmup_steps,
            message=outcome.message,
            attempts=attempts,
        )
        if outcome.status == "interrupted":
            run.interrupted = True
            break
    ranked = sorted((i for i, r in run.results.items() if r.status == "ok"),
                    key=lambda i: -(run.results[i].tokens_per_second or 0.0))  # fmt: skip
    for position, index in enumerate(ranked, 1):
        run.results[index].rank = position
    return run


def fastest(run: ProbeRun) -> int | None:
    """Returns the index of the fastest candidate measured, None when none ran."""
    return next((i for i, r in run.results.items() if r.rank == 1), None)


def why_chosen(plan: Plan, run: ProbeRun) -> str:
    """Returns one sentence: which candidate won, by how much, against the planner's choice or the runner-up."""
    best = fastest(run)
    planned = next((i for i, c in enumerate(plan.candidates) if c.chosen), None)
    stopped = " (Ctrl-C stopped the probe: not every candidate ran)" if run.interrupted else ""
    if best is None:
        return f"no candidate ran; the analytic plan stays (see each candidate's probe message){stopped}"
    r = run.results[best]
    text = f"{describe(plan.candidates[best], r.micro_batch_size)}: {r.tokens_per_second:,.0f} tokens/s measured"
    if best != planned and planned in run.results and run.results[planned].status == "ok":
        other = run.results[planned]
        was = describe(plan.candidates[planned], other.micro_batch_size)
        ratio = r.tokens_per_second / other.tokens_per_second
        return f"{text}, {ratio:.2f}x the planner's choice ({was}: {other.tokens_per_second:,.0f}){stopped}"
    lead = "the planner's choice" if best == planned else "the fastest that ran"
    if best != planned and planned in run.results:
        lead += f" (the planner's choice: {run.results[planned].status})"
    runner_up = next((i for i, x in run.results.items() if x.rank == 2), None)
    if runner_up is None:
        return f"{text}; {lead}, the only candidate that ran{stopped}"
    other = run.results[runner_up]
    was = describe(plan.candidates[runner_up], other.micro_batch_size)
    ratio = r.tokens_per_second / other.tokens_per_second
    return f"{text}; {lead}, {ratio:.2f}x the next ({was}: {other.tokens_per_second:,.0f}){stopped}"


def probed_plan(plan: Plan, run: ProbeRun, *, plan_path: str | Path, steps: int, warmup: int = WARMUP_STEPS) -> Plan:
    """Returns the plan for PLAN.probed.json: every candidate's probe result, the fastest measured as the plan's
    choice (its strategy, micro-batch, DeepSpeed JSON and launch command), and `probe` saying how."""
    best = fastest(run)
    planned = next((i for i, c in enumerate(plan.candidates) if c.chosen), None)
    out = plan.model_copy(deep=True) if best is None else candidate_plan(plan, best, run.results[best].micro_batch_size)
    for index, result in run.results.items():
        out.candidates[index].probe = result.model_copy(deep=True)
    if best is not None:
        out.launch.command = launch_command(out, str(probed_path(plan_path)))
        if run.results[best].micro_batch_size != plan.candidates[best].micro_batch_size:
            out.notes.append(
                f"probe: micro-batch {run.results[best].micro_batch_size} after an out-of-memory at "
                f"{plan.candidates[best].micro_batch_size}; the estimate is the planner's for micro-batch "
                f"{plan.candidates[best].micro_batch_size}"
            )
    out.probe = ProbeSummary(
        probed=run.order, chosen=best, planned=planned, reason=why_chosen(plan, run), steps=steps,
        warmup_steps=warmup, complete=not run.interrupted, device=run.device,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"), versions=run.versions,
    )  # fmt: skip
    return out


def ranking_table(plan: Plan):
    """Returns a rich Table of a probed plan, predicted vs measured for every candidate probed, the fastest
    measured first; within 100 columns at the widest values (GiB in the headers, numbers in the cells)."""
    from rich import box
    from rich.table import Table

    summary = plan.probe
    rows = sorted(summary.probed, key=lambda i: (plan.candidates[i].probe.rank or 10**6, summary.probed.index(i)))
    title = (f"probe: {len(summary.probed)} candidates x {summary.steps} steps ({summary.warmup_steps} warm-up) on "
             f"{plan.hardware.world_size} x {summary.device or plan.hardware.gpu}")  # fmt: skip
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, collapse_padding=True,
                  caption="predicted: the planner's step-time model and memory estimate at the planned micro-batch; "
                          "measured: this probe (peak = busiest rank's max_memory_allocated; none on CPU)",
                  caption_justify="left")  # fmt: skip
    # No rank column: the rows are in measured order, the fastest first (each candidate's rank is in the file).
    columns = [("", "left"), ("strategy", "left"), ("ckpt", "left"), ("micro", "right"),
               ("status", "left"), ("tok/s\npredicted", "right"), ("tok/s\nmeasured", "right"),
               ("peak GiB\npredicted", "right"), ("peak GiB\nmeasured", "right"), ("host GiB\nmeasured", "right")]
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for i in rows:
        c, r = plan.candidates[i], plan.candidates[i].probe
        micro = str(c.micro_batch_size)
        if r.micro_batch_size != c.micro_batch_size:
            micro = f"{c.micro_batch_size}->{r.micro_batch_size}"
        table.add_row(
            "->" if i == summary.chosen else "",
            _name(c),
            "on" if c.gradient_checkpointing else "off",
            micro,
            r.status,
            f"{c.tokens_per_second:,.0f}" if c.tokens_per_second is not None else "n/a",
            f"{r.tokens_per_second:,.0f}" if r.tokens_per_second else "-",
            _gib_number(c.estimate.per_gpu.peak_allocated),
            _gib_number(r.peak_allocated_bytes),
            _gib_number(r.host_rss_bytes),
            style="bold green" if i == summary.chosen else (None if r.status == "ok" else "dim"),
        )
    return table


def _gib_number(num_bytes: int | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / GIB:.2f}"


def selection_text(plan: Plan, count: int, steps: int) -> str:
    """Returns the line saying which candidates the probe runs and why those."""
    order, fitting = probe_order(plan, count), ranked_candidates(plan)
    kinds = {_kind(plan.candidates[i]) for i in fitting}
    how = ("the fastest predicted of each strategy family (0-2 | 2-offload | 3 | 3-offload, -all) x checkpointing"
           + (f"; {len(kinds)} such kinds fit, the next fastest fill the rest" if len(kinds) < len(order) else ""))
    return (f"probe: running {len(order)} of {len(fitting)} fitting candidates, {steps} steps each ({WARMUP_STEPS} "
            f"warm-up): {how}")


def probe_and_write(plan_path: str | Path, count: int, *, runner: Runner | None = None, steps: int | None = None,
                    hostfile: str | None = None, hosts=None, master_addr: str | None = None,
                    console=None, overrides: argparse.Namespace | None = None,
                    ) -> tuple[Plan, Path, ProbeRun]:  # fmt: skip
    """Probes the plan at `plan_path` (`steps` per candidate, default PROBE_STEPS), writes PLAN.probed.json
    (also when Ctrl-C stopped it) and prints the ranking; returns (probed plan, its path, the run). The
    default runner launches each candidate in a temporary folder beside the plan, removed afterwards.
    `overrides`: zero-run's data and training flags, applied to every candidate as to the run after it."""
    steps = steps or PROBE_STEPS
    if steps <= WARMUP_STEPS:
        raise ValueError(f"a probe of {steps} steps measures nothing after {WARMUP_STEPS} warm-up steps")
    plan = load_plan(plan_path)
    if overrides is not None:
        apply_training_args(plan, overrides, planning=False)
    if not ranked_candidates(plan):
        raise InputError(f"plan file {str(plan_path)!r} lists no candidate that fits; nothing to probe")
    console = console or _console()
    out_path = probed_path(plan_path)
    workdir = None
    if runner is None:
        try:
            workdir = Path(tempfile.mkdtemp(prefix=".zero-probe-", dir=Path(plan_path).absolute().parent))
        except OSError as error:
            raise InputError(f"--probe runs beside the plan and cannot write there: {error}") from None
        runner = LaunchRunner(workdir, steps=steps, hostfile=hostfile, hosts=hosts, master_addr=master_addr)
    console.print(selection_text(plan, count, steps))
    try:
        run = run_probe(plan, count, runner, steps=steps,
                        emit=lambda line: console.print(line, soft_wrap=True, markup=False))  # fmt: skip
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    result = probed_plan(plan, run, plan_path=plan_path, steps=steps)
    save_plan(result, out_path)
    console.print(ranking_table(result))
    console.print(f"Chosen: {result.probe.reason}", soft_wrap=True, markup=False)
    if run.interrupted:
        console.print(f"probe interrupted; what was measured is in {out_path}")
    else:
        console.print(f"Probed plan: {out_path}")
    return result, out_path, run


def _console():
    from rich.console import Console

    from zero_planner.plan.render import output_width

    return Console(highlight=False, width=output_width())  # the terminal's, COLUMNS, or 100 for a pipe


# --- the commands' hooks ---------------------------------------------------------------------------------------




def zero_plan(args: argparse.Namespace, plan_path: Path | None) -> int:
    """zero-plan ... -o PLAN --probe K: probes the plan just written on this machine; returns the exit status
    (0 a candidate ran, 1 none did, 130 Ctrl-C)."""
    preflight.check_inputs(load_plan(plan_path))  # each candidate's ranks need the tokenizer and data: exit 2 now
    result, _, run = probe_and_write(plan_path, args.probe)
    if run.interrupted:
        return 130
    if result.probe.chosen is None:
        return 1
    print(f"Run:  zero-run {shlex.quote(str(probed_path(plan_path)))}")
    return 0


def check_zero_plan_args(args: argparse.Namespace) -> None:
    """Raises InputError when `zero-plan --probe` cannot run: it needs this machine's GPUs and a plan file."""
    if args.probe is None:
        return
    gpus = args.gpus.strip().lower()
    if gpus != "auto" and not gpus.startswith("cpu"):
        raise InputError(f"--probe runs the candidates on this machine: use --gpus auto or cpu:N, not {args.gpus!r}")
    if args.ds_config:
        raise InputError("--probe compares the planner's candidates; --ds-config gives one (run it with zero-run)")
    if not args.output:
        raise InputError("--probe writes PLAN.probed.json beside the plan: give -o PLAN.json")
    if args.json:
        raise InputError("--probe prints its progress; without --json, read the result from PLAN.probed.json")


# --- rank side -----------------------------------------------------------------------------------------------




"""What zero-plan prints for people: one screen by default, every number on request.

    candidate table   strategy, checkpointing, micro-batch x accumulation, GPU total, host, tokens/s, verdict:
                      fits in 100 columns; the chosen row is marked `->` and the line under it says why it wins
    --wide            the same table with every memory component (params ... peak), up to 200 columns
    --explain         each candidate's reason in full, with its memory breakdown

Bytes become GiB (2**30) here and in cli.py, nowhere else. Width: the terminal's, or COLUMNS; written to a pipe,
DEFAULT_PIPE_WIDTH. Every line is wrapped to that width (the launch command with shell continuations, so it
still pastes).
"""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
from collections.abc import Sequence

from zero_planner.hardware import Cluster
from zero_planner.plan.fit import (
    SAFETY_MARGIN_BYTES,
    SAFETY_MARGIN_FRACTION,
    gpu_limit_bytes,
    host_binding_phase,
    host_limit_bytes,
)
from zero_planner.plan import measured
from zero_planner.plan.saves import save_summary
from zero_planner.plan.search import SPEED_TIE
from zero_planner.planfile import Plan
from zero_planner.strategies import step_kind

GIB = 2**30
DEFAULT_PIPE_WIDTH = 100
"""Columns when stdout is not a terminal and COLUMNS is not set (a pipe, a file, a CI log)."""
WIDE_MIN_WIDTH = 200
"""--wide asks for every column: at least this many, whatever the terminal, so that the table is not squeezed."""
METHOD_WORDS = {**measured.METHOD_WORDS, "auto": "any method"}
STAGE_WORDS = {
    0: "nothing sharded (plain data parallel)",
    1: "optimizer states sharded",
    2: "optimizer states and gradients sharded",
    3: "optimizer states, gradients and weights sharded",
}


def gib(num_bytes: int | float) -> str:
    return f"{num_bytes / GIB:.2f}"


def output_width(*, wide: bool = False) -> int | None:
    """Returns the console width to use: None (rich asks the terminal, or reads COLUMNS), DEFAULT_PIPE_WIDTH
    for a pipe without COLUMNS; never less than WIDE_MIN_WIDTH with --wide."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        width = int(columns)
    elif sys.stdout.isatty():
        width = None
    else:
        width = DEFAULT_PIPE_WIDTH
    if wide:
        import shutil

        return max(width or shutil.get_terminal_size().columns, WIDE_MIN_WIDTH)
    return width


def make_console(*, wide: bool = False):
    from rich.console import Console

    return Console(highlight=False, width=output_width(wide=wide))


def say(console, text: str, *, indent: str = "", hang: str = "", style: str | None = None) -> None:
    """Prints plain `text` (no markup) wrapped to the console width, `indent` before the first line, `hang`
    before the others."""
    from rich.text import Text

    width = max(console.width, 20)
    lines = textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=hang or indent,
                          break_on_hyphens=False, break_long_words=False) or [indent]  # fmt: skip
    for line in lines:
        console.print(Text(line, style=style or ""), soft_wrap=True)


def command_lines(argv: Sequence[str], width: int, indent: str = "  ") -> list[str]:
    """Returns the shell command `argv` broken into lines of at most `width` columns with `\\` continuations
    (an argument longer than a line stays whole), so that it can be pasted as printed."""
    words = [shlex.quote(a) for a in argv]
    lines, current = [], indent + words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) + 2 > width and current.strip():
            lines.append(current + " \\")
            current = indent + "    " + word
        else:
            current += " " + word
    return [*lines, current]


def hardware_text(cluster: Cluster) -> str:
    if cluster.is_cpu:
        return f"{cluster.gpus_per_node} CPU processes ({cluster.gpu.memory_bytes / GIB:.1f} GiB each)"
    nodes = f"{cluster.nodes} nodes x " if cluster.nodes > 1 else ""
    return f"{nodes}{cluster.gpus_per_node}x {cluster.gpu.name} ({cluster.gpu.memory_bytes / GIB:.2f} GiB each)"


def ckpt_text(ckpt: bool) -> str:
    return "with checkpointing" if ckpt else "no checkpointing"


def option_text(option) -> str:
    """Returns `stage 2, checkpointing, micro-batch 4 x 8`: one candidate in words."""
    return (
        f"stage {option.strategy.name}, {ckpt_text(option.gradient_checkpointing)}, micro-batch "
        f"{option.micro_batch_size} x {option.gradient_accumulation_steps}"
    )


def verdict(option, chosen, *, fitting: int, gpu_cap_bytes: int, host_cap_bytes: int, fastest: float = 0.0) -> str:
    """Returns the table's short verdict: `chosen (fastest)` (or `chosen (tie, simplest)` when a candidate
    within search.SPEED_TIE is faster: `fastest` is the top tokens/s), `fits, 23% slower`, or what does not
    fit (`GPU 17.2>13.8`: GiB needed > GiB allowed); `fitting` is how many candidates fit."""
    if option.fits:
        unmodelled = option.step is not None and not option.step.modelled  # CPU processes: no speed figure
        if option is chosen:
            if fitting == 1:
                return "chosen (only fit)"
            if unmodelled:
                return "chosen"
            return "chosen (tie, simplest)" if option.tokens_per_second < fastest else "chosen (fastest)"
        if unmodelled:
            return "fits"
        if chosen is not None and chosen.tokens_per_second > 0:
            slower = 1 - option.tokens_per_second / chosen.tokens_per_second
            return f"fits, {slower:.0%} slower" if slower >= 0.005 else "fits, as fast"
        return "fits"
    if option.reason.startswith("does not run"):
        return "no: fails in DeepSpeed"  # options.known_failure; --explain gives the reason in full
    memory, problems = option.memory, []
    need = memory.total_bytes
    if need > gpu_cap_bytes:
        cache = " (cache)" if 0 < memory.floor_bytes <= gpu_cap_bytes else ""
        phase = "" if memory.binding_phase == "train" else f" {PHASE_SHORT.get(memory.binding_phase, memory.binding_phase)}"
        problems.append(f"GPU{phase} {need / GIB:.1f}>{gpu_cap_bytes / GIB:.1f}{cache}")
    if memory.cpu_total_bytes > host_cap_bytes:  # its phase: --explain (the narrow column has no room)
        problems.append(f"host {memory.cpu_total_bytes / GIB:.0f}>{host_cap_bytes / GIB:.0f}")
    return "no: " + (", ".join(problems) if problems else option.reason)


def candidate_table(title: str, options, chosen, caption: str, *, wide: bool, gpu_cap_bytes: int,
                    host_cap_bytes: int, chosen_label: str | None = None):  # fmt: skip
    """Returns the rich Table of `options`: the short form, or with `wide` every memory component and the
    full reason. `chosen_label` replaces the chosen row's verdict (--ds-config: nothing was chosen)."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, caption=caption, header_style="bold", title_justify="left", caption_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)  # fmt: skip
    columns = [("", "left"), ("strategy", "left"), ("ckpt", "left"), ("micro x acc", "right")]
    if wide:
        columns += [(name, "right") for name in ("params", "grads", "optim", "activ", "buffers", "overhead", "peak")]
        columns += [("binds", "left")]  # the phase of the run whose peak is `peak`
    columns += [("GiB/GPU", "right"), ("host GiB", "right"), ("tokens/s", "right")]
    columns += [("why not" if wide else "verdict", "left")]
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=name not in ("verdict", "why not"))
    fitting = sum(o.fits for o in options)
    fastest = max((o.tokens_per_second for o in options if o.fits), default=0.0)
    for option in options:
        m = option.memory
        row = ["->" if option is chosen else "", option.strategy.name, "on" if option.gradient_checkpointing else "off",
               f"{option.micro_batch_size} x {option.gradient_accumulation_steps}"]  # fmt: skip
        if wide:
            row += [gib(b) for b in (m.params_bytes, m.gradients_bytes, m.optimizer_bytes, m.activations_bytes,
                                     m.buffers_bytes, m.overhead_bytes, m.peak_allocated_bytes)]  # fmt: skip
            row.append(PHASE_SHORT.get(m.binding_phase, m.binding_phase) if m.phase_peaks else "-")
        row += [gib(m.total_bytes), f"{m.cpu_total_bytes / GIB:.1f}", tokens_text(option)]
        if wide:
            row.append(option.reason)
        elif option is chosen and chosen_label:
            row.append(chosen_label)
        else:
            row.append(verdict(option, chosen, fitting=fitting, gpu_cap_bytes=gpu_cap_bytes,
                               host_cap_bytes=host_cap_bytes, fastest=fastest))  # fmt: skip
        style = "bold green" if option is chosen else (None if option.fits else "dim")
        table.add_row(*row, style=style)
    return table


def model_error_text() -> str:
    """Returns the step-time model's stated error: its median (and largest) error on architecture families left
    out of its fit (catalog/step_time.json, benchmarks/throughput_check.py)."""
    from zero_planner.plan.throughput import load_calibration

    cal = load_calibration()
    by_bound = ""
    if cal.bound_errors:
        gpu, host = cal.stated_error(1, "gpu"), cal.stated_error(1, "host")
        by_bound = (f"; ±{gpu[0]:.0%}, up to {gpu[1]:.0%}, where the GPU's work sets the pace, ±{host[0]:.0%}, up to "
                    f"{host[1]:.0%}, where the host's does: its speed differs between machines")
    return (f"tokens/s: step-time model, ±{cal.median_error:.0%} (median error on architectures left out of its "
            f"fit, up to {cal.max_error:.0%}{by_bound}; {cal.scope_text()})")


BOUND_TEXT = {"gpu": "steps the GPU's work bounds, as this one",
              "host": "steps the host bounds, as this one (its Python, launches and ZeRO-3's hooks run at the speed of "
                      "the machine's host, which differs between machines of one kind)"}
"""How the plan's summary names the runs its stated error is over (Candidate.bound)."""


def tokens_text(option) -> str:
    """Returns the tokens/s cell: the step-time model's figure, "-" when the option does not fit, and "n/a" for
    CPU processes, which the model does not describe (throughput.models_throughput)."""
    if not option.fits or option.step is None:
        return "-"
    return f"{option.tokens_per_second:,.0f}" if option.step.modelled else "n/a"


def why_chosen(options, chosen) -> str:
    """Returns why `chosen` wins: the fastest that fits by the step-time model, and by how much."""
    fitting = [o for o in options if o.fits]
    if len(fitting) == 1:
        return f"the only one of {len(options)} candidates that fits"
    others = [o for o in fitting if o is not chosen]
    best_other = max(others, key=lambda o: o.tokens_per_second)
    if chosen.step is not None and not chosen.step.modelled:
        return f"first of {len(fitting)} candidates that fit by the planner's order (tokens/s not modelled on CPU)"
    ahead = chosen.tokens_per_second / best_other.tokens_per_second - 1 if best_other.tokens_per_second else 0
    margin = f"{ahead:.0%} ahead of" if ahead >= SPEED_TIE else "as fast as (simpler than)"
    if ahead < 0:  # a tie within SPEED_TIE, won by the simpler candidate
        return (
            f"tied for fastest of {len(fitting)} candidates that fit ({chosen.tokens_per_second:,.0f} tokens/s, "
            f"within the model's resolution of {option_text(best_other)} at {best_other.tokens_per_second:,.0f}), "
            f"and simpler"
        )
    return (
        f"the fastest of {len(fitting)} candidates that fit ({chosen.tokens_per_second:,.0f} tokens/s), "
        f"{margin} {option_text(best_other)}"
    )


PHASE_SHORT = {"initialize": "init"}
"""Phase names as the narrow table's verdict column writes them."""


def phases_text(memory) -> str:
    """Returns the peak of every phase of a run in GiB, the binding one named, and the host's binding phase."""
    peaks = ", ".join(f"{name} {gib(value)}" for name, value in memory.phase_peaks.items())
    host = host_binding_phase(memory)
    host_text = f"; host binds in {host}" if host not in ("", "train") else ""
    return f"phases (peak allocated): {peaks}; binds: {memory.binding_phase}{host_text}"


def explain(console, options, chosen) -> None:
    """Prints every candidate's reason in full and its memory breakdown (--explain)."""
    console.print()
    say(console, "Every candidate (GiB per GPU; host per node):", style="bold")
    say(console, model_error_text(), indent="  ", hang="    ")
    for option in options:
        m = option.memory
        mark = "-> " if option is chosen else "   "
        say(console, f"{option_text(option)}: {option.reason}", indent=mark, hang="      ",
            style="bold green" if option is chosen else None)  # fmt: skip
        breakdown = (
            f"params {gib(m.params_bytes)} + gradients {gib(m.gradients_bytes)} + optimizer "
            f"{gib(m.optimizer_bytes)}, activations {gib(m.activations_bytes)}, buffers {gib(m.buffers_bytes)}; "
            f"peak allocated {gib(m.peak_allocated_bytes)}, with overhead {gib(m.overhead_bytes)} total "
            f"{gib(m.total_bytes)}; host {gib(m.cpu_total_bytes)}"
            + (f"; {tokens_text(option)} tokens/s" if option.fits else "")
        )
        say(console, breakdown, indent="      ")
        if m.phase_peaks:
            say(console, phases_text(m), indent="      ", hang="        ")


def print_plan_result(console, result, *, spec_name: str, method: str = "full", wide: bool = False,
                      show_reasons: bool = False) -> None:  # fmt: skip
    cluster, spec = result.cluster, result.spec
    gpu_cap, host_cap = gpu_limit_bytes(cluster.gpu.memory_bytes), host_limit_bytes(cluster.cpu_memory_bytes)
    title = (
        f"{spec_name} ({spec.num_params / 1e9:.2f}B params) on {hardware_text(cluster)}, "
        f"seq {result.seq_len}, {result.precision}"
    )
    caption = (
        f"Fits: GiB/GPU (peak allocated + CUDA context, expandable segments; ZeRO-2 adds its reduction stream's "
        f"pool) <= {gpu_cap / GIB:.2f} (capacity less "
        f"{SAFETY_MARGIN_FRACTION:.0%} and {SAFETY_MARGIN_BYTES // 2**20} MiB), host GiB per node <= "
        f"{host_cap / GIB:.1f}. tokens/s: whole cluster, step-time model"
        + ("; not modelled for CPU processes (n/a). " if cluster.is_cpu else ". ")
        + ("--explain: every reason in full." if wide else "--wide: every memory component; --explain: every reason.")
    )
    console.print(candidate_table(title, result.options, result.chosen, caption, wide=wide, gpu_cap_bytes=gpu_cap,
                                  host_cap_bytes=host_cap))  # fmt: skip
    if show_reasons:
        explain(console, result.options, result.chosen)
    for note in result.notes:
        say(console, f"note: {note}", hang="  ")
    if result.chosen is None:
        console.print(
            f"[bold red]Nothing fits[/] for {METHOD_WORDS.get(method, method)} of {spec_name} on {hardware_text(cluster)} "
            f"at seq {result.seq_len}. What would:"
        )
        for line in result.advice:
            say(console, line, indent="  - ", hang="    ")


def capacity_line(what: str, need_bytes: int, have_bytes: int) -> str:
    spare = have_bytes - need_bytes
    room = f"headroom {gib(spare)} GiB" if spare >= 0 else f"short by {gib(-spare)} GiB"
    return f"{what} {gib(need_bytes)} of {gib(have_bytes)} GiB: {room}"


def print_config_estimate(console, estimate, cluster: Cluster, path: str, *, wide: bool = False,
                          show_reasons: bool = False) -> None:  # fmt: skip
    option = estimate.option
    title = (
        f"{path} on {hardware_text(cluster)}, seq {estimate.plan.training.seq_len}, {estimate.plan.training.precision}"
    )
    caption = "GiB per GPU (host: per node); fit judged against the full capacity, no safety margin."
    chosen = option if option.fits else None
    console.print(candidate_table(title, [option], chosen, caption, wide=wide, gpu_cap_bytes=cluster.gpu.memory_bytes,
                                  host_cap_bytes=cluster.cpu_memory_bytes, chosen_label="fits (no margin)"))  # fmt: skip
    if show_reasons:
        explain(console, [option], chosen)
    gpu_line = capacity_line("GPU", option.memory.total_bytes, cluster.gpu.memory_bytes)
    host_line = capacity_line("host", option.memory.cpu_total_bytes, cluster.cpu_memory_bytes) + " per node"
    verdict_text = "Fits" if option.fits else "Does not fit"
    say(console, f"{verdict_text} (no safety margin): {gpu_line}; {host_line}", hang="  ",
        style="bold green" if option.fits else "bold red")  # fmt: skip
    for note in estimate.plan.notes:
        say(console, f"note: {note}", hang="  ")


def runner_up_within(candidates, chosen, error: float):
    """Returns the fastest fitting candidate of another kind of step than `chosen` (not `alike`: the one that
    --probe 2 runs second) predicted within `error` (a fraction) of `chosen`'s tokens/s, else None: where the
    step-time model's median error spans the gap, it cannot order the two (two H200s, Gemma 2 2B: ZeRO-1 at
    2 x 2,048 predicted 0.6% ahead of 7 x 2,048 with checkpointing, measured 15-23% behind it, 2026-11-27)."""
    others = [c for c in candidates if c.fits and c is not chosen and c.tokens_per_second and not alike(c, chosen)]
    if not others or not chosen.tokens_per_second:
        return None
    best = max(others, key=lambda c: c.tokens_per_second)
    return best if best.tokens_per_second >= chosen.tokens_per_second * (1 - error) else None


def alike(a, b) -> bool:
    """Whether two candidates are one kind of step (strategies.step_kind: strategy family x checkpointing), which
    measure alike and of which zero-plan --probe runs only the fastest predicted before other kinds."""
    return step_kind(a.strategy.name, a.gradient_checkpointing) == step_kind(b.strategy.name, b.gradient_checkpointing)


def candidate_text(candidate) -> str:
    """Returns `stage 3-offload, with checkpointing, micro-batch 18`: a plan file's candidate in words."""
    return (f"stage {candidate.strategy.name}, {ckpt_text(candidate.gradient_checkpointing)}, micro-batch "
            f"{candidate.micro_batch_size}")


METHOD_CHOSEN_WORDS = {"lora": "LoRA (adapters trained, base weights frozen)",
                       "qlora": "QLoRA (adapters trained on a frozen 4-bit base)"}
"""How the Chosen line names an adapter method; full fine-tuning, the default, is not named."""


def print_next_steps(console, plan: Plan, written, output: str | None, *, why: str | None = None,
                     method_asked: str | None = None) -> None:
    """Prints the chosen plan in words, its stated speed error, the files written and the launch line.
    `method_asked` is the user's --method: under auto, a method other than full fine-tuning says why."""
    t, s = plan.training, plan.strategy
    world = plan.hardware.nodes * plan.hardware.gpus_per_node
    per_gpu = plan.estimate.per_gpu
    offload = []
    if s.offload_optimizer != "none":
        offload.append(f"optimizer offloaded to {s.offload_optimizer}")
    if s.offload_param != "none":
        offload.append(f"parameters offloaded to {s.offload_param}")
    what = STAGE_WORDS[s.stage] + ("; " + ", ".join(offload) if offload else "")
    method = f"{METHOD_CHOSEN_WORDS[t.method]}, " if t.method in METHOD_CHOSEN_WORDS else ""
    say(console, f"Chosen: {method}ZeRO stage {s.stage} ({what}), {t.precision}, gradient checkpointing "
        f"{'on' if t.gradient_checkpointing else 'off'}", hang="  ", style="bold green")  # fmt: skip
    if method_asked == "auto" and t.method != "full":
        say(console, f"  method: {METHOD_WORDS[t.method]}, not full fine-tuning, which does not fit here "
            f"(--method auto; --method full shows what would)", hang="    ")  # fmt: skip
    if why:
        say(console, f"  why: {why}", hang="    ")
    say(console, f"  batch: micro-batch {t.micro_batch_size} x accumulation {t.gradient_accumulation_steps} x "
        f"{world} {'GPU' if world == 1 else 'GPUs'} = {t.micro_batch_size * t.gradient_accumulation_steps * world} "
        f"sequences of {t.seq_len} tokens per step", hang="    ")  # fmt: skip
    where = f" in {per_gpu.binding_phase}" if per_gpu.binding_phase not in (None, "train") else ""
    host_phase = next((k for k, v in plan.estimate.cpu.phases.items() if v == plan.estimate.cpu.total), "")
    host_where = f" (in {host_phase})" if host_phase not in ("", "train") else ""
    say(console, f"  per GPU: total {gib(per_gpu.total)} of {gib(plan.hardware.gpu_memory_bytes)} GiB (peak allocated "
        f"{gib(per_gpu.peak_allocated)} GiB{where}); host {gib(plan.estimate.cpu.total)} of "
        f"{gib(plan.hardware.cpu_memory_bytes)} GiB per node{host_where}", hang="    ")  # fmt: skip
    if t.attn_implementation == "eager":
        say(console, "  attention: eager (current transformers releases refuse SDPA for this architecture): every "
            "layer materializes its scores, counted in memory and tokens/s", hang="    ")  # fmt: skip
    say(console, f"  zero-run keeps {save_summary(t.save, t.save_every, t.save_total_limit, adapters=t.method != 'full')}"
        + (f"; logs to {', '.join(t.report_to)}" if t.report_to else ""), hang="    ")  # fmt: skip
    chosen = next((c for c in plan.candidates if c.chosen), None)
    if chosen is not None and chosen.tokens_per_second:
        from zero_planner.plan.throughput import load_calibration

        cal = load_calibration()
        median, largest = cal.stated_error(world, chosen.bound)
        on = " on several GPUs" if world > 1 and cal.several_gpus_median_error else ""
        over = f", for {BOUND_TEXT[chosen.bound]}" if chosen.bound and cal.bound_errors else ""
        measured = plan.hardware.gpu in cal.fitted_gpus()
        if measured:
            error = (f"±{median:.0%} median error on architectures left out of its fit{on}{over}, up to "
                     f"{largest:.0%}")
        else:  # the stated error is over the fitted GPUs' runs; it says nothing of a card never measured
            error = (f"{plan.hardware.gpu} never measured: scaled from its catalog peaks, fitted on "
                     f"{' and '.join(cal.fitted_gpus())} runs, so its error here is not known")
        say(console, f"  estimated {chosen.tokens_per_second:,.0f} tokens/s (step-time model, {error}; not a "
            f"measurement)", hang="    ")  # fmt: skip
        close = runner_up_within(plan.candidates, chosen, median)
        if close is not None:
            slower = 1 - close.tokens_per_second / chosen.tokens_per_second
            within = "within that error" if measured else "within the error on the GPUs measured"
            say(console, f"  the next best, {candidate_text(close)}, is predicted {slower:.1%} slower: {within}, "
                f"so the order of the two is not known; on the training machine, --gpus auto --probe 2 "
                f"times both", hang="    ")  # fmt: skip
    elif chosen is not None and chosen.tokens_per_second is None:
        say(console, "  tokens/s: not modelled for CPU processes (the step-time model describes GPUs)", hang="    ")
    if written:
        plan_path, ds_path = written
        say(console, f"Plan: {plan_path}   DeepSpeed JSON: {ds_path}", hang="  ")
        say(console, f"Run:  zero-run {shlex.quote(str(plan_path))}", hang="  ")
    else:
        say(console, "Write the plan with -o plan.json, then run: zero-run plan.json")
    say(console, "runs:")
    for line in command_lines(plan.launch.command, max(console.width, 40)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def duration_text(hours: float | None) -> str:
    """Returns `45 min`, `12.3 h` or `4.2 d` (days past 48 hours); `-` for None."""
    if hours is None:
        return "-"
    if hours < 1:
        return f"{hours * 60:.0f} min"
    if hours < 48:
        return f"{hours:.1f} h"
    return f"{hours / 24:.1f} d"


def cluster_text(cluster: Cluster) -> str:
    """Returns `8xH100-SXM` or `2x8xH100-SXM` (nodes x GPUs per node), `cpu:2` for CPU processes."""
    if cluster.is_cpu:
        return f"cpu:{cluster.gpus_per_node}"
    nodes = f"{cluster.nodes}x" if cluster.nodes > 1 else ""
    return f"{nodes}{cluster.gpus_per_node}x{cluster.gpu.name}"


def comparison_table(rows, *, title: str, caption: str):
    """Returns the rich Table of --compare: rank, cluster, its best plan (stage, checkpointing, micro-batch x
    accumulation), GiB per GPU, tokens/s, time, GPU-hours, price and cost; fits in 100 columns."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, caption=caption, header_style="bold", title_justify="left", caption_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)  # fmt: skip
    methods = [row_method(row) for row in rows]
    mixed = any(m not in (None, "full") for m in methods)  # full fine-tuning beside LoRA/QLoRA rows: say which
    for name, justify in (("#", "right"), ("cluster", "left"), *((("method", "left"),) if mixed else ()),
                          ("best plan", "left"), ("GiB/GPU", "right"), ("tokens/s", "right"), ("time", "right"),
                          ("GPU-h", "right"), ("$/GPU-h", "right"), ("cost", "right")):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=name != "best plan")
    for rank, (row, method) in enumerate(zip(rows, methods), 1):
        chosen = row.result.chosen
        named = (METHOD_SHORT.get(method, "-"),) if mixed else ()
        if chosen is None:
            table.add_row("", cluster_text(row.cluster), *named, "nothing fits", "-", "-", "-", "-",
                          _price(row.price_per_gpu_hour), "-", style="dim")  # fmt: skip
            continue
        best = (f"{chosen.strategy.name} {'ckpt' if chosen.gradient_checkpointing else 'no ckpt'} "
                f"{chosen.micro_batch_size}x{chosen.gradient_accumulation_steps}")  # fmt: skip
        rate = row.tokens_per_second
        table.add_row(str(rank), cluster_text(row.cluster), *named, best, gib(chosen.memory.total_bytes),
                      f"{rate:,.0f}" if rate else "n/a", duration_text(row.hours),
                      f"{row.gpu_hours:,.0f}" if row.gpu_hours is not None else "-", _price(row.price_per_gpu_hour),
                      f"${row.cost:,.0f}" if row.cost is not None else "-",
                      style="bold green" if rank == 1 else None)  # fmt: skip
    return table


METHOD_SHORT = {"full": "full", "lora": "LoRA", "qlora": "QLoRA"}


def row_method(row) -> str | None:
    """Returns the method of a --compare row's best plan (full, lora, qlora), None where nothing fits."""
    plan = row.result.plan
    return plan.training.method if plan is not None else None


def _price(price: float | None) -> str:
    return f"{price:.2f}" if price is not None else "-"


def print_comparison(console, rows, *, spec_name: str, spec, tokens: int, seq_len: int, notes=()) -> None:
    """Prints the --compare table, the stated error of its times, the fastest and the cheapest cluster, and
    what would fit where nothing does."""
    from zero_planner.plan.throughput import load_calibration

    cal = load_calibration()
    title = (f"{tokens:,} tokens of {spec_name} ({spec.num_params / 1e9:.2f}B params), seq {seq_len}: "
             f"each cluster's best plan, fastest first")  # fmt: skip
    several = (f"; on several GPUs ±{cal.several_gpus_median_error:.0%}, up to {cal.several_gpus_max_error:.0%}"
               if cal.several_gpus_median_error else "")
    caption = (f"time = tokens / tokens/s of the step-time model, ±{cal.median_error:.0%} (median error on "
               f"architectures left out of its fit, up to {cal.max_error:.0%}{several}); {cal.scope_text()}. "
               f"best plan: ZeRO stage, checkpointing, micro-batch x accumulation. cost = GPU-hours x $/GPU-h "
               f"(--price).")  # fmt: skip
    console.print(comparison_table(rows, title=title, caption=caption))
    timed = [r for r in rows if r.hours is not None]
    if timed:
        fastest = min(timed, key=lambda r: r.hours)
        line = f"fastest: {cluster_text(fastest.cluster)}, {duration_text(fastest.hours)}"
        priced = [r for r in timed if r.cost is not None]
        if priced:
            cheapest = min(priced, key=lambda r: r.cost)
            line += f"; cheapest: {cluster_text(cheapest.cluster)}, ${cheapest.cost:,.0f} ({duration_text(cheapest.hours)})"
        say(console, line)
    if len({m for m in map(row_method, rows) if m is not None}) > 1:
        say(console, "note: the rows train different methods (full fine-tuning where it fits, else LoRA or QLoRA: "
            "--method auto): full fine-tuning updates every weight, the adapter methods only the adapters, so a "
            "faster row is not the same training done sooner", hang="  ")  # fmt: skip
    for note in notes:
        say(console, f"note: {note}", hang="  ")
    for row in rows:
        if not row.fits and row.result.advice:
            say(console, f"{cluster_text(row.cluster)}: nothing fits; {row.result.advice[0]}", hang="  ")
    if timed:
        method = row_method(timed[0])
        method_flag = f" --method {method}" if method not in (None, "full") else ""
        say(console, f"Plan one of them: zero-plan --model {spec_name} --gpus {timed[0].label}{method_flag} "
            f"-o plan.json")

"""run_report.html: a picture of one zero-run, drawn from its run_report.json alone.

    python -m zero_planner.run.report_page OUTPUT_DIR/run_report.json [-o PAGE.html]

zero-run writes the page beside run_report.json at the end of every run. One self-contained HTML file: inline
SVG and CSS, no JavaScript, no external file, no plotting library. Charts: the loss per optimizer step with the
eval loss; tokens/s per step (the warm-up steps left out of the run's average drawn apart, the steps in which a
rank's allocator flushed its cache marked); device memory per rank,
measured peak allocated vs the plan's prediction; host memory per node, the ranks' peak RSS vs the prediction; and,
where the report has them (`ranks[].phases`), the same per phase of the run. Every mark is an SVG element whose
class names what it is (`point`, `bar`) and whose `data-series` names its series, so a test can count what a
browser drew; each has a <title> with its value.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAGE_NAME = "run_report.html"
GIB = 2**30
WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 34, 46  # plot margins in px: tick labels left and below, legend above
MAX_MARKERS = 200
"""Lines of more points than this are drawn without a circle per point (the page stays small and readable)."""
MAX_LINE_POINTS = 2000
"""Longer series are thinned to about this many points (every k-th, the last kept) before drawing."""
COLORS = {"train": "#0072B2", "eval": "#D55E00", "warm": "#999999", "measured": "#0072B2", "predicted": "#E69F00",
          "average": "#009E73", "reserved": "#56B4E9", "flush": "#CC79A7", "resume": "#000000"}  # Okabe-Ito: told apart with colour blindness  # fmt: skip


@dataclass(frozen=True)
class Series:
    """One line: (x, y) points, drawn as a polyline and (up to MAX_MARKERS points) circles; `joined` False: the
    circles alone (points that are not a sequence)."""

    name: str
    points: list[tuple[float, float]]
    color: str
    markers: bool = True
    dashed: bool = False
    joined: bool = True


@dataclass(frozen=True)
class Bars:
    """One bar series: a value per group (None: not measured, no bar)."""

    name: str
    values: list[float | None]
    color: str


def nice_ticks(lo: float, hi: float, count: int = 5, *, integer: bool = False) -> list[float]:
    """Returns about `count` round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten; whole
    numbers only with `integer`, for optimizer steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if integer:
        step = max(step, 1)
    first = math.floor(lo / step) * step
    ticks = []
    value = first
    while value < hi + step * 0.999:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _fmt(value: float) -> str:
    """Returns a tick label: thousands separated, at most three significant decimals."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}" if value == int(value) else f"{value:.1f}"
    return f"{value:.3g}"


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


class _Frame:
    """Maps data to pixels inside the plot area of one chart."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], *, y_from_zero: bool, x_integer: bool = False):
        self.x_ticks = nice_ticks(min(xs), max(xs), integer=x_integer) if xs else [0.0, 1.0]
        lo = 0.0 if y_from_zero else min(ys)
        self.y_ticks = nice_ticks(lo, max(ys)) if ys else [0.0, 1.0]
        self.x0, self.x1 = self.x_ticks[0], self.x_ticks[-1]
        self.y0, self.y1 = self.y_ticks[0], self.y_ticks[-1]

    def px(self, x: float) -> float:
        return LEFT + (x - self.x0) / ((self.x1 - self.x0) or 1) * (WIDTH - LEFT - RIGHT)

    def py(self, y: float) -> float:
        return HEIGHT - BOTTOM - (y - self.y0) / ((self.y1 - self.y0) or 1) * (HEIGHT - TOP - BOTTOM)


def _axes(frame: _Frame, x_label: str, y_label: str, *, x_ticks: bool = True) -> list[str]:
    out = ['<g class="axes">']
    bottom, top = HEIGHT - BOTTOM, TOP
    for y in frame.y_ticks:
        py = frame.py(y)
        out.append(f'<line class="grid" x1="{LEFT}" y1="{py:.1f}" x2="{WIDTH - RIGHT}" y2="{py:.1f}"/>')
        out.append(f'<text class="tick y-tick" x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{_esc(_fmt(y))}</text>')
    if x_ticks:
        for x in frame.x_ticks:
            px = frame.px(x)
            out.append(f'<line class="tick-mark" x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" y2="{bottom + 4}"/>')
            out.append(f'<text class="tick x-tick" x="{px:.1f}" y="{bottom + 18}" text-anchor="middle">'
                       f'{_esc(_fmt(x))}</text>')  # fmt: skip
    out.append(f'<line class="axis" x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}"/>')
    out.append(f'<line class="axis" x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}"/>')
    out.append(f'<text class="axis-label" x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 8}" '
               f'text-anchor="middle">{_esc(x_label)}</text>')  # fmt: skip
    out.append(f'<text class="axis-label" x="14" y="{(TOP + HEIGHT - BOTTOM) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2:.0f})">{_esc(y_label)}</text>')  # fmt: skip
    out.append("</g>")
    return out


def _legend(entries: Sequence[tuple[str, str, bool]]) -> list[str]:
    """Returns the legend above the plot: (name, colour, dashed) per entry, laid out left to right."""
    out = ['<g class="legend">']
    x = LEFT
    for name, color, dashed in entries:
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        out.append(f'<line x1="{x}" y1="14" x2="{x + 18}" y2="14" stroke="{color}" stroke-width="3"{dash}/>')
        out.append(f'<text class="legend-label" x="{x + 23}" y="18">{_esc(name)}</text>')
        x += 23 + 7 * len(name) + 18
    out.append("</g>")
    return out


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_LINE_POINTS:
        return points
    k = math.ceil(len(points) / MAX_LINE_POINTS)
    return points[::k] + ([points[-1]] if (len(points) - 1) % k else [])


def line_chart(chart_id: str, title: str, series: Sequence[Series], *, x_label: str, y_label: str,
               y_from_zero: bool = False, value_text=_fmt, rules: Sequence[tuple[str, float, str]] = (),
               marks: Sequence[tuple[str, float, str]] = ()) -> str:  # fmt: skip
    """Returns a <figure> with one SVG line chart; `rules` are horizontal reference lines (name, y, colour),
    `marks` vertical ones (name, x, colour: the step a run resumed from)."""
    drawn = [s for s in series if s.points]
    xs = [x for s in drawn for x, _ in s.points] + ([x for _, x, _ in marks] if drawn else [])
    ys = [y for s in drawn for _, y in s.points] + [y for _, y, _ in rules]
    if not xs:
        return _empty(chart_id, title, "nothing to draw: the run recorded no steps")
    frame = _Frame(xs, ys, y_from_zero=y_from_zero, x_integer=True)  # x: optimizer steps
    out = _svg_open(chart_id, title) + _axes(frame, x_label, y_label)
    for name, y, color in rules:
        py = frame.py(y)
        out.append(f'<line class="rule" data-series="{_esc(name)}" x1="{LEFT}" y1="{py:.1f}" x2="{WIDTH - RIGHT}" '
                   f'y2="{py:.1f}" stroke="{color}" stroke-dasharray="6 4"><title>{_esc(name)}: '
                   f'{_esc(value_text(y))}</title></line>')  # fmt: skip
    for name, x, color in marks:
        px = frame.px(x)
        out.append(f'<line class="mark" data-series="{_esc(name)}" x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" '
                   f'y2="{HEIGHT - BOTTOM}" stroke="{color}" stroke-dasharray="2 3"><title>{_esc(name)}</title></line>')  # fmt: skip
    for s in drawn:
        points = _thin(s.points)
        coords = " ".join(f"{frame.px(x):.1f},{frame.py(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        out.append(f'<g class="series" data-series="{_esc(s.name)}">')
        if len(points) > 1 and s.joined:
            out.append(f'<polyline class="line" points="{coords}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        if s.markers and len(s.points) <= MAX_MARKERS:
            for x, y in s.points:
                out.append(f'<circle class="point" data-series="{_esc(s.name)}" cx="{frame.px(x):.1f}" '
                           f'cy="{frame.py(y):.1f}" r="3" fill="{s.color}"><title>{_esc(s.name)} at step '
                           f'{_fmt(x)}: {_esc(value_text(y))}</title></circle>')  # fmt: skip
        out.append("</g>")
    out += _legend([(s.name, s.color, s.dashed) for s in drawn]
                   + [(name, color, True) for name, _, color in (*rules, *marks)])  # fmt: skip
    return "\n".join(out + ["</svg></figure>"])


def bar_chart(chart_id: str, title: str, groups: Sequence[str], bars: Sequence[Bars], *, x_label: str,
              y_label: str, value_text=_fmt, note: str = "") -> str:  # fmt: skip
    """Returns a <figure> with one SVG grouped bar chart: a group per label, a bar per series with a value."""
    values = [v for b in bars for v in b.values if v is not None]
    if not groups or not values:
        return _empty(chart_id, title, note or "nothing measured")
    frame = _Frame([0.0, 1.0], [0.0, max(values)], y_from_zero=True)
    out = _svg_open(chart_id, title, note) + _axes(frame, x_label, y_label, x_ticks=False)
    plot_w = WIDTH - LEFT - RIGHT
    group_w = plot_w / len(groups)
    bar_w = min(48.0, group_w * 0.8 / max(len(bars), 1))
    for g, label in enumerate(groups):
        left = LEFT + g * group_w + (group_w - bar_w * len(bars)) / 2
        for b, series in enumerate(bars):
            value = series.values[g]
            if value is None:
                continue
            top = frame.py(value)
            out.append(f'<rect class="bar" data-series="{_esc(series.name)}" data-group="{_esc(label)}" '
                       f'x="{left + b * bar_w:.1f}" y="{top:.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{max(HEIGHT - BOTTOM - top, 0.5):.1f}" fill="{series.color}"><title>{_esc(label)}, '
                       f'{_esc(series.name)}: {_esc(value_text(value))}</title></rect>')  # fmt: skip
            if bar_w >= 24:  # the value over its bar, where it fits
                out.append(f'<text class="bar-label" x="{left + b * bar_w + (bar_w - 2) / 2:.1f}" y="{top - 3:.1f}" '
                           f'text-anchor="middle">{_esc(_fmt(round(value, 1)))}</text>')  # fmt: skip
        out.append(f'<text class="tick x-tick group-label" x="{LEFT + (g + 0.5) * group_w:.1f}" '
                   f'y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">{_esc(label)}</text>')  # fmt: skip
    out += _legend([(b.name, b.color, False) for b in bars])
    return "\n".join(out + ["</svg></figure>"])


def _svg_open(chart_id: str, title: str, note: str = "") -> list[str]:
    caption = f"{_esc(title)}" + (f' <span class="note">{_esc(note)}</span>' if note else "")
    return [f'<figure class="chart" id="{_esc(chart_id)}"><figcaption>{caption}</figcaption>',
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
            f'height="{HEIGHT}" role="img" aria-label="{_esc(title)}">']  # fmt: skip


def _empty(chart_id: str, title: str, why: str) -> str:
    return (f'<figure class="chart empty" id="{_esc(chart_id)}"><figcaption>{_esc(title)}</figcaption>'
            f'<p class="note">{_esc(why)}</p></figure>')  # fmt: skip


# --- the charts of a run report ---


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f} GiB"


def _gib_axis(value: float) -> str:
    return f"{value:.2f} GiB"


def loss_chart(report: dict[str, Any]) -> str:
    losses = report.get("losses") or []
    train = Series("train loss", [(i + 1, float(v)) for i, v in enumerate(losses)], COLORS["train"])
    evals = [(float(e["step"]), float(e["loss"])) for e in report.get("eval_losses") or []]
    series = [train] + ([Series("eval loss", evals, COLORS["eval"], dashed=True)] if evals else [])
    return line_chart("loss", "Loss per optimizer step", series, x_label="optimizer step", y_label="loss",
                      value_text=lambda v: f"{v:.4f}", marks=resume_marks(report))  # fmt: skip


def resume_marks(report: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The vertical line at the step a resumed run continued from (its losses and evals before it are the
    checkpoint's); none for a run from the start or a report written before zero-run recorded it."""
    step = report.get("resumed_from_step") or 0
    return [(f"resumed (step {step})", float(step), COLORS["resume"])] if step else []


def tokens_per_step(report: dict[str, Any]) -> int:
    return (report["world_size"] * report["micro_batch_size"] * report["gradient_accumulation_steps"]
            * report["seq_len"])  # fmt: skip


FLUSH_SERIES = "allocator flushed its cache (any rank)"


def throughput_chart(report: dict[str, Any]) -> str:
    """Tokens/s of each optimizer step of this run (its step_times_s; a resumed run's earlier steps are not in
    it); the warm-up steps that zero-run leaves out of tokens_per_second are their own series, and the steps in which
    a rank's allocator flushed its cache (ranks[].alloc_retry_steps: the memory edge) are marked."""
    times = report.get("step_times_s") or []
    first = report["steps"] - len(times) + 1
    per_step = tokens_per_step(report)
    warm = report.get("warmup_steps", 0) if len(times) > report.get("warmup_steps", 0) else 0
    points = [(first + i, per_step / t) for i, t in enumerate(times) if t > 0]
    flushed = {step for row in report.get("ranks") or [] for step, _ in row.get("alloc_retry_steps") or []}
    series = [Series("warm-up steps (not averaged)", points[:warm], COLORS["warm"]),
              Series("tokens/s per step", points[warm:], COLORS["train"]),
              Series(FLUSH_SERIES, [(x, y) for x, y in points if x in flushed], COLORS["flush"], joined=False)]  # fmt: skip
    rules = []
    if report.get("tokens_per_second"):
        rules.append(("run average", float(report["tokens_per_second"]), COLORS["average"]))
    if report.get("predicted_tokens_per_second"):
        rules.append(("predicted", float(report["predicted_tokens_per_second"]), COLORS["predicted"]))
    return line_chart("throughput", f"Tokens/s per step ({per_step:,} tokens a step)", series, x_label="optimizer step",
                      y_label="tokens/s", y_from_zero=True, value_text=lambda v: f"{v:,.0f}", rules=rules,
                      marks=resume_marks(report))  # fmt: skip


def device_chart(report: dict[str, Any]) -> str:
    ranks = report.get("ranks") or []
    groups = [f"rank {r['rank']}" for r in ranks]
    def figures(key: str) -> list[float | None]:
        return [_gib_or_none(r.get(key)) for r in ranks]

    bars = [Bars("peak allocated", figures("peak_allocated_bytes"), COLORS["measured"]),
            Bars("predicted", figures("predicted_peak_allocated_bytes"), COLORS["predicted"]),
            Bars("peak reserved", figures("peak_reserved_bytes"), COLORS["reserved"])]  # fmt: skip
    if all(v is None for v in bars[0].values):
        return _empty("device-memory", "Device memory per rank",
                      f"not measured on {report.get('device', 'this device')}: CPU processes have no device "
                      "allocator (host memory below)")  # fmt: skip
    return bar_chart("device-memory", "Device memory per rank: peak allocated vs predicted", groups, bars,
                     x_label="rank", y_label="GiB", value_text=_gib_axis)  # fmt: skip


def _gib_or_none(value: float | None) -> float | None:
    return None if value is None else value / GIB


def _nodes(report: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Returns the ranks grouped by node (ranks_per_node consecutive ranks each; one node when unknown)."""
    ranks = report.get("ranks") or []
    per_node = report.get("ranks_per_node") or len(ranks) or 1
    return [ranks[i : i + per_node] for i in range(0, len(ranks), per_node)]


def host_chart(report: dict[str, Any]) -> str:
    """Host memory per node: the sum of its ranks' peak RSS (an upper bound: the peaks need not coincide) vs the
    plan's host figure per node, with each rank's own peak beside them."""
    nodes = _nodes(report)
    groups = [f"node {i}" for i in range(len(nodes))]
    measured = [sum(r.get("host_rss_bytes") or 0 for r in node) / GIB for node in nodes]
    predicted = [_gib_or_none(report.get("predicted_host_bytes_per_node"))] * len(nodes)
    bars = [Bars("sum of ranks' peak RSS", measured, COLORS["measured"]),
            Bars("predicted per node", predicted, COLORS["predicted"])]  # fmt: skip
    return bar_chart("host-memory", "Host memory per node: peak RSS vs predicted", groups, bars, x_label="node",
                     y_label="GiB", value_text=_gib_axis)  # fmt: skip


def phase_charts(report: dict[str, Any]) -> list[str]:
    """Returns the per-phase charts (device on a GPU, host always) when the ranks report phases; none otherwise."""
    ranks = [r for r in report.get("ranks") or [] if r.get("phases")]
    if not ranks:
        return []
    names = list(dict.fromkeys(name for r in ranks for name in r["phases"]))
    charts = []
    device = [max((r["phases"].get(n, {}).get("peak_allocated_bytes") or 0) for r in ranks) for n in names]
    if any(device):
        predicted = [next((r["phases"][n].get("predicted_peak_allocated_bytes") for r in ranks if n in r["phases"]),
                          None) for n in names]  # fmt: skip
        bars = [Bars("peak allocated (busiest rank)", [v / GIB if v else None for v in device], COLORS["measured"]),
                Bars("predicted", [_gib_or_none(v) for v in predicted], COLORS["predicted"])]  # fmt: skip
        charts.append(bar_chart("phase-device-memory", "Device memory per phase: peak allocated vs predicted", names,
                                bars, x_label="phase", y_label="GiB", value_text=_gib_axis))  # fmt: skip
    node = [r for r in _nodes(report)[0] if r.get("phases")]
    host = [sum(r["phases"].get(n, {}).get("host_rss_peak_bytes") or 0 for r in node) for n in names]
    predicted_host = report.get("predicted_host_phases_per_node") or {}
    bars = [Bars("sum of node 0's ranks' peak RSS", [v / GIB if v else None for v in host], COLORS["measured"]),
            Bars("predicted per node", [_gib_or_none(predicted_host.get(n)) for n in names],
                 COLORS["predicted"])]  # fmt: skip
    charts.append(bar_chart("phase-host-memory", "Host memory per phase, node 0: peak RSS vs predicted", names, bars,
                            x_label="phase", y_label="GiB", value_text=_gib_axis,
                            note="" if report.get("ranks_per_node") else "(all ranks taken as one node)"))  # fmt: skip
    return charts


def _summary(report: dict[str, Any]) -> str:
    tps, predicted = report.get("tokens_per_second"), report.get("predicted_tokens_per_second")
    losses = report.get("losses") or []
    facts = [
        ("model", report.get("model")),
        ("strategy", f"ZeRO {report.get('strategy')}, {report.get('method')}, {report.get('task')}"),
        ("shape", f"{report.get('world_size')} ranks x micro-batch {report.get('micro_batch_size')} x accumulation "
                  f"{report.get('gradient_accumulation_steps')} x {report.get('seq_len')} tokens"),
        ("device", report.get("device")),
        ("steps", f"{report.get('steps')} ({report.get('status')}"
                  + (f", resumed from step {report['resumed_from_step']}" if report.get("resumed_from_step") else "")
                  + ")"),
        ("loss", f"{losses[0]:.4f} -> {losses[-1]:.4f}" if losses else "-"),
        ("tokens/s", (f"{tps:,.0f}" if tps else "-") + (f" (predicted {predicted:,.0f})" if predicted else "")),
        ("kept", report.get("save", "-")),
        ("versions", ", ".join(f"{k} {v}" for k, v in (report.get("versions") or {}).items()) or "-"),
    ]  # fmt: skip
    rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in facts)
    return f'<table class="summary">{rows}</table>'


def _rank_table(report: dict[str, Any]) -> str:
    head = "<tr><th>rank</th><th>peak allocated</th><th>predicted</th><th>error</th><th>peak reserved</th>" \
           "<th>host RSS</th><th>cache flushes</th></tr>"  # fmt: skip
    rows = []
    for r in report.get("ranks") or []:
        err = r.get("error_pct")
        rows.append(f"<tr><td>{r['rank']}</td><td>{_gib(r.get('peak_allocated_bytes'))}</td>"
                    f"<td>{_gib(r.get('predicted_peak_allocated_bytes'))}</td>"
                    f"<td>{'-' if err is None else f'{err:+.1f}%'}</td><td>{_gib(r.get('peak_reserved_bytes'))}</td>"
                    f"<td>{_gib(r.get('host_rss_bytes'))}</td><td>{_esc(_flushes(report, r))}</td></tr>")  # fmt: skip
    return f'<table class="ranks">{head}{"".join(rows)}</table>'


def _flushes(report: dict[str, Any], rank: dict[str, Any]) -> str:
    """Returns a rank's cache flushes in training steps ("3 in 2 steps"), "0", or "-" where none could be counted
    (CPU processes, reports written before zero-run counted them)."""
    if report.get("device") == "cpu" or "alloc_retry_steps" not in rank:
        return "-"
    steps = rank["alloc_retry_steps"]
    return f"{sum(n for _, n in steps)} in {len(steps)} steps" if steps else "0"


STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; margin: 24px;
       max-width: 1280px; }
figure.chart svg { width: 100%; height: auto; }
h1 { font-size: 20px; margin: 0 0 12px; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { padding: 2px 10px 2px 0; text-align: left; }
table.ranks td, table.ranks th { text-align: right; padding-left: 12px; }
figure { margin: 18px 0; }
figcaption { font-weight: 600; margin-bottom: 4px; }
.note { font-weight: normal; color: #666; }
svg text { font-size: 12px; fill: #333; }
svg .axis { stroke: #444; }
svg .grid { stroke: #e4e4e4; }
svg .tick-mark { stroke: #444; }
svg .axis-label { font-size: 12px; fill: #555; }
svg .bar-label { font-size: 10px; fill: #444; }
"""


def render_page(report: dict[str, Any]) -> str:
    """Returns the whole HTML page for one run report (a dict as in run_report.json)."""
    title = f"zero-run {report.get('model', '')}: {report.get('steps', 0)} steps, ZeRO {report.get('strategy', '')}"
    charts = [loss_chart(report), throughput_chart(report), device_chart(report), host_chart(report),
              *phase_charts(report)]  # fmt: skip
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{_esc(title)}</title>",
        f"<style>{STYLE}</style></head><body>", f"<h1>{_esc(title)}</h1>", _summary(report), _rank_table(report),
        *charts, "</body></html>", ""])  # fmt: skip


def write_page(report: dict[str, Any], path: str | Path) -> Path:
    """Writes render_page(report) to `path` (through a temp file); returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_page(report), encoding="utf-8")
    tmp.replace(path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zero_planner.run.report_page", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)  # fmt: skip
    parser.add_argument("report", help="a run_report.json written by zero-run")
    parser.add_argument("-o", "--output", help=f"the page to write (default: {PAGE_NAME} beside the report)")
    args = parser.parse_args(argv)
    try:
        report = json.loads(Path(args.report).read_text())
    except (OSError, json.JSONDecodeError) as error:
        print(f"report_page: error: {args.report!r} is not a readable run report: {error}", file=sys.stderr)
        return 2
    out = write_page(report, args.output or Path(args.report).with_name(PAGE_NAME))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""run_report.html (zero_planner/run/report_page.py): what it draws, read from the markup and from what headless
Chromium lays out and paints (Debian's `chromium` package; .ci/run installs it, the test is skipped without it)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import GIB, make_plan

from zero_planner.run.report import build_run_report
from zero_planner.run.report_page import FLUSH_SERIES, PAGE_NAME, main, nice_ticks, render_page, write_page

STEPS, EVAL_EVERY, WARMUP = 30, 10, 1
PHASES = ("load", "initialize", "train", "eval", "save", "export")


def gpu_report(*, ranks: int = 2, phases: bool = True, steps: int = STEPS) -> dict:
    """Returns a run report as zero-run writes it (report.build_run_report) for a two-GPU run, with phases."""
    plan = make_plan("2", gpu="H100", gpus_per_node=ranks, gpu_memory_bytes=80 * 10**9, precision="bf16",
                     peak_bytes=60 * GIB, total_bytes=70 * GIB, cpu_bytes=40 * GIB)  # fmt: skip
    if phases:
        plan.estimate.per_gpu.phases = {name: (30 + 5 * i) * GIB for i, name in enumerate(PHASES)}
        plan.estimate.cpu.phases = {"train": 30 * GIB, "save": 38 * GIB, "export": 35 * GIB}
    rows = []
    for r in range(ranks):
        row = {"rank": r, "peak_allocated_bytes": (58 + r) * GIB, "peak_reserved_bytes": (62 + r) * GIB,
               "host_rss_bytes": (14 + r) * GIB}  # fmt: skip
        if phases:
            row["phases"] = {name: {"peak_allocated_bytes": (29 + 5 * i + r) * GIB, "host_rss_peak_bytes": (10 + i) * GIB}
                             for i, name in enumerate(PHASES)}  # fmt: skip
        rows.append(row)
    losses = [10.0 * math.exp(-k / 8) + 2.0 for k in range(steps)]
    times = [0.5 if k < WARMUP else 0.02 + 0.001 * (k % 3) for k in range(steps)]
    tokens = ranks * plan.training.micro_batch_size * plan.training.seq_len
    tokens_per_second = tokens * (steps - WARMUP) / sum(times[WARMUP:])  # as zero-run averages them
    report = build_run_report(plan, rows, losses, tokens_per_second, steps=steps, device="NVIDIA H100 80GB HBM3",
                              versions={"torch": "2.13.0"})  # fmt: skip
    report["eval_losses"] = [{"step": s, "loss": losses[s - 1] + 0.3} for s in range(EVAL_EVERY, steps + 1, EVAL_EVERY)]
    report["step_times_s"] = times
    report["warmup_steps"] = WARMUP
    return report


def marks(page: str, kind: str, series: str | None = None) -> int:
    pattern = f'class="{kind}" data-series="{re.escape(series)}"' if series else f'class="{kind}"'
    return len(re.findall(pattern, page))


def test_page_draws_every_step_evaluation_rank_and_phase():
    report = gpu_report()
    page = render_page(report)
    assert marks(page, "point", "train loss") == STEPS
    assert marks(page, "point", "eval loss") == STEPS // EVAL_EVERY
    assert marks(page, "point", "warm-up steps (not averaged)") == WARMUP
    assert marks(page, "point", "tokens/s per step") == STEPS - WARMUP
    assert marks(page, "rule", "run average") == 1 and marks(page, "rule", "predicted") == 0  # no tokens/s model on cpu
    # device memory: 3 bars per rank; host: measured and predicted per node; phases: 2 per phase, host where predicted
    assert marks(page, "bar", "peak allocated") == marks(page, "bar", "predicted") - len(PHASES) == 2
    assert marks(page, "bar", "peak allocated (busiest rank)") == len(PHASES)
    assert marks(page, "bar", "predicted per node") == 1 + 3  # the node's figure, and the 3 phases the plan predicts
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    # Values are in the marks' titles: the busiest rank's train phase, measured and predicted.
    assert "train, peak allocated (busiest rank): 40.00 GiB" in page and "train, predicted: 40.00 GiB" in page


def test_steps_with_cache_flushes_are_marked_and_counted_per_rank():
    report = gpu_report()
    assert marks(render_page(report), "point", FLUSH_SERIES) == 0 and render_page(report).count("<td>0</td></tr>") == 2
    older = {**report, "ranks": [{k: v for k, v in r.items() if k != "alloc_retry_steps"} for r in report["ranks"]]}
    assert render_page(older).count("<td>-</td></tr>") == 2  # written before zero-run counted them
    report["ranks"][1]["alloc_retry_steps"] = [[3, 2], [5, 1]]
    page = render_page(report)
    assert marks(page, "point", FLUSH_SERIES) == 2  # circles on steps 3 and 5 of the tokens/s chart, not a line
    assert f"{FLUSH_SERIES} at step 3:" in page and f"{FLUSH_SERIES} at step 5:" in page
    flushed = re.search(f'data-series="{re.escape(FLUSH_SERIES)}">(.*?)</g>', page, re.S).group(1)
    assert "polyline" not in flushed
    assert "<td>0</td></tr>" in page and "<td>3 in 2 steps</td></tr>" in page


def test_a_resumed_run_is_marked_where_it_resumed():
    report = gpu_report()
    assert marks(render_page(report), "mark") == 0  # a run from the start, or a report from before the field
    report["resumed_from_step"] = 12
    page = render_page(report)
    assert marks(page, "mark", "resumed (step 12)") == 2  # the loss and tokens/s charts
    assert "30 (ok, resumed from step 12)" in page
    assert marks(page, "point", "eval loss") == len(report["eval_losses"])  # the evals before it drawn too


def test_page_without_phases_or_device_figures():
    report = gpu_report(phases=False)
    for row in report["ranks"]:
        row["peak_allocated_bytes"] = row["peak_reserved_bytes"] = None  # CPU processes
    report["device"] = "cpu"
    page = render_page(report)
    assert 'id="phase-device-memory"' not in page and 'id="phase-host-memory"' not in page
    assert "not measured on cpu: CPU processes have no device allocator" in page
    assert marks(page, "bar", "sum of ranks&#x27; peak RSS") == 1
    empty = render_page({**report, "losses": [], "step_times_s": [], "eval_losses": [], "steps": 0})
    assert "nothing to draw: the run recorded no steps" in empty


def test_long_runs_draw_lines_without_a_circle_per_step():
    page = render_page(gpu_report(steps=5000))
    assert marks(page, "point", "train loss") == 0
    line = re.search(r'data-series="train loss">\s*<polyline class="line" points="([^"]+)"', page)
    assert 1000 < len(line.group(1).split()) <= 2001  # thinned to about MAX_LINE_POINTS


def test_text_is_escaped():
    report = gpu_report()
    report["model"] = "<script>alert(1)</script>"
    assert "<script>" not in render_page(report) and "&lt;script&gt;" in render_page(report)


@pytest.mark.parametrize(
    "lo, hi, integer, expected",
    [(0, 2950, False, [0, 1000, 2000, 3000]), (5.97, 6.25, False, [5.9, 6.0, 6.1, 6.2, 6.3]),
     (1, 2, True, [1, 2]), (1, 12, True, [0, 5, 10, 15]), (0.0, 0.0, False, [0.0, 0.5, 1.0])],
)  # fmt: skip
def test_nice_ticks(lo, hi, integer, expected):
    assert nice_ticks(lo, hi, integer=integer) == pytest.approx(expected)


def test_page_from_a_report_file(tmp_path, capsys):
    (tmp_path / "run_report.json").write_text(json.dumps(gpu_report()))
    assert main([str(tmp_path / "run_report.json")]) == 0
    assert (tmp_path / PAGE_NAME).read_text() == render_page(gpu_report())
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "is not a readable run report" in capsys.readouterr().err


# --- what Chromium draws ---


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless Chromium here (Debian: apt-get install -y chromium; .ci/run installs it)")


def run_chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip


MEASURE = """
<script>
// Test only (appended to a copy of the page): what the browser laid out, as JSON in <pre id="measured">.
const inside = (el) => {
  const svg = el.closest('svg').getBoundingClientRect(), r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && r.left >= svg.left - 4 && r.right <= svg.right + 4 &&
         r.top >= svg.top - 4 && r.bottom <= svg.bottom + 4;
};
const count = (selector) => [...document.querySelectorAll(selector)].filter(inside).length;
const out = {
  points: count('circle.point'), train_points: count('circle.point[data-series="train loss"]'),
  eval_points: count('circle.point[data-series="eval loss"]'), bars: count('rect.bar'),
  lines: count('polyline.line'), tick_labels: count('text.tick'), charts: document.querySelectorAll('svg').length,
  widest_svg: Math.max(...[...document.querySelectorAll('svg')].map(s => s.getBoundingClientRect().width)),
};
document.body.insertAdjacentHTML('beforeend', '<pre id="measured">' + JSON.stringify(out) + '</pre>');
</script>
"""


def test_chromium_lays_out_every_mark_inside_its_chart(tmp_path):
    report = gpu_report()
    page = write_page(report, tmp_path / PAGE_NAME).read_text()
    probe = tmp_path / "measure.html"
    probe.write_text(page.replace("</body>", MEASURE + "</body>"))
    done = run_chromium("--dump-dom", probe.as_uri())
    found = re.findall(r'<pre id="measured">(\{[^<]+)</pre>', done.stdout)  # the script's own text has no {
    assert found, done.stderr[-2000:]
    measured = json.loads(found[-1])
    assert measured["train_points"] == marks(page, "point", "train loss") == STEPS
    assert measured["eval_points"] == STEPS // EVAL_EVERY
    assert measured["points"] == marks(page, "point") and measured["bars"] == marks(page, "bar") > 0
    assert measured["lines"] == marks(page, "line")
    assert measured["tick_labels"] == len(re.findall(r'<text class="tick ', page)) > 0
    assert measured["charts"] == 6 and measured["widest_svg"] <= 800  # loss, tokens/s, device, host, 2 phase charts


def test_chromium_screenshot_is_drawn_in_the_charts_colours(tmp_path):
    from PIL import Image

    write_page(gpu_report(), tmp_path / PAGE_NAME)
    shot = tmp_path / "page.png"
    done = run_chromium("--hide-scrollbars", "--window-size=820,2400", f"--screenshot={shot}",
                        (tmp_path / PAGE_NAME).as_uri())  # fmt: skip
    assert shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # not blank: text, lines, bars
    present = {rgb for _, rgb in colours}
    for hex_colour in ("#0072B2", "#E69F00", "#D55E00"):  # measured, predicted, eval loss
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in present, f"{hex_colour} is not drawn"
    # Ink in every chart's band of the page, not only at the top: the last chart (host per phase) is drawn too.
    width, height = image.size
    bottom_half = image.crop((0, height // 2, width, height)).getcolors(maxcolors=1 << 20)
    assert len(bottom_half) > 20

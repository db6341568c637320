"""The step-time model against measured step times: every committed single-GPU case that ran alone on its GPU.

Prints, per case, measured and predicted tokens/s and their ratio, the error per strategy, and plan quality:
for each setting measured at the planner's picks (model, seq_len, GPU, allocator), the candidate the model
ranks first against the measured best. A figure to read, not a gate; benchmarks/throughput_fit.py fits the
model's constants from the same cases.

    python benchmarks/throughput_check.py [--min-tokens 4096]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.memory_regression import load_cases, workload_of  # noqa: E402
from zero_planner.hardware import GPU, find_gpu  # noqa: E402
from zero_planner.memory import Workload  # noqa: E402
from zero_planner.models.spec import ModelSpec, spec_from_config  # noqa: E402
from zero_planner.planner import pick_fastest  # noqa: E402
from zero_planner.strategies import STRATEGIES  # noqa: E402
from zero_planner.throughput import estimate_step_time, training_flops, warmup_steps  # noqa: E402

PLANNER_ROLES = ("pick", "rerun-xs")
"""Operating-point rows that are candidates the planner itself proposed (`next` is one micro-batch past its
pick, a user config is not a candidate)."""


def shared_host(row: dict) -> bool:
    """True for a row whose harness shared its host with another (device_run.sh SPLIT_GPUS sets host_note)."""
    return bool(row["provenance"].get("host_note"))


@dataclass(frozen=True)
class MeasuredCase:
    """One committed single-GPU run with its median micro-step time."""

    name: str
    model: str
    strategy: str
    method: str
    spec: ModelSpec
    workload: Workload
    gpu: GPU
    seconds: float
    """Median of the steps after warm-up (throughput.warmup_steps); one micro-step, as the harness steps the engine every one."""
    row: dict

    @property
    def tokens(self) -> int:
        return self.workload.micro_batch_size * self.workload.seq_len

    @property
    def measured_tokens_per_second(self) -> float:
        return self.tokens / self.seconds

    @property
    def host_shared(self) -> bool:
        """Run by one of several harnesses on one host (device_run.sh SPLIT_GPUS): alone on its GPU, but CPU
        Adam, pinned copies and kernel launches of the neighbour's case shared the host's memory bandwidth
        and PCIe. Its memory figures hold; its step time may be slowed (seen: ZeRO-1/2 and offload cases)."""
        return shared_host(self.row)

    def predicted_tokens_per_second(self) -> float:
        return estimate_step_time(self.spec, STRATEGIES[self.strategy], self.gpu, self.workload).tokens_per_second

    @property
    def setting(self) -> tuple | None:
        """(model, seq_len, GPU, allocator) for rows at the planner's picks, else None."""
        case = self.row["case"]
        planned = case.get("planned") or {}
        if planned.get("role") not in PLANNER_ROLES or case.get("user_config"):
            return None
        return (self.model, self.workload.seq_len, self.gpu.name, case.get("alloc_conf") or "default")


def measured_cases(min_tokens: int = 4096, host_shared: bool = False) -> list[MeasuredCase]:
    """Returns the committed single-GPU cases that ran alone, with step times, at >= min_tokens per micro-step;
    with host_shared, also those whose host ran another harness's cases meanwhile (MeasuredCase.host_shared)."""
    specs: dict = {}
    cases = []
    for row in load_cases():
        case = row["case"]
        if row["status"] != "ok" or row.get("gpu_shared") or case["num_gpus"] != 1:
            continue
        # The harness times every micro-step (one forward/backward per engine step).
        times = (row["ranks"][0].get("step_times_s") or [])[warmup_steps(STRATEGIES[case["strategy"]].stage):]
        if len(times) < 2 or case["micro_batch_size"] * case["seq_len"] < min_tokens:
            continue
        if shared_host(row) and not host_shared:
            continue
        key = json.dumps(case["model_config"], sort_keys=True)
        if key not in specs:
            specs[key] = spec_from_config(case["model_config"], case["model"])
        spec = specs[key]
        cases.append(MeasuredCase(
            name=row["id"], model=case["model"], strategy=case["strategy"], method=case.get("method", "full"),
            spec=spec, workload=workload_of(row, spec), seconds=statistics.median(times), row=row,
            gpu=find_gpu(row["provenance"]["gpu"].replace("NVIDIA ", "").split()[0]),
        ))
    return cases


def describe(case: MeasuredCase) -> str:
    w = case.workload
    return f"{case.strategy} mb{w.micro_batch_size}{' gc' if w.gradient_checkpointing else ''}"


def model_choice(group: list[MeasuredCase]) -> MeasuredCase:
    """Returns the candidate the planner would run among `group` (planner.pick_fastest): the fastest by the
    model, a tie going to the simpler strategy, then no checkpointing, then the larger micro-batch."""
    order = list(STRATEGIES)
    return pick_fastest(group, MeasuredCase.predicted_tokens_per_second,
                        lambda c: (order.index(c.strategy), c.workload.gradient_checkpointing, -c.workload.micro_batch_size))


def plan_quality(cases: list[MeasuredCase]) -> list[float]:
    """Prints, per setting with two or more measured planner candidates, the model's first choice against the
    measured best; returns the ratios measured(chosen) / measured(best) of the settings measured alone on
    their host (host-shared settings are printed, marked, and left out of the worst ratio)."""
    groups: dict[tuple, list[MeasuredCase]] = defaultdict(list)
    for case in cases:
        if case.setting is not None:
            groups[(*case.setting, case.host_shared)].append(case)
    print(f"\nplan quality: per setting, the model's first choice among the measured planner candidates")
    print(f"  {'model':16s} {'seq':>5s} {'GPU':9s} {'allocator':10s} {'n':>2s}  {'model picks':18s} {'measured best':18s} ratio")
    ratios, shared_ratios = [], []
    for (model, seq_len, gpu, alloc, shared), group in sorted(groups.items()):
        if len(group) < 2:
            continue
        chosen = model_choice(group)
        best = max(group, key=lambda c: c.measured_tokens_per_second)
        ratio = chosen.measured_tokens_per_second / best.measured_tokens_per_second
        (shared_ratios if shared else ratios).append(ratio)
        alloc = "xs" if alloc.startswith("expandable") else alloc
        pick = f"{describe(chosen)} {chosen.measured_tokens_per_second:,.0f}"
        top = f"{describe(best)} {best.measured_tokens_per_second:,.0f}"
        mark = "  host shared" if shared else ""
        print(f"  {model:16s} {seq_len:5d} {gpu:9s} {alloc:10s} {len(group):2d}  {pick:18s} {top:18s} {ratio:.3f}{mark}")
    if ratios:
        print(f"  worst ratio {min(ratios):.3f} over {len(ratios)} settings measured alone on their host (target >= 0.95)")
    if shared_ratios:
        print(f"  host shared (indicative: timings may include the neighbour's host load): worst {min(shared_ratios):.3f} "
              f"over {len(shared_ratios)} settings")
    return ratios


def error_table(cases: list[MeasuredCase], title: str) -> None:
    """Prints predicted / measured tokens/s - 1 per strategy and overall."""
    errors: dict[str, list[float]] = defaultdict(list)
    for case in cases:
        errors[case.strategy].append(case.predicted_tokens_per_second() / case.measured_tokens_per_second - 1)
    print(f"\n{title}: cases, median, range")
    everything = []
    for name in STRATEGIES:
        if errors[name]:
            values = errors[name]
            everything += values
            print(f"  {name:14s} {len(values):3d}  {statistics.median(values):+6.0%}  {min(values):+.0%} .. {max(values):+.0%}")
    if everything:
        abs_all = [abs(e) for e in everything]
        print(f"  {'all':14s} {len(everything):3d}  median |error| {statistics.median(abs_all):.0%}, max {max(abs_all):.0%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--min-tokens", type=int, default=4096, help="tokens per micro-step at least")
    args = parser.parse_args(argv)
    cases = measured_cases(args.min_tokens, host_shared=True)
    print(f"{'case':64s} {'TFLOP/s':>8s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s}")
    for case in cases:
        predicted = case.predicted_tokens_per_second()
        measured = case.measured_tokens_per_second
        tflops = training_flops(case.spec, case.workload) / case.seconds / 1e12
        mark = "  host shared" if case.host_shared else ""
        print(f"{case.name[:64]:64s} {tflops:8.1f} {measured:9,.0f} {predicted:9,.0f} {predicted / measured:6.2f}{mark}")
    error_table([c for c in cases if not c.host_shared], "predicted / measured tokens/s - 1, alone on the host, per strategy")
    shared = [c for c in cases if c.host_shared]
    if shared:
        error_table(shared, "the same, host shared with another harness (indicative, not in the figures above)")
    plan_quality(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())

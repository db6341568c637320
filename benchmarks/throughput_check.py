"""The step-time model against measured step times: every committed case that ran alone on its GPUs.

Prints, per single-GPU case, measured and predicted tokens/s and their ratio, the error per strategy, how the
model generalizes (leave one family out: the constants refitted without an architecture family, that family
predicted), and plan quality: for each setting measured at the planner's picks (model, seq_len, GPU, GPUs,
allocator, machine), the candidate the model ranks first against the measured best. benchmarks/throughput_fit.py fits
the model's constants from the same cases. Exit status 1 when the errors stored with the constants
(catalog/step_time.json, stated beside every predicted tokens/s) differ from the ones computed here by more
than half a point: the stated error must be today's (refresh: `python benchmarks/throughput_fit.py --write`, or
`--write-errors` to keep the constants).
Cases of several GPUs (each alone on its machine) are shown apart, with their own plan quality and their own
leave-one-family-out errors: the constants are fitted on one GPU but ZeRO-3's times per gather and per bucket across
ranks and their growth with the ranks (DeepSpeed skips the gather on one rank), so they test the communication terms
and the rest out of sample.

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

from benchmarks.memory_regression import load_cases, predict, run_capacity, workload_of  # noqa: E402
from zero_planner.hardware import GPU, find_gpu  # noqa: E402
from zero_planner.models.spec import ModelSpec, spec_from_config  # noqa: E402
from zero_planner.plan.memory import ALLOC_CONF, Workload, ZeroBuffers  # noqa: E402
from zero_planner.plan.search import pick_fastest  # noqa: E402
from zero_planner.plan.throughput import (eager_attention_bytes, eager_attention_seconds, estimate_step_time,  # noqa: E402
                                          training_flops, warmup_steps)
from zero_planner.strategies import STRATEGIES  # noqa: E402

PLANNER_ROLES = ("pick", "rerun-xs")
"""Operating-point rows that are candidates the planner itself proposed (`next` is one micro-batch past its
pick, a user config is not a candidate)."""


def shared_host(row: dict) -> bool:
    """True for a row whose harness shared its host with another (device_run.sh SPLIT_GPUS sets host_note), or
    whose harness ran another case on another GPU meanwhile (host_shared, recorded since 2026-11-26)."""
    return bool(row["provenance"].get("host_note") or row.get("host_shared"))


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
        """Tokens of one micro-step on all the GPUs."""
        return self.workload.micro_batch_size * self.workload.seq_len * self.workload.world_size

    @property
    def measured_tokens_per_second(self) -> float:
        return self.tokens / self.seconds

    @property
    def host_shared(self) -> bool:
        """Run by one of several harnesses on one host (device_run.sh SPLIT_GPUS): alone on its GPU, but CPU
        Adam, pinned copies and kernel launches of the neighbour's case shared the host's memory bandwidth
        and PCIe. Its memory figures hold; its step time may be slowed (seen: ZeRO-1/2 and offload cases)."""
        return shared_host(self.row)

    @property
    def buffers(self) -> ZeroBuffers | None:
        """The ZeRO sizes of the run's own DeepSpeed JSON where it is not ours (timing_suite.py's `variant`: another
        reduce bucket size or persistence threshold), as zero-plan reads a user's (--ds-config); None for ours."""
        case = self.row["case"]
        return ZeroBuffers.from_ds_config(case["deepspeed_config"], self.spec.hidden_size) if case.get("variant") else None

    def predicted_tokens_per_second(self) -> float:
        return estimate_step_time(self.spec, STRATEGIES[self.strategy], self.gpu, self.workload,
                                  buffers=self.buffers).tokens_per_second

    @property
    def setting(self) -> tuple | None:
        """(model, seq_len, GPU, GPUs, allocator, results file) for rows at the planner's picks, else None: a sweep
        compares candidates timed on one machine (a results file is one lent machine's calls): the same case took
        0.447-0.551 s per step on three H100 machines (Llama 3.2 3B under ZeRO-2, 2026-11-26)."""
        case = self.row["case"]
        planned = case.get("planned") or {}
        if planned.get("role") not in PLANNER_ROLES or case.get("user_config"):
            return None
        return (self.model, self.workload.seq_len, self.gpu.name, self.workload.world_size, case.get("alloc_conf") or "default",
                self.row["file"])  # fmt: skip


_OVER_ITS_CARD: dict[tuple, bool] = {}
_SPECS: dict = {}


def over_its_card(row: dict) -> bool:
    """True for a run under zero-run's allocator (expandable segments) whose predicted total exceeds its card: no
    candidate the planner makes. It ran because the caching allocator freed its cache and retried in every step
    (benchmarks/stream_pools.py: ZeRO-2 at 2-3 retries a step where its reduction stream's pool did not fit beside
    the peak), a regime the step-time model leaves out: neither fitted nor scored, printed apart (over_the_card)."""
    key = (row["file"], row["id"])
    if key not in _OVER_ITS_CARD:
        _OVER_ITS_CARD[key] = row["case"].get("alloc_conf") == ALLOC_CONF and \
            predict(row, _SPECS)[1].total_bytes > run_capacity(row)
    return _OVER_ITS_CARD[key]


def timed_steps(row: dict) -> list[float]:
    """Returns the step times of rank 0 after warm-up (throughput.warmup_steps): the harness times every
    micro-step (one forward/backward per engine step)."""
    return (row["ranks"][0].get("step_times_s") or [])[warmup_steps(STRATEGIES[row["case"]["strategy"]].stage):]


def most_steps(rows: list[dict]) -> list[dict]:
    """Returns the rows less those whose case ran again with more timed steps on the same GPU model in the same
    planned role (a rerun, benchmarks/timing_suite.py: three timed steps did not settle a median; it keeps the
    case's role); runs of equal length all stay, and so does a sweep's pick that a later suite ran as a ladder case
    (i26-llama1b-z3-2xh100: the same case on another machine, not a rerun of the sweep's)."""
    def key(row: dict) -> tuple:
        return row["id"], row["provenance"]["gpu"], (row["case"].get("planned") or {}).get("role")

    longest: dict[tuple, int] = defaultdict(int)
    for row in rows:
        longest[key(row)] = max(longest[key(row)], len(timed_steps(row)))
    return [row for row in rows if len(timed_steps(row)) == longest[key(row)]]


def read_variant(row: dict) -> bool:
    """True for a run of another DeepSpeed JSON than ours (timing_suite.py's `variant`) whose
    differences the step-time model reads (MeasuredCase.buffers): ZeRO-1/2's and ZeRO-3's reduce bucket size,
    ZeRO-3's persistence threshold; not ZeRO-2 without overlap_comm, which it does not model (user_configs). On
    several GPUs they are the runs that tell ZeRO-3's gathers across ranks from its buckets: with our JSON's
    hidden^2 buckets every family but GPT-2 reduces about one bucket per two gathers, so without GPT-2 the fit
    could not tell the two apart (it put 0.27 ms on a gather and none on a bucket, GPT-2's runs then predicted up to
    56% fast); DeepSpeed's own 5e8 buckets (a handful a step) and 1e5 ones (hundreds) set them apart in four families.
    On one GPU too, since the model counts ZeRO-3's buckets there (Calibration.stage3_seconds_per_bucket): the runs of
    one case at two bucket sizes on one machine are what tell a bucket's time from a fetch's."""
    case = row["case"]
    if not case.get("variant"):
        return False
    zero = case["deepspeed_config"].get("zero_optimization", {})
    return not (zero.get("stage") == 2 and not zero.get("overlap_comm", False))


def measured_cases(min_tokens: int = 4096, host_shared: bool = False, gpus: int | None = 1,
                   one_sync: bool = False, over_card: bool = False, own_json: bool = False) -> list[MeasuredCase]:
    """Returns the committed cases of `gpus` GPUs (None: any number) that ran alone, with step times, at >=
    min_tokens per micro-step, less the runs of another DeepSpeed JSON than ours (timing_suite.py's `variant`: a
    setting the planner never writes; but see own_json) and the memory diagnostics of stream_pools.py (a
    snapshot of every allocator segment at each phase's end, inside the timed steps); with host_shared, also those whose host ran
    another harness's cases meanwhile (MeasuredCase.host_shared); with one_sync, only the runs timed as zero-run's
    loop runs (gpu_step.py phase_sync False: one wait per step), which the fit does not see. Runs predicted over
    their card (over_its_card) are left out; with over_card, only those are returned. With own_json, also the runs of
    another DeepSpeed JSON whose differences the model reads on several GPUs (read_variant), each predicted with its
    own (MeasuredCase.buffers): the fit and the stated errors take them."""
    specs: dict = {}
    cases = []
    rows = [row for row in load_cases() if row["status"] == "ok" and not row.get("gpu_shared")
            and row["case"].get("kind") != "zero-run" and (not row["case"].get("variant") or own_json and read_variant(row))
            and not row["case"].get("stream_pools") and over_its_card(row) == over_card
            and row["case"].get("phase_sync", True) != one_sync
            and (gpus is None or row["case"]["num_gpus"] == gpus)]  # fmt: skip
    for row in most_steps(rows):
        case = row["case"]
        times = timed_steps(row)
        if len(times) < 2 or case["micro_batch_size"] * case["seq_len"] < min_tokens:
            continue
        if shared_host(row) and not host_shared:
            continue
        cases.append(measured_case(row, specs))
    return cases


def measured_case(row: dict, specs: dict) -> MeasuredCase:
    """Returns the committed run `row` as a MeasuredCase (its median timed step); `specs` caches the model specs by
    config."""
    case = row["case"]
    key = json.dumps(case["model_config"], sort_keys=True)
    if key not in specs:
        specs[key] = spec_from_config(case["model_config"], case["model"])
    spec = specs[key]
    return MeasuredCase(
        name=row["id"], model=case["model"], strategy=case["strategy"], method=case.get("method", "full"),
        spec=spec, workload=workload_of(row, spec), seconds=statistics.median(timed_steps(row)), row=row,
        gpu=find_gpu(row["provenance"]["gpu"].replace("NVIDIA ", "").split()[0]),
    )


def over_the_card(min_tokens: int) -> None:
    """Prints the runs left out as predicted over their card (over_its_card), with their allocator retries and
    the model's ratio: what the step-time model would have said of a run it does not cover."""
    cases = measured_cases(min_tokens, host_shared=True, gpus=None, over_card=True) + \
        measured_cases(min_tokens, host_shared=True, gpus=None, one_sync=True, over_card=True)
    if not cases:
        return
    print("\nleft out: runs whose predicted total (zero-run's allocator) exceeds their card, which the planner never "
          "proposes; the allocator retried through them (not fitted, not scored)")
    for case in cases:
        retries = max(rank.get("num_alloc_retries") or 0 for rank in case.row["ranks"])
        print(f"  {case.name[:64]:64s} {retries:3d} retries  predicted / measured tokens/s "
              f"{case.predicted_tokens_per_second() / case.measured_tokens_per_second:.2f}  {case.row['file'].removesuffix('.jsonl')}")


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
    print(f"  {'model':16s} {'seq':>5s} {'GPUs':11s} {'allocator':10s} {'n':>2s}  {'model picks':18s} {'measured best':18s} ratio")
    ratios, shared_ratios = [], []
    for (model, seq_len, gpu, world, alloc, file, shared), group in sorted(groups.items()):
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
        if not group[0].row["case"].get("phase_sync", True):
            mark += "  timed as zero-run's loop (one wait per step)"
        timed, planned = group[0].workload.attn_implementation, group[0].spec.attn_implementation or "sdpa"
        if timed != planned:
            mark += f"  timed with {timed}; zero-plan's plans run {planned}"
        gpus = f"{world}x{gpu}"
        print(f"  {model:16s} {seq_len:5d} {gpus:11s} {alloc:10s} {len(group):2d}  {pick:18s} {top:18s} {ratio:.3f}  "
              f"{file.removesuffix('.jsonl')}{mark}")
    if ratios:
        print(f"  worst ratio {min(ratios):.3f} over {len(ratios)} settings measured alone on their host (target >= 0.98, issue 26)")
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


STATED_MIN_TOKENS = 4096
"""The cases the stated error is computed over: micro-steps of at least this many tokens (shorter ones, 0.1-0.2 s
steps of 2,048 tokens, vary by 30% between identical runs)."""
STATED_ERROR_TOLERANCE = 0.005
"""How far the errors stored in catalog/step_time.json may be from the recomputed ones before the check fails."""


def _stats(errors: list[float]) -> tuple[float, float]:
    absolute = [abs(e) for e in errors]
    return (statistics.median(absolute), max(absolute)) if absolute else (float("nan"), float("nan"))


def family_errors(cases: list[MeasuredCase], base=None) -> tuple[list, list[float], list[float]]:
    """Returns the full fine-tuning cases' features and, aligned with them, each one's error in sample and out of
    family (predicted / measured tokens/s - 1 = measured / predicted step time - 1).

    In sample: throughput_fit.fit on every case, each case predicted by it. Out of family: for each
    architecture family (config model_type), the fit on every other family's cases predicts that family's
    cases. A case that ran on two machines (the same id, equal steps) counts twice, once per run."""
    from benchmarks.throughput_fit import features, fit, predict

    rows = [features(c, base) for c in cases if c.method == "full"]
    full = fit(rows, base)

    def error(row, result) -> float:
        return row.measured_s / predict(row, result.for_case(row)) - 1

    fits = {family: fit([r for r in rows if r.family != family], base) for family in sorted({r.family for r in rows})}
    return rows, [error(r, full) for r in rows], [error(r, fits[r.family]) for r in rows]


def _family_table(indices: list[int], rows: list, in_sample: list[float], out: list[float], note: str = "") -> None:
    """Prints, for the rows at `indices`, a line per family and one over all: in-sample and out-of-family median and
    largest |error|, and the out-of-family range."""
    def line(label: str, members: list[int], tail: str) -> None:
        i_med, i_max = _stats([in_sample[i] for i in members])
        o_med, o_max = _stats([out[i] for i in members])
        print(f"  {label:10s} {len(members):3d}  {i_med:16.1%} {i_max:5.0%}   {o_med:20.1%} {o_max:5.0%}{tail}")

    for family in sorted({rows[i].family for i in indices}):
        members = [i for i in indices if rows[i].family == family]
        low, high = min(out[i] for i in members), max(out[i] for i in members)
        line(family, members, f"  {low:+.0%} .. {high:+.0%}")
    line("all", indices, note)


BOUNDS = (("1", "one GPU"), ("n", "several GPUs"))
"""Calibration.bound_errors' keys before the colon: one GPU, several."""


def bound_errors(rows: list, out: list[float], bounds: list[str]) -> dict:
    """Returns the out-of-family (median, largest) |error| by what the model says sets a step's pace (StepTime.bound,
    aligned with `rows`): {"1:gpu": {cases, median, max}, "1:host": ..., "n:gpu": ..., "n:host": ...}."""
    result = {}
    for key, _ in BOUNDS:
        for bound in ("gpu", "host"):
            errors = [e for r, e, b in zip(rows, out, bounds) if (r.world_size == 1) == (key == "1") and b == bound]
            if errors:
                median, largest = _stats(errors)
                result[f"{key}:{bound}"] = {"cases": len(errors), "median": round(median, 4), "max": round(largest, 4)}
    return result


def validate(cases: list[MeasuredCase], *, quiet: bool = False, base=None) -> dict:
    """Returns (and prints unless quiet) the tokens/s error in sample and out of family (family_errors), per
    family and over all: the stated figures over the cases of one GPU, then the cases of several apart. The
    reference GPU's cases fit the GPU constants; other GPUs' cases are only predicted (their hosts' CPU Adam
    rates are fitted on their own offload cases, held-out family excluded); cases of several GPUs fit only the
    ZeRO-3 gather, and the CPU Adam rate of a host seen only in them."""
    from benchmarks.throughput_fit import bound
    from zero_planner.plan.throughput import load_calibration

    every, every_in, every_out = family_errors(cases, base)
    by_bound = bound_errors(every, every_out, [bound(r, base or load_calibration()) for r in every])
    one = [i for i, r in enumerate(every) if r.world_size == 1]
    several = [i for i, r in enumerate(every) if r.world_size > 1]
    rows = [every[i] for i in one]
    families = sorted({r.family for r in rows})
    if not quiet:
        print("\nhow it generalizes: tokens/s predicted / measured - 1, fitted on every case (in sample) and fitted "
              "without the case's architecture family (out of family)")
        print(f"  {'family':10s} {'n':>3s}  {'in-sample median':>16s} {'max':>5s}   {'out-of-family median':>20s} {'max':>5s}  range")
        _family_table(one, every, every_in, every_out, "   (targets out of family: median <= 10%, max <= 25%)")
        if several:
            print("\n  several GPUs (ZeRO-3's gathers, buckets and their growth, ZeRO-1/2's buckets, and their hosts' CPU Adam "
                  "fitted on them, the rest on one GPU), the same way:")
            _family_table(several, every, every_in, every_out)
        print("\n  by what sets the step's pace in the model (StepTime.bound: the host where its launches, buckets and "
              "ZeRO-3 hooks take at least the GPU's time), out of family; the figure zero-plan states for each:")
        for key, label in BOUNDS:
            for bound in ("gpu", "host"):
                if f"{key}:{bound}" in by_bound:
                    e = by_bound[f"{key}:{bound}"]
                    print(f"  {label:12s} {bound}-bound {e['cases']:4d} runs, median {e['median']:5.1%}, max {e['max']:4.0%}")
    i_med, i_max = _stats([every_in[i] for i in one])
    o_med, o_max = _stats([every_out[i] for i in one])
    s_med, s_max = _stats([every_out[i] for i in several])
    result = {"in_sample_median": round(i_med, 4), "in_sample_max": round(i_max, 4),
              "out_of_family_median": round(o_med, 4), "out_of_family_max": round(o_max, 4),
              "cases": len(rows), "families": families,
              "computed_by": "python benchmarks/throughput_check.py (throughput_fit.fit, leave one family out)"}  # fmt: skip
    if several:
        result.update(several_gpus_out_of_family_median=round(s_med, 4), several_gpus_out_of_family_max=round(s_max, 4),
                      several_gpus_cases=len(several))  # fmt: skip
    result["by_bound"] = by_bound
    return result


VALIDATION_JSON = ROOT / "benchmarks" / "step_time_validation.json"
"""The committed output of the full validation (validate over every run alone on its host, with the committed
constants), written by `python benchmarks/throughput_fit.py --write` or `--write-errors` (4-5 minutes on a 2-core
machine): the tests and CI read it instead of refitting, and fail when its inputs changed since (inputs_sha256)."""
VALIDATION_INPUTS = ("benchmarks/results/*.jsonl", "benchmarks/throughput_fit.py", "benchmarks/refit_step_time.py",
                     "benchmarks/throughput_check.py",
                     "zero_planner/plan/throughput.py", "zero_planner/catalog/gpus.json")
"""What the validation is a function of, beside catalog/step_time.json's constants (its stated errors are the
validation's output, so they are left out of the hash). The rest of the planner (model specs, the memory model, which
runs memory_regression.load_cases reads) is held by the per-run predictions stored beside the figures, which the
tests recompute in a second."""


def validation_inputs_sha256() -> str:
    """Returns the sha256 (hex) of the validation's inputs: VALIDATION_INPUTS' files in name order and
    catalog/step_time.json without its "error" section."""
    import hashlib

    from zero_planner.plan.throughput import STEP_TIME_FILE

    digest = hashlib.sha256()
    for pattern in VALIDATION_INPUTS:
        for path in sorted(ROOT.glob(pattern)):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    constants = json.loads((ROOT / "zero_planner" / STEP_TIME_FILE).read_text())
    constants.pop("error", None)
    digest.update(json.dumps(constants, sort_keys=True).encode())
    return digest.hexdigest()


def validation_cases() -> list[MeasuredCase]:
    """Returns the runs the stated errors are computed over: every committed run, one GPU and several, alone on its
    host, at >= STATED_MIN_TOKENS per micro-step, runs of users' JSONs each with its own."""
    return [c for c in measured_cases(STATED_MIN_TOKENS, gpus=None, own_json=True) if not c.host_shared]


def run_predictions(cases: list[MeasuredCase], cal=None) -> list[list]:
    """Returns [[run name, predicted step seconds], ...] for the full fine-tuning `cases`, at the committed constants
    (or `cal`): what the validation's figures were computed from, cheap to recompute."""
    from benchmarks.throughput_fit import features, predict
    from zero_planner.plan.throughput import load_calibration

    cal = cal or load_calibration()
    return [[row.name, predict(row, cal)] for row in (features(c, cal) for c in cases if c.method == "full")]


def write_validation(computed: dict, cases: list[MeasuredCase], path: Path = VALIDATION_JSON) -> None:
    """Writes the validation's figures, its inputs' hash and each run's prediction to `path`."""
    data = {"_about": VALIDATION_JSON_ABOUT, "inputs_sha256": validation_inputs_sha256(),
            "inputs": list(VALIDATION_INPUTS) + ["zero_planner/catalog/step_time.json (constants)"],
            "validation": computed, "predicted_step_s": run_predictions(cases)}  # fmt: skip
    path.write_text(json.dumps(data, indent=1) + "\n")


VALIDATION_JSON_ABOUT = ("The step-time model's validation over the committed runs (benchmarks/throughput_check.py "
                         "validate: in sample and leave one family out), computed by python benchmarks/throughput_fit.py "
                         "--write-errors. Stale when inputs_sha256 differs from today's inputs: rerun that command.")


class StaleValidation(Exception):
    """The committed validation was computed from other inputs than today's."""


def committed_validation() -> dict:
    """Returns the committed validation's figures (validate's dict); StaleValidation when its inputs changed."""
    data = json.loads(VALIDATION_JSON.read_text())
    if data["inputs_sha256"] != validation_inputs_sha256():
        raise StaleValidation(f"{VALIDATION_JSON.relative_to(ROOT)} was computed from other runs or another model than "
                              "today's; run python benchmarks/throughput_fit.py --write-errors (--write to refit the "
                              "constants), then python -m pytest -m refit")
    return data["validation"]


def check_stated(computed: dict) -> bool:
    """Prints and returns whether the errors stored in catalog/step_time.json match the computed ones."""
    from zero_planner.plan.throughput import load_calibration

    cal = load_calibration()
    stored = {"out_of_family_median": cal.median_error, "out_of_family_max": cal.max_error,
              "in_sample_median": cal.in_sample_median_error, "in_sample_max": cal.in_sample_max_error}  # fmt: skip
    several_gpus = "several_gpus_out_of_family_median" in computed  # stated beside tokens/s of plans for several GPUs
    if several_gpus:
        stored.update(several_gpus_out_of_family_median=cal.several_gpus_median_error,
                      several_gpus_out_of_family_max=cal.several_gpus_max_error)  # fmt: skip
    computed = dict(computed)
    for key, e in computed.pop("by_bound", {}).items():  # the figures stated per bound (StepTime.bound), flattened
        computed.update({f"{key}:median": e["median"], f"{key}:max": e["max"]})
        stored.update({f"{key}:median": float("nan"), f"{key}:max": float("nan")})  # stale unless stored (below)
    for key, median, largest in cal.bound_errors:
        stored.update({f"{key}:median": median, f"{key}:max": largest})
    stale = {k: (v, computed.get(k, float("nan"))) for k, v in stored.items()
             if not abs(v - computed.get(k, float("nan"))) <= STATED_ERROR_TOLERANCE}
    if stale:
        print("\nstale: catalog/step_time.json states " + ", ".join(f"{k} {a:.1%} (computed {b:.1%})" for k, (a, b) in stale.items())
              + "; run python benchmarks/throughput_fit.py --write")
        return False
    several = (f"; several GPUs median {cal.several_gpus_median_error:.1%}, max {cal.several_gpus_max_error:.1%}"
               if several_gpus else "")
    print(f"\nstated error (catalog/step_time.json, shown beside tokens/s): median {cal.median_error:.1%}, "
          f"max {cal.max_error:.1%} out of family{several}: matches")  # fmt: skip
    return True


def case_table(cases: list[MeasuredCase]) -> None:
    """Prints each case's achieved TFLOP/s (per GPU), measured and predicted tokens/s (all GPUs) and their ratio."""
    print(f"{'case':64s} {'TFLOP/s':>8s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s}")
    for case in cases:
        predicted = case.predicted_tokens_per_second()
        measured = case.measured_tokens_per_second
        tflops = training_flops(case.spec, case.workload) / case.seconds / 1e12
        mark = "  host shared" if case.host_shared else ""
        print(f"{case.name[:64]:64s} {tflops:8.1f} {measured:9,.0f} {predicted:9,.0f} {predicted / measured:6.2f}{mark}")


def several_gpus(min_tokens: int) -> list[float]:
    """Prints the cases of several GPUs (each alone on its machine) as the committed constants predict them,
    their error per strategy and their plan quality; returns the plan-quality ratios."""
    cases = [c for c in measured_cases(min_tokens, gpus=None) if c.workload.world_size > 1 and not c.host_shared]
    if not cases:
        return []
    print(f"\nseveral GPUs, each case alone on its machine, with the committed constants (all fitted on one GPU but the "
          f"ZeRO-3 gather's and bucket's times across ranks and their growth, and ZeRO-1/2's buckets across ranks; the H100 host's CPU Adam rate on every host, as zero-plan without --gpus "
          f"auto; out-of-family figures above, each host at its own rate)")
    case_table(cases)
    error_table(cases, "predicted / measured tokens/s - 1 on several GPUs, per strategy")
    # and the sweeps timed as zero-run's loop runs (one wait per step; not fitted)
    one_sync = [c for c in measured_cases(min_tokens, gpus=None, one_sync=True) if c.setting is not None
                and c.workload.world_size > 1 and not c.host_shared]  # fmt: skip
    return plan_quality(cases + one_sync)


def user_configs() -> list[tuple[str, float, float, float]]:
    """Prints and returns (case, measured s, predicted s with its own DeepSpeed JSON, predicted with ours) for the
    committed runs of a DeepSpeed JSON other than ours (timing_suite.py's variants): the step-time model reads a
    user's ZeRO-2 bucket size and ZeRO-3 persistence threshold (`--ds-config`). Those of several GPUs that it reads
    (read_variant) are fitted and in the stated errors (marked "fitted"); the rest are out of sample."""
    rows = [row for row in load_cases() if row["status"] == "ok" and row["case"].get("variant")
            and not row.get("gpu_shared") and not shared_host(row) and not row["case"].get("stream_pools")]  # fmt: skip
    if not rows:
        return []
    print("\nanother DeepSpeed JSON than ours: step seconds measured, predicted with the run's own JSON (--ds-config), "
          "with ours; \"fitted\": several GPUs' runs the fit and the stated errors take (read_variant), the rest out of sample")
    out, specs = [], {}
    for row in rows:
        c = measured_case(row, specs)
        strategy, buffers, measured = STRATEGIES[c.strategy], c.buffers, c.seconds
        own = estimate_step_time(c.spec, strategy, c.gpu, c.workload, buffers=buffers).step_s
        ours = estimate_step_time(c.spec, strategy, c.gpu, c.workload).step_s
        print(f"  {row['id'][:64]:64s} {measured:6.3f}  {own:6.3f} ({own / measured - 1:+.0%})  {ours:6.3f} "
              f"({ours / measured - 1:+.0%})  overlap_comm {buffers.overlap_comm}, reduce_bucket_size {buffers.reduce_bucket_size:.3g}"
              f"{'  fitted' if read_variant(row) else ''}")
        out.append((row["id"], measured, own, ours))
    print("  (ZeRO-2 without overlap_comm is not modelled: it is counted per bucket like overlap_comm's synchronize; at\n"
          "  DeepSpeed's 5e8 buckets that is a handful, and those runs took ZeRO-1's time or a little more)")
    return out


def loop_waits() -> list[tuple[str, float, float, float]]:
    """Prints and returns (case, seconds timed as the harness times, as zero-run's loop runs, predicted) for the
    committed sync pairs (timing_suite.py `sync_pairs`): the same case with the harness's wait after forward,
    backward and step, then with one wait per step (`phase_sync` False, not fitted)."""
    phased = {c.name: c for c in measured_cases(0, gpus=None, host_shared=True) if "|phase-sync-" in c.name}
    pairs = [(c, phased[c.name.replace("|one-sync-", "|phase-sync-")])
             for c in measured_cases(0, gpus=None, host_shared=True, one_sync=True)
             if "|one-sync-" in c.name and c.name.replace("|one-sync-", "|phase-sync-") in phased]  # fmt: skip
    if not pairs:
        return []
    print("\nthe harness's waits: step ms with a wait after forward, backward and step (the committed runs) and with "
          "one wait per step (zero-run's loop; not fitted), then the model's")
    out = []
    for one, harness in sorted(pairs, key=lambda pair: pair[0].name):
        predicted = estimate_step_time(one.spec, STRATEGIES[one.strategy], one.gpu, one.workload).step_s
        a, b = harness.seconds, one.seconds
        name = one.name.replace("|one-sync-", "|")
        print(f"  {name[:64]:64s} {a * 1e3:7.1f} {b * 1e3:7.1f} ({b / a - 1:+.1%})  {predicted * 1e3:7.1f} "
              f"({predicted / b - 1:+.0%} of one wait)  {one.row['file'].removesuffix('.jsonl')}")
        out.append((name, a, b, predicted))
    return out


@dataclass(frozen=True)
class EagerPair:
    """One shape timed under eager attention and under SDPA, both with one wait per step (not fitted)."""

    name: str
    eager_s: float
    sdpa_s: float
    score_bytes: float
    """eager_attention_bytes of the shape: what eager moves that SDPA keeps on chip."""
    predicted_s: float
    """eager_attention_seconds at the committed constants."""
    bandwidth: float
    """The GPU's catalog device-memory bandwidth, bytes/s."""

    @property
    def fraction(self) -> float:
        """The catalog bandwidth's share at which the difference moves the score bytes."""
        return self.score_bytes / (self.eager_s - self.sdpa_s) / self.bandwidth


def eager_pairs(quiet: bool = False) -> list[EagerPair]:
    """Returns (and prints unless quiet) the committed shapes timed under both attentions in one call on one
    machine (the same results file), each alone on its host with one wait per step (the median of the SDPA runs
    where several). Their difference per score byte is what Calibration.eager_scores_memory_fraction holds.

    Pairs across calls are left out: a lent machine's host sets part of a small step, and machines of one kind
    differ by up to 20% (docs/speed.md). Gemma 2 at 2 x 2,048 without checkpointing took 76-81 ms more under eager
    on two and four H200s against SDPA runs of other machines (2026-11-27/28), 40 ms more where one machine ran
    both (h200x2-i26-eager-pairs-2026-11-28.jsonl)."""
    def shape(c: MeasuredCase) -> str:
        return c.name.split("|xs")[0]  # the case id less its allocator and run suffixes

    runs = measured_cases(0, gpus=None, one_sync=True)
    sdpa: dict[tuple, list[MeasuredCase]] = defaultdict(list)
    for c in runs:
        if c.workload.attn_implementation == "sdpa":
            sdpa[shape(c), c.gpu.name, c.row["file"]].append(c)
    pairs = []
    for c in runs:
        twins = sdpa.get((shape(c), c.gpu.name, c.row["file"]))
        if c.workload.attn_implementation != "eager" or not twins:
            continue
        pairs.append(EagerPair(name=shape(c), eager_s=c.seconds,
                               sdpa_s=statistics.median(t.seconds for t in twins),
                               score_bytes=eager_attention_bytes(c.spec, c.workload),
                               predicted_s=eager_attention_seconds(c.spec, c.gpu, c.workload),
                               bandwidth=c.gpu.memory_bandwidth_bytes_per_s))  # fmt: skip
    if pairs and not quiet:
        print("\neager attention: step ms under eager and under SDPA (one wait per step each, not fitted), the difference, "
              "the model's score kernels, and the bandwidth share the difference implies")
        for p in sorted(pairs, key=lambda p: p.name):
            print(f"  {p.name[:56]:56s} {p.eager_s * 1e3:7.1f} {p.sdpa_s * 1e3:7.1f} {(p.eager_s - p.sdpa_s) * 1e3:6.1f} "
                  f"{p.predicted_s * 1e3:6.1f}  {p.fraction:.3f}")
        print(f"  median share {statistics.median(p.fraction for p in pairs):.3f} over {len(pairs)} pairs "
              "(Calibration.eager_scores_memory_fraction)")
    return pairs


def error_floor(seconds: list[float]) -> float:
    """Returns the smallest largest |measured / predicted - 1| (the stated error's measure, family_errors) that one
    predicted time can reach over repeated measurements of one case: (slowest - fastest) / (slowest + fastest), at
    the prediction (slowest + fastest) / 2."""
    return (max(seconds) - min(seconds)) / (max(seconds) + min(seconds))


def repeat_spread(quiet: bool = False) -> dict[str, tuple[int, float, float]]:
    """Prints (unless quiet) and returns, for one GPU and several, over the cases measured alone more than once (the
    same id in several results files, that is on several lent machines or calls): (cases, median spread slowest /
    fastest - 1, the largest error_floor). A model that predicts one time per case cannot have a smaller maximum
    error on them than that floor, whatever its terms."""
    result = {}
    if not quiet:
        print("\nrepeats: the same case measured alone on several machines or calls (step seconds)")
    for label, gpus in (("one GPU", 1), ("several GPUs", None)):
        groups: dict[str, list[float]] = defaultdict(list)
        for c in measured_cases(gpus=gpus):
            if gpus is None and c.workload.world_size == 1:
                continue
            groups[c.name.removesuffix("|profile")].append(c.seconds)
        repeated = {name: times for name, times in groups.items() if len(times) > 1}
        if not repeated:
            continue
        spreads = [max(t) / min(t) - 1 for t in repeated.values()]
        worst = max(repeated, key=lambda name: error_floor(repeated[name]))
        result[label] = (len(repeated), statistics.median(spreads), error_floor(repeated[worst]))
        if not quiet:
            times = ", ".join(f"{t:.3f}" for t in sorted(repeated[worst]))
            print(f"  {label:12s} {len(repeated):3d} cases, spread median {statistics.median(spreads):.0%}, largest "
                  f"{max(spreads):.0%}: no one prediction per case gets its max error below {result[label][2]:.1%} "
                  f"({worst}: {times})")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--min-tokens", type=int, default=STATED_MIN_TOKENS, help="tokens per micro-step at least")
    parser.add_argument("--recompute", action="store_true",
                        help="refit per family instead of reading benchmarks/step_time_validation.json (4-5 minutes)")
    args = parser.parse_args(argv)
    cases = measured_cases(args.min_tokens, host_shared=True)
    case_table(cases)
    error_table([c for c in cases if not c.host_shared], "predicted / measured tokens/s - 1, alone on the host, per strategy, with the "
                "committed constants (the H100 host's CPU Adam rate on every host, as zero-plan without --gpus auto)")
    shared = [c for c in cases if c.host_shared]
    if shared:
        error_table(shared, "the same, host shared with another harness (indicative, not in the figures above)")
    if args.recompute or args.min_tokens != STATED_MIN_TOKENS:
        computed = validate([c for c in measured_cases(args.min_tokens, gpus=None, own_json=True) if not c.host_shared])
    else:
        try:
            computed = committed_validation()
        except StaleValidation as stale:
            print(f"\nstale: {stale}")
            return 1
        print(f"\nhow it generalizes: {VALIDATION_JSON.relative_to(ROOT)} (inputs unchanged; --recompute refits per "
              f"family): one GPU out of family median {computed['out_of_family_median']:.1%}, max "
              f"{computed['out_of_family_max']:.1%} over {computed['cases']} runs; several GPUs median "
              f"{computed['several_gpus_out_of_family_median']:.1%}, max {computed['several_gpus_out_of_family_max']:.1%} "
              f"over {computed['several_gpus_cases']}")
    repeat_spread()
    # with the one-GPU sweeps timed as zero-run's loop runs (one wait per step; not fitted), as several_gpus does
    one_sync = [c for c in measured_cases(args.min_tokens, one_sync=True, host_shared=True) if c.setting is not None]
    plan_quality(cases + one_sync)
    several_gpus(args.min_tokens)
    over_the_card(args.min_tokens)
    user_configs()
    loop_waits()
    eager_pairs()
    if args.min_tokens != STATED_MIN_TOKENS:
        print(f"\n(the stated error is over micro-steps of >= {STATED_MIN_TOKENS} tokens: not compared here)")
        return 0
    return 0 if check_stated(computed) else 1


if __name__ == "__main__":
    sys.exit(main())

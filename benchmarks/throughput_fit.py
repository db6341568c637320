"""Fits the step-time model's measured constants from the committed single-GPU runs, and prints them.

    python benchmarks/throughput_fit.py [--min-tokens 4096] [--write]

What it fits (zero_planner/plan/throughput.py, Calibration, explains each term), in this order, each step on its own
cases of the reference GPU (H100), at the smooth maximum's power of the committed calibration (with `--write`, at each
power of OVERLAP_POWERS in turn, keeping the fit of least in-sample squared error over the one-GPU runs):
  1. stages 0-2 without offload: the achieved matmul and HBM fractions of peak (a grid: matmul up to
     throughput.MAX_MATMUL_FRACTION, HBM up to 1; each GEMM runs at its roofline, so the two do not enter
     linearly), and, by least squares on relative error at each grid point, the achieved attention fraction,
     the optimizer's bytes per parameter and the host seconds per gradient tensor, on times less the smooth
     maximum's excess over the plain one (fit_dense_overlapped);
  2. the host's floor: seconds per decoder layer pass on stages 0-1, then per ZeRO-2 bucket on stage 2 (1-d
     searches); then 1 again without the runs the host bound, and these two again;
  3. stage 3 without offload: the host seconds per fetched tensor (1-d search, the terms of 1 and 2 fixed);
  4. offload: CPU Adam parameters/s, per host (least squares on relative error, 1-3 fixed): a property of
     the machine, so each host's offload runs give its own rate (the committed runs name no CPU model; each
     GPU kind was lent on its own host type, so the GPU name stands for the host until gpu_harness.py
     records `cpu_model`). The reference host's rate is the catalog default. Likewise the ZeRO-3 hook time
     per fetch (host Python) of another host, from its stage-3 runs that the hooks bound (small micro-batches),
     and its time per ZeRO-2 bucket, from its stage-2 runs that the host bound;
  5. ZeRO-3 on several GPUs: the host seconds of each gather across ranks (1-d search over the
     runs of several GPUs, each at its host's per-fetch time; 1-4 fixed, and fitted on one GPU only);
  6. ZeRO-1/2 on several GPUs without offload: the host seconds of each gradient bucket reduced across ranks
     (1-d search, 1-5 fixed), then each other GPU's device-memory fraction again with it counted; both twice.
Everything is deterministic (grids and closed-form least squares: no random starts) and takes well under a
second, so benchmarks/throughput_check.py refits once per architecture family to validate out of family.
`--write` stores the constants and the errors throughput_check computes into zero_planner/catalog/step_time.json.
Cases: throughput_check.measured_cases (status ok, alone on GPU and host, >= --min-tokens tokens per micro-step),
with the runs of several GPUs under another DeepSpeed JSON whose bucket size or persistence threshold the model reads
(throughput_check.read_variant), each at its own JSON's counts; runs of several GPUs enter steps 5 and 6 only (and
each other GPU's device-memory fraction).
The command's code is benchmarks/refit_step_time.py (it reads throughput_check's runs and validation, which import
this module's fit): this module imports neither.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zero_planner.plan import throughput  # noqa: E402
from zero_planner.plan.throughput import Calibration, load_calibration  # noqa: E402
from zero_planner.strategies import STRATEGIES  # noqa: E402

STEP_TIME_JSON = ROOT / "zero_planner" / throughput.STEP_TIME_FILE


@dataclass(frozen=True)
class Features:
    """One case's model inputs at the GPU's catalog peaks (seconds at 100% of peak), counted by throughput.py."""

    name: str
    family: str
    host: str
    gpu: str
    strategy: str
    measured_s: float
    matmul_s: float
    gemm_flops_s: tuple[float, ...]
    """Each GEMM shape's FLOPs over the peak (throughput.gemms; a grouped expert GEMM's and a misaligned one's over
    their share of it, throughput.gemm_rate_share)."""
    gemm_bytes_s: tuple[float, ...]
    """Each GEMM shape's bytes over the catalog bandwidth."""
    attention_s: float
    """Attention FLOPs of the unmasked layers over the peak (at the fitted attention rate)."""
    traffic_s: float
    optimizer_param_s: float
    fetches: int
    reductions: int
    """ZeRO-2's gradient buckets per backward (throughput.stage2_reductions); 0 for other stages."""
    layer_passes: float
    """Decoder layer passes of the host per micro-step (throughput.layer_passes)."""
    cpu_adam_params: float
    pcie_s: float
    world_size: int = 1
    gathers: int = 0
    """ZeRO-3's gathers across ranks (several GPUs; throughput.stage3_gathers); 0 on one GPU, where DeepSpeed skips them."""
    communication_s: float = 0.0
    """ZeRO's collectives between GPUs per step at NCCL's measured rate (throughput.communication_seconds)."""
    masked_attention_s: float = 0.0
    """Seconds of the masked layers' attention at the measured masked_attention_fraction (not fitted)."""
    eager_attention_s: float = 0.0
    """Seconds of eager attention's score kernels at the measured eager_scores_memory_fraction (not fitted; 0 under
    SDPA, as every fitted run), or of SDPA's math kernel, its products and score kernels at their measured rates."""
    broadcast_s: float = 0.0
    """Seconds of the broadcasting kernels at the measured broadcast_memory_fraction (throughput.broadcast_traffic_bytes,
    out of traffic_s, and ZeRO-3's separate bias adds, zero3_bias_seconds; not fitted)."""
    stage3_reductions: int = 0
    """ZeRO-3's gradient buckets reduced across ranks per backward (several GPUs; throughput.stage2_reductions, the
    same bucketing); 0 on one GPU."""
    variant: str = ""
    """The run's DeepSpeed JSON where it is not ours (timing_suite.py's variant: `bucket-5e8`, `ds-defaults`, ...)."""
    stage3_buckets: int = 0
    """ZeRO-3's gradient buckets per backward on any number of GPUs (throughput.stage2_reductions at the case's reduce
    bucket size), each at stage3_seconds_per_bucket; 0 for other stages."""
    grad_tensors: float = 0.0
    """Gradient tensors the rank handles one at a time per step (throughput.grad_tensor_passes)."""
    reductions_across: float = 0.0
    """ZeRO-1/2's gradient buckets reduced across ranks per micro-step (several GPUs;
    throughput.reductions_across_ranks); 0 on one GPU and at stages 0 and 3."""


def family_of(case) -> str:
    """Returns the case's architecture family: its config's model_type (llama, qwen2, qwen3, gemma2, phi3, gpt2,
    mistral, mixtral, ...). Two sizes of one family share code paths and kernels; a new model_type is what the
    model has not seen."""
    return str(case.spec.model_type)


def host_of(case) -> str:
    """Returns the key of the machine a case ran on: the GPU kind (each lent GPU kind came on its own host type),
    with the CPU model and logical cores where the harness recorded them (the lent 1-GPU H100 machines have 16, the
    2-GPU ones 32; their CPU Adam and hook times differ). The CPU model alone does not tell the hosts apart: the lent
    H100 and H200 machines both report the virtual CPU's generic "Intel(R) Xeon(R) Processor", and their hooks
    and CPU Adam run at different speeds (Mistral-7B's ZeRO-3 fetches at micro-batch 1-2: 1.05 ms each on the
    H200's host, 2026-11-25; 1.5-2.1 ms on the H100's for Llama-3.2-3B, Qwen3-1.7B, Gemma-2-2B)."""
    provenance = case.row["provenance"]
    cpu_model, cores = provenance.get("cpu_model"), provenance.get("cpu_cores")
    if not cpu_model:
        return case.gpu.name
    return f"{case.gpu.name} ({cpu_model}, {cores} cores)" if cores else f"{case.gpu.name} ({cpu_model})"


def features(case, base: Calibration | None = None) -> Features:
    """Returns the case's Features; a routed expert's GEMM FLOPs and a misaligned GEMM's count at `base`'s measured
    shares of the matmul rate (benchmarks/kernel_rates.py, not fitted here); fetches, gathers and buckets at the
    case's own DeepSpeed JSON's sizes where it has one (MeasuredCase.buffers), as estimate_step_time reads them."""
    base = base or load_calibration()
    spec, workload, strategy, gpu = case.spec, case.workload, STRATEGIES[case.strategy], case.gpu
    buffers = getattr(case, "buffers", None)  # a run's own DeepSpeed JSON (throughput_check.read_variant); ours if None
    threshold = buffers.param_persistence_threshold if buffers else None
    bucket = buffers.reduce_bucket_size if buffers else None
    psi = throughput.trainable_params(spec, workload) / (workload.world_size if strategy.stage >= 1 else 1)
    peak = throughput.peak_flops(gpu, workload.precision)
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    stage3_across_ranks = strategy.stage == 3 and workload.world_size > 1  # gathers and reductions span ranks
    masked = throughput.masked_attention_share(spec, workload, base)
    shapes = throughput.gemms(spec, workload)
    broadcast = throughput.broadcast_traffic_bytes(spec, workload)
    # SDPA's math kernel runs its products at their own measured rate (throughput.attention_seconds), not the fitted one
    math_kernel = throughput.sdpa_math_kernel(spec, workload)
    zero3_buckets = throughput.stage2_reductions(spec, workload, bucket=bucket) if strategy.stage == 3 else 0
    return Features(
        name=case.name,
        family=family_of(case),
        host=host_of(case),
        gpu=gpu.name,
        strategy=case.strategy,
        measured_s=case.seconds,
        matmul_s=throughput.matmul_flops(spec, workload) / peak,
        gemm_flops_s=tuple(g.flops / peak / throughput.gemm_rate_share(g, base) for g in shapes),
        gemm_bytes_s=tuple(g.bytes / bandwidth for g in shapes),
        attention_s=0.0 if math_kernel else throughput.attention_flops(spec, workload) * (1 - masked) / peak,
        masked_attention_s=throughput.masked_attention_seconds(spec, gpu, workload, base),
        traffic_s=(throughput.device_traffic_bytes(spec, workload) - broadcast) / bandwidth,
        eager_attention_s=(throughput.eager_attention_seconds(spec, gpu, workload, base)
                           + (throughput.attention_seconds(spec, gpu, workload, base) if math_kernel else 0.0)),
        broadcast_s=(broadcast / throughput.broadcast_bytes_per_s(gpu, base)
                     + throughput.zero3_bias_seconds(spec, strategy, gpu, workload, base)),
        optimizer_param_s=0.0 if strategy.offload_optimizer != "none" else psi / bandwidth,
        fetches=throughput.stage3_fetches(spec, workload, threshold) if strategy.stage == 3 else 0,
        reductions=throughput.stage2_reductions(spec, workload, bucket=bucket) if strategy.stage == 2 else 0,
        layer_passes=throughput.layer_passes(spec, workload),
        cpu_adam_params=throughput.cpu_adam_params(spec, strategy, workload),
        pcie_s=throughput.pcie_seconds(spec, strategy, gpu, workload),
        world_size=workload.world_size,
        gathers=throughput.stage3_gathers(spec, workload, threshold) if stage3_across_ranks else 0,
        stage3_reductions=zero3_buckets if stage3_across_ranks else 0,
        variant=str(case.row["case"].get("variant") or "") if hasattr(case, "row") else "",
        stage3_buckets=zero3_buckets,
        communication_s=throughput.communication_seconds(spec, strategy, gpu, workload, base),
        grad_tensors=throughput.grad_tensor_passes(spec, strategy, workload),
        reductions_across=throughput.reductions_across_ranks(spec, strategy, workload, bucket),
    )


def gpu_seconds(c: Features, cal: Calibration) -> float:
    """Returns the case's GPU seconds per micro-step at `cal` (no host terms, optimizer and offload apart)."""
    f, h = cal.matmul_fraction, cal.memory_fraction_for(c.gpu)
    gemm = sum(max(flops / f, size / h) for flops, size in zip(c.gemm_flops_s, c.gemm_bytes_s))
    return (gemm + c.attention_s / cal.attention_fraction + c.masked_attention_s + c.eager_attention_s + c.broadcast_s
            + c.traffic_s / h)


def host_seconds(c: Features, cal: Calibration) -> float:
    """Returns the case's host seconds per micro-step at `cal`: layer passes, ZeRO-2's buckets and ZeRO-1/2's buckets
    across ranks (throughput.host_seconds)."""
    return (c.layer_passes * cal.host_seconds_per_layer + c.reductions * cal.stage2_seconds_per_reduction
            + c.reductions_across * cal.seconds_per_reduction_across_ranks)


def stage3_host_seconds(c: Features, cal: Calibration) -> float:
    """Returns ZeRO-3's host seconds of the case's micro-step at `cal` (throughput.stage3_host_seconds): the hooks'
    fetches and buckets, and the gathers and buckets across ranks with their growth."""
    across = c.gathers * cal.stage3_seconds_per_gather + c.stage3_reductions * cal.stage3_seconds_per_reduction
    return stage3_hooks_seconds(c, cal) + across * throughput.stage3_sync_growth(c.world_size, cal)


def bound(c: Features, cal: Calibration) -> str:
    """Returns throughput.StepTime.bound of the case at `cal` ("host" where the host's work of the micro-step is at
    least the GPU's), from the features: as estimate_step_time gives it, without building the step again."""
    return "host" if host_seconds(c, cal) + stage3_host_seconds(c, cal) >= gpu_seconds(c, cal) else "gpu"


def predict(c: Features, cal: Calibration) -> float:
    """Returns the predicted micro-step seconds of a case (one micro-step per optimizer step, as the harness
    runs): throughput.estimate_step_time's formula on the features (tests/test_throughput_check.py checks the
    two agree on every committed case)."""
    fetches = stage3_host_seconds(c, cal)
    optimizer = cal.optimizer_bytes_per_param * c.optimizer_param_s / cal.memory_fraction_for(c.gpu)
    tensors = c.grad_tensors * cal.seconds_per_grad_tensor
    busy = throughput.overlapped_seconds(gpu_seconds(c, cal), host_seconds(c, cal) + fetches, cal.host_overlap_power)
    return busy + optimizer + tensors + c.communication_s + c.pcie_s + c.cpu_adam_params / cal.cpu_adam_params_per_s_per_node


def fit_dense(cases: list[Features], base: Calibration) -> Calibration | None:
    """Returns `base` with the stage 0-2 constants fitted, or None where no physical fit exists.

    For each (matmul fraction f, HBM fraction h) on a 0.01 grid, t - sum of GEMM rooflines - traffic_s/h =
    attention_s/a + optimizer_param_s * bytes/h + grad_tensors * seconds per tensor is linear in (1/a, bytes/h,
    seconds per tensor); dividing each row by t makes it
    least squares on relative error, solved in closed form at every grid point at once. The grid keeps the
    physical fit (fractions in (0, 1], bytes and seconds >= 0) with the smallest residual; ties go to the first.
    """
    if len(cases) < 4:
        return None
    t = np.array([c.measured_s for c in cases])
    width = max(len(c.gemm_flops_s) for c in cases)
    flops = np.array([c.gemm_flops_s + (0.0,) * (width - len(c.gemm_flops_s)) for c in cases])
    size = np.array([c.gemm_bytes_s + (0.0,) * (width - len(c.gemm_bytes_s)) for c in cases])
    traffic = np.array([c.traffic_s for c in cases])
    fixed = np.array([c.masked_attention_s + c.eager_attention_s + c.broadcast_s for c in cases])  # measured, not fitted
    x = np.array([[c.attention_s, c.optimizer_param_s, c.grad_tensors] for c in cases]) / t[:, None]
    gram = x.T @ x
    if np.linalg.matrix_rank(x / np.maximum(np.abs(x).max(axis=0), 1e-30)) < x.shape[1]:
        return None  # a column the cases do not vary (e.g. no attention), or two in proportion
    inverse = np.linalg.inv(gram)
    fs = np.arange(30, int(throughput.MAX_MATMUL_FRACTION * 100) + 1) / 100
    hs = np.arange(30, 101) / 100
    # rest[f, h, case] = t - GEMM rooflines - traffic / h, relative to t
    gemm = np.maximum(flops[None, None] / fs[:, None, None, None], size[None, None] / hs[None, :, None, None]).sum(-1)
    rest = 1 - (gemm + traffic / hs[None, :, None] + fixed) / t
    coef = np.einsum("ij,fhj->fhi", inverse, np.einsum("cj,fhc->fhj", x, rest))  # (1/a, bytes/h, s per tensor)
    residual = ((np.einsum("cj,fhj->fhc", x, coef) - rest) ** 2).sum(-1)
    physical = (coef[..., 0] >= 1) & (coef[..., 1] >= 0) & (coef[..., 2] >= 0)
    if not physical.any():
        return None
    residual = np.where(physical, residual, np.inf)
    i, j = np.unravel_index(int(np.argmin(residual)), residual.shape)
    inv_a, opt_per_h, per_tensor = coef[i, j]
    return replace(base, matmul_fraction=float(fs[i]), memory_fraction=float(hs[j]), attention_fraction=round(1 / inv_a, 5),
                   optimizer_bytes_per_param=round(float(opt_per_h * hs[j]), 1),
                   seconds_per_grad_tensor=round(float(per_tensor), 6))  # fmt: skip


OVERLAP_ROUNDS = 3
"""Rounds of fit_dense_overlapped: each refits the GPU constants on the times less the smooth maximum's excess at
the previous round's constants (the excess is a few percent where it is not 0, so the constants settle in two)."""


def fit_dense_overlapped(cases: list[Features], base: Calibration) -> Calibration | None:
    """Returns fit_dense of `cases` with the host's share of each case taken out first: fit_dense's closed form
    takes a case's time as GPU work, optimizer and tensors, and the smooth maximum (host_overlap_power) adds to the
    GPU's work what the host's starves it of; that excess, at the constants so far, leaves the measured time before
    each round (OVERLAP_ROUNDS). At the plain maximum the excess is 0 and this is fit_dense."""
    cal = base
    for _ in range(OVERLAP_ROUNDS):
        trimmed = [replace(c, measured_s=c.measured_s - overlap_excess(c, cal)) for c in cases]
        fitted = fit_dense(trimmed, cal)
        if fitted is None:
            return None if cal is base else cal
        cal = fitted
    return cal


def overlap_excess(c: Features, cal: Calibration) -> float:
    """Returns what the smooth maximum of a stage 0-2 case's GPU and host seconds adds to their plain maximum."""
    gpu, host = gpu_seconds(c, cal), host_seconds(c, cal)
    return throughput.overlapped_seconds(gpu, host, cal.host_overlap_power) - max(gpu, host)


def fit_host_rate(cases: list[Features], cal: Calibration, name: str, step: float, steps: int, digits: int,
                  for_case: Callable[[Features], Calibration] | None = None) -> Calibration:
    """Returns `cal` with its host rate `name` (seconds per unit) minimising the cases' squared relative error over
    the grid 0, step, ..., (steps - 1) * step, rounded to `digits`; `cal` itself without cases. `for_case`: each
    case predicted with its own calibration (its host's rates), `name` set to the trial value."""
    if not cases:
        return cal

    bases = [for_case(c) if for_case else cal for c in cases]

    def error(k: float) -> float:
        trials: dict[int, Calibration] = {}  # one trial calibration per distinct base (per host)
        total = 0.0
        for c, b in zip(cases, bases):
            if id(b) not in trials:
                trials[id(b)] = replace(b, **{name: k}, cpu_adam_params_per_s_per_node=float("inf"))
            total += (predict(c, trials[id(b)]) / c.measured_s - 1) ** 2
        return total

    grid = [i * step for i in range(0, steps)]
    return replace(cal, **{name: round(min(grid, key=error), digits)})


def fit_stage3(cases: list[Features], cal: Calibration) -> Calibration:
    """Returns `cal` with the host seconds per fetch minimising squared relative error (0.01 ms grid)."""
    return fit_host_rate(cases, cal, "stage3_seconds_per_fetch", 1e-5, 500, 7)


def fit_host_layer(cases: list[Features], cal: Calibration) -> Calibration:
    """Returns `cal` with the host seconds per layer pass minimising squared relative error (0.1 ms grid)."""
    return fit_host_rate(cases, cal, "host_seconds_per_layer", 1e-4, 150, 6)


def fit_stage2(cases: list[Features], cal: Calibration) -> Calibration:
    """Returns `cal` with the host seconds per ZeRO-2 reduction minimising squared relative error (0.01 ms grid)."""
    return fit_host_rate(cases, cal, "stage2_seconds_per_reduction", 1e-5, 500, 7)


OVERLAP_POWERS = (1.5, 2.0, 3.0, 4.0, 6.0, 10.0, math.inf)
"""The smooth maximum's powers `--write` tries (Calibration.host_overlap_power): each refits every constant, and
the one of least in-sample squared relative error over the one-GPU runs is kept. The out-of-family folds
(throughput_check.py) hold it fixed: one shape parameter chosen on every family's runs."""

GATHER_FIT_ROUNDS = 8
"""Rounds of fit_gather's alternation between the per-gather and per-reduction times and their growth with the
ranks (each a 1-D grid search with the others fixed): on the committed runs they settle to their grids within
seven (with four, the gather stopped at 0.08 ms on its way to 0)."""

GATHER_GRIDS = (("stage3_seconds_per_gather", 1e-5, 500, 7), ("stage3_seconds_per_reduction", 1e-5, 500, 7),
                ("stage3_sync_growth_per_doubling", 0.05, 61, 2))  # fmt: skip
"""fit_gather's constants and their grids (name, step, steps, digits): 0.01 ms up to 5 ms; growth 0 to 3 per
doubling of the ranks in steps of 0.05."""


def fit_gather(cases: list[Features], partial: "Fit") -> Calibration:
    """Returns `partial`'s calibration with the host seconds per ZeRO-3 gather across ranks and per gradient
    bucket reduced across ranks (several GPUs), and their growth per doubling of the ranks beyond two, minimising
    squared relative error (GATHER_GRIDS, fitted in turn GATHER_FIT_ROUNDS times from zero reductions and no
    growth), each case at its host's per-fetch time. Without runs of more than two GPUs the growth stays 0."""
    cal = replace(partial.calibration, stage3_seconds_per_reduction=0.0, stage3_sync_growth_per_doubling=0.0)
    grids = GATHER_GRIDS if any(c.world_size > 2 for c in cases) else GATHER_GRIDS[:2]
    for _ in range(GATHER_FIT_ROUNDS if cases else 0):
        for name, step, steps, digits in grids:
            fitted = replace(partial, calibration=cal)
            cal = fit_host_rate(cases, cal, name, step, steps, digits, fitted.for_case)
    return cal


GPU_MEMORY_FRACTIONS = tuple(round(0.2 + 0.005 * i, 3) for i in range(161))
"""The grid of fit_gpu_memory: device-memory fractions 0.2 to 1.0."""


def fit_gpu_memory(cases: list[Features], partial: "Fit") -> float | None:
    """Returns the device-memory fraction (achieved / catalog bandwidth of the memory-bound kernels, GEMM operands and
    the optimizer step) that predicts `cases` of one GPU other than the reference with the least median |error|,
    every other constant at `partial`'s; None without cases. Only the cases the GPU's work sets can show it: no
    offload, the host's time below half the GPU's."""
    calibrated = [(c, partial.for_case(c)) for c in cases if c.pcie_s == 0 and not c.cpu_adam_params]
    shown = [(c, cal) for c, cal in calibrated
             if host_seconds(c, cal) + stage3_hooks_seconds(c, cal) < 0.5 * gpu_seconds(c, cal)]
    if not shown:
        return None

    def error(h: float) -> float:
        return statistics.median(abs(c.measured_s / predict(c, replace(cal, gpu_memory_fractions=((c.gpu, h),))) - 1)
                                 for c, cal in shown)  # fmt: skip

    return min(GPU_MEMORY_FRACTIONS, key=error)


def fit_cpu_adam(cases: list[Features], cal: Calibration) -> float | None:
    """Returns CPU Adam parameters/s: least squares of (t - rest)/t = p/rate/t in 1/rate; None without cases."""
    rest = replace(cal, cpu_adam_params_per_s_per_node=float("inf"))
    rows = [(c.cpu_adam_params / c.measured_s, 1 - predict(c, rest) / c.measured_s) for c in cases if c.cpu_adam_params]
    if not rows:
        return None
    inv = sum(x * y for x, y in rows) / sum(x * x for x, _ in rows)
    return 1 / inv if inv > 0 else None


BUCKET_FIT_ROUNDS = 4
"""Rounds of fit_stage3_hooks' alternation between the time per bucket and the hosts' times per fetch."""


def fit_stage3_hooks(cases: list[Features], ref: list[Features], cal: Calibration,
                     reference_host: str | None) -> tuple[Calibration, dict[str, float]]:
    """Returns `cal` with ZeRO-3's one-GPU hook times fitted, and each other host's time per fetch: the reference host's
    per fetch on the reference GPU's stage-3 runs (fit_stage3), each other host's on its runs the hooks bound, and the
    time per gradient bucket (one for every host: DeepSpeed's same Python per bucket) on every one-GPU stage-3 run the
    hooks bound, each at its host's per-fetch time; in turn BUCKET_FIT_ROUNDS times from no bucket time. Only runs of
    one case at two bucket sizes on one host tell the two apart (under our buckets there is about one per two
    fetches); without such runs the bucket's time stays 0."""
    cal = replace(cal, stage3_seconds_per_bucket=0.0)
    zero3 = [c for c in cases if c.strategy == "3"]
    separating = {c.host for c in zero3 if not c.variant} & {c.host for c in zero3 if c.variant}
    stage3: dict[str, float] = {}
    for round_ in range(BUCKET_FIT_ROUNDS if separating else 1):
        cal = fit_stage3([c for c in ref if c.strategy == "3"], cal)
        stage3 = {}
        for host in sorted({c.host for c in zero3} - {reference_host}):
            bound = [c for c in zero3 if c.host == host and host_bound(c, cal)]
            if bound:
                stage3[host] = fit_stage3(bound, cal).stage3_seconds_per_fetch
        if separating and round_ < BUCKET_FIT_ROUNDS - 1:
            partial = Fit(cal, {}, stage3)
            bound = [c for c in zero3 if host_bound(c, partial.for_case(c))]
            cal = fit_host_rate(bound, cal, "stage3_seconds_per_bucket", 1e-5, 200, 7, partial.for_case)
    return cal, stage3


@dataclass(frozen=True)
class Fit:
    """A calibration fitted on some cases, and the host rates of every host whose runs could show them: CPU
    Adam where it had offload runs, the ZeRO-3 hook time per fetch where it had host-bound stage-3 runs."""

    calibration: Calibration
    host_cpu_adam: dict[str, float]
    host_stage3: dict[str, float] = field(default_factory=dict)
    host_stage2: dict[str, float] = field(default_factory=dict)
    gpu_memory: dict[str, float] = field(default_factory=dict)
    """Device-memory fraction of each GPU other than the reference whose runs this fit saw (fit_gpu_memory)."""

    def with_gpu_memory(self) -> Calibration:
        """Returns the fitted calibration with this fit's device-memory fraction of each other GPU in it."""
        return replace(self.calibration, gpu_memory_fractions=tuple(sorted(self.gpu_memory.items())))

    def for_case(self, c: Features) -> Calibration:
        """Returns the calibration to predict `c` with: the fitted one, with its host's rates where this fit saw
        runs of that host that show them (otherwise the reference host's), and its GPU's device-memory fraction
        where this fit saw that GPU's runs."""
        cal = self.with_gpu_memory()
        rate = self.host_cpu_adam.get(c.host)
        if rate:
            cal = cal.with_cpu_adam(rate, "fitted")
        if c.host in self.host_stage3:
            cal = replace(cal, stage3_seconds_per_fetch=self.host_stage3[c.host])
        if c.host in self.host_stage2:
            cal = replace(cal, stage2_seconds_per_reduction=self.host_stage2[c.host])
        return cal


def host_bound(c: Features, cal: Calibration) -> bool:
    """Returns whether a stage-3 case's micro-step is set by the host's hooks at `cal` (fetches x seconds per
    fetch above half the GPU's work): only such cases show the host's per-fetch time."""
    return stage3_hooks_seconds(c, cal) > 0.5 * gpu_seconds(c, cal)


def stage3_hooks_seconds(c: Features, cal: Calibration) -> float:
    """Returns a ZeRO-3 case's one-rank hook seconds per micro-step at `cal`: its fetches and its gradient buckets."""
    return c.fetches * cal.stage3_seconds_per_fetch + c.stage3_buckets * cal.stage3_seconds_per_bucket


def host_bound_launches(c: Features, cal: Calibration) -> bool:
    """Returns whether a stage 0-2 case's host time (layer launches, ZeRO-2's reductions) at `cal` is above half its
    GPU work: such cases show the host's rates, and do not show the GPU's."""
    return host_seconds(c, cal) > 0.5 * gpu_seconds(c, cal)


def buckets_across_ranks_runs(several: list[Features]) -> list[Features]:
    """Returns the runs of several GPUs that show ZeRO-1/2's buckets reduced across ranks: stages 1-2 without offload
    (fit_host_rate's trials leave CPU Adam out; offload runs get the term too, their buckets reduced the same way)."""
    return [c for c in several if c.reductions_across and not c.cpu_adam_params]


def fit(cases: list[Features], base: Calibration | None = None, reference_gpu: str | None = None) -> Fit:
    """Returns the Fit of `cases`: GPU constants on the reference GPU's runs, CPU Adam per host on all hosts'."""
    # each fit fits its own device-memory fractions (fit_gpu_memory) and buckets across ranks (below), from none
    base = replace(base or load_calibration(), gpu_memory_fractions=(), seconds_per_reduction_across_ranks=0.0)
    reference_gpu = reference_gpu or base.reference_gpu
    several = [c for c in cases if c.world_size > 1]
    cases = [c for c in cases if c.world_size == 1]
    ref = [c for c in cases if c.gpu == reference_gpu]
    dense = fit_dense_overlapped([c for c in ref if c.strategy in ("0", "1", "2")], base)
    if dense is None:
        raise ValueError("no physical fit of stages 0-2 on these cases")
    stages01 = [c for c in ref if c.strategy in ("0", "1")]
    zero2 = [c for c in ref if c.strategy == "2"]
    dense = fit_stage2(zero2, fit_host_layer(stages01, dense))
    # the GPU constants again without the runs the host bound (small micro-batches), then the host's rates again
    refit = fit_dense_overlapped([c for c in stages01 + zero2 if not host_bound_launches(c, dense)], dense) or dense
    cal = fit_stage2(zero2, fit_host_layer(stages01, refit))
    rates: dict[str, float] = {}
    stage2: dict[str, float] = {}
    # The reference host is the one most of the reference GPU's runs came from, not the first file's: since the
    # harness records `cpu_model`, one lent machine type can appear under two keys (the GPU name before, the CPU
    # model after), and the catalog's CPU Adam rate must not come from one new suite's offload cases alone.
    hosts = Counter(c.host for c in ref)
    reference_host = min(hosts, key=lambda h: (-hosts[h], h)) if hosts else None
    cal, stage3 = fit_stage3_hooks(cases, ref, cal, reference_host)
    for host in sorted({c.host for c in cases}):
        if host != reference_host:
            bound = [c for c in cases if c.host == host and c.strategy == "2" and host_bound_launches(c, cal)]
            if bound:
                stage2[host] = fit_stage2(bound, cal).stage2_seconds_per_reduction
        rate = fit_cpu_adam([c for c in cases if c.host == host and "offload" in c.strategy], cal)
        if rate:
            rates[host] = rate
    if reference_host in rates:
        cal = cal.with_cpu_adam(round(rates[reference_host], -6), "catalog")
    # Each other GPU's device-memory rate, on its own runs (one GPU and several): the catalog's bandwidth at the
    # reference GPU's fraction overstated the H200's (two H200s, 2026-11-27: a mixture of small experts 14-18%
    # slower than predicted at every candidate; benchmarks/kernel_rates.py there: memory-bound grouped GEMMs 0.94-1.23x
    # the H100's time where the catalog's bandwidths say 0.70x)
    def gpu_memory_of(cal: Calibration) -> dict[str, float]:
        fractions = {gpu: fit_gpu_memory([c for c in cases + several if c.gpu == gpu], Fit(cal, rates, stage3, stage2))
                     for gpu in sorted({c.gpu for c in cases + several} - {reference_gpu})}
        return {gpu: fraction for gpu, fraction in fractions.items() if fraction}

    gpu_memory = gpu_memory_of(cal)
    # ZeRO-3's gather on several GPUs, the one-GPU terms (and each host's per-fetch time) fixed
    cal = fit_gather([c for c in several if c.strategy == "3"], Fit(cal, rates, stage3, stage2, gpu_memory))
    # ZeRO-1/2's buckets reduced across ranks (from 0: base), then each other GPU's memory rate again with them counted
    # (its runs of several GPUs carry them); twice
    zero12 = buckets_across_ranks_runs(several)
    for _ in range(2 if zero12 else 0):
        cal = fit_host_rate(zero12, cal, "seconds_per_reduction_across_ranks", 1e-5, 300, 7,
                            Fit(cal, rates, stage3, stage2, gpu_memory).for_case)
        gpu_memory = gpu_memory_of(cal)
    # A host seen only in runs of several GPUs (the lent 2- and 4-GPU machines) gets its CPU Adam rate from those
    # runs' offload cases, as every one-GPU host does from its own: the optimizer step is the node's CPU Adam
    # (Llama 3.2 1B's took 0.38-0.41 s on two GPUs and on four, 2026-11-26), a property of the host that
    # `--gpus auto` measures where the plan is made (plan/host_rates.py).
    for host in sorted({c.host for c in several} - set(rates)):
        rate = fit_cpu_adam([c for c in several if c.host == host and "offload" in c.strategy], cal)
        if rate:
            rates[host] = rate
    return Fit(cal, rates, stage3, stage2, gpu_memory)


def summary(errors: list[float]) -> str:
    if not errors:
        return "no cases"
    absolute = [abs(e) for e in errors]
    return f"{len(errors):3d} cases, median |error| {statistics.median(absolute):5.1%}, max {max(absolute):5.1%}"


KERNEL_SHARES = ("grouped_gemm_fraction", "misaligned_gemm_fraction", "even_misaligned_gemm_fraction")
"""The GEMMs' shares of the dense roofline that benchmarks/kernel_rates.py measures (`--kernels`); its
bias_add_memory_fraction is the broadcasting kernels' rate of the GPU it ran on (Calibration.broadcast_fraction_for)."""


def write_calibration(cal: Calibration, error: dict, path: Path = STEP_TIME_JSON) -> None:
    """Writes the constants of `cal` and the `error` figures into catalog/step_time.json (its _about kept)."""
    data = json.loads(path.read_text())
    for name in ("reference_gpu", "measured_on", "matmul_fraction", "attention_fraction", "memory_fraction",
                 "optimizer_bytes_per_param", "stage3_seconds_per_fetch", "stage3_seconds_per_gather",
                 "stage3_seconds_per_reduction", "stage3_seconds_per_bucket", "stage3_sync_growth_per_doubling",
                 "seconds_per_reduction_across_ranks",
                 "stage2_seconds_per_reduction", "host_seconds_per_layer", "host_overlap_power", "seconds_per_grad_tensor",
                 "cpu_adam_params_per_s_per_node",
                 "stage3_offload_copy_bytes_per_s", "grouped_gemm_fraction", "misaligned_gemm_fraction",
                 "even_misaligned_gemm_fraction", "broadcast_memory_fraction", "link_fraction", "link_measured_on"):  # fmt: skip
        data[name] = getattr(cal, name)
    data["gpu_memory_fraction"] = dict(cal.gpu_memory_fractions)
    data["gpu_broadcast_fraction"] = dict(cal.gpu_broadcast_fractions)
    data["error"] = error
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":  # the command's code is refit_step_time.py, which reads throughput_check's runs
    from benchmarks.refit_step_time import main

    sys.exit(main())

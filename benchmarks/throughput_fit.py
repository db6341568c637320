"""Fits the step-time model's measured constants from the committed single-GPU runs, and prints them.

    python benchmarks/throughput_fit.py [--min-tokens 4096] [--gpu H100]

What it fits (zero_planner/throughput.py explains each term), in this order, each step on its own cases:
  1. stages 0-2 without offload: the achieved weight-matmul fraction of peak (searched on a grid up to
     throughput.MAX_MATMUL_FRACTION), and, by least squares on relative error, the achieved attention and HBM
     fractions and OPTIMIZER_BYTES_PER_PARAM;
  2. stage 3 without offload: STAGE3_SECONDS_PER_FETCH (1-d search, the terms of 1 fixed);
  3. offload: CPU_ADAM_PARAMS_PER_S_PER_NODE (least squares on relative error, 1 and 2 fixed).
Then it refits step 1 on one model family and reports the error on the others (held out), both ways.
Cases: status ok, one GPU, not shared with another run, step times recorded (steps 1.. as the harness steps
the engine every micro-step; step 0 is warm-up), at least --min-tokens tokens per micro-step. Copy what it
prints into catalog/gpus.json (achieved_*) and throughput.py's constants when new data arrives.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.throughput_check import measured_cases  # noqa: E402
from zero_planner import throughput  # noqa: E402
from zero_planner.hardware import find_gpu  # noqa: E402
from zero_planner.memory import trainable_params  # noqa: E402
from zero_planner.strategies import STRATEGIES  # noqa: E402


@dataclass(frozen=True)
class Features:
    """One case's model inputs at the reference GPU's peaks (seconds at 100% of peak)."""

    name: str
    family: str
    strategy: str
    measured_s: float
    matmul_s: float
    attention_s: float
    traffic_s: float
    optimizer_param_s: float
    fetches: int
    cpu_adam_params: float
    pcie_s: float


def features(case) -> Features:
    spec, workload, strategy = case.spec, case.workload, STRATEGIES[case.strategy]
    gpu = case.gpu
    offload = throughput.offload_seconds(spec, strategy, gpu, workload)
    cpu_params = 0.0
    if strategy.offload_optimizer != "none":
        cpu_params = trainable_params(spec, workload) * workload.gpus_per_node / workload.world_size
        offload -= cpu_params / throughput.CPU_ADAM_PARAMS_PER_S_PER_NODE  # keep the PCIe part only
    psi = trainable_params(spec, workload) / (workload.world_size if strategy.stage >= 1 else 1)
    return Features(
        name=case.name,
        family=case.model.split("-")[0].rstrip("0123456789."),
        strategy=case.strategy,
        measured_s=case.seconds,
        matmul_s=throughput.matmul_flops(spec, workload) / throughput.peak_flops(gpu, workload.precision),
        attention_s=throughput.attention_flops(spec, workload) / throughput.peak_flops(gpu, workload.precision),
        traffic_s=throughput.activation_traffic_bytes(spec, workload) / gpu.memory_bandwidth_bytes_per_s,
        optimizer_param_s=0.0 if strategy.offload_optimizer != "none" else psi / gpu.memory_bandwidth_bytes_per_s,
        fetches=throughput.stage3_fetches(spec, workload) if strategy.stage == 3 else 0,
        cpu_adam_params=cpu_params,
        pcie_s=offload,
    )


Dense = tuple[float, float, float, float]
"""(matmul fraction, attention fraction, HBM fraction, optimizer bytes per parameter)."""


def fit_dense(cases: list[Features]) -> Dense | None:
    """Returns the stage 0-2 constants, or None where no physical fit exists (too few distinct cases).

    For each matmul fraction f on the grid, t - matmul_s/f = attention_s/a + traffic_s/h + bytes *
    optimizer_param_s is linear in (1/a, 1/h, bytes); dividing each row by t makes it least squares on
    relative error. The grid keeps the physical fit (fractions in (0, 1], bytes >= 0) with the smallest
    residual.
    """
    best = None
    x = np.array([[c.attention_s, c.traffic_s, c.optimizer_param_s] for c in cases])
    t = np.array([c.measured_s for c in cases])
    m = np.array([c.matmul_s for c in cases])
    for step in range(30, int(throughput.MAX_MATMUL_FRACTION * 100) + 1):
        f = step / 100
        coef, *_ = np.linalg.lstsq(x / t[:, None], 1 - m / f / t, rcond=None)
        inv_a, inv_h, opt_bytes = coef
        if inv_a < 1 or inv_h < 1 or opt_bytes < 0:
            continue
        residual = float(np.sum((x @ coef + m / f - t) ** 2 / t**2))
        if best is None or residual < best[0]:
            best = (residual, f, 1 / inv_a, 1 / inv_h, float(opt_bytes / inv_h))  # bytes at the achieved rate
    return None if best is None else best[1:]


def fit_stage3(cases: list[Features], dense: Dense) -> float:
    """Returns the host seconds per fetch minimising squared relative error of max(gpu, host) + optimizer."""
    def error(k: float) -> float:
        return sum((predict(c, dense, k, float("inf")) / c.measured_s - 1) ** 2 for c in cases)
    grid = [i * 1e-5 for i in range(0, 500)]
    return min(grid, key=error)


def predict(c: Features, dense: Dense, k: float, cpu_rate: float) -> float:
    f, a, h, opt_bytes = dense
    gpu = c.matmul_s / f + c.attention_s / a + c.traffic_s / h
    return max(gpu, c.fetches * k) + opt_bytes * c.optimizer_param_s / h + c.pcie_s + c.cpu_adam_params / cpu_rate


def fit_cpu_adam(cases: list[Features], dense: Dense, k: float) -> float:
    """Returns CPU Adam parameters/s: least squares of (t - rest)/t = p/rate/t in 1/rate."""
    rows = [(c.cpu_adam_params / c.measured_s, 1 - predict(c, dense, k, float("inf")) / c.measured_s) for c in cases]
    inv = sum(x * y for x, y in rows) / sum(x * x for x, _ in rows)
    return 1 / inv


def summary(errors: list[float]) -> str:
    if not errors:
        return "no cases"
    absolute = [abs(e) for e in errors]
    return f"{len(errors):3d} cases, median |error| {statistics.median(absolute):5.1%}, max {max(absolute):5.1%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--min-tokens", type=int, default=4096, help="tokens per micro-step at least")
    parser.add_argument("--gpu", default=throughput.REFERENCE_GPU, help="fit on cases measured on this GPU type")
    args = parser.parse_args(argv)
    gpu = find_gpu(args.gpu)
    cases = [features(c) for c in measured_cases(args.min_tokens) if c.gpu.name == gpu.name and c.method == "full"]
    dense = [c for c in cases if c.strategy in ("0", "1", "2")]
    stage3 = [c for c in cases if c.strategy == "3"]
    offload = [c for c in cases if "offload" in c.strategy]
    fitted = fit_dense(dense)
    assert fitted is not None, "no physical fit of stages 0-2"
    f, a, h, opt_bytes = fitted
    k = fit_stage3(stage3, fitted)
    cpu_rate = fit_cpu_adam(offload, fitted, k) if offload else throughput.CPU_ADAM_PARAMS_PER_S_PER_NODE
    print(f"fitted on {len(cases)} {gpu.name} cases (>= {args.min_tokens} tokens per micro-step):")
    print(f"  achieved matmul      {f:.2f} of peak = {f * gpu.peak_dense_tflops_16bit:.0f} TFLOP/s   (catalog achieved_matmul_tflops_16bit)")
    print(f"  achieved attention   {a:.2f} of peak = {a * gpu.peak_dense_tflops_16bit:.0f} TFLOP/s   (catalog achieved_attention_tflops_16bit)")
    print(f"  achieved HBM         {h:.2f} of peak = {h * gpu.memory_bandwidth_bytes_per_s:.3g} B/s (catalog achieved_memory_bandwidth_bytes_per_s)")
    print(f"  optimizer            {opt_bytes:.0f} bytes per trainable parameter per step       (OPTIMIZER_BYTES_PER_PARAM)")
    print(f"  stage 3              {k * 1e3:.2f} ms host time per fetched tensor            (STAGE3_SECONDS_PER_FETCH)")
    print(f"  CPU Adam             {cpu_rate:.3g} params/s per node                        (CPU_ADAM_PARAMS_PER_S_PER_NODE)")

    def errors(subset: list[Features], fit: Dense) -> list[float]:
        return [predict(c, fit, k, cpu_rate) / c.measured_s - 1 for c in subset]

    print("\nstep time predicted / measured - 1 with these constants (tokens/s error is about the same, sign flipped):")
    for label, subset in (("stages 0-2", dense), ("stage 3", stage3), ("offload", offload), ("all", cases)):
        print(f"  {label:12s} {summary(errors(subset, fitted))}")
    print("\nheld out: stages 0-2 refitted without some families, checked on those (stage-3/CPU constants kept):")
    # One family alone cannot be fitted (llama ran at one seq_len only, so attention and matmul are
    # collinear; the others have 2-3 cases each): hold out whole families instead.
    families = sorted({c.family for c in cases})
    for held in (["llama"], ["qwen"], [f for f in families if f not in ("llama", "qwen")]):
        train = [c for c in dense if c.family not in held]
        fit = fit_dense(train)
        if fit is None:
            print(f"  without {'+'.join(held)}: no physical fit")
            continue
        print(f"  fit without {'+'.join(held)} ({len(train)} cases): matmul {fit[0]:.2f} attention {fit[1]:.2f}"
              f" HBM {fit[2]:.2f} optimizer {fit[3]:.0f} B")
        for label, subset in (("stages 0-2", dense), ("stage 3", stage3), ("offload", offload)):
            test = [c for c in subset if c.family in held]
            if test:
                print(f"    held out {label:10s} {summary(errors(test, fit))}   (in-sample: {summary(errors([c for c in subset if c.family not in held], fit))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A trial of another structure for the step-time model, on the committed runs, beside the committed one (not the
planner's: nothing here changes zero-plan). Prints the out-of-family errors and the plan quality of each.

    python benchmarks/structure_trial.py [--attention fit|0.57] [--moe 0.5]      (~2-4 minutes, no GPU)

The trial (2026-11-28, docs/speed.md "What the kernels say about the fitted rates"): the memory-bound kernels at
their profiled rates (MEMORY_KERNEL_FRACTION: recompute_profile.py on one H100 and one H200) instead of a fitted
rate, and a fitted time per decoder layer per optimizer step (the GPU's idle between kernels in whole DeepSpeed
steps, 1.5-1.9 ms a layer on one H200), the optimizer's bytes per parameter and the matmul rate fitted with it by
least squares on relative error; `--attention` pins SDPA's rate or fits it; `--moe` gives the mixtures of experts'
routing and permutation bytes their own fraction of the reference GPU's bandwidth (scaled to other GPUs as the dense
rate is). Everything else (host rates, ZeRO-3's hooks, CPU Adam, several GPUs) is throughput_fit.fit's, unchanged.
Written before the per-gradient-tensor term (Calibration.seconds_per_grad_tensor, 2026-11-28, twelfth session): the
trial's own fit leaves that term at the committed value; its figures in docs/speed.md are of the structure before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchmarks.throughput_fit as tf  # noqa: E402
from benchmarks import throughput_check as tc  # noqa: E402
from zero_planner.plan import throughput  # noqa: E402
from zero_planner.plan.throughput import Calibration, load_calibration  # noqa: E402

MEMORY_KERNEL_FRACTION = {"H100-SXM": 0.65, "H200": 0.57}
"""The memory-bound kernels' own rate (device_traffic_bytes over their profiled time, recompute_profile.py --report:
fitted rate / measured-over-predicted 0.77-0.79 on the H100, 0.74-0.77 on the H200, 2026-11-27 and -28)."""


@dataclass(frozen=True)
class TrialFeatures(tf.Features):
    layers: int = 0
    moe_s: float = 0.0


@dataclass(frozen=True)
class TrialCalibration(Calibration):
    step_seconds_per_layer: float = 0.0
    moe_memory_fraction: float = 0.0


def trial(attention: str, moe: float) -> None:
    committed = {name: getattr(tf, name) for name in ("features", "gpu_seconds", "predict", "fit_dense", "fit_gpu_memory")}

    def features(case, base=None):
        f = committed["features"](case, base)
        return TrialFeatures(**asdict(f), layers=case.spec.num_layers,
                             moe_s=throughput.moe_traffic_bytes(case.spec, case.workload) / case.gpu.memory_bandwidth_bytes_per_s)

    def gpu_seconds(c, cal):
        h = cal.memory_fraction_for(c.gpu)
        m = (cal.moe_memory_fraction * h / cal.memory_fraction) if cal.moe_memory_fraction else h
        gemm = sum(max(fl / cal.matmul_fraction, size / h) for fl, size in zip(c.gemm_flops_s, c.gemm_bytes_s))
        return (gemm + c.attention_s / cal.attention_fraction + c.masked_attention_s + c.eager_attention_s + c.broadcast_s
                + (c.traffic_s - c.moe_s) / h + c.moe_s / m)

    def fit_dense(cases, base):
        if len(cases) < 4:
            return None
        t = np.array([c.measured_s for c in cases])
        h = MEMORY_KERNEL_FRACTION[base.reference_gpu]
        attentions = [x / 100 for x in range(30, 101, 2)] if attention == "fit" else [float(attention)]
        best = None
        for f in [x / 100 for x in range(50, 81)]:
            for a in attentions:
                cal = replace(base, matmul_fraction=f, memory_fraction=h, attention_fraction=a,
                              optimizer_bytes_per_param=0.0, step_seconds_per_layer=0.0, moe_memory_fraction=moe)
                rest = np.array([gpu_seconds(c, cal) for c in cases])
                x = np.array([[c.optimizer_param_s / h, c.layers] for c in cases]) / t[:, None]
                y = 1 - rest / t
                coef = np.maximum(np.linalg.lstsq(x, y, rcond=None)[0], 0)
                residual = float(((x @ coef - y) ** 2).sum())
                if best is None or residual < best[0]:
                    best = (residual, cal, coef)
        _, cal, coef = best
        return replace(cal, optimizer_bytes_per_param=round(float(coef[0]), 1), step_seconds_per_layer=round(float(coef[1]), 6))

    tf.features, tf.gpu_seconds, tf.fit_dense = features, gpu_seconds, fit_dense
    # the committed predict reads gpu_seconds from its module, so it now takes the trial's; the trial adds its time
    # per layer per step
    tf.predict = lambda c, cal: committed["predict"](c, cal) + c.layers * cal.step_seconds_per_layer
    tf.fit_gpu_memory = lambda cases, partial: next((MEMORY_KERNEL_FRACTION[c.gpu] for c in cases if c.gpu in MEMORY_KERNEL_FRACTION), None)


def report(label: str, base: Calibration) -> None:
    cases = tc.measured_cases(gpus=None)
    rows, in_sample, out = tc.family_errors(cases, base)
    full = tf.fit(rows, base)
    names = ("matmul_fraction", "memory_fraction", "attention_fraction", "optimizer_bytes_per_param",
             "host_seconds_per_layer", "step_seconds_per_layer")
    print(f"\n{label}: " + ", ".join(f"{n} {getattr(full.calibration, n, 0.0):g}" for n in names), dict(full.gpu_memory))
    for title, keep in (("one GPU", lambda r: r.world_size == 1), ("several GPUs", lambda r: r.world_size > 1)):
        idx = [i for i, r in enumerate(rows) if keep(r)]
        errors = [abs(out[i]) for i in idx]
        print(f"  {title:12s} {len(idx):3d} cases, out of family median {statistics.median(errors):.1%}, max {max(errors):.0%}")
    sweeps = tc.measured_cases(gpus=None) + tc.measured_cases(gpus=None, one_sync=True)
    featured = {id(c): tf.features(c, base) for c in sweeps if c.method == "full"}
    groups: dict = {}
    for c in sweeps:
        if c.setting is not None and not c.host_shared and id(c) in featured:
            groups.setdefault(c.setting, []).append(c)
    order = list(tc.STRATEGIES)
    ratios = []
    for setting, group in sorted(groups.items()):
        if len(group) < 2:
            continue
        chosen = tc.pick_fastest(group, lambda c: c.tokens / tf.predict(featured[id(c)], full.for_case(featured[id(c)])),
                                 lambda c: (order.index(c.strategy), c.workload.gradient_checkpointing, -c.workload.micro_batch_size))
        best = max(group, key=lambda c: c.measured_tokens_per_second)
        ratios.append((chosen.measured_tokens_per_second / best.measured_tokens_per_second, setting, chosen, best))
    low = [r for r in ratios if r[0] < 0.98]
    print(f"  plan quality over {len(ratios)} settings: {len(low)} below 0.98")
    for ratio, setting, chosen, best in low:
        print(f"    {ratio:.3f} {setting[0]} {setting[3]}x{setting[2]} {Path(setting[5]).name}: "
              f"picks {tc.describe(chosen)}, best {tc.describe(best)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--attention", default="fit", help="fit, or SDPA's rate as a fraction of peak (0.57)")
    parser.add_argument("--moe", type=float, default=0.0, help="MoE routing bytes' fraction of the H100's bandwidth (0: the dense rate)")
    args = parser.parse_args(argv)
    base = load_calibration()
    report("committed structure (throughput_fit.fit)", base)
    trial(args.attention, args.moe)
    report(f"trial: kernel memory rates, time per layer per step, attention {args.attention}, moe {args.moe or 'dense'}",
           TrialCalibration(**asdict(base)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

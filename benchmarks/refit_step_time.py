"""The command of benchmarks/throughput_fit.py: refits the step-time constants on the committed runs, prints them,
and with --write or --write-errors stores them and the validation (throughput_check.validate).

    python benchmarks/throughput_fit.py [--min-tokens 4096] [--write | --write-errors] [--kernels FILE]

Its own module, above both throughput_fit (the fit) and throughput_check (the runs and the validation, which refits
once per family): the fit itself reads no runs, so neither module imports the other's caller.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import throughput_fit  # noqa: E402
from benchmarks.throughput_check import (STATED_MIN_TOKENS, VALIDATION_JSON, measured_cases, validate,  # noqa: E402
                                         write_validation)
from benchmarks.throughput_fit import (KERNEL_SHARES, OVERLAP_POWERS, STEP_TIME_JSON,  # noqa: E402
                                       buckets_across_ranks_runs, features, fit, predict, summary, write_calibration)
from zero_planner.plan.throughput import load_calibration  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=throughput_fit.__doc__.splitlines()[0])
    parser.add_argument("--min-tokens", type=int, default=4096, help="tokens per micro-step at least")
    parser.add_argument("--write", action="store_true", help="store the constants and errors in catalog/step_time.json")
    parser.add_argument("--write-errors", action="store_true",
                        help="store only the errors (validate over today's cases), the committed constants kept: new "
                             "runs checked against the model without refitting it")
    parser.add_argument("--kernels", type=Path, default=None,
                        help="benchmarks/kernel_rates.py's JSON: take the grouped and misaligned GEMMs' shares of the "
                             "matmul rate and its GPU's broadcast rate from it (measured, not fitted)")
    args = parser.parse_args(argv)
    base = load_calibration()
    if args.kernels:
        measured = json.loads(args.kernels.read_text())
        for key in KERNEL_SHARES:
            if measured.get(key):
                base = replace(base, **{key: float(measured[key])})
        broadcast, gpu = measured.get("bias_add_memory_fraction"), measured.get("catalog_gpu")
        if broadcast and gpu == base.reference_gpu:
            base = replace(base, broadcast_memory_fraction=float(broadcast))
        elif broadcast:  # a rate of its own GPU, not the reference's
            own = {**dict(base.gpu_broadcast_fractions), gpu: float(broadcast)}
            base = replace(base, gpu_broadcast_fractions=tuple(sorted(own.items())))
    everything = [features(c, base) for c in measured_cases(args.min_tokens, gpus=None, own_json=True) if c.method == "full"]
    cases = [c for c in everything if c.world_size == 1]
    result = None
    if args.write_errors:
        result = fit(everything, base)
    else:
        for power in OVERLAP_POWERS:  # the smooth maximum's power: the one of least in-sample squared error
            trial = fit(everything, replace(base, host_overlap_power=power))
            squared = sum((predict(c, trial.for_case(c)) / c.measured_s - 1) ** 2 for c in cases)
            print(f"  host_overlap_power {power:>4}: one-GPU in-sample squared relative error {squared:.3f}")
            if result is None or squared < best:
                result, best = trial, squared
    cal = result.calibration
    several = [c for c in everything if c.world_size > 1]
    ref = [c for c in cases if c.gpu == cal.reference_gpu]
    print(f"fitted on {len(ref)} {cal.reference_gpu} cases (>= {args.min_tokens} tokens per micro-step):")
    print(f"  achieved matmul      {cal.matmul_fraction:.2f} of peak   (matmul_fraction)")
    print(f"  achieved attention   {cal.attention_fraction:.3f} of peak  (attention_fraction)")
    print(f"  achieved HBM         {cal.memory_fraction:.3f} of peak  (memory_fraction)")
    print(f"  optimizer            {cal.optimizer_bytes_per_param:.0f} bytes per trainable parameter per step")
    print(f"  optimizer            {cal.seconds_per_grad_tensor * 1e3:.3f} ms host time per gradient tensor, one at a time")
    print(f"  stage 3              {cal.stage3_seconds_per_fetch * 1e3:.2f} ms host time per fetched tensor")
    print(f"  stage 3              {cal.stage3_seconds_per_bucket * 1e3:.2f} ms host time per gradient bucket, any ranks")
    print(f"  stage 3, several GPUs {cal.stage3_seconds_per_gather * 1e3:.2f} ms more per gather across ranks "
          f"({sum(c.strategy == '3' for c in several)} runs)")
    print(f"  stage 3, several GPUs {cal.stage3_seconds_per_reduction * 1e3:.2f} ms more per gradient bucket reduced "
          "across ranks")
    print(f"  stage 3, several GPUs x{1 + cal.stage3_sync_growth_per_doubling:.2f} on both per doubling of the ranks beyond "
          f"two ({sum(c.strategy == '3' and c.world_size > 2 for c in several)} runs of more than two)")
    print(f"  stages 1-2, several GPUs {cal.seconds_per_reduction_across_ranks * 1e3:.2f} ms host time per bucket "
          f"reduced across ranks ({len(buckets_across_ranks_runs(several))} runs)")
    print(f"  stage 2              {cal.stage2_seconds_per_reduction * 1e3:.2f} ms host time per reduced bucket")
    print(f"  host                 {cal.host_seconds_per_layer * 1e3:.2f} ms per decoder layer's forward and backward")
    print(f"  host and GPU         smooth maximum of power {cal.host_overlap_power} (host_overlap_power)")
    for host, rate in result.host_cpu_adam.items():
        print(f"  CPU Adam             {rate:.3g} params/s per node on the {host} host")
    for host, seconds in result.host_stage3.items():
        print(f"  stage 3 on {host:8s} {seconds * 1e3:.2f} ms host time per fetched tensor")
    for host, seconds in result.host_stage2.items():
        print(f"  stage 2 on {host:8s} {seconds * 1e3:.2f} ms host time per reduced bucket")
    for gpu, fraction in result.gpu_memory.items():
        print(f"  achieved HBM on {gpu:8s} {fraction:.3f} of its catalog bandwidth (gpu_memory_fraction)")
    print("\nstep time predicted / measured - 1 with these constants (tokens/s error is about the same, sign flipped):")
    for label, subset in (("stages 0-2", [c for c in ref if c.strategy in ("0", "1", "2")]),
                          ("stage 3", [c for c in ref if c.strategy == "3"]),
                          ("offload", [c for c in cases if "offload" in c.strategy]), ("all", cases),
                          ("several GPUs", several)):  # fmt: skip
        print(f"  {label:12s} {summary([predict(c, result.for_case(c)) / c.measured_s - 1 for c in subset])}")
    if args.write or args.write_errors:
        kept = load_calibration() if args.write_errors else result.with_gpu_memory()
        cases = measured_cases(args.min_tokens, gpus=None, own_json=True)
        error = validate(cases, quiet=True, base=kept)
        write_calibration(kept, error)
        if args.min_tokens == STATED_MIN_TOKENS:  # the committed validation the tests and CI read
            write_validation(error, [c for c in cases if not c.host_shared])
            print(f"wrote {VALIDATION_JSON.relative_to(ROOT)}")
        print(f"\nwrote {STEP_TIME_JSON.relative_to(ROOT)}: out of family median {error['out_of_family_median']:.1%}, "
              f"max {error['out_of_family_max']:.1%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

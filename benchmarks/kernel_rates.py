"""Kernel rates the step-time model rests on, measured on one GPU and its host (run where the suites run).

    python benchmarks/kernel_rates.py --out $OUT/kernels.json      (~1-2 minutes on an H100)

Measures, each against what zero_planner/plan/throughput.py predicts with the committed constants:
  - dense bf16 GEMMs (torch.mm) of transformer shapes: the matmul roofline of throughput.gemms;
  - grouped bf16 GEMMs as transformers' MoE experts run them (torch grouped_mm over E experts of m tokens each,
    forward and forward + backward through autograd), from 8 experts x 2,048 tokens down to 128 x 64: the ratio
    measured/roofline is the grouped GEMM's own rate (Calibration.grouped_gemm_fraction, the median over the
    shapes the roofline calls FLOP-bound), and the memory-bound shapes check the roofline itself;
  - this host's DeepSpeed CPU Adam rate (zero_planner/plan/host_rates.py, the figure zero-plan --gpus auto measures).
Writes one JSON with the GPU, versions, every shape's time and the summary figures; `python
benchmarks/throughput_fit.py --kernels FILE --write` takes grouped_gemm_fraction from it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zero_planner.hardware import find_gpu  # noqa: E402
from zero_planner.plan.throughput import load_calibration, matmul_flops_per_s, memory_bytes_per_s  # noqa: E402

DENSE = [(16384, 2048, 8192), (16384, 8192, 2048), (16384, 2048, 512), (16384, 896, 128), (4096, 4096, 14336),
         (2048, 4096, 4096), (512, 4096, 4096), (16384, 1024, 50257)]  # fmt: skip
"""(tokens, in, out): llama/qwen projections, a GQA k/v projection, a 7B MLP, short micro-batches, GPT-2's head."""
GROUPED = [(8, 2048, 1536, 8192), (8, 14336, 1536, 8192), (32, 2048, 1024, 1024), (32, 512, 1024, 1024),
           (64, 512, 2048, 2816), (128, 256, 2048, 1536), (128, 64, 2048, 1536), (60, 1024, 2048, 2816)]  # fmt: skip
"""(experts, tokens per expert, in, out): Mixtral-like, the suites' MoE shapes (32 experts top-8, Qwen-MoE-like
60 experts), Qwen3-30B-A3B-like 128 experts at 256 and 64 tokens each."""


def _time(fn, repeats: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _grouped_mm(x, w, offs):
    import torch

    op = getattr(torch.nn.functional, "grouped_mm", None) or torch._grouped_mm
    return op(x, w, offs=offs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpu", default=None, help="catalog GPU (default: from the device name)")
    parser.add_argument("--no-cpu-adam", action="store_true")
    args = parser.parse_args(argv)

    import torch

    device_name = torch.cuda.get_device_name(0)
    gpu = find_gpu(args.gpu or device_name.replace("NVIDIA ", "").split()[0])
    cal = load_calibration()
    rate, bandwidth = matmul_flops_per_s(gpu, "bf16"), memory_bytes_per_s(gpu)
    result: dict = {"gpu": device_name, "catalog_gpu": gpu.name, "torch": torch.__version__,
                    "date": dt.date.today().isoformat(), "dense": [], "grouped": []}  # fmt: skip
    print(f"{device_name}: roofline {rate / 1e12:.0f} TFLOP/s, {bandwidth / 1e12:.2f} TB/s (committed constants)")
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    for m, k, n in DENSE:
        a, b = torch.randn(m, k, **bf16), torch.randn(k, n, **bf16)
        seconds = _time(lambda: a @ b)
        flops, size = 2 * m * k * n, 2 * (m * k + k * n + m * n)
        roofline = max(flops / rate, size / bandwidth)
        result["dense"].append({"m": m, "k": k, "n": n, "seconds": seconds, "roofline_s": roofline})
        print(f"  dense   m {m:6d} k {k:6d} n {n:6d}: {flops / seconds / 1e12:6.0f} TFLOP/s, roofline/measured {roofline / seconds:.2f}")
        del a, b
    fractions = []
    for experts, rows, k, n in GROUPED:
        x = torch.randn(experts * rows, k, **bf16, requires_grad=True)
        w = torch.randn(experts, k, n, **bf16, requires_grad=True)
        offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * rows
        forward = _time(lambda: _grouped_mm(x, w, offs))
        grad = torch.randn(experts * rows, n, **bf16)
        both = _time(lambda: torch.autograd.grad(_grouped_mm(x, w, offs), (x, w), grad))
        flops = 2 * experts * rows * k * n
        size = 2 * (experts * rows * k + experts * k * n + experts * rows * n)
        bound = "flops" if flops / rate >= size / bandwidth else "bytes"
        roofline = max(flops / rate, size / bandwidth)
        entry = {"experts": experts, "rows": rows, "k": k, "n": n, "forward_s": forward, "forward_backward_s": both,
                 "roofline_forward_s": roofline, "bound": bound}  # fmt: skip
        result["grouped"].append(entry)
        if bound == "flops":
            fractions.append(roofline / forward)
        print(f"  grouped E {experts:3d} x m {rows:5d} k {k:5d} n {n:5d}: fwd {flops / forward / 1e12:5.0f} TFLOP/s, "
              f"fwd+bwd {3 * flops / both / 1e12:5.0f}, roofline/measured {roofline / forward:.2f} ({bound})")  # fmt: skip
        del x, w, grad
    if fractions:
        result["grouped_gemm_fraction"] = round(statistics.median(fractions), 3)
        print(f"grouped GEMM rate / dense roofline (FLOP-bound shapes): median {result['grouped_gemm_fraction']:.3f}"
              f" (committed: {cal.grouped_gemm_fraction})")  # fmt: skip
    if not args.no_cpu_adam:
        from dataclasses import asdict

        from zero_planner.plan.host_rates import measure_in_child

        rate_host = measure_in_child()
        result["cpu_adam"] = asdict(rate_host) if rate_host else None
        if rate_host:
            print(f"CPU Adam: {rate_host.cpu_adam_params_per_s:.3g} parameters/s ({rate_host.cpu_model}, "
                  f"{rate_host.cores} cores)")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Kernel rates the step-time model rests on, measured on one GPU and its host (run where the suites run).

    python benchmarks/kernel_rates.py --out $OUT/kernels.json      (~1-2 minutes on an H100)

Measures, each against what zero_planner/plan/throughput.py predicts with the committed constants:
  - dense bf16 GEMMs (torch.mm) of transformer shapes: the matmul roofline of throughput.gemms;
  - grouped bf16 GEMMs as transformers' MoE experts run them (torch grouped_mm over E experts of m tokens each,
    forward and forward + backward through autograd), from 8 experts x 2,048 tokens down to 128 x 64: the ratio
    measured/roofline is the grouped GEMM's own rate (Calibration.grouped_gemm_fraction, the median over the
    shapes the roofline calls FLOP-bound), and the memory-bound shapes check the roofline itself;
  - misaligned bf16 GEMMs: a dimension that is not a multiple of 8 elements (GPT-2's 50,257-token head), in the
    three products a linear layer runs (forward X W^T, input gradient dY W, weight gradient dY^T X), beside the
    same shape rounded up to a multiple of 8: the ratio roofline/measured, median over the products of the shapes
    with an odd dimension (misaligned_gemm_fraction) and over those whose dimensions are even but not all multiples
    of 8 (Calibration.misaligned_gemm_fraction and even_misaligned_gemm_fraction; benchmarks/kernel_classes.py);
  - ZeRO-3's linear (deepspeed/runtime/zero/linear.py LinearFunctionForZeroStage3): a 3-D input's bias is added in
    a separate `output += bias` where F.linear fuses it into the GEMM; the extra time against F.linear and the
    bandwidth that implies for the add's 4 bytes per output element, median over the shapes as a share of the
    catalog bandwidth (bias_add_memory_fraction: the broadcasting kernels' rate on this GPU,
    Calibration.broadcast_fraction_for; kernel_classes.py);
  - elementwise kernels by class on 16,384 x 4,096 bf16 tensors (vectorized, broadcasting a row or a column, strided,
    a reduction, a cat, a transpose copy): the rate each moves its bytes at (kernel_classes.py);
  - this host's DeepSpeed CPU Adam rate (zero_planner/plan/host_rates.py, the figure zero-plan --gpus auto measures).
Writes one JSON with the GPU, versions, every shape's time and the summary figures; `python
benchmarks/throughput_fit.py --kernels FILE --write` takes the GEMMs' shares and the broadcast rate from it.
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
MISALIGNED = [(16384, 1024, 50257), (37888, 1280, 50257), (8192, 1600, 50257), (16384, 1024, 50258),
              (16384, 1024, 50260), (16384, 1024, 50264), (16384, 1023, 4096)]  # fmt: skip
"""(tokens, in, out): GPT-2 medium, large and XL's tied head (50,257, odd), the same head padded to 50,258 and 50,260
(even, not a multiple of 8) and to 50,264 (aligned, the control), and an odd input width."""
BIASED = [(13, 2048, 2048, 6144), (13, 2048, 8192, 2048), (4, 4096, 3584, 4608), (13, 2048, 6144, 2048),
          (13, 2048, 2048, 8192)]  # fmt: skip
"""(batch, seq, in, out) of a biased linear on a 3-D input: Pythia-1.4B's fused qkv and its MLP down projection at
the 13 x 2,048 its sweep ran, Qwen2.5-7B's q, k and v (one stacked shape) at 4 x 4,096, and two more widths."""


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
    result["misaligned"], odd, even = [], [], []
    for m, k, n in MISALIGNED:
        x, w, g = torch.randn(m, k, **bf16), torch.randn(n, k, **bf16), torch.randn(m, n, **bf16)
        products = {"forward": lambda: x @ w.t(), "input_grad": lambda: g @ w, "weight_grad": lambda: g.t() @ x}
        flops, size = 2 * m * k * n, 2 * (m * k + k * n + m * n)
        roofline = max(flops / rate, size / bandwidth)
        entry = {"m": m, "k": k, "n": n, "roofline_s": roofline, "aligned": not (m % 8 or k % 8 or n % 8)}
        for name, product in products.items():
            entry[f"{name}_s"] = _time(product, repeats=10)
            if not entry["aligned"]:
                (odd if m % 2 or k % 2 or n % 2 else even).append(roofline / entry[f"{name}_s"])
        result["misaligned"].append(entry)
        print(f"  linear  m {m:6d} k {k:5d} n {n:6d}: " + ", ".join(
            f"{name} {flops / entry[name + '_s'] / 1e12:4.0f} TFLOP/s ({roofline / entry[name + '_s']:.2f} of roofline)"
            for name in products))  # fmt: skip
        del x, w, g
    for key, ratios, label in (("misaligned_gemm_fraction", odd, "an odd dimension"),
                               ("even_misaligned_gemm_fraction", even, "even dimensions, not all multiples of 8")):
        if ratios:
            result[key] = round(statistics.median(ratios), 3)
            print(f"GEMM rate / dense roofline with {label}: median {result[key]:.3f} over {len(ratios)} products")
    result["elementwise"] = []
    rows, width = 16384, 4096  # 128 MiB of bf16 per operand: clear of the caches
    x, y = torch.randn(rows, width, **bf16), torch.randn(rows, width, **bf16)
    column, row = torch.randn(rows, 1, **bf16), torch.randn(width, **bf16)
    wide = torch.randn(rows, 2 * width, **bf16)
    element = rows * width
    classes = {  # name: (kernel, bytes it must move)
        "add, same shapes (vectorized)": (lambda: x + y, 6 * element),
        "multiply by a scalar (vectorized)": (lambda: x * 0.5, 4 * element),
        "tanh (vectorized)": (lambda: torch.tanh(x), 4 * element),
        "to fp32 (vectorized)": (lambda: x.float(), 6 * element),
        "multiply by a row vector (broadcast: a weight)": (lambda: x * row, 4 * element),
        "multiply by a column vector (broadcast: a norm's variance)": (lambda: x * column, 4 * element),
        "add a bias in place (broadcast)": (lambda: x.add_(row), 4 * element),
        "negate a strided half (rotate_half's slice)": (lambda: -wide[:, width:], 4 * element),
        "mean over the last dimension (reduction)": (lambda: x.mean(-1, keepdim=True), 2 * element),
        "cat of two halves": (lambda: torch.cat((x, y), dim=-1), 8 * element),
        "transpose copy (contiguous)": (lambda: x.view(rows, 32, 128).transpose(0, 1).contiguous(), 4 * element),
    }
    for name, (kernel, size) in classes.items():
        seconds = _time(kernel)
        result["elementwise"].append({"kernel": name, "bytes": size, "seconds": seconds})
        print(f"  memory  {name:58s} {size / seconds / 1e12:5.2f} TB/s ({size / seconds / gpu.memory_bandwidth_bytes_per_s:.2f} of the catalog)")
    del x, y, column, row, wide
    result["biased"] = []
    for batch, seq, k, n in BIASED:
        x, w, bias = torch.randn(batch, seq, k, **bf16), torch.randn(n, k, **bf16), torch.randn(n, **bf16)

        def zero3_linear():
            out = x.matmul(w.t())
            out += bias
            return out

        fused = _time(lambda: torch.nn.functional.linear(x, w, bias))
        separate = _time(zero3_linear)
        add = batch * seq * n * 4  # read and write the output once more
        entry = {"batch": batch, "seq": seq, "k": k, "n": n, "fused_s": fused, "separate_s": separate,
                 "add_bytes": add, "add_bytes_per_s": add / max(separate - fused, 1e-9)}  # fmt: skip
        result["biased"].append(entry)
        print(f"  bias    {batch} x {seq} x {k} -> {n}: F.linear {fused * 1e3:.3f} ms, matmul + add {separate * 1e3:.3f} ms: "
              f"{add / 1e9:.2f} GB at {entry['add_bytes_per_s'] / 1e12:.2f} TB/s")  # fmt: skip
        del x, w, bias
    result["bias_add_memory_fraction"] = round(statistics.median(
        e["add_bytes_per_s"] for e in result["biased"]) / gpu.memory_bandwidth_bytes_per_s, 3)
    print(f"ZeRO-3's bias add over F.linear: median {result['bias_add_memory_fraction']:.3f} of the catalog bandwidth")
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

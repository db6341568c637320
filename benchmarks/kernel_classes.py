"""Kernel classes the step-time model lumps together, read from the committed profiles and kernel rates (no GPU).

    python benchmarks/kernel_classes.py        (a few seconds)

The model (zero_planner/plan/throughput.py) charges every memory-bound byte at one fitted HBM rate and every GEMM
FLOP at one matmul rate (routed experts apart). The kernels run three classes at rates of their own:
  - broadcasting elementwise kernels: an operand of stride 0 (RMSNorm's variance and weight, rotary's cos and sin,
    a bias) keeps TensorIterator off its vectorized kernels, and the generic `elementwise_kernel<128, 4,
    gpu_kernel_impl_nocast<...>>` runs at about 1.4-1.5 TB/s on both the H100 and the H200 (132 SMs each: bound by
    its issue rate, not the memory's), where GPT-2's vectorized GELU kernels ran at 3.9-4.4 TB/s on the H200;
  - GEMMs with a dimension that is not a multiple of 8 (GPT-2's 50,257-token head): cuBLAS runs CUTLASS's
    Turing-era align1 kernels at 0.12-0.19 of the dense roofline;
  - ZeRO-3's linear adds a 3-D input's bias apart (`output += bias`, a broadcast), where F.linear fuses it.
For each, this prints the committed measurements beside what the model counts (throughput.broadcast_traffic_bytes,
the misaligned GEMMs of throughput.gemms, throughput.zero3_bias_bytes): the generic kernels' time in every profiled
step, the align1 kernels' time against the head's FLOPs, Pythia's ZeRO-3 step against its ZeRO-0 step. The model
runs each class at its measured rate (Calibration.broadcast_memory_fraction and gpu_broadcast_fractions,
misaligned_gemm_fraction, even_misaligned_gemm_fraction; docs/speed.md "Kernel classes").
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cases import model_config  # noqa: E402
from zero_planner.hardware import find_gpu  # noqa: E402
from zero_planner.models.spec import ModelSpec, spec_from_config  # noqa: E402
from zero_planner.plan import throughput  # noqa: E402
from zero_planner.plan.memory import Workload  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def misaligned_head_flops(spec: ModelSpec, workload: Workload) -> float:
    """Returns the FLOPs of the output head's three products (forward, input and weight gradients) where a dimension
    is odd (throughput.gemm_alignment: GPT-2's 50,257-token vocabulary), else 0."""
    tokens = workload.micro_batch_size * workload.seq_len
    if throughput.gemm_alignment(2, tokens, spec.hidden_size, spec.vocab_size) != 1:
        return 0.0
    return 3 * 2.0 * tokens * spec.hidden_size * spec.vocab_size


def generic_elementwise_seconds(top_kernels: dict) -> float:
    """Returns the seconds of a profile's generic (non-vectorized) elementwise kernels."""
    return sum(v for k, v in top_kernels.items() if "elementwise_kernel<128" in k and "gpu_kernel_impl_nocast" in k)


def align1_gemm_seconds(top_kernels: dict) -> float:
    """Returns the seconds of a profile's CUTLASS align1 GEMM kernels."""
    return sum(v for k, v in top_kernels.items() if "gemm" in k and "align1" in k)


def profiled_steps() -> list[dict]:
    """Returns every committed step profile with its kernels: (source, GPU, spec, workload, strategy, top_kernels,
    kernel_s), from recompute_profile.py's files and the one-wait profile suites (i26-kinds-*)."""
    steps = []
    for path in sorted(RESULTS.glob("recompute-*.json")):
        data = json.loads(path.read_text())
        for row in data["rows"]:
            measured = row["measured"]
            spec = spec_from_config(model_config(row["model"]), row["model"])
            workload = Workload(micro_batch_size=row["micro_batch_size"], seq_len=row["seq_len"],
                                gradient_checkpointing=row["gradient_checkpointing"], precision="bf16")  # fmt: skip
            steps.append({"source": path.name, "gpu": data["gpu"].replace("NVIDIA ", "").split()[0], "spec": spec,
                          "workload": workload, "strategy": "0", "top_kernels": measured.get("top_kernels") or {},
                          "kernel_s": measured.get("kernel_s") or {}})  # fmt: skip
    for path in sorted(RESULTS.glob("*-i26-kinds*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            profile = row["ranks"][0].get("profile") if row.get("status") == "ok" else None
            if not profile:
                continue
            case = row["case"]
            spec = spec_from_config(case["model_config"], case["model"])
            workload = Workload(micro_batch_size=case["micro_batch_size"], seq_len=case["seq_len"],
                                gradient_checkpointing=case["gradient_checkpointing"], precision=case["precision"])  # fmt: skip
            steps.append({"source": path.name, "gpu": row["provenance"]["gpu"].replace("NVIDIA ", "").split()[0],
                          "spec": spec, "workload": workload, "strategy": case["strategy"],
                          "top_kernels": profile["top_kernels"], "kernel_s": profile["kernel_s"]})  # fmt: skip
    return steps


def _label(step: dict) -> str:
    w = step["workload"]
    return (f"{step['spec'].name:18s} ZeRO-{step['strategy']} {w.micro_batch_size:2d} x {w.seq_len}"
            f"{' gc' if w.gradient_checkpointing else '   '} {step['gpu']:8s} {step['source'][:34]}")


def broadcast_rates(steps: list[dict]) -> list[tuple[dict, float, float]]:
    """Returns (step, generic kernels' seconds, broadcast bytes) for the ZeRO-0 steps that broadcast (ZeRO-3's bias
    adds are broadcasts too)."""
    rows = []
    for step in steps:
        size = throughput.broadcast_traffic_bytes(step["spec"], step["workload"])
        if size and step["strategy"] == "0":
            rows.append((step, generic_elementwise_seconds(step["top_kernels"]), size))
    return rows


def main() -> int:
    steps = profiled_steps()
    print("broadcasting kernels: each ZeRO-0 profile's generic elementwise kernels against throughput.broadcast_traffic_bytes")
    by_gpu: dict[str, list[float]] = {}
    for step, seconds, size in broadcast_rates(steps):
        rate = size / seconds / 1e12 if seconds else 0.0
        masked = throughput.attention_mask_bytes(step["spec"], step["workload"]) > 0
        note = "  (and an explicit attention mask: its conversion is generic too)" if masked else ""
        if not masked:
            by_gpu.setdefault(step["gpu"], []).append(rate)
        print(f"  {_label(step)} {seconds * 1e3:7.1f} ms {size / 1e9:7.1f} GB  {rate:5.2f} TB/s{note}")
    for gpu, rates in sorted(by_gpu.items()):
        bandwidth = find_gpu(gpu).memory_bandwidth_bytes_per_s
        print(f"  {gpu}: median {statistics.median(rates):.2f} TB/s over {len(rates)} steps without a mask, "
              f"{statistics.median(rates) * 1e12 / bandwidth:.2f} of the catalog's {bandwidth / 1e12:.2f} TB/s")
    print("\nmisaligned GEMMs: each profile's align1 kernels against the output head's FLOPs (vocabulary not a multiple of 8)")
    for step in steps:
        flops = misaligned_head_flops(step["spec"], step["workload"])
        seconds = align1_gemm_seconds(step["top_kernels"])
        if flops and seconds:
            peak = find_gpu(step["gpu"]).peak_dense_tflops_16bit * 1e12
            print(f"  {_label(step)} {seconds * 1e3:7.1f} ms {flops / 1e12:6.2f} TFLOP  {flops / seconds / peak:.3f} of the dense peak")
    for path in sorted(RESULTS.glob("kernels-*.json")):
        data = json.loads(path.read_text())
        if "misaligned_gemm_fraction" in data:
            print(f"  {path.name}: roofline/measured {data['misaligned_gemm_fraction']} with an odd dimension, "
                  f"{data.get('even_misaligned_gemm_fraction')} with even ones not multiples of 8 (kernel_rates.py)")
    print("\nZeRO-3's bias adds: Pythia-1.4B's profiled ZeRO-3 step against its ZeRO-0 step")
    zero = {(s["spec"].name, s["workload"]): s for s in steps if s["strategy"] == "0"}
    for step in steps:
        twin = zero.get((step["spec"].name, step["workload"]))
        if step["strategy"] != "3" or twin is None:
            continue
        extra = step["kernel_s"].get("other", 0.0) - twin["kernel_s"].get("other", 0.0)
        size = throughput.zero3_bias_bytes(step["spec"], step["workload"])
        print(f"  {_label(step)} elementwise +{extra * 1e3:.1f} ms, {size / 1e9:.1f} GB of bias adds: {size / extra / 1e12:.2f} TB/s")
    for path in sorted(RESULTS.glob("kernels-*.json")):
        data = json.loads(path.read_text())
        if "biased" in data:
            rates = ", ".join(f"{e['add_bytes_per_s'] / 1e12:.2f}" for e in data["biased"])
            print(f"  {path.name}: matmul + add over F.linear, {rates} TB/s (kernel_rates.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

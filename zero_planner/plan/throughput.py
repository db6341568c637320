"""The step-time model: seconds per optimizer step and tokens/s, used to rank candidates that fit.

Calibrated on measured single-GPU steps (benchmarks/results/*.jsonl; the fit is benchmarks/throughput_fit.py,
the comparison and its leave-one-family-out validation benchmarks/throughput_check.py). One micro-step on one
GPU is

    gpu_s   = sum over GEMM shapes of max(FLOPs / achieved matmul rate, operand bytes / achieved HBM rate)
            + attention FLOPs / achieved attention rate
            + bytes of the memory-bound kernels / achieved HBM rate
    host_s  = layer passes * host_seconds_per_layer   (the host's Python and kernel launches of each decoder
                                                       layer's forward and backward: a checkpointed layer runs
                                                       its forward twice)
            + reductions * stage2_seconds_per_reduction  (stage 2: overlap_comm synchronizes the device once per
                                                       gradient bucket it reduces, so the host cannot run ahead)
            + reductions * seconds_per_reduction_across_ranks  (stages 1-2 on several GPUs: each bucket's
                                                       all-reduce on the host's thread; stage 1 once per
                                                       optimizer step)
    micro_s = smax(gpu_s, host_s)                     (stages 0-2: the GPU waits for the host where its work is
                                                       shorter, small micro-batches of small models, and on
                                                       runs of short kernels where the two are close: smax is
                                                       overlapped_seconds, (a^p + b^p)^(1/p) at
                                                       Calibration.host_overlap_power)
            = smax(gpu_s, host_s + stage3_host_seconds)      (stage 3: the hooks' work per fetch request and per
                                                       gradient bucket (stage3_seconds_per_bucket) runs on the
                                                       host's one Python thread with the layers' launches, and the
                                                       GPU hides both where its work is longer; on several GPUs
                                                       plus each gather's: stage3_gathers x stage3_seconds_per_gather,
                                                       and each gradient bucket's reduction: stage2_reductions x
                                                       stage3_seconds_per_reduction, both growing per doubling
                                                       of the ranks beyond two)

and one optimizer step is accum * micro_s + the optimizer step on the GPU (or CPU Adam with offload) + ZeRO
collectives between GPUs + PCIe traffic for offload, with no overlap assumed between those. The counts come
from the kernels the Hugging Face model runs: each GEMM's FLOPs and the bytes of its two inputs and output
(gemms: the roofline makes narrow matrices and small experts run below the matmul rate), elementwise kernels
(norms, rotary, activations, residual adds, the loss), a mixture of experts' routing and token permutation
(router softmax and top-k, the sort, gathers and scatter-adds, the sentinel masks, fp32 rows where the router's
weights are fp32: counted op by op from a trace, benchmarks/moe_ops.py), sliding-window mask biases and, under eager
attention, the materialized scores (eager_attention_bytes, at their own measured rate). The achieved
rates are fractions of the GPU's catalog peaks, measured on one GPU (Calibration, catalog/step_time.json);
the host's CPU Adam rate is the catalog's unless measured on the machine (host_rates.py, `--gpus
auto`). Pure: numbers in, numbers out; no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from importlib import resources

from zero_planner.hardware import GPU
from zero_planner.models.spec import ModelSpec
from zero_planner.plan.dsconfig import STAGE3_MAX_REUSE_DISTANCE, bucket_sizes
from zero_planner.plan.memory import (Workload, ZeroBuffers, adapted_linears, sdpa_masked_layers, sdpa_math_kernel,
                                      trainable_params, weight_bytes)
from zero_planner.strategies import Strategy


@dataclass(frozen=True)
class Calibration:
    """The step-time model's measured constants: catalog/step_time.json, written by `python
    benchmarks/throughput_fit.py --write` from the committed runs on `reference_gpu` (each field says what it
    describes). Rates are fractions of a GPU's catalog peaks, so one measured GPU lends them to the others."""

    reference_gpu: str
    """The catalog GPU whose runs were fitted (H100-SXM)."""
    measured_on: str
    """GPU, host, software versions and dates of the fitted runs."""
    matmul_fraction: float
    """FITTED: achieved / dense 16-bit peak of the weight matmuls (FLOPs alone; their operands' bytes are
    counted at the HBM rate). Searched up to MAX_MATMUL_FRACTION."""
    attention_fraction: float
    """FITTED: the rate SDPA's kernels get through attention_flops, as a fraction of the 16-bit peak (causal
    mask not discounted, the flash backward's recomputation not counted: both are in the fraction)."""
    memory_fraction: float
    """FITTED: achieved / catalog device-memory bandwidth of the memory-bound kernels and GEMM operands."""
    optimizer_bytes_per_param: float
    """FITTED: device-memory bytes per trainable parameter that one GPU optimizer step costs at the achieved HBM
    rate (DeepSpeed's fused Adam with fp32 master weights, gradient-norm clipping, the bf16 copy back, gradient
    zeroing). The kernels' own traffic is ~62 B (fp32 grad accumulate 10, norm 4, clip 8, Adam 28, bf16 copy
    6, zero 4); the fit finds more (per-tensor launches and Python in the step)."""
    stage3_seconds_per_fetch: float
    """FITTED: host seconds per ZeRO-3 parameter fetch (one gathered tensor, forward or backward): the
    pre/post-forward/backward module hooks, the partitioned-parameter coordinator's trace and prefetch
    bookkeeping, `__allgather_params` (a copy even on one GPU) and the release, and the gradient's
    reduce-scatter into its partition (deepspeed/runtime/zero/partitioned_param_coordinator.py, stage3.py,
    parameter_offload.py). It adds to the layers' own host time (host_seconds_per_layer: one Python thread runs
    both), and the GPU runs ahead of the host, so it only costs time where the two are longer than the
    micro-step's GPU work (small micro-batches). Host Python: it differs between machines."""
    stage2_seconds_per_reduction: float
    """FITTED: host seconds per gradient bucket ZeRO-2 reduces in backward (stage2_reductions). With overlap_comm
    (our stage-2 JSON) every reduction starts with a device-wide synchronize (stage_1_and_2.py
    allreduce_and_copy: `get_accelerator().synchronize()`), so the host cannot run ahead of the GPU across a
    bucket: its Python per bucket (average_tensor's per-parameter bookkeeping, flatten, reduce, unflatten and
    the copies back, copy_grads_in_partition) and the relaunch of the backward after it add to the host's
    micro-step, which the GPU's work hides at large micro-batches. Host Python: it differs between machines."""
    cpu_adam_params_per_s_per_node: float
    """FITTED on the reference host, or MEASURED on this machine (cpu_adam_source): parameters per second that
    DeepSpeed's CPUAdam updates with all cores of one node, including the fp32 gradient copy to host and the
    bf16 parameter copy back. A property of the host's CPU and memory, not of the GPU."""
    stage3_offload_copy_bytes_per_s: float
    """MEASURED: bytes per second at which ZeRO-3 with the optimizer offloaded and parameters on the GPU brings
    the updated parameters up: each sub-group's fp32 master is converted into a fresh, unpinned 16-bit host
    buffer and copied to the GPU from pageable memory (stage3.py _optimizer_step), where ZeRO-2 offload copies
    from a pinned staging buffer. Llama-3.2-3B on the H200 (16 host cores, alone, 2026-11-23): 3-offload minus
    2-offload at equal shapes, +1.10 s (mb 12) and +1.58 s (mb 38, gc) per step for 6.4 GB, 4.1-5.8 GB/s."""
    stage3_seconds_per_gather: float = 0.0
    """FITTED on runs of several GPUs: the host seconds of one ZeRO-3 gather (stage3_gathers) where the parameter's
    partition spans several ranks. On one rank DeepSpeed hands the parameter over as it is (partition_parameters.py
    all_gather_coalesced returns _no_gather_coalesced); on several it allocates the gathered buffer, launches
    the all-gather on its own stream and, waiting on the handle, splits the buffer into the parameters (the
    backward's gradient buckets are stage3_seconds_per_reduction's). Host Python and launches, like the per-fetch
    time. Fitted with the buckets' time and its growth (2026-11-27) it is 0: the step times do not separate
    gathers from buckets, and the runs at DeepSpeed's 5e8 buckets (all the gathers, a few buckets; not fitted)
    are predicted closest without it."""
    stage3_seconds_per_reduction: float = 0.0
    """FITTED on runs of several GPUs, with stage3_seconds_per_gather: the host seconds one gradient bucket ZeRO-3
    reduces across the ranks in backward costs beyond its one-rank time (stage3_seconds_per_bucket; the buckets are
    stage2_reductions: stage3.py reduce_independent_p_g_buckets_and_remove_grads buckets the gradients by the same
    rule as ZeRO-2).
    `__reduce_and_partition_ipg_grads` flattens the bucket, launches the reduce-scatter and copies each rank's
    share into its gradient partition, per bucket, on the hooks' thread. A model's reductions and gathers are
    not proportional: GPT-2 medium gathers 98 tensors (the forward's; with 1e9 reuse distance the backward finds
    them) but reduces 195 buckets of hidden^2 elements, Qwen3-1.7B gathers 370 and reduces 225. Measured on two
    H100s (2026-11-26 runs, each against the same case on one GPU of the same machine): the backward grew by
    about 0.5 ms per bucket in every family, where its gathers could not explain it."""
    stage3_seconds_per_bucket: float = 0.0
    """FITTED on one GPU (runs of one case at two reduce bucket sizes on one machine): the host seconds of each gradient
    bucket ZeRO-3 closes in backward (stage2_reductions, the reduce bucket size of our JSON or the user's), on any number
    of ranks. On one rank too, stage3.py `__reduce_and_partition_ipg_grads` switches to the reduce stream, runs
    `__avg_scatter_contiguous_grads` on the bucket (a reduce-scatter of one rank: the division and a copy), copies each
    parameter's share into its gradient partition (partition_grads) and records an event, per bucket, on the hooks'
    thread. Under our JSON's hidden^2 buckets a model closes about one bucket per two fetched tensors, so the one-GPU
    runs of ours alone cannot tell it from stage3_seconds_per_fetch: the runs at DeepSpeed's 5e8 (a handful) and 1e5
    (one per tensor above it) do. One H200 (2026-11-29, i26-z3-buckets-h200, twice): 0.14-0.90 ms a bucket, median
    0.51, where the model charged none and had a minimal user JSON's steps 8-31% slow; seven more families
    (2026-12-02, i26-z3-user-h200, two machines): 0.41-0.81 ms on one, 0.59-1.52 on the other, whose host-bound steps
    ran a median 37% longer. Fitted over every host-bound one-GPU ZeRO-3 run with the hosts' per-fetch times: 0.19 ms
    (throughput_fit.fit_stage3_hooks). Several ranks add stage3_seconds_per_reduction to each."""
    stage3_sync_growth_per_doubling: float = 0.0
    """FITTED on runs of several GPUs, with the two above: how much more each ZeRO-3 gather and gradient bucket
    across ranks costs the host per doubling of the ranks beyond two (their seconds times 1 + this x
    log2(world / 2)). Each rank's hooks wait at every collective for the slowest rank's. Two four-H100 machines
    ran the same host-bound ZeRO-3 cases on 2 and on 4 of their GPUs (2026-11-27): 17 of 20 took longer on four
    (median +11%: +22% on one machine, +7% on the other; up to +58%), where the model's GPU and communication
    terms shrink. Eight GPUs and several nodes are not measured: the logarithm is the assumption there."""
    seconds_per_reduction_across_ranks: float = 0.0
    """FITTED on runs of several GPUs (stages 1-2; the one-GPU constants fixed): the host seconds of one gradient
    bucket ZeRO-1 or ZeRO-2 reduces across the ranks (stage2_reductions), beside the GPU's work like the layers'
    launches. Every rank walks every gradient into its buckets (stage_1_and_2.py reduce_gradients at stage 1, the
    backward hooks at stage 2: reduce_independent_p_g_buckets_and_remove_grads for each parameter), and on several
    ranks each bucket is all-reduced (allreduce_and_copy / average_tensor: flatten, NCCL call, copy back), each rank
    waiting at the collective for the slowest. Stage 1 reduces at the accumulation boundary only, stage 2 in every
    micro-step. Without it the model had GPT-2 medium's ZeRO-1 at 4 x 1,024 about 30% faster on two and four H100s
    than on one, where it measured as slow (0.128-0.179 s a step against 0.124-0.168; 195 buckets). Fitted on the 83
    committed stage 1-2 runs of several GPUs without offload (2026-11-29): 0.33 ms a bucket (ZeRO-3's
    stage3_seconds_per_reduction: 0.60); their largest error 44% -> 27%, median 5.8% -> 3.1%. On one GPU DeepSpeed
    walks the same buckets without a collective: that time is in the one-GPU constants."""
    seconds_per_grad_tensor: float = 0.0
    """FITTED with optimizer_bytes_per_param (stages 0-2, one GPU): the host seconds DeepSpeed spends on each gradient
    tensor, one tensor at a time, while the GPU waits (grad_tensor_passes). Stages 0-2 check every gradient of the
    rank's partition for inf and NaN in the optimizer step (stage_1_and_2.py has_overflow_partitioned_grads_serial;
    ZeRO-0 has_overflow_serial: amax, amin, isfinite twice, logical_and, logical_not, add, seven launches a tensor
    whose GPU work is a few microseconds) and take each one's norm; ZeRO-3 checks its flat partition once but moves
    every gradient into its bucket and partition in backward (stage3.py __add_grad_to_ipg_bucket, partition_grads);
    offloading walks them to copy each to the host.
    Profiled on one H200 (2026-11-28, benchmarks/idle_profile.py: torch.profiler with the CPU's ops, each gap in the
    GPU's work charged to the host code that launched the kernel after it): at stages 0-2 the GPU idled most in the
    optimizer step, in proportion to the tensors (Llama 3.2 1B 146, Gemma 2 2B 288, Qwen2.5-1.5B 338),
    has_inf_or_nan the frame charged most; at ZeRO-3 in backward's per-gradient hooks. The per-layer and per-fetch
    host times do not see it: it comes after the layers' launches, with nothing queued on the GPU to hide it."""
    grouped_gemm_fraction: float = 1.0
    """MEASURED (benchmarks/kernel_rates.py on the reference GPU): a routed expert's grouped GEMM (torch's
    grouped_mm, CUTLASS) over the dense GEMM's rate at the same per-expert shape, where both are bound by
    FLOPs. 1.0 where not measured: grouped GEMMs at the dense rate, their size penalty from the roofline alone."""
    misaligned_gemm_fraction: float = 1.0
    """MEASURED (benchmarks/kernel_rates.py): a GEMM with a dimension that is not a multiple of 16 bytes' worth of
    elements (8 at 16 bits: GPT-2's 50,257-token head) over the dense roofline of its shape. cuBLAS cannot take its
    Hopper kernels for such operands and runs CUTLASS's Turing-era align1 kernels (cutlass_75_tensorop_bf16_s1688gemm
    ..._align1). On one H200 (torch 2.11, 2026-11-29, kernels-h200-2026-11-29.json; GPT-2's head at 8,192-37,888
    tokens and an odd input width): 0.12-0.13 of the roofline forward, 0.15-0.19 for the two gradients, median 0.163
    (0.156 and 0.165 in two earlier calls); the same head padded to 50,264 ran at 0.89-1.00. 1.0 where not measured:
    the dense rate. Measured with 16-bit operands only (fp32 GEMMs run at the fp32 peak, and their alignment is not
    modelled)."""
    broadcast_memory_fraction: float = 0.0
    """MEASURED on the reference GPU: the rate of elementwise kernels that broadcast an operand, as a fraction of the
    catalog device-memory bandwidth (gpu_broadcast_fractions for GPUs measured apart). A stride-0 operand keeps
    TensorIterator off its vectorized kernels: they run in the generic `elementwise_kernel<128, 4,
    gpu_kernel_impl_nocast<...>>`, at about the same 1.4-1.5 TB/s on the H100 and the H200 (132 SMs each; the
    kernel is bound by its issue rate, not the memory's). On the H100 from its step profiles (recompute-h100-*,
    2026-11-27: the generic kernels' time against broadcast_traffic_bytes, Llama 3.2 1B, Qwen3-1.7B and Gemma 2 2B
    at 2-5 x 2,048, plain and checkpointed): 1.39-1.67 TB/s, median 1.44, 0.43 of 3.35. 0 where not measured: the
    fitted HBM rate."""
    gpu_broadcast_fractions: tuple[tuple[str, float], ...] = ()
    """MEASURED: (catalog GPU name, broadcast_memory_fraction of that GPU). The H200 (benchmarks/kernel_rates.py on
    ZeRO-3's separate bias add, zero3_bias_bytes: `output += bias` over a 3-D output, its time over F.linear's fused
    bias; 2026-11-29, three calls of three to five shapes): 1.13-1.72 TB/s, median 0.30 of 4.8 in each call. Its step
    profiles agree: the generic kernels took 129.5 ms a step for Qwen3-4B at 5 x 2,048 and 95.8 for Llama 3.2 3B at
    8 x 2,048 (i26-kinds-h200), 1.40 and 1.53 TB/s of those bytes, where GPT-2 large's vectorized GELU kernels (pow,
    tanh, tanh_backward) ran at 3.9-4.4 TB/s."""
    even_misaligned_gemm_fraction: float = 1.0
    """MEASURED (benchmarks/kernel_rates.py), as misaligned_gemm_fraction for a GEMM whose dimensions are even but not
    all multiples of 8 (16-bit): wider loads than align1, still not the Hopper kernels. GPT-2's head padded to 50,258
    and 50,260 on one H200 (2026-11-29): 0.32-0.36 of the roofline in all three products, median 0.339. 1.0 where
    not measured."""
    masked_attention_fraction: float = 0.0
    """MEASURED (benchmarks/recompute_profile.py): the rate SDPA's kernels get through attention_flops of a layer
    that attends through an explicit mask (memory.sdpa_masked_layers: a sliding window the sequence reaches), as a
    fraction of the 16-bit peak. Transformers then hands SDPA a boolean mask instead of is_causal, and the kernel
    cannot skip the causal half. Phi-3-mini at 4 x 2,048 on one H200 (head dim 96, window 2,047; cuDNN's flash
    kernels with the mask, 2026-11-27): 0.194 of the peak plain, 0.205 checkpointed, where the unmasked kernels
    of three other models ran at 0.53-0.80; on one H100 the same profile at 4 x 2,048 and 2 x 4,096 took 0.95-0.99
    of the time this rate gives. 0 where not measured: the unmasked rate."""
    eager_scores_memory_fraction: float = 0.0
    """MEASURED (benchmarks/throughput_check.py's eager pairs): the rate eager attention's score kernels move their
    bytes (eager_attention_bytes), as a fraction of the catalog device-memory bandwidth. Those bytes are work the
    fitted runs (SDPA) never had, added to a step whose fixed costs memory_fraction has absorbed (the fitted
    rates, 0.51 H100 and 0.435 H200, sit below the memory-bound kernels' own, 0.65 and 0.55), so they run at the
    kernels' rate: steps under eager attention against the same shapes under SDPA, both in one call on one
    machine, each timed with one wait per step (2026-11-27/28), the difference per byte: Gemma 2 2B and Llama 3.2
    1B (32 heads of 64, no soft-cap) on one H100 and on one H200, Gemma 2 on two H200s, twelve pairs, median 0.54
    (0.50-0.62 where the difference is above 60 ms but one; Llama's four 0.50-0.53; at 1-2 sequences of Gemma 2,
    differences of 34-100 ms, 0.14-0.85). Pairs across machines are left out: a lent machine's host sets part of
    a small step (Gemma 2 at 2 x 2,048 took 76-81 ms more under eager against SDPA runs of other machines, 40 ms
    where one ran both; the median of those fourteen pairs was 0.53). The same share on both GPUs, where their
    memory-bound kernels differ (0.65, 0.55). Lent to other GPUs as the other fractions are. 0 where not measured:
    the GPU's fitted memory rate."""
    math_sdpa_matmul_fraction: float = 0.0
    """MEASURED (benchmarks/sdpa_path.py, one H200, torch 2.11, 2026-11-29): the rate of SDPA's math kernel's two
    products (QK^T and PV in fp32, the key and value expanded over the heads; sdpa_math_kernel) as a fraction of
    the catalog fp32 peak: at Falcon-7B's 71 heads of 64 and one K/V head, 1 x 2,048, their forward and backward
    alone took 6.20 ms for 229 GFLOP, 36.9 TFLOP/s, 0.551 of 66.9. Lent to other GPUs as the other fractions are.
    0: matmul_fraction."""
    math_sdpa_memory_fraction: float = 0.0
    """MEASURED (the same call): the rate of the math kernel's elementwise kernels (_MATH_SCORE_FORWARD_BYTES and
    _BACKWARD_BYTES per score) as a fraction of the catalog bandwidth: the whole SDPA call's forward and backward
    took 11.53 ms, 5.33 more than its products alone, for 74 bytes over 297.8M scores: 4.13 TB/s, 0.861 of 4.8
    (fp32, contiguous, vectorized: the eager scores' rate, 0.54, is of 16-bit kernels with casts). 0:
    eager_scores_memory_fraction."""
    host_seconds_per_layer: float = 0.0
    """FITTED: host seconds of one decoder layer's forward and backward (its Python, autograd and kernel
    launches), the floor of a micro-step whose GPU work is shorter: GPT-2 medium at 4 x 1,024 tokens took 0.155
    s per step on an H100 where its GPU work is about 0.05 s (2026-11-26)."""
    host_overlap_power: float = math.inf
    """CHOSEN (by the fit's in-sample error, below): the power p of the smooth maximum (gpu^p + host^p)^(1/p) that
    a micro-step takes of its GPU work and its host's (layer launches, ZeRO-2's buckets, ZeRO-3's fetches);
    infinity is the plain maximum. The host and the GPU are two stages of a pipeline whose lead empties at every
    synchronisation: the GPU idles on runs of short kernels before the host's total reaches the GPU's. Profiled
    on one H200 (2026-11-29, `i26-kinds-h200`, benchmarks/recompute_profile.py --deepspeed-steps): at the picks of
    Qwen3-4B, GPT-2 large, Llama 3.2 3B and Phi-3 (host 6-11% of the GPU's time) the unprofiled steps idled
    0.05-0.16 ms per gradient tensor beyond their kernels, where seconds_per_grad_tensor, fitted with the plain
    maximum, charged 0.25: at small micro-batches (host 27-54% of the GPU's) the idle was 0.19-0.43 ms per
    tensor, the starvation the maximum leaves at 0 charged to the tensors. `throughput_fit.py --write` refits
    every constant at each p of OVERLAP_POWERS and keeps the one of least in-sample squared error: 6 (host at half
    the GPU's time adds 0.3%, equal adds 12%), which took the host's time per layer from 2.0 to 1.7 ms and left the
    time per tensor at 0.252 ms (lower powers lower it, to 0.166 at 1.5, and fit worse); out of family, one GPU
    7.9% / 49.6% -> 7.1% / 38.7%, several 7.4% / 69.3% -> 7.4% / 54.5% (docs/speed.md)."""
    link_fraction: float = 1.0
    """MEASURED (benchmarks/nccl_rates.py): NCCL's achieved bus bandwidth over the catalog's intra-node link, fitted
    with a time per call (20 us, not used: communication_seconds says why) to every collective it timed (all-reduce,
    reduce, all-gather, reduce-scatter of bf16, 4 MiB to 1 GiB per rank, 2 and 4 H100s of one host, NVLink 4,
    2026-11-27; `python benchmarks/nccl_rates.py --fit` on their JSONs): 319 GB/s of the catalog's 450, median |error|
    11% over those timings; two H200s the same way: 317 GB/s, 0.70. Other links (NVLink 3, PCIe, across nodes) are
    assumed to reach the same share."""
    link_measured_on: str = ""
    """Where link_fraction was measured (GPUs, link, date); empty where it was not: the catalog's link rate then."""
    gpu_memory_fractions: tuple[tuple[str, float], ...] = ()
    """FITTED on the runs of GPUs other than the reference (throughput_fit.fit_gpu_memory): (catalog GPU name, its own
    device-memory fraction), which replaces memory_fraction for that GPU. The catalog's bandwidth at the reference
    GPU's fraction overstated the H200's: on two H200s (2026-11-27) a mixture of small experts ran 14-18% slower
    than predicted at every candidate and Gemma 2 5-8%, and benchmarks/kernel_rates.py there timed memory-bound
    grouped GEMMs at 0.94-1.23x the H100's time where 4.8 against 3.35 TB/s says 0.70x. GPUs without runs keep
    the reference fraction."""
    cpu_adam_source: str = "catalog"
    """`catalog` (the reference host's fitted rate) or `measured` (this machine, host_rates.py)."""
    median_error: float = 0.0
    """Median |predicted/measured - 1| of tokens/s, each case predicted by a fit that left its architecture
    family out (benchmarks/throughput_check.py): the error stated beside every predicted tokens/s."""
    max_error: float = 0.0
    """The largest such error."""
    in_sample_median_error: float = 0.0
    """Median error with every case in the fit (what the model does on what it has seen)."""
    in_sample_max_error: float = 0.0
    error_cases: int = 0
    """Cases the errors are computed over (single GPU, alone on their host, >= 4096 tokens per micro-step)."""
    error_families: tuple[str, ...] = ()
    """The architecture families (config model_type) held out in turn."""
    several_gpus_median_error: float = 0.0
    """The same out-of-family median over the runs of several GPUs (communication and ZeRO-3's gathers in play)."""
    several_gpus_max_error: float = 0.0
    bound_errors: tuple[tuple[str, float, float], ...] = ()
    """The same out-of-family (median, largest) error over the runs whose step the model says the GPU sets ("gpu")
    and those it says the host sets ("host", StepTime.bound), one GPU and several apart: (key, median, largest) with
    keys "1:gpu", "1:host", "n:gpu", "n:host". Host-bound steps carry the spread of hosts between machines of one
    kind, which the GPU-bound ones, where the planner's picks mostly land, do not (benchmarks/throughput_check.py)."""

    def stated_error(self, world_size: int = 1, bound: str | None = None) -> tuple[float, float]:
        """Returns the (median, largest) out-of-family error to state beside tokens/s of a job on `world_size`
        GPUs: the one-GPU figures, or those of several GPUs where measured; with `bound` ("gpu" or "host",
        StepTime.bound), those of the runs bound alike where measured."""
        several = world_size > 1 and bool(self.several_gpus_median_error)
        key = f"{'n' if several else '1'}:{bound}"
        for stored, median, largest in self.bound_errors:
            if stored == key:
                return median, largest
        if several:
            return self.several_gpus_median_error, self.several_gpus_max_error
        return self.median_error, self.max_error

    def broadcast_fraction_for(self, gpu_name: str) -> float:
        """Returns the broadcasting kernels' fraction of the catalog bandwidth of `gpu_name`: its own where measured
        (gpu_broadcast_fractions), else the reference GPU's."""
        return dict(self.gpu_broadcast_fractions).get(gpu_name, self.broadcast_memory_fraction)

    def memory_fraction_for(self, gpu_name: str) -> float:
        """Returns the device-memory fraction of the catalog GPU `gpu_name`: its own where fitted
        (gpu_memory_fractions), else the reference GPU's."""
        return dict(self.gpu_memory_fractions).get(gpu_name, self.memory_fraction)

    def fitted_gpus(self) -> tuple[str, ...]:
        """Returns the catalog GPUs whose runs the model is fitted on: the reference, then those with their own
        device-memory fraction."""
        return (self.reference_gpu, *(name for name, _ in self.gpu_memory_fractions))

    def scope_text(self) -> str:
        """Returns what the figures rest on, for the captions: the GPUs fitted, and where the rate between GPUs
        was measured (or that it was not)."""
        gpus = " and ".join(self.fitted_gpus())
        link = (f"links between GPUs at NCCL's {self.link_fraction:.0%} of the catalog's, measured on "
                f"{self.link_measured_on}; other links assumed alike" if self.link_measured_on
                else "links between GPUs at the catalog's rate, not measured")  # fmt: skip
        return f"fitted on {gpus} runs, other GPUs scaled from their catalog peaks; {link}"

    def with_cpu_adam(self, params_per_s: float, source: str = "measured") -> "Calibration":
        """Returns this calibration with the host's CPU Adam rate replaced (a measurement on this machine)."""
        return replace(self, cpu_adam_params_per_s_per_node=float(params_per_s), cpu_adam_source=source)


STEP_TIME_FILE = "catalog/step_time.json"


@lru_cache(maxsize=1)
def load_calibration() -> Calibration:
    """Returns the committed Calibration (catalog/step_time.json, read once)."""
    text = resources.files("zero_planner").joinpath(STEP_TIME_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    error = data.get("error", {})
    names = {f.name for f in fields(Calibration)}
    values = {k: v for k, v in data.items() if k in names}
    for name, key in (("gpu_memory_fractions", "gpu_memory_fraction"), ("gpu_broadcast_fractions", "gpu_broadcast_fraction")):
        values[name] = tuple(sorted((str(k), float(v)) for k, v in data.get(key, {}).items()))
    values.update(
        median_error=error.get("out_of_family_median", 0.0),
        max_error=error.get("out_of_family_max", 0.0),
        in_sample_median_error=error.get("in_sample_median", 0.0),
        in_sample_max_error=error.get("in_sample_max", 0.0),
        error_cases=error.get("cases", 0),
        error_families=tuple(error.get("families", ())),
        several_gpus_median_error=error.get("several_gpus_out_of_family_median", 0.0),
        several_gpus_max_error=error.get("several_gpus_out_of_family_max", 0.0),
        bound_errors=tuple((key, float(v["median"]), float(v["max"])) for key, v in sorted(error.get("by_bound", {}).items())),
    )
    return Calibration(**values)


REFERENCE_GPU = "H100-SXM"
"""The catalog GPU whose achieved rates were measured (Calibration.reference_gpu); others get its fractions."""

INTER_NODE_BANDWIDTH_BYTES_PER_S = 25 * 10**9
"""Node-to-node bandwidth per direction assumed when the GPU catalog gives none: 200 Gb/s, one
InfiniBand HDR / 200 GbE NIC per node."""

MAX_MATMUL_FRACTION = 0.8
"""The fit's ceiling on achieved/peak matmul rate: large bf16 GEMMs on H100 SXM reach ~75-80% of the dense
peak in cuBLAS benchmarks; the committed steps alone cannot separate the matmul rate from the memory-bound
term (they trade off), so the fit searches below this ceiling."""


def __getattr__(name: str):
    """The constants that used to be module constants, now read from the calibration (old imports keep working)."""
    legacy = {
        "OPTIMIZER_BYTES_PER_PARAM": "optimizer_bytes_per_param",
        "STAGE3_SECONDS_PER_FETCH": "stage3_seconds_per_fetch",
        "STAGE2_SECONDS_PER_REDUCTION": "stage2_seconds_per_reduction",
        "CPU_ADAM_PARAMS_PER_S_PER_NODE": "cpu_adam_params_per_s_per_node",
        "STAGE3_OFFLOAD_COPY_BYTES_PER_S": "stage3_offload_copy_bytes_per_s",
        "MEDIAN_ERROR": "median_error",
        "MEASURED_ON": "measured_on",
    }
    if name in legacy:
        return getattr(load_calibration(), legacy[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def warmup_steps(stage: int, micro_steps_per_step: int = 1) -> int:
    """Returns the steps a measured tokens/s leaves out: the first everywhere (allocations, kernel tuning), and
    under ZeRO-3 the second too when a step is one forward/backward: the parameter coordinator starts with an
    invalid trace, records the module order in the second forward/backward and prefetches only from the third
    (deepspeed/runtime/zero/partitioned_param_coordinator.py reset_step: INVALID -> RECORD -> COMPLETE). Every
    committed stage-3 case shows it: its second step up to 4x the later ones (benchmarks/results)."""
    return 2 if stage == 3 and micro_steps_per_step == 1 else 1


def models_throughput(gpu: GPU) -> bool:
    """Returns whether tokens/s from this model may be shown for `gpu`: False for CPU processes (`cpu:N`).

    The model's constants (achieved fractions of a tensor-core peak and of HBM bandwidth, the catalog's
    placeholder 1 TFLOP/s for a CPU) describe GPUs. For scripts/demo.sh's plan (llama-tiny, two CPU processes, stage 0, micro-batch 4 x 128
    tokens, accumulation 2) it predicts 178,313 tokens/s; zero-run measured 712 in issue 16's run and, on
    our 2-core machine on 2026-11-23, 397 to 11,149 depending on the load from other work. Neither the level
    nor the spread is modelled. The figure still ranks CPU candidates (the terms keep their order: bigger
    batches, less communication), but is never written to the plan or printed
    (plan.Plan.check_no_cpu_throughput, cli, report)."""
    return not gpu.is_cpu


@dataclass(frozen=True)
class StepTime:
    """Estimated seconds of one optimizer step (all micro-steps of gradient accumulation) and its parts."""

    compute_s: float
    """GPU work of the micro-steps: matmuls (recomputed forward included) plus memory-bound kernels."""
    communication_s: float
    """ZeRO collectives between GPUs (zero on one GPU)."""
    offload_s: float
    """PCIe traffic to/from host memory plus CPU Adam (zero without offload)."""
    step_s: float
    """Everything: compute + host-bound time (host_s, stage3_s) + optimizer + communication + offload, no overlap."""
    tokens_per_step: int
    """Tokens of one optimizer step over the whole cluster: micro_batch * seq_len * accumulation * world."""
    tokens_per_second: float
    """Whole-cluster training throughput: tokens_per_step / step_s."""
    mfu: float
    """Model FLOPs utilisation of the whole step: training_flops per GPU / (step_s * peak)."""
    modelled: bool = True
    """False for CPU processes: tokens_per_second only ranks candidates and is not to be shown."""
    stage3_s: float = 0.0
    """ZeRO-3 host-side fetch overhead the GPU's work does not hide (zero for stages 0-2)."""
    host_s: float = 0.0
    """The host's time the GPU's work does not hide: stages 0-2's layer launches and ZeRO-2's synchronized reductions
    beyond the GPU's work, and every stage's per-gradient-tensor work (grad_tensor_seconds)."""
    optimizer_s: float = 0.0
    """The optimizer step on the GPU (zero when the optimizer is offloaded: CPU Adam is in offload_s)."""
    host_work_s: float = 0.0
    """The host's own seconds of the micro-steps before they race the GPU's (compute_s): layer launches, ZeRO-2's
    buckets, ZeRO-3's hooks per fetch, gather and bucket."""

    @property
    def bound(self) -> str:
        """Returns "host" where the host's work of the micro-steps is at least the GPU's (host_work_s >= compute_s),
        else "gpu": which of the two sets the pace, and so which stated error applies (Calibration.stated_error).
        Host-bound steps run at the speed of the machine's host: nine such ZeRO-3 cases ran a median 1.37x slower
        on one lent H200 machine than on four others (docs/speed.md, "Five H200 machines")."""
        return "host" if self.host_work_s >= self.compute_s else "gpu"


def compute_params(spec: ModelSpec) -> int:
    """Returns the parameters a token's matmuls touch: all of them, less experts it is not routed to, less an
    untied input embedding (a lookup, not a matmul)."""
    num_params = spec.num_params
    if spec.num_experts > 1:
        matrices = 3 if spec.gated_mlp else 2
        expert_params = matrices * spec.hidden_size * spec.intermediate_size
        num_params -= spec.num_layers * (spec.num_experts - spec.num_experts_per_tok) * expert_params
    if not spec.tie_word_embeddings:
        num_params -= spec.vocab_size * spec.hidden_size
    return max(num_params, 1)


def _passes(workload: Workload) -> int:
    """Forward + backward (2x) [+ recomputed forward], in forward-equivalents of matmul work."""
    passes = 4 if workload.gradient_checkpointing else 3
    if workload.method in ("lora", "qlora"):
        passes -= 1  # frozen weights: the backward computes input gradients only (adapters are negligible)
    return passes


def training_flops(spec: ModelSpec, workload: Workload) -> float:
    """Returns the FLOPs of one micro-step on one GPU.

    Matmuls: 6 * N per token (2 forward + 4 backward), 8 * N with gradient checkpointing (one more forward of
    the decoder layers: matmul_flops).
    Attention scores and their use: 12 * L * d_attn * s per token, d_attn = heads * head_dim (PaLM, Chowdhery
    et al. 2022, appendix B: 6N + 12LHQT), 16 * ... with checkpointing. Masking is not discounted.
    """
    return float(matmul_flops(spec, workload) + attention_flops(spec, workload))


def matmul_flops(spec: ModelSpec, workload: Workload) -> float:
    """Returns the weight-matmul FLOPs of one micro-step on one GPU: 2 * passes * N per token, where a
    checkpointed forward recomputes the decoder layers only (Hugging Face checkpoints each layer; the
    lm_head runs forward and backward once), so the lm_head counts 6, not 8, and neither is the MLP's output
    projection run again where its recomputation stops early (unrecomputed_params)."""
    tokens = workload.micro_batch_size * workload.seq_len
    passes = _passes(workload)
    head = spec.vocab_size * spec.hidden_size if workload.task == "causal-lm" else 0
    head = min(head, compute_params(spec))
    skipped = spec.num_layers * unrecomputed_params(spec, workload)
    not_recomputed = head + skipped if workload.gradient_checkpointing else 0
    return float(2 * passes * compute_params(spec) * tokens - 2 * not_recomputed * tokens)


def attention_flops(spec: ModelSpec, workload: Workload) -> float:
    """Returns the attention-score FLOPs (QK^T and PV) of one micro-step: 4 * passes * L * d_attn * s per
    token, the causal mask not discounted (the kernel skips the masked half; the achieved rate absorbs it)."""
    tokens = workload.micro_batch_size * workload.seq_len
    d_attn = spec.num_attention_heads * spec.head_dim
    return float(4 * _passes(workload) * spec.num_layers * d_attn * workload.seq_len * tokens)


# Bytes per element that the Hugging Face modules' unfused PyTorch kernels read + write in one forward, with
# bf16 activations (transformers 5.17 modeling_llama.py and relatives):
_RMS_NORM_BYTES = 36
"""LlamaRMSNorm: to(fp32) 2+4, pow 4+4, mean 4, x*rsqrt 4+4, to(bf16) 4+2, weight* 2+2."""
_LAYER_NORM_BYTES = 4
"""nn.LayerNorm: one fused kernel, read 2 + write 2."""
_ROTARY_BYTES = 22
"""apply_rotary_pos_emb per element of q and k: q*cos 2+2, -x 2+2, cat 2+2, *sin 2+2, add 4+2."""
_RESIDUAL_BYTES = 6
"""One residual add: read 2 + 2, write 2 (two per layer)."""
_NATIVE_ACTIVATION_BYTES = 4
"""silu / gelu as one kernel: read 2 + write 2 per MLP element."""
_PYTHON_GELU_BYTES = 36
"""GPT-2's gelu_new written in Python ops (pow, mul, add, mul, tanh, add, mul, mul) per MLP element."""
_GATE_MULTIPLY_BYTES = 6
"""act(gate) * up in a gated MLP: read 2 + 2, write 2."""
_DROPOUT_BYTES = 5
"""Dropout: read 2, write 2 and a 1-byte mask (GPT-2's and OPT's residual dropouts; llama-style models have none)."""
_ATTENTION_OUTPUT_BYTES = 4
"""The attention output's transpose back to (batch, seq, heads*head_dim): a copy, read 2 + write 2."""
_LOSS_BYTES_PER_LOGIT = 40
"""ForCausalLMLoss per logit: logits.float() 2+4, log_softmax 4+4 (max and sum) + 4; backward: the nll
gradient fill 4, log_softmax backward 4+4+4, the cast back 4+2 (transformers loss_utils.py, cross_entropy)."""
_SOFTCAP_BYTES_PER_LOGIT = 36
"""Gemma-2's final logit soft-capping (divide, tanh, multiply on bf16 logits), forward and backward."""
_KV_CACHE_BYTES = 4
"""Per element of k and v, without checkpointing: the model's forward builds a DynamicCache whenever the
config's use_cache is on (zero-run turns it off only with checkpointing, as transformers does), and every
layer's attention concatenates its k and v into it, read 2 + write 2 (cache_utils.py DynamicLayer.update:
torch.cat onto an empty tensor; traced by benchmarks/moe_ops.py). The cat's backward is a view."""
BACKWARD_TRAFFIC_RATIO = 2
"""An elementwise op's backward reads its saved input(s) and the incoming gradient and writes the input
gradient: about twice the forward's bytes (a count, not fitted)."""


_LAYER_NORM_TYPES = ("gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi")
"""Types normalised by nn.LayerNorm (one fused kernel); others by an RMSNorm written in PyTorch ops."""
_ABSOLUTE_POSITION_TYPES = ("gpt2", "opt", "bloom")
"""Types without rotary embeddings (learned positions, or ALiBi)."""
_QK_NORM_TYPES = ("qwen3", "qwen3_moe", "gemma3", "gemma3_text")
"""Types that RMS-normalise each head's q and k."""
_RMS_NORM_BROADCAST_BYTES = 12
"""Of _RMS_NORM_BYTES, the two multiplies that broadcast: x * rsqrt(variance) (the variance one per row) 4+4, and
weight * x (the weight one per column) 2+2."""
_ROTARY_BROADCAST_BYTES = 8
"""Of _ROTARY_BYTES, q * cos and rotate_half(q) * sin (cos and sin shared by the heads) 2+2 each."""


def layer_broadcast_bytes(spec: ModelSpec) -> int:
    """Returns the bytes per token of one decoder layer's forward that broadcasting elementwise kernels move (a part
    of layer_traffic_bytes, at Calibration.broadcast_memory_fraction): RMSNorm's two multiplies (the layer's norms
    and Qwen3's q and k norms) and rotary's cos and sin multiplies. LayerNorm is one fused kernel."""
    d_q = spec.num_attention_heads * spec.head_dim
    d_kv = spec.num_key_value_heads * spec.head_dim
    model_type = spec.model_type
    norms = 0 if model_type in _LAYER_NORM_TYPES else (4 if model_type in _POST_NORM_TYPES else 2)
    rotary = 0 if model_type in _ABSOLUTE_POSITION_TYPES else _ROTARY_BROADCAST_BYTES * (d_q + d_kv)
    qk_norm = _RMS_NORM_BROADCAST_BYTES * (d_q + d_kv) if model_type in _QK_NORM_TYPES else 0
    return norms * _RMS_NORM_BROADCAST_BYTES * spec.hidden_size + rotary + qk_norm


def broadcast_traffic_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes of activation_traffic_bytes that broadcasting kernels move in one micro-step: each layer's
    layer_broadcast_bytes forward, BACKWARD_TRAFFIC_RATIO times backward, and once more where checkpointing
    recomputes the forward."""
    passes = 1 + BACKWARD_TRAFFIC_RATIO + (1 if workload.gradient_checkpointing else 0)
    scale = 2 if workload.precision == "fp32" else 1
    tokens = workload.micro_batch_size * workload.seq_len
    return float(tokens * passes * spec.num_layers * layer_broadcast_bytes(spec) * scale) + moe_broadcast_bytes(spec, workload)


def moe_broadcast_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes of moe_traffic_bytes that broadcast: per routed copy, the sentinel masks (a (S, 1) mask over
    the rows, forward and backward) and the routing weight's multiply and its gradient (a (S, 1) weight)."""
    if spec.num_experts <= 1:
        return 0.0
    b = 4 if workload.precision == "fp32" else 2
    p = _routed_row_bytes(spec, b)
    h, i, k = spec.hidden_size, spec.intermediate_size, spec.num_experts_per_tok
    masks = (2 * 2 * b if spec.gated_mlp else 2 * b) * i  # the first grouped GEMM's output, 2 wide when gated
    forward = (4 * b + b + p) * h + masks
    backward = (2 * p + 4 * b) * h + masks
    per_copy = forward * (2 if workload.gradient_checkpointing else 1) + backward
    return float(workload.micro_batch_size * workload.seq_len * spec.num_layers * k * per_copy)


def layer_traffic_bytes(spec: ModelSpec) -> int:
    """Returns the bytes that one decoder layer's memory-bound kernels move per token in one forward (bf16). A
    mixture of experts' routed experts are in moe_traffic_bytes, with their own backward."""
    h = spec.hidden_size
    mlp = 0 if spec.num_experts > 1 else spec.intermediate_size
    d_q = spec.num_attention_heads * spec.head_dim
    d_kv = spec.num_key_value_heads * spec.head_dim
    model_type = spec.model_type
    activation = str(spec.config.get("hidden_act") or spec.config.get("activation_function") or "silu")
    layer_norm = model_type in _LAYER_NORM_TYPES
    norms = 4 if model_type in _POST_NORM_TYPES else 2  # gemma-2: pre- and post-norms
    norm_bytes = norms * (_LAYER_NORM_BYTES if layer_norm else _RMS_NORM_BYTES) * h
    rotary = 0 if model_type in _ABSOLUTE_POSITION_TYPES else _ROTARY_BYTES * (d_q + d_kv)
    qk_norm = _RMS_NORM_BYTES * (d_q + d_kv) if model_type in _QK_NORM_TYPES else 0
    act = (_PYTHON_GELU_BYTES if activation in ("gelu_new", "gelu_fast") else _NATIVE_ACTIVATION_BYTES) * mlp
    gate = _GATE_MULTIPLY_BYTES * mlp if spec.gated_mlp else 0
    dropout = 2 * _DROPOUT_BYTES * h if _residual_dropout(spec) > 0 else 0
    residual = 2 * _RESIDUAL_BYTES * h
    return (norm_bytes + rotary + qk_norm + act + gate + dropout + residual + shared_expert_bytes(spec)
            + _ATTENTION_OUTPUT_BYTES * d_q)  # fmt: skip


def shared_expert_bytes(spec: ModelSpec) -> int:
    """Returns the bytes per token of a shared expert's memory-bound kernels in one forward (bf16; 0 without):
    Qwen2-MoE's gated MLP of its own width on every token, scaled by sigmoid(gate(x)) (one multiply) and added
    to the routed experts' output (one add)."""
    width = int(spec.config.get("shared_expert_intermediate_size") or 0) if spec.num_experts > 1 else 0
    if not width:
        return 0
    return (_NATIVE_ACTIVATION_BYTES + _GATE_MULTIPLY_BYTES) * width + 2 * _RESIDUAL_BYTES * spec.hidden_size


# Checkpointing recomputes a layer's forward only up to the last op that saved a tensor for backward: the models
# checkpoint with use_reentrant=False (zero_planner/run/modeling.py; transformers' default too), whose recomputation
# stops as soon as every saved tensor is back (torch/utils/checkpoint.py, _StopRecomputationError; early stop is on
# by default). A decoder layer's last residual add saves nothing and is not run again, nor is a mixture of
# experts' tail after its inverse permutation (MoeLayerBytes.not_recomputed). Traced: benchmarks/moe_ops.py.
def activation_traffic_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the device-memory bytes one micro-step's memory-bound kernels move on one GPU.

    Per token: each layer's elementwise kernels (layer_traffic_bytes) once forward, BACKWARD_TRAFFIC_RATIO
    times backward and, when checkpointing recomputes the forward, once more up to the layer's last residual
    add (its recomputation stops early, above); plus the loss over the fp32 logits (micro_batch * seq * vocab of
    them: for a 152k vocabulary that is ~6 MB per token, more than a 0.5B model's layers). fp32 training moves
    twice the bytes.
    """
    tokens = workload.micro_batch_size * workload.seq_len
    layer = layer_traffic_bytes(spec)
    per_token = (1 + BACKWARD_TRAFFIC_RATIO) * spec.num_layers * layer
    if workload.gradient_checkpointing:
        per_token += spec.num_layers * (layer - _RESIDUAL_BYTES * spec.hidden_size)
    elif spec.config.get("use_cache", True):
        per_token += spec.num_layers * _KV_CACHE_BYTES * 2 * spec.num_key_value_heads * spec.head_dim
    if workload.task == "causal-lm":
        per_token += _LOSS_BYTES_PER_LOGIT * spec.vocab_size
        if spec.config.get("final_logit_softcapping"):
            per_token += _SOFTCAP_BYTES_PER_LOGIT * spec.vocab_size
    scale = 2 if workload.precision == "fp32" else 1
    return float(tokens * per_token * scale)


# Mixture of experts as transformers 5.17 runs it: the router (modeling_mixtral.py MixtralTopKRouter and its
# relatives) and integrations/moe.py grouped_mm_experts_forward, the default experts implementation where torch
# has grouped_mm. Counted op by op from an aten-level trace of one MoE block's forward and backward
# (benchmarks/moe_ops.py, which prints the same count beside the trace; tests/test_throughput.py holds this count
# to the trace it recorded, benchmarks/results/moe-ops-transformers-5.17.0.json). The experts' matmuls are GEMMs
# (gemms); everything else below is memory-bound. S = k routed copies per token, b the activation's bytes, p the
# bytes of a routed row after the routing-weight multiply (_routed_row_bytes). Later releases skip the sentinel
# masks without expert parallelism (transformers PR 48201; under 5.24 the same trace moves 20% fewer bytes for
# Mixtral-32e-top8): the count follows the version the calibration was measured with (Calibration.measured_on).
_ROUTER_BYTES_PER_EXPERT = 40
"""The router's fp32 path per expert: forward logits.float() 2+4, softmax 4+4, top-k reads 4; backward the
top-k gradient scattered into zeros 4+4, softmax backward 4+4+4, the cast back 4+2."""
_SORT_BYTES_PER_KEY = 264
"""torch.sort of the S int64 expert ids with their int64 positions: CUB's radix sort (8-bit digits) over
64-bit keys, 8 passes each reading and writing key and value (8 x 32 B), plus one histogram pass (8 B).
torch.sort passes no bit range, so all 64 bits are sorted (an upper bound where CUB skips trivial passes)."""
_INDEX_SORT_BYTES_PER_KEY = 96
"""The backward of an index gather is index_put_(accumulate=True), which sorts its int64 indices over the
bits the row count needs (at::native index_put_with_sort_kernel): up to 3 passes of 32 B for < 2**24 rows.
Three of them per MoE block: the token rows, the routing weights and the un-permute."""
_PERMUTE_INDEX_BYTES = 160
"""Per routed copy, forward, the int64 bookkeeping around the sort (trace: 161): top-k's values and indices 12,
the top-k renormalisation 20, perm // k 16, the three gathers' index reads 24 and the weights' gather 8, the
histogram's int cast and read 16, the sentinel mask 9 and clamp 16, the inverse permutation (arange 8, its
index_put_ 24 + 8)."""
_PERMUTE_INDEX_BACKWARD_BYTES = 64
"""Per routed copy, backward (trace: 61): the two row index_put_s' index reads 16, the routing weights' gradient
(zeros 4, its index_put_ 16 + 4), the renormalisation's backward ~24."""
_FP32_ROUTING_WEIGHTS = ("mixtral",)
"""Types whose router hands the experts fp32 weights: Mixtral's softmax(router_logits.float()) top-k is never
cast back (modeling_mixtral.py MixtralTopKRouter), so `proj_out * weights` promotes the routed rows to fp32.
Qwen2-MoE, Qwen3-MoE and OLMoE cast router_top_value to the logits' dtype (their TopKRouter)."""


def _routed_row_bytes(spec: ModelSpec, b: int) -> int:
    """Returns the bytes per element of a routed row after the routing-weight multiply: 4 where the router's
    weights stay fp32 (_FP32_ROUTING_WEIGHTS; type promotion), else the activation's `b`."""
    return max(b, 4) if spec.model_type in _FP32_ROUTING_WEIGHTS else b


def expert_row_bytes(b: int, p: int) -> tuple[int, int]:
    """Returns (forward, backward) bytes per routed copy and hidden element that the token permutation around
    the experts' GEMMs moves, with activations of `b` bytes and routed rows of `p` after the weight multiply."""
    forward = (2 * b      # gather hidden_states[perm // k]: read, write
               + 2 * b    # masked_fill_ of the gathered rows (the expert-parallel sentinel mask, all False here)
               + 2 * b    # masked_fill of the down projection's output (the same mask)
               + b + p    # proj_out * routing weight: read b, write p
               + 2 * p    # gather back weighted_out[inv_perm]
               + p)       # read by the k-way sum  # fmt: skip
    backward = (p             # the sum's gradient, expanded over k, made contiguous (clone: write)
                + p           # zeros for the un-permute's index_put_
                + 3 * p       # index_put_(accumulate) of the gradient: read the zeros and the values, write
                + 2 * p + b   # the routing weight's gradient: grad * proj_out (read p and b, write p)
                + p           # ... summed over the hidden dimension (read)
                + 2 * p       # proj_out's gradient: grad * weight (read, write)
                + (p + b if p != b else 0)  # ... cast back to the activation dtype
                + 2 * b       # masked_fill's backward after the down projection
                + 2 * b       # masked_fill_'s backward on the gathered rows
                + b)          # the gather's backward: index_put_(accumulate) reads the rows  # fmt: skip
    return forward, backward


def expert_intermediate_bytes(gated: bool, b: int) -> tuple[int, int]:
    """Returns (forward, backward) bytes per routed copy and element of an expert's intermediate width: its
    activation (and gate) between the two grouped GEMMs, and the sentinel mask on the first one's output."""
    if gated:
        forward = 2 * 2 * b + 2 * b + 3 * b  # masked_fill of gate_up (2 wide), act(gate), act(gate) * up
        backward = 6 * b + 3 * b + 2 * 2 * b + 2 * 2 * b  # the product's two gradients, act backward, the
        # chunk's backward (cat, 2 wide), masked_fill's backward (2 wide)
    else:
        forward = 2 * b + 2 * b  # masked_fill of up, act
        backward = 3 * b + 2 * b  # act backward, masked_fill's backward
    return forward, backward


@dataclass(frozen=True)
class MoeLayerBytes:
    """Bytes per token that one mixture-of-experts block moves outside its GEMMs (moe_layer_bytes)."""

    forward: int
    backward: int
    not_recomputed: int
    """The forward's tail after its inverse permutation, which a checkpointed recomputation does not run again
    (see activation_traffic_bytes): the gather back, the k-way sum, the cast; 0 where a shared expert's gate follows."""
    sort_passes: int
    """Of forward + backward, the radix-sort passes inside torch.sort and index_put_(accumulate) (CUB's, counted
    from their algorithms), which an aten-level trace does not see."""


def moe_layer_bytes(spec: ModelSpec, b: int = 2) -> MoeLayerBytes:
    """Returns the bytes per token that one MoE block moves outside the experts' GEMMs with `b`-byte activations:
    the router's softmax and top-k over all experts, the sort of the routed copies by expert, the gathers into
    expert order and back, the sentinel masks, the experts' activation, the routing-weight multiply and the k-way
    sum, forward and backward."""
    p = _routed_row_bytes(spec, b)
    h, i, e, k = spec.hidden_size, spec.intermediate_size, spec.num_experts, spec.num_experts_per_tok
    row_forward, row_backward = expert_row_bytes(b, p)
    mid_forward, mid_backward = expert_intermediate_bytes(spec.gated_mlp, b)
    cast = p + b if p != b else 0  # the block's output cast to the activation dtype, and its gradient back
    forward = (18 * e + k * (_SORT_BYTES_PER_KEY + _PERMUTE_INDEX_BYTES) + k * (row_forward * h + mid_forward * i)
               + (p + cast) * h)  # the sum writes one row per token  # fmt: skip
    backward = (22 * e + k * (3 * _INDEX_SORT_BYTES_PER_KEY + _PERMUTE_INDEX_BACKWARD_BYTES)
                + k * (row_backward * h + mid_backward * i)
                + (cast + p + 3 * b + 3 * b) * h)  # per token: the gradient's cast and read by the clone, the
    # gather's zeros and destination rows (b + 2b), the sum of the router's and the experts' input gradients
    not_recomputed = k * 3 * p * h + (p + cast) * h
    if shared_expert_bytes(spec):
        # Qwen2-MoE's block ends with its shared expert's gate (a linear that saves its input), so the routed
        # tail is recomputed too; only the scaled add after it is not (in layer_traffic_bytes, left counted).
        not_recomputed = 0
    # torch.sort's own read of 8 and write of 16 per key is an aten op; the rest of its passes are not
    sort_passes = k * (_SORT_BYTES_PER_KEY - 24 + 3 * _INDEX_SORT_BYTES_PER_KEY)
    return MoeLayerBytes(forward, backward, not_recomputed, sort_passes)


def moe_traffic_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes one micro-step's mixture-of-experts blocks move outside the experts' GEMMs (0 for dense
    models): moe_layer_bytes per token and layer, forward, backward and, with checkpointing, the forward again
    up to its inverse permutation."""
    if spec.num_experts <= 1:
        return 0.0
    tokens = workload.micro_batch_size * workload.seq_len
    layer = moe_layer_bytes(spec, 4 if workload.precision == "fp32" else 2)
    per_token = layer.forward + layer.backward
    if workload.gradient_checkpointing:
        per_token += layer.forward - layer.not_recomputed
    return float(tokens * spec.num_layers * per_token)


_POST_NORM_TYPES = ("gemma2", "gemma3", "gemma3_text")
"""Types with a norm on each sublayer's output before the residual add (Gemma 2's post_feedforward_layernorm)."""


def output_projection_params(spec: ModelSpec) -> int:
    """Returns the weights per layer that checkpointing's recomputed forward does not multiply again: the dense
    MLP's output projection (down_proj, c_proj) where its output goes straight into the residual add, else 0.

    The recomputation stops once every tensor saved for backward is back (activation_traffic_bytes, above).
    Autograd packs a matmul's saved inputs before the kernel runs, and the residual add saves nothing, so the
    last thing recomputed is the projection's input: its GEMM is not run again. Kernel profiles with and
    without checkpointing (benchmarks/recompute_profile.py, H100 and H200, 2-6 x 2,048 tokens) put the
    recomputed GEMMs at 0.17-0.22 of the plain micro-step's for Llama 3.2 1B and Qwen3-1.7B, whose forward
    GEMMs less down_proj are 0.19 and 0.20 (all of them: 0.26, 0.27), and at 0.25-0.27 for Gemma 2 2B (0.26),
    whose post-feedforward norm saves the projection's output. A residual dropout (GPT-2's resid_pdrop) saves
    its mask, which needs the output too. Mixtures of experts (their tail is in MoeLayerBytes) and adapters
    (PEFT runs the frozen projection before the adapter's path) are recomputed whole."""
    if spec.num_experts > 1 or spec.model_type in _POST_NORM_TYPES or _residual_dropout(spec) > 0:
        return 0
    return spec.intermediate_size * spec.hidden_size


def unrecomputed_params(spec: ModelSpec, workload: Workload) -> int:
    """Returns output_projection_params where `workload` checkpoints and trains every weight, else 0."""
    if not workload.gradient_checkpointing or workload.method in ("lora", "qlora"):
        return 0
    return output_projection_params(spec)


_RESIDUAL_DROPOUT_KEYS = {"gpt2": ("resid_pdrop", 0.1), "opt": ("dropout", 0.1)}
"""(config key, transformers' default) of the dropout on each residual branch, by model type; others read
`resid_pdrop`, default 0. GPT-2 drops out each c_proj's output; OPTDecoderLayer the attention's and fc2's outputs
before each residual add. OPT-1.3B on one H200 (2026-11-29, `i26-kinds-opt-h200`): with checkpointing, fc2 ran
again (GEMMs 926 ms a step at 32 x 2,048 where the model, skipping it, had 785) and fused_dropout_kernel_vec took
23 ms."""


def _residual_dropout(spec: ModelSpec) -> float:
    """Returns the dropout probability on each residual branch (_RESIDUAL_DROPOUT_KEYS)."""
    key, default = _RESIDUAL_DROPOUT_KEYS.get(spec.model_type, ("resid_pdrop", 0.0))
    return float(spec.config.get(key, default) or 0)


_FUSED_QKV = ("phi3", "gpt2", "gpt_neox", "phi", "falcon", "bloom", "gptj")
"""Types whose attention projects q, k and v in one linear layer (phi3 qkv_proj, gpt2 c_attn, ...)."""
_FUSED_GATE_UP = ("phi3",)
"""Types whose gated MLP projects gate and up in one linear layer (phi3 gate_up_proj)."""


_BIASED_LINEARS = {"qwen2": ("qkv",), "qwen2_moe": ("qkv",), "opt": ("qkv", "o", "mlp"), "gpt_neox": ("qkv", "o", "mlp"),
                   "gpt2": ()}  # fmt: skip
"""The decoder linears that carry a bias, by model type (Qwen2's q, k and v; OPT's and GPT-NeoX's every linear);
others read transformers' `attention_bias` (q, k, v, o) and `mlp_bias` flags, default off. GPT-2's Conv1D multiplies
a 2-D view with addmm, its bias fused, so none of its adds run apart."""
_BIAS_FLAGS = {"opt": "enable_bias", "gpt_neox": "attention_bias"}
"""A type's config flag that turns its biases off (OPT's enable_bias; GPT-NeoX's attention_bias, its attention's
only)."""


def biased_outputs(spec: ModelSpec, workload: Workload) -> tuple[int, int]:
    """Returns the output features per token and layer of the decoder linears with a bias (_BIASED_LINEARS), and of
    those the ones a checkpointed forward runs again (not the MLP's output projection where its recomputation stops
    early: unrecomputed_params)."""
    h, i = spec.hidden_size, spec.intermediate_size
    d_q, d_kv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
    config = spec.config
    if spec.model_type in _BIASED_LINEARS:
        parts = set(_BIASED_LINEARS[spec.model_type])
        flag = _BIAS_FLAGS.get(spec.model_type)
        if flag and not config.get(flag, True):
            parts = parts & {"mlp"} if spec.model_type == "gpt_neox" else set()
    else:
        parts = ({"qkv", "o"} if config.get("attention_bias") else set()) | ({"mlp"} if config.get("mlp_bias") else set())
    mlp = ((2 * i if spec.gated_mlp else i) + h) if spec.num_experts <= 1 else 0  # routed experts carry no bias
    outputs = sum({"qkv": d_q + 2 * d_kv, "o": h, "mlp": mlp}[part] for part in parts)
    down = h if "mlp" in parts and mlp else 0
    return outputs, outputs - (down if unrecomputed_params(spec, workload) else 0)


def zero3_bias_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes ZeRO-3's linear moves per micro-step adding biases apart from their GEMMs.

    zero.Init replaces torch.nn.functional.linear with LinearFunctionForZeroStage3 (memory_efficient_linear, on by
    default; the replacement outlives the context) and, for a 3-D input, it runs `input.matmul(weight.t())` and then
    `output += bias`, a broadcast add that reads and writes the output once more (deepspeed/runtime/zero/linear.py),
    where F.linear fuses the bias into the GEMM. Pythia-1.4B on one H200 (2026-11-29, i26-kinds-pythia3-h200): the
    elementwise kernels took 69 ms a step at 13 x 2,048 under ZeRO-3 against 38.5 under ZeRO-0, 291.5 against 123.6
    at 32 x 2,048 checkpointed: these bytes are 47 and 219 GB, 1.58 and 1.31 TB/s (benchmarks/kernel_classes.py)."""
    outputs, recomputed = biased_outputs(spec, workload)
    if not outputs:
        return 0.0
    b = 4 if workload.precision == "fp32" else 2
    per_token = outputs + (recomputed if workload.gradient_checkpointing else 0)
    return float(2 * b * per_token * spec.num_layers * workload.micro_batch_size * workload.seq_len)


def zero3_bias_seconds(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload,
                       calibration: Calibration | None = None) -> float:
    """Returns the GPU seconds per micro-step of ZeRO-3's separate bias adds (zero3_bias_bytes; 0 for other stages), a
    broadcast, at broadcast_bytes_per_s."""
    if strategy.stage != 3:
        return 0.0
    return zero3_bias_bytes(spec, workload) / broadcast_bytes_per_s(gpu, calibration)


ALIGNED_ELEMENTS = 8
"""16-bit elements in the 16 bytes cuBLAS's Hopper kernels (and the tensor-core paths before them) need every
matrix's dimensions aligned to."""


@dataclass(frozen=True)
class Gemm:
    """Matrix multiplies of one shape in one micro-step (all layers and passes that run it): the FLOPs, and the
    bytes they read and write (both inputs, the output) at the activation width."""

    flops: float
    bytes: float
    grouped: bool = False
    """A routed expert's grouped GEMM (its FLOPs at Calibration.grouped_gemm_fraction of the matmul rate)."""
    alignment: int = ALIGNED_ELEMENTS
    """The largest of 1, 2, 4 and 8 that divides every dimension of the product (16-bit operands; 8 for fp32 ones,
    whose alignment is not modelled): below 8 its FLOPs run at Calibration.misaligned_gemm_fraction (odd) or
    even_misaligned_gemm_fraction of the matmul rate (gemm_rate_share)."""


def layer_linears(spec: ModelSpec) -> list[tuple[int, int]]:
    """Returns one decoder layer's linear layers as (in, out) features: attention (q, k, v or a fused qkv, o),
    the dense MLP, or, for a mixture of experts, the router and a shared expert (the routed experts are
    grouped GEMMs: gemms())."""
    h, i = spec.hidden_size, spec.intermediate_size
    d_q = spec.num_attention_heads * spec.head_dim
    d_kv = spec.num_key_value_heads * spec.head_dim
    fused = spec.model_type in _FUSED_QKV
    layers = [(h, d_q + 2 * d_kv)] if fused else [(h, d_q), (h, d_kv), (h, d_kv)]
    layers.append((d_q, h))
    if spec.num_experts > 1:
        layers.append((h, spec.num_experts))  # the router
        shared = int(spec.config.get("shared_expert_intermediate_size") or 0)
        if shared:
            layers += [(h, shared), (h, shared), (shared, h), (h, 1)]  # gate, up, down, Qwen2-MoE's gate
        return layers
    if spec.gated_mlp:
        layers += [(h, 2 * i)] if spec.model_type in _FUSED_GATE_UP else [(h, i), (h, i)]
    else:
        layers.append((h, i))
    layers.append((i, h))
    return layers


def gemm_alignment(width: int, *dims: int) -> int:
    """Returns the largest of 1, 2, 4 and 8 elements that divides every dimension of a product of `width`-byte
    operands (Gemm.alignment); ALIGNED_ELEMENTS for other widths than 16 bits."""
    if width != 2:
        return ALIGNED_ELEMENTS
    alignment = ALIGNED_ELEMENTS
    while alignment > 1 and any(d % alignment for d in dims):
        alignment //= 2
    return alignment


def _linear_gemms(m: int, k: int, n: int, count: float, width: int, *, weight_grad: bool, forwards: int,
                  grouped: bool = False) -> list[Gemm]:
    """Returns the GEMMs of `count` linear layers (k -> n features) on m rows: `forwards` forward products
    X W (m x k by k x n), the input gradient dY W^T (m x n by n x k) and, unless frozen, the weight gradient
    X^T dY (k x m by m x n). Each reads both inputs and writes its output once. The three products share the
    dimensions, and so their alignment (a grouped GEMM's rate is its own: ALIGNED_ELEMENTS)."""
    flops = 2.0 * m * k * n * count
    alignment = ALIGNED_ELEMENTS if grouped else gemm_alignment(width, m, k, n)
    forward = Gemm(forwards * flops, forwards * count * width * (m * k + k * n + m * n), grouped, alignment)
    data_grad = Gemm(flops, count * width * (m * n + n * k + m * k), grouped, alignment)
    result = [forward, data_grad]
    if weight_grad:
        result.append(Gemm(flops, count * width * (k * m + m * n + k * n), grouped, alignment))
    return result


def gemms(spec: ModelSpec, workload: Workload) -> list[Gemm]:
    """Returns the micro-step's matrix multiplies by shape: the decoder's linear layers (forward, input and
    weight gradients, the recomputed forward with checkpointing), the output head (not recomputed), and each
    routed expert's grouped GEMMs on its T*k/E tokens (the routing spread evenly: a random-init model's, and
    the best case for a trained one).

    Each runs at the roofline of its shape, max(FLOPs / matmul rate, bytes / HBM rate): large matrices are
    bound by their FLOPs, a matrix with few rows or a narrow side (a grouped-query k/v projection, a small
    expert seeing a few hundred tokens, whose whole weight is read in every pass) by the bytes it moves. That
    is why many small experts run far below the dense matmul rate; no per-shape constant is fitted.
    """
    tokens = workload.micro_batch_size * workload.seq_len
    b = 4 if workload.precision == "fp32" else 2
    trains_weights = workload.method not in ("lora", "qlora")
    forwards = 2 if workload.gradient_checkpointing else 1
    skips_output = unrecomputed_params(spec, workload) > 0
    linears = layer_linears(spec)
    result: list[Gemm] = []
    for index, (k, n) in enumerate(linears):
        once = skips_output and index == len(linears) - 1  # the MLP's output projection: not recomputed
        result += _linear_gemms(tokens, k, n, spec.num_layers, b, weight_grad=trains_weights,
                                forwards=1 if once else forwards)
    if workload.task == "causal-lm":
        result += _linear_gemms(tokens, spec.hidden_size, spec.vocab_size, 1, b, weight_grad=trains_weights, forwards=1)
    if spec.num_experts > 1:
        h, i = spec.hidden_size, spec.intermediate_size
        up = 2 * i if spec.gated_mlp else i  # gate and up stacked in one grouped GEMM
        rows = max(1, round(tokens * spec.num_experts_per_tok / spec.num_experts))
        count = spec.num_layers * spec.num_experts
        for k, n in ((h, up), (i, h)):
            result += _linear_gemms(rows, k, n, count, b, weight_grad=trains_weights, forwards=forwards, grouped=True)
    # The shapes are the standard projections; matmul_flops counts from the exact parameter count. What the
    # shapes do not cover (nothing for the architectures we measured: within 0.4%, GPT-2's position table
    # being a lookup) runs at the matmul rate.
    rest = matmul_flops(spec, workload) - sum(g.flops for g in result)
    if rest > 0.01 * matmul_flops(spec, workload):
        result.append(Gemm(rest, 0.0))
    return result


def gemm_rate_share(gemm: Gemm, calibration: Calibration) -> float:
    """Returns the share of the dense matmul rate `gemm`'s FLOPs run at: a grouped expert GEMM's measured share, a
    misaligned product's (odd or even: Gemm.alignment), else 1."""
    if gemm.grouped:
        return calibration.grouped_gemm_fraction
    if gemm.alignment >= ALIGNED_ELEMENTS:
        return 1.0
    return calibration.misaligned_gemm_fraction if gemm.alignment == 1 else calibration.even_misaligned_gemm_fraction


def gemm_seconds(spec: ModelSpec, gpu: GPU, workload: Workload, calibration: Calibration | None = None) -> float:
    """Returns the seconds of the micro-step's matrix multiplies: each shape at its roofline (gemms()), grouped and
    misaligned ones at their share of the matmul rate (gemm_rate_share)."""
    cal = calibration or load_calibration()
    rate = matmul_flops_per_s(gpu, workload.precision, calibration)
    bandwidth = memory_bytes_per_s(gpu, calibration)
    return sum(max(g.flops / (rate * gemm_rate_share(g, cal)), g.bytes / bandwidth) for g in gemms(spec, workload))


def peak_flops(gpu: GPU, precision: str) -> float:
    """Returns the GPU's peak in FLOP/s for `precision`: the dense 16-bit tensor-core peak, or plain fp32."""
    tflops = gpu.peak_tflops_fp32 if precision == "fp32" else gpu.peak_dense_tflops_16bit
    return tflops * 1e12


def reference_fractions(calibration: Calibration | None = None) -> tuple[float, float, float]:
    """Returns the measured GPU's achieved/peak ratios: (matmul, device memory, attention)."""
    cal = calibration or load_calibration()
    return cal.matmul_fraction, cal.memory_fraction, cal.attention_fraction


def matmul_flops_per_s(gpu: GPU, precision: str, calibration: Calibration | None = None) -> float:
    """Returns the matmul rate a training step reaches on `gpu`, in FLOP/s: its catalog peak times the
    reference GPU's measured achieved/peak ratio (measured on the H100; an assumption for T4, A100, RTX 4090,
    H200, ...: same kernels, same share of the peak). fp32 uses the plain fp32 peak (PyTorch's default keeps
    TF32 off for matmuls) at that ratio."""
    return peak_flops(gpu, precision) * reference_fractions(calibration)[0]


def attention_flops_per_s(gpu: GPU, precision: str, calibration: Calibration | None = None) -> float:
    """Returns the rate at which SDPA's attention kernels get through attention_flops on `gpu`, in FLOP/s: the
    peak times the reference GPU's measured ratio."""
    return peak_flops(gpu, precision) * reference_fractions(calibration)[2]


def memory_bytes_per_s(gpu: GPU, calibration: Calibration | None = None) -> float:
    """Returns the device-memory rate the step's memory-bound kernels and GEMM operands reach on `gpu`, in
    bytes/s: the catalog bandwidth times the GPU's own fitted ratio where its runs gave one
    (Calibration.gpu_memory_fractions: the H200), else the reference GPU's."""
    cal = calibration or load_calibration()
    return gpu.memory_bandwidth_bytes_per_s * cal.memory_fraction_for(gpu.name)


def stage3_fetches(spec: ModelSpec, workload: Workload, persistence_threshold: int | None = None) -> int:
    """Returns the fetch requests of ZeRO-3's hooks in one micro-step: each parameter tensor above
    stage3_param_persistence_threshold (our dsconfig's 10 * hidden unless given) once per pass of its module (the
    forward, the backward, and the recomputed forward with checkpointing); smaller ones (norms, biases) stay
    resident. The hooks' Python (fetch_sub_module, the trace and prefetch bookkeeping, the release) runs on every
    pass whether or not the tensor must be gathered again (stage3_gathers counts those)."""
    threshold = bucket_sizes(spec.hidden_size)["stage3_param_persistence_threshold"] if persistence_threshold is None else persistence_threshold
    fetched = sum(count for numel, count in spec.tensor_sizes if numel > threshold)
    return fetched * (3 if workload.gradient_checkpointing else 2)


def stage3_gathers(spec: ModelSpec, workload: Workload, persistence_threshold: int | None = None,
                   reuse_distance: int | None = None) -> int:
    """Returns the parameter tensors ZeRO-3 gathers in one micro-step (across ranks on several GPUs).

    A tensor above the persistence threshold is gathered when a module needs it and it is not already there.
    After each module the coordinator releases its parameters unless they are used again within the next
    stage3_max_reuse_distance elements of modules (our dsconfig's 1e9 unless given;
    partitioned_param_coordinator.py __params_to_release), so the last layers of the forward stay for the
    backward, and with checkpointing a layer's recomputed forward keeps its weights for its backward. Counted by
    walking the forward and backward (stage3_trace) where models.analytic covers the family; otherwise
    stage3_fetches. (The prefetcher also keeps what it has looked ahead to: about one module more.)"""
    threshold = bucket_sizes(spec.hidden_size)["stage3_param_persistence_threshold"] if persistence_threshold is None else persistence_threshold
    reuse = STAGE3_MAX_REUSE_DISTANCE if reuse_distance is None else reuse_distance
    trace = stage3_trace(spec, workload.gradient_checkpointing) if spec.config else None
    if trace is None:
        return stage3_fetches(spec, workload, persistence_threshold)
    return _trace_gathers(trace, threshold, reuse)


def stage3_trace(spec: ModelSpec, gradient_checkpointing: bool) -> tuple[tuple[tuple[str, int], ...], ...] | None:
    """Returns the modules one micro-step runs, in order, each as its ((parameter, numel), ...): the forward, then
    the backward in reverse, each checkpointed decoder layer's forward again just before its backward. None where
    models.analytic does not cover the family."""
    return _stage3_trace(_config_key(spec), gradient_checkpointing)


def _config_key(spec: ModelSpec) -> str:
    """Returns the model's config as canonical JSON: the cache key of what is derived from it (ModelSpec holds a dict)."""
    return json.dumps(spec.config, sort_keys=True, default=str)


@lru_cache(maxsize=64)
def _stage3_trace(config_json: str, gradient_checkpointing: bool) -> tuple | None:
    from zero_planner.models.analytic import forward_modules

    modules = forward_modules(json.loads(config_json))
    if modules is None:
        return None
    head, layer, tail, layers = modules
    per_layer = [[tuple((f"{i}.{name}", numel) for name, numel in params) for _, params in layer] for i in range(layers)]
    head_, tail_ = [params for _, params in head], [params for _, params in tail]
    forward = head_ + [m for block in per_layer for m in block] + tail_
    if not gradient_checkpointing:
        return tuple(forward + forward[::-1])
    backward = tail_[::-1] + [m for block in per_layer[::-1] for m in block + block[::-1]] + head_[::-1]
    return tuple(forward + backward)


@lru_cache(maxsize=256)
def _trace_gathers(trace: tuple, threshold: int, reuse: int) -> int:
    """Walks `trace` as the coordinator does: a tensor above `threshold` is gathered when its module runs without
    it; after the module it is released unless a module starting within `reuse` elements uses it again."""
    sizes = [sum(numel for _, numel in module) for module in trace]
    before = [0]
    for size in sizes:
        before.append(before[-1] + size)
    next_use: dict[str, int] = {}
    following = [dict() for _ in trace]
    for i in range(len(trace) - 1, -1, -1):
        following[i] = {name: next_use.get(name) for name, _ in trace[i]}
        for name, _ in trace[i]:
            next_use[name] = i
    available: set[str] = set()
    gathers = 0
    for i, module in enumerate(trace):
        for name, numel in module:
            if numel > threshold and name not in available:
                gathers += 1
                available.add(name)
        for name, numel in module:
            later = following[i][name]
            # released unless used again by a module that starts within `reuse` elements after this one
            if later is None or before[later] - before[i + 1] >= reuse:
                available.discard(name)
    return gathers


def stage3_host_seconds(spec: ModelSpec, workload: Workload, calibration: Calibration | None = None,
                        buffers: ZeroBuffers | None = None) -> float:
    """Returns ZeRO-3's host seconds of one micro-step: its hooks' fetch requests (stage3_fetches x
    stage3_seconds_per_fetch) and gradient buckets (stage2_reductions x stage3_seconds_per_bucket), plus, where the
    partitions span several ranks, its gathers (stage3_gathers x stage3_seconds_per_gather; one rank skips them) and its gradient buckets' reductions (stage2_reductions x
    stage3_seconds_per_reduction), both growing with the ranks (stage3_sync_growth). `buffers`: a user's JSON's persistence threshold and reduce bucket size (ours
    unless given)."""
    cal = calibration or load_calibration()
    threshold = buffers.param_persistence_threshold if buffers else None
    buckets = stage2_reductions(spec, workload, bucket=buffers.reduce_bucket_size if buffers else None)
    seconds = (stage3_fetches(spec, workload, threshold) * cal.stage3_seconds_per_fetch
               + buckets * cal.stage3_seconds_per_bucket)  # fmt: skip
    if workload.world_size > 1:
        across = (stage3_gathers(spec, workload, threshold) * cal.stage3_seconds_per_gather
                  + buckets * cal.stage3_seconds_per_reduction)  # fmt: skip
        seconds += across * stage3_sync_growth(workload.world_size, cal)
    return seconds


def stage3_sync_growth(world_size: int, calibration: Calibration) -> float:
    """Returns the factor on ZeRO-3's host seconds per gather and per bucket across `world_size` ranks over two
    ranks' (1 at two; Calibration.stage3_sync_growth_per_doubling per doubling beyond)."""
    return 1.0 + calibration.stage3_sync_growth_per_doubling * math.log2(max(world_size, 2) / 2)


@lru_cache(maxsize=64)
def _parameter_order(config_json: str) -> tuple[int, ...] | None:
    from zero_planner.models.analytic import parameter_order

    order = parameter_order(json.loads(config_json))
    return None if order is None else tuple(order)


def layer_passes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the decoder layers' host passes of one micro-step in units of one forward and backward: the layers,
    4/3 of them with checkpointing (a forward is about a third of a layer's launches, and runs twice)."""
    return spec.num_layers * (4 / 3 if workload.gradient_checkpointing else 1.0)


def host_seconds(spec: ModelSpec, strategy: Strategy, workload: Workload, calibration: Calibration | None = None,
                 buffers: ZeroBuffers | None = None) -> float:
    """Returns the host's seconds of one micro-step at stages 0-2: layer passes x host_seconds_per_layer, plus
    ZeRO-2's reductions x stage2_seconds_per_reduction, plus on several GPUs ZeRO-1/2's buckets reduced across the
    ranks x seconds_per_reduction_across_ranks (buckets of `buffers`' reduce_bucket_size: a user's JSON; ours unless
    given)."""
    cal = calibration or load_calibration()
    seconds = layer_passes(spec, workload) * cal.host_seconds_per_layer
    bucket = buffers.reduce_bucket_size if buffers else None
    if strategy.stage == 2:
        seconds += stage2_reductions(spec, workload, bucket=bucket) * cal.stage2_seconds_per_reduction
    return seconds + reductions_across_ranks(spec, strategy, workload, bucket) * cal.seconds_per_reduction_across_ranks


def reductions_across_ranks(spec: ModelSpec, strategy: Strategy, workload: Workload, bucket: int | None = None) -> float:
    """Returns the gradient buckets ZeRO-1/2 reduce across the ranks per micro-step (0 on one GPU and at stages 0
    and 3, whose reductions are counted elsewhere): stage2_reductions in every micro-step at stage 2, once per
    optimizer step at stage 1 (the accumulation boundary), spread over its micro-steps
    (Calibration.seconds_per_reduction_across_ranks)."""
    if strategy.stage not in (1, 2) or workload.world_size <= 1:
        return 0.0
    reductions = stage2_reductions(spec, workload, bucket=bucket)
    return reductions / workload.gradient_accumulation_steps if strategy.stage == 1 else float(reductions)


def stage2_reductions(spec: ModelSpec, workload: Workload, bucket: int | None = None) -> int:
    """Returns the gradient buckets ZeRO-2 reduces in one backward (reduce_bucket_size `bucket` elements, our
    dsconfig's hidden^2 unless given); ZeRO-3 closes its buckets by the same rule (stage3.py
    reduce_independent_p_g_buckets_and_remove_grads), which stage3_host_seconds counts on several GPUs.

    DeepSpeed's hook (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads) reduces the bucket
    whenever the next gradient would overflow it; the gradients arrive in about the reverse of the parameters'
    registration order, which models.analytic.parameter_order gives for the families it covers (equal to
    named_parameters for every benchmark config) and the meta-device count for the others (ModelSpec.parameter_order:
    OPT's and GPT-NeoX's biases close buckets of their own, as GPT-2's do). Otherwise (a count without the order)
    every weight matrix (> 10 x hidden elements) counts one: with hidden^2 buckets each closes about one; a bucket
    that holds many matrices closes when full (the parameters' elements over the bucket, where fewer). Adapters: their trainable tensors are
    small, so buckets fill whole: trainable parameters / bucket."""
    bucket = bucket_sizes(spec.hidden_size)["reduce_bucket_size"] if bucket is None else bucket
    if workload.method != "full":
        return max(1, -(-trainable_params(spec, workload) // bucket))
    order = (_parameter_order(_config_key(spec)) if spec.config else None) or spec.parameter_order
    if order is None:
        # the order unknown: about one bucket per weight matrix where a bucket holds about one (ours), and no fewer
        # than the gradients' elements over the bucket where it holds many (DeepSpeed's 5e8: a handful). Before this
        # read the bucket size, OPT-1.3B's and Pythia-1.4B's ZeRO-3 counted ~150 buckets at 5e8 as at ours
        # (i26-z3-user-h200: their 5e8 steps ran 142 and 155 ms faster than ours, the model had them equal)
        matrices = sum(count for numel, count in spec.tensor_sizes if numel > 10 * spec.hidden_size)
        elements = sum(numel * count for numel, count in spec.tensor_sizes)
        return min(matrices, -(-elements // bucket))
    reductions, elements = 0, 0
    for numel in reversed(order):
        if elements and elements + numel > bucket:
            reductions, elements = reductions + 1, 0
        elements += numel
    return reductions + (1 if elements else 0)


def link_bandwidth_bytes_per_s(gpu: GPU, workload: Workload, calibration: Calibration | None = None) -> float:
    """Returns the bandwidth a ring collective runs at: the intra-node link at NCCL's measured share of it
    (Calibration.link_fraction), or the slower node-to-node link when the job spans nodes (in a ring every link
    carries the same bytes, so the slowest one sets the pace)."""
    cal = calibration or load_calibration()
    bandwidth = float(gpu.intra_node_bandwidth_bytes_per_s) * cal.link_fraction
    if workload.world_size > workload.gpus_per_node:
        inter = getattr(gpu, "inter_node_bandwidth_bytes_per_s", None) or INTER_NODE_BANDWIDTH_BYTES_PER_S
        bandwidth = min(bandwidth, float(inter))
    return bandwidth


def communication_seconds(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload,
                          calibration: Calibration | None = None) -> float:
    """Returns the seconds of ZeRO's collectives per optimizer step (0 on one GPU): communication_bytes at the link's
    achieved bandwidth (link_bandwidth_bytes_per_s: NCCL's measured share of the catalog's link).

    NCCL's time per call beyond its bytes (20 us measured by benchmarks/nccl_rates.py) is not added: ZeRO-1/2 send a
    gradient bucket at a time, so it would cost them 5-15 ms per step on two GPUs, and with it Llama 3.2 1B's ZeRO-3
    at 10 x 2,048 on two H100s becomes the pick (measured 0.71 of the best): the model has that step 37% short, as
    it does not know the memory edge (3 allocator retries at 74.0 of 79.2 GiB on two machines, 2026-11-26/27)."""
    cal = calibration or load_calibration()
    return communication_bytes(spec, strategy, workload) / link_bandwidth_bytes_per_s(gpu, workload, cal)


def communication_bytes(spec: ModelSpec, strategy: Strategy, workload: Workload) -> float:
    """Returns the bytes each GPU sends per optimizer step for ZeRO's collectives (0 on one GPU).

    With Psi trainable parameters of `b` bytes, a ring all-reduce moves 2 * Psi * b * (n-1)/n per GPU, an
    all-gather or reduce-scatter half that. What DeepSpeed 0.19 sends, stage by stage:
    - stage 0 all-reduces the gradients once per optimizer step (engine.py buffered_allreduce_fallback): 2 x.
    - stages 1 and 2 all-reduce the whole gradient too, not the ZeRO paper's reduce-scatter: each bucket is
      all-reduced and every rank keeps its own partition of it (stage_1_and_2.py: average_tensor's
      allreduce_and_scatter under use_multi_rank_bucket_allreduce, on by default; buffered_reduce_fallback's
      allreduce_and_copy without contiguous_gradients, as our ZeRO-1 runs). Then the updated 16-bit parameters
      are all-gathered (all_gather_dp_groups): 2 x + 1 x. Stage 1 reduces once per optimizer step (at the
      accumulation boundary), stage 2 in every micro-step's backward. Measured on two H200s (Gemma 2 2B, 2,048
      tokens, 2026-11-27): backward grew by 21-23 ms from one GPU to two at ZeRO-0 and ZeRO-1 alike, where the
      all-reduce of its 5.2 GB of gradients takes 16 ms at NCCL's rate and a reduce-scatter 8.
    - stage 3 gathers every stored weight in forward and in backward (once more when checkpointing recomputes
      the forward) and reduce-scatters the gradients (stage3.py __avg_scatter_grads, reduce_scatter_coalesced):
      (2 or 3) x + 1 x.
    """
    n = workload.world_size
    if n <= 1:
        return 0.0
    psi = trainable_params(spec, workload)  # gradients are reduced for trainable parameters only
    b = 4 if workload.precision == "fp32" else 2
    accum = workload.gradient_accumulation_steps
    ring = (n - 1) / n
    if strategy.stage == 0:
        volume = 2 * psi * b
    elif strategy.stage == 1:
        volume = 2 * psi * b + psi * b  # all-reduce of the gradients, all-gather of the parameters
    elif strategy.stage == 2:
        volume = 2 * psi * b * accum + psi * b
    else:
        gathers = 3 if workload.gradient_checkpointing else 2
        # every stored weight (frozen ones too, 4-bit for QLoRA) is gathered; trainable gradients reduced
        volume = (gathers * weight_bytes(spec, workload) + psi * b) * accum
    return volume * ring


def cpu_adam_params(spec: ModelSpec, strategy: Strategy, workload: Workload) -> float:
    """Returns the parameters one node's CPUs update per optimizer step under optimizer offload (0 without):
    the node's share of the trainable parameters, Psi * gpus_per_node / world_size."""
    if strategy.offload_optimizer == "none":
        return 0.0
    return trainable_params(spec, workload) * workload.gpus_per_node / workload.world_size


def pcie_seconds(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload,
                 calibration: Calibration | None = None) -> float:
    """Returns the host <-> device copy time of offload per optimizer step (0 without offload), CPU Adam apart.

    Optimizer offload (ZeRO-Offload): each GPU sends its gradient partition down (2 bytes * Psi/n, every
    micro-step, as stages 2/3 reduce every micro-step) and receives its updated 16-bit parameters back up
    (2 bytes * Psi/n, once per step). ZeRO-3 keeping parameters on the GPU brings them up from pageable memory
    instead (stage3_offload_copy_bytes_per_s). Parameter offload (ZeRO-Infinity, stage 3): the parameter
    partition comes up from host memory for the forward and again for the backward (one more time for a
    recomputed forward), every micro-step.
    """
    if strategy.offload_optimizer == "none" and strategy.offload_param == "none":
        return 0.0
    cal = calibration or load_calibration()
    n = workload.world_size
    psi = trainable_params(spec, workload)
    b = 4 if workload.precision == "fp32" else 2
    accum = workload.gradient_accumulation_steps
    partition_bytes = b * psi / n
    pcie = float(gpu.pcie_bandwidth_bytes_per_s)
    seconds = 0.0
    if strategy.offload_optimizer != "none":
        seconds += (partition_bytes * accum + partition_bytes) / pcie
        if strategy.stage == 3 and strategy.offload_param == "none":
            seconds += partition_bytes / cal.stage3_offload_copy_bytes_per_s
    if strategy.offload_param != "none":
        transfers = 3 if workload.gradient_checkpointing else 2
        seconds += transfers * weight_bytes(spec, workload) / n * accum / pcie
    return seconds


def offload_seconds(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload,
                    calibration: Calibration | None = None) -> float:
    """Returns PCIe transfer time plus CPU Adam time per optimizer step (0 without offload): pcie_seconds plus
    cpu_adam_params at the host's CPU Adam rate (Calibration.cpu_adam_params_per_s_per_node)."""
    cal = calibration or load_calibration()
    adam = cpu_adam_params(spec, strategy, workload) / cal.cpu_adam_params_per_s_per_node
    return pcie_seconds(spec, strategy, gpu, workload, cal) + adam


def attention_mask_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes of explicit attention masks in one micro-step (0 where SDPA runs causal without one).

    A sliding window the sequence reaches (memory.sdpa_masked_layers) makes transformers hand SDPA a boolean
    (batch, 1, seq, seq) mask, which SDPA turns into an additive bias in the query's dtype (read 1 B, write `b`
    per position, every forward call). On the H100 and H200 (torch 2.11) cuDNN's flash kernels take that bias
    and read it inside the attention kernel, whose time masked_attention_fraction holds: Phi-3-mini's kernel
    profiles (recompute-h100-phi3-*-2026-11-27.json) moved the memory-bound kernels by 1.3 ms plain and 2.4
    checkpointed from 4 x 2,048 to 2 x 4,096 tokens, this conversion's bytes, where a bias read again per head
    (the memory-efficient kernel's grid) would have added 41 and 62 ms. GPUs whose SDPA takes the memory-efficient
    kernel instead are not measured.
    """
    masked = _sdpa_masked_layers(spec, workload)
    if not masked:
        return 0.0
    b = 4 if workload.precision == "fp32" else 2
    positions = workload.micro_batch_size * workload.seq_len * workload.seq_len
    return float(masked * positions * (1 + b) * (2 if workload.gradient_checkpointing else 1))


# Eager attention (transformers' eager_attention_forward, where SDPA is refused or not chosen) materializes the
# scores, (batch, heads, seq, seq) per layer, the whole square (the causal half is masked, not skipped), and moves
# them through unfused kernels. Bytes per score element with 16-bit activations (fp32: twice), forward: the QK^T
# matmul's output 2, `* scaling` 2+2, `+ attention_mask` 2+2 (the mask, shared by the heads, left out), softmax in
# fp32 2+4, `.to(dtype)` 4+2, the PV matmul's read 2; dropout at p=0 runs no kernel. Backward: the PV matmul's
# gradient 2 and read 2, the cast back 2+4, softmax backward 4+4+2, `* scaling` 2+2, the QK^T matmul's two reads 4.
_EAGER_SCORE_FORWARD_BYTES = 24
_EAGER_SCORE_BACKWARD_BYTES = 28
_EAGER_SOFTCAP_FORWARD_BYTES = 12
"""Gemma 2's attention logit soft-capping on the scores: divide, tanh, multiply, 2+2 each."""
_EAGER_SOFTCAP_BACKWARD_BYTES = 14
"""Its backward: the multiply 2+2, tanh's 2+2+2 (the saved output), the divide 2+2."""


_MATH_SCORE_FORWARD_BYTES = 38
"""SDPA's math kernel (torch 2.11, composite; fp32 scores whatever the precision), per score element in forward:
the QK^T matmul's output 4, `add_` of the causal mask 4+4, _safe_softmax's softmax 4+4, its `eq(-inf)` 4+1, `all`
over the row 1, `where` 4+4, the PV matmul's read 4."""
_MATH_SCORE_BACKWARD_BYTES = 36
"""Its backward: the PV matmul's gradient of the probabilities 4 and read of them 4, `where`'s backward 4+4, softmax
backward 4+4+4, the QK^T matmul's two reads 4+4."""


def eager_attention_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes eager attention's score kernels move in one micro-step, or SDPA's math kernel's where it
    runs (sdpa_math_kernel: fp32 scores, _MATH_SCORE_FORWARD_BYTES and _BACKWARD_BYTES); 0 under SDPA's fused
    kernels, which keep the scores on chip.

    Measured (2026-11-27, two H200s, Gemma 2 2B at 2,048 tokens): zero-run with the plan's eager attention took 132
    ms more per step than the harness's SDPA, both waiting once per step, at ZeRO-1 5 x 2,048 (0.676 against 0.544
    s; benchmarks/zero_run/gemma2-2b-eager-*, h200x2-i26-gemma2-one-sync-2026-11-27.jsonl) and 504 ms more at ZeRO-0
    13 x 2,048 with checkpointing (2.062 against 1.558 s); these bytes at Calibration.eager_scores_memory_fraction
    (0.54 of 4.8 TB/s) come to 131 and 499 ms (eager_attention_seconds)."""
    if not spec.num_layers:
        return 0.0
    if sdpa_math_kernel(spec, workload):
        forward, backward, scale = _MATH_SCORE_FORWARD_BYTES, _MATH_SCORE_BACKWARD_BYTES, 1  # fp32 at any precision
    elif workload.attn_implementation == "eager":
        forward, backward = _EAGER_SCORE_FORWARD_BYTES, _EAGER_SCORE_BACKWARD_BYTES
        if spec.config.get("attn_logit_softcapping"):
            forward += _EAGER_SOFTCAP_FORWARD_BYTES
            backward += _EAGER_SOFTCAP_BACKWARD_BYTES
        scale = 2 if workload.precision == "fp32" else 1
    else:
        return 0.0
    per_element = forward * (2 if workload.gradient_checkpointing else 1) + backward
    scores = workload.micro_batch_size * spec.num_attention_heads * workload.seq_len * workload.seq_len
    return float(spec.num_layers * scores * per_element * scale)


def eager_attention_seconds(spec: ModelSpec, gpu: GPU, workload: Workload,
                            calibration: Calibration | None = None) -> float:
    """Returns the seconds of eager attention's score kernels in one micro-step: eager_attention_bytes at
    Calibration.eager_scores_memory_fraction of the catalog bandwidth where measured, else at the fitted HBM rate;
    SDPA's math kernel's at Calibration.math_sdpa_memory_fraction; 0 under SDPA's fused kernels."""
    scores = eager_attention_bytes(spec, workload)
    if not scores:
        return 0.0
    cal = calibration or load_calibration()
    if sdpa_math_kernel(spec, workload) and cal.math_sdpa_memory_fraction:
        return scores / (gpu.memory_bandwidth_bytes_per_s * cal.math_sdpa_memory_fraction)
    if not cal.eager_scores_memory_fraction:
        return scores / memory_bytes_per_s(gpu, calibration)
    return scores / (gpu.memory_bandwidth_bytes_per_s * cal.eager_scores_memory_fraction)


def device_traffic_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes of the micro-step's memory-bound kernels at the fitted HBM rate: elementwise kernels and
    the loss (activation_traffic_bytes), MoE routing and permutation (moe_traffic_bytes), explicit attention masks
    (attention_mask_bytes). The GEMMs' own bytes are in their roofline (gemm_seconds); eager attention's scores
    have their own measured rate (eager_attention_seconds)."""
    return activation_traffic_bytes(spec, workload) + moe_traffic_bytes(spec, workload) + attention_mask_bytes(spec, workload)


def broadcast_bytes_per_s(gpu: GPU, calibration: Calibration | None = None) -> float:
    """Returns the device-memory rate of broadcasting elementwise kernels on `gpu` (Calibration.broadcast_fraction_for
    of its catalog bandwidth where measured, else the fitted HBM rate)."""
    cal = calibration or load_calibration()
    fraction = cal.broadcast_fraction_for(gpu.name)
    return gpu.memory_bandwidth_bytes_per_s * fraction if fraction else memory_bytes_per_s(gpu, calibration)


def traffic_seconds(spec: ModelSpec, gpu: GPU, workload: Workload, calibration: Calibration | None = None) -> float:
    """Returns the seconds of the micro-step's memory-bound kernels (device_traffic_bytes): the broadcasting ones
    (broadcast_traffic_bytes) at their measured rate, the rest at the fitted HBM rate."""
    broadcast = broadcast_traffic_bytes(spec, workload)
    return ((device_traffic_bytes(spec, workload) - broadcast) / memory_bytes_per_s(gpu, calibration)
            + broadcast / broadcast_bytes_per_s(gpu, calibration))


def micro_step_gpu_seconds(spec: ModelSpec, gpu: GPU, workload: Workload,
                           calibration: Calibration | None = None) -> float:
    """Returns the GPU's seconds for one micro-step: weight matmuls at their rooflines, attention at its
    achieved rate, memory-bound kernels at theirs (traffic_seconds), eager attention's scores at theirs."""
    matmul_s = gemm_seconds(spec, gpu, workload, calibration)
    attention_s = attention_seconds(spec, gpu, workload, calibration) + eager_attention_seconds(spec, gpu, workload, calibration)
    return matmul_s + attention_s + traffic_seconds(spec, gpu, workload, calibration)


def _sdpa_masked_layers(spec: ModelSpec, workload: Workload) -> int:
    """Returns the layers that attend through an explicit mask (memory.sdpa_masked_layers) where attention runs
    in SDPA, 0 for other attention implementations."""
    return sdpa_masked_layers(spec, workload.seq_len) if workload.attn_implementation == "sdpa" else 0


def masked_attention_share(spec: ModelSpec, workload: Workload, calibration: Calibration | None = None) -> float:
    """Returns the share of attention_flops timed at the masked rate: that of the layers attending through an
    explicit mask under SDPA, where Calibration.masked_attention_fraction is measured (else 0: those layers run
    at the unmasked rate)."""
    cal = calibration or load_calibration()
    if not cal.masked_attention_fraction or not spec.num_layers:
        return 0.0
    return _sdpa_masked_layers(spec, workload) / spec.num_layers


def masked_attention_seconds(spec: ModelSpec, gpu: GPU, workload: Workload,
                             calibration: Calibration | None = None) -> float:
    """Returns the seconds of the masked layers' attention at Calibration.masked_attention_fraction of the peak."""
    share = masked_attention_share(spec, workload, calibration)
    if not share:
        return 0.0
    cal = calibration or load_calibration()
    rate = peak_flops(gpu, workload.precision) * cal.masked_attention_fraction
    return attention_flops(spec, workload) * share / rate


def attention_seconds(spec: ModelSpec, gpu: GPU, workload: Workload, calibration: Calibration | None = None) -> float:
    """Returns the seconds of one micro-step's attention kernels: unmasked layers at the fitted attention rate,
    masked ones at their measured rate (masked_attention_seconds); under SDPA's math kernel (sdpa_math_kernel) its
    two fp32 products, the whole square, at Calibration.math_sdpa_matmul_fraction of the fp32 peak."""
    if sdpa_math_kernel(spec, workload):
        # torch's math kernel: the whole square in fp32 matmuls (no TF32 by default), at their measured share of the
        # fp32 peak
        cal = calibration or load_calibration()
        fraction = cal.math_sdpa_matmul_fraction or cal.matmul_fraction
        return attention_flops(spec, workload) / (peak_flops(gpu, "fp32") * fraction)
    unmasked = attention_flops(spec, workload) * (1 - masked_attention_share(spec, workload, calibration))
    return (unmasked / attention_flops_per_s(gpu, workload.precision, calibration)
            + masked_attention_seconds(spec, gpu, workload, calibration))


def optimizer_seconds(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload,
                      calibration: Calibration | None = None) -> float:
    """Returns the GPU optimizer step's seconds (once per optimizer step; 0 when the optimizer is offloaded).

    Stages 1-3 step the rank's partition only: trainable params / world size.
    """
    if strategy.offload_optimizer != "none":
        return 0.0
    cal = calibration or load_calibration()
    psi = trainable_params(spec, workload)
    if strategy.stage >= 1:
        psi /= workload.world_size
    return cal.optimizer_bytes_per_param * psi / memory_bytes_per_s(gpu, calibration)


def trainable_tensors(spec: ModelSpec, workload: Workload) -> int:
    """Returns the tensors the optimizer updates: every parameter tensor of the model, or the LoRA adapters' two
    per adapted linear layer (plus a seq-cls score head)."""
    if workload.method in ("lora", "qlora"):
        return 2 * adapted_linears(spec) + (1 if workload.task == "seq-cls" else 0)
    return sum(count for _, count in spec.tensor_sizes)


def grad_tensor_passes(spec: ModelSpec, strategy: Strategy, workload: Workload) -> float:
    """Returns the gradient tensors one rank handles one at a time per optimizer step (Calibration.seconds_per_grad_tensor):
    stage 0 checks every trainable tensor; stages 1 and 2 the rank's partition, about 1/world of them (DeepSpeed
    partitions the flattened gradients); stage 3 moves every gradient into its partition in each micro-step's
    backward, on every rank. The same with the optimizer offloaded: DeepSpeed still walks the gradients one tensor at
    a time to copy them to the host (stage_1_and_2.py copy_grads_in_partition; counted there, the fit's 22 offload
    runs went from 3.3% to 3.1% median error)."""
    tensors = trainable_tensors(spec, workload)
    if strategy.stage == 3:
        return float(tensors * workload.gradient_accumulation_steps)
    return tensors / workload.world_size if strategy.stage >= 1 else float(tensors)


def grad_tensor_seconds(spec: ModelSpec, strategy: Strategy, workload: Workload,
                        calibration: Calibration | None = None) -> float:
    """Returns the host seconds per optimizer step of DeepSpeed's per-gradient-tensor work (grad_tensor_passes x
    Calibration.seconds_per_grad_tensor), which the GPU waits through."""
    cal = calibration or load_calibration()
    return grad_tensor_passes(spec, strategy, workload) * cal.seconds_per_grad_tensor


def overlapped_seconds(gpu_s: float, host_s: float, power: float) -> float:
    """Returns the seconds of work the GPU (`gpu_s`) and its host's thread (`host_s`) do side by side: their smooth
    maximum (gpu_s^power + host_s^power)^(1/power), the plain maximum at infinity
    (Calibration.host_overlap_power)."""
    top = max(gpu_s, host_s)
    if math.isinf(power) or top <= 0:
        return top
    return top * ((gpu_s / top) ** power + (host_s / top) ** power) ** (1 / power)


def estimate_step_time(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload,
                       calibration: Calibration | None = None, buffers: ZeroBuffers | None = None) -> StepTime:
    """Returns the estimated StepTime of one optimizer step of `workload` under `strategy` on `gpu`s.

    `workload.world_size` GPUs each run `gradient_accumulation_steps` micro-steps of `micro_batch_size` x
    `seq_len` tokens; compute is per GPU (data parallel), so more GPUs never slow it down. `calibration`
    None: the committed constants (load_calibration()), the GPU's own measured rates where the catalog has
    them; given: its constants everywhere (a refit, or this host's CPU Adam rate). `buffers`: the ZeRO sizes of a
    user's DeepSpeed JSON (ZeRO-2's bucket count, ZeRO-3's persistence threshold); ours unless given.
    """
    cal = calibration or load_calibration()
    accum = workload.gradient_accumulation_steps
    gpu_s = micro_step_gpu_seconds(spec, gpu, workload, calibration) + zero3_bias_seconds(spec, strategy, gpu, workload,
                                                                                         calibration)
    fetches_s = stage3_host_seconds(spec, workload, cal, buffers) if strategy.stage == 3 else 0.0
    compute_s = accum * gpu_s
    launches_s = host_seconds(spec, strategy, workload, cal, buffers)
    # the hooks run on the host's thread with the layers' launches: their sum against the GPU's work
    launched_s = overlapped_seconds(gpu_s, launches_s, cal.host_overlap_power)
    stage3_s = accum * (overlapped_seconds(gpu_s, launches_s + fetches_s, cal.host_overlap_power) - launched_s)
    host_bound_s = accum * (launched_s - gpu_s) + grad_tensor_seconds(spec, strategy, workload, cal)
    optimizer_s = optimizer_seconds(spec, strategy, gpu, workload, calibration)
    communication_s = communication_seconds(spec, strategy, gpu, workload, cal)
    offload_s = offload_seconds(spec, strategy, gpu, workload, cal)
    step_s = compute_s + host_bound_s + stage3_s + optimizer_s + communication_s + offload_s
    tokens = workload.micro_batch_size * workload.seq_len * accum * workload.world_size
    return StepTime(
        compute_s=compute_s,
        communication_s=communication_s,
        offload_s=offload_s,
        step_s=step_s,
        tokens_per_step=tokens,
        tokens_per_second=tokens / step_s,
        mfu=accum * training_flops(spec, workload) / (step_s * peak_flops(gpu, workload.precision)),
        modelled=models_throughput(gpu),
        stage3_s=stage3_s,
        host_s=host_bound_s,
        optimizer_s=optimizer_s,
        host_work_s=accum * (launches_s + fetches_s),
    )

"""The step-time model: seconds per optimizer step and tokens/s, used to rank candidates that fit.

Calibrated on measured single-GPU steps (benchmarks/results/*.jsonl; the fit is benchmarks/throughput_fit.py,
the comparison benchmarks/throughput_check.py). One micro-step on one GPU is

    gpu_s   = weight-matmul FLOPs / achieved matmul rate  +  attention FLOPs / achieved attention rate
            + bytes of memory-bound kernels / achieved HBM rate
    micro_s = gpu_s                                  (stages 0-2)
            = max(gpu_s, fetches * STAGE3_SECONDS_PER_FETCH)   (stage 3: the host-side hook work per fetched
                                                       parameter, which the GPU hides when its work is longer)

and one optimizer step is accum * micro_s + the optimizer step on the GPU (or CPU Adam with offload) + ZeRO
collectives between GPUs + PCIe traffic for offload, with no overlap assumed between those. The achieved
rates are per GPU (catalog/gpus.json, measured on H100; other GPUs scale their catalog peaks by the H100's
ratio); the byte counts come from the kernels the Hugging Face model runs (counted below, not fitted); the
per-software constants are module constants with their provenance. Pure: numbers in, numbers out; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from zero_planner.dsconfig import bucket_sizes
from zero_planner.hardware import GPU, load_gpu_catalog
from zero_planner.memory import Workload, trainable_params, weight_bytes
from zero_planner.models.spec import ModelSpec
from zero_planner.strategies import Strategy

REFERENCE_GPU = "H100-SXM"
"""The catalog GPU whose achieved rates were measured; others get its achieved/peak ratios."""

MEASURED_ON = "H100 80GB HBM3 (16 host cores), torch 2.11.0+cu130, deepspeed 0.19.8, transformers 5.17.0, 2026-11-23"
"""Where the fitted constants below (and the H100's achieved_* catalog fields) come from."""

OPTIMIZER_BYTES_PER_PARAM = 99.0
"""FITTED: device-memory bytes per trainable parameter that one optimizer step costs at the achieved HBM rate
(DeepSpeed's fused Adam with fp32 master weights, gradient-norm clipping, the bf16 copy back, gradient
zeroing). The kernels' own traffic is ~62 B (fp32 grad accumulate 10, norm 4, clip 8, Adam 28, bf16 copy 6,
zero 4); the fit finds more (per-tensor launches and Python in the step), so the constant is the measured
figure. MEASURED_ON; benchmarks/throughput_fit.py, stages 0-2."""

STAGE3_SECONDS_PER_FETCH = 1.88e-3
"""FITTED: host seconds per ZeRO-3 parameter fetch (one gathered tensor, forward or backward): the
pre/post-forward/backward module hooks, the partitioned-parameter coordinator's trace and prefetch
bookkeeping, `__allgather_params` (a copy even on one GPU) and the release, and the gradient's
reduce-scatter into its partition (deepspeed/runtime/zero/partitioned_param_coordinator.py, stage3.py,
parameter_offload.py). The GPU runs ahead of the host, so this only costs time where it is longer than the
micro-step's GPU work (small micro-batches). MEASURED_ON; benchmarks/throughput_fit.py, stage-3 cases, their
steps after warmup_steps (ZeRO-3 records its trace in the second)."""

CPU_ADAM_PARAMS_PER_S_PER_NODE = 1.88e9
"""FITTED: parameters per second that DeepSpeed's CPUAdam updates with all cores of one node, including the
fp32 gradient copy to host and the bf16 parameter copy back (offload cases of MEASURED_ON, 16 host cores).
A many-core server may be faster; the figure is what we measured, not scaled by core count."""

def warmup_steps(stage: int, micro_steps_per_step: int = 1) -> int:
    """Returns the steps a measured tokens/s leaves out: the first everywhere (allocations, kernel tuning), and
    under ZeRO-3 the second too when a step is one forward/backward: the parameter coordinator starts with an
    invalid trace, records the module order in the second forward/backward and prefetches only from the third
    (deepspeed/runtime/zero/partitioned_param_coordinator.py reset_step: INVALID -> RECORD -> COMPLETE). Every
    committed stage-3 case shows it: its second step up to 4x the later ones (benchmarks/results)."""
    return 2 if stage == 3 and micro_steps_per_step == 1 else 1


STAGE3_OFFLOAD_COPY_BYTES_PER_S = 4.8e9
"""MEASURED: bytes per second at which ZeRO-3 with the optimizer offloaded and parameters on the GPU brings the
updated parameters up: each sub-group's fp32 master is converted into a fresh, unpinned 16-bit host buffer
and copied to the GPU from pageable memory (stage3.py _optimizer_step; the w-byte host transient that
memory.py counts), where ZeRO-2 offload copies from a pinned staging buffer. Llama-3.2-3B on the H200 (16 host
cores, alone, 2026-11-23): 3-offload minus 2-offload at equal shapes, +1.10 s (mb 12) and +1.58 s (mb 38, gc)
per step for 6.4 GB, 4.1-5.8 GB/s; CPU Adam and every other term are common to both and cancel."""

INTER_NODE_BANDWIDTH_BYTES_PER_S = 25 * 10**9
"""Node-to-node bandwidth per direction assumed when the GPU catalog gives none: 200 Gb/s, one
InfiniBand HDR / 200 GbE NIC per node."""

MAX_MATMUL_FRACTION = 0.8
"""The fit's ceiling on achieved/peak matmul rate: large bf16 GEMMs on H100 SXM reach ~75-80% of the dense
peak in cuBLAS benchmarks; the committed steps alone cannot separate the matmul rate from the memory-bound
term (they trade off), so the fit searches below this ceiling."""

MEDIAN_ERROR = 0.07
"""Median |predicted/measured - 1| of tokens/s over the committed H100 single-GPU cases
(benchmarks/throughput_check.py); shown beside predicted tokens/s."""

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
    """Everything: compute + stage-3 host overhead + optimizer + communication + offload, no overlap."""
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
    optimizer_s: float = 0.0
    """The optimizer step on the GPU (zero when the optimizer is offloaded: CPU Adam is in offload_s)."""


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
    lm_head runs forward and backward once), so the lm_head counts 6, not 8."""
    tokens = workload.micro_batch_size * workload.seq_len
    passes = _passes(workload)
    head = spec.vocab_size * spec.hidden_size if workload.task == "causal-lm" else 0
    head = min(head, compute_params(spec))
    recomputed_head = head if workload.gradient_checkpointing else 0
    return float(2 * passes * compute_params(spec) * tokens - 2 * recomputed_head * tokens)


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
"""Dropout: read 2, write 2 and a 1-byte mask (GPT-2's residual dropouts; llama-style models have none)."""
_ATTENTION_OUTPUT_BYTES = 4
"""The attention output's transpose back to (batch, seq, heads*head_dim): a copy, read 2 + write 2."""
_MOE_ROUTING_BYTES = 14
"""Per routed expert and hidden element: hidden_states[token_idx] 2+2, * routing weight 2+2, index_add_ 2+2+2."""
_LOSS_BYTES_PER_LOGIT = 40
"""ForCausalLMLoss per logit: logits.float() 2+4, log_softmax 4+4 (max and sum) + 4; backward: the nll
gradient fill 4, log_softmax backward 4+4+4, the cast back 4+2 (transformers loss_utils.py, cross_entropy)."""
_SOFTCAP_BYTES_PER_LOGIT = 36
"""Gemma-2's final logit soft-capping (divide, tanh, multiply on bf16 logits), forward and backward."""
BACKWARD_TRAFFIC_RATIO = 2
"""An elementwise op's backward reads its saved input(s) and the incoming gradient and writes the input
gradient: about twice the forward's bytes (a count, not fitted)."""


def layer_traffic_bytes(spec: ModelSpec) -> int:
    """Returns the bytes that one decoder layer's memory-bound kernels move per token in one forward (bf16)."""
    h = spec.hidden_size
    mlp = spec.intermediate_size * spec.num_experts_per_tok
    d_q = spec.num_attention_heads * spec.head_dim
    d_kv = spec.num_key_value_heads * spec.head_dim
    model_type = spec.model_type
    activation = str(spec.config.get("hidden_act") or spec.config.get("activation_function") or "silu")
    layer_norm = model_type in ("gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi")
    norms = 4 if model_type in ("gemma2", "gemma3", "gemma3_text") else 2  # gemma-2: pre- and post-norms
    norm_bytes = norms * (_LAYER_NORM_BYTES if layer_norm else _RMS_NORM_BYTES) * h
    rotary = 0 if model_type in ("gpt2", "opt", "bloom") else _ROTARY_BYTES * (d_q + d_kv)
    qk_norm = _RMS_NORM_BYTES * (d_q + d_kv) if model_type in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text") else 0
    act = (_PYTHON_GELU_BYTES if activation in ("gelu_new", "gelu_fast") else _NATIVE_ACTIVATION_BYTES) * mlp
    gate = _GATE_MULTIPLY_BYTES * mlp if spec.gated_mlp else 0
    resid_pdrop = spec.config.get("resid_pdrop", 0.1 if model_type == "gpt2" else 0.0)  # GPT2Config's default
    dropout = 2 * _DROPOUT_BYTES * h if float(resid_pdrop or 0) > 0 else 0
    residual = 2 * _RESIDUAL_BYTES * h
    routing = 0
    if spec.num_experts > 1:  # transformers 5 MixtralExperts: zeros_like, then per routed expert
        routing = 2 * h + spec.num_experts_per_tok * _MOE_ROUTING_BYTES * h  # gather, weight, index_add_
    return norm_bytes + rotary + qk_norm + act + gate + dropout + residual + routing + _ATTENTION_OUTPUT_BYTES * d_q


def activation_traffic_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the device-memory bytes one micro-step's memory-bound kernels move on one GPU.

    Per token: each layer's elementwise kernels (layer_traffic_bytes) once forward, BACKWARD_TRAFFIC_RATIO
    times backward and once more when checkpointing recomputes the forward; plus the loss over the fp32
    logits (micro_batch * seq * vocab of them: for a 152k vocabulary that is ~6 MB per token, more than a
    0.5B model's layers). fp32 training moves twice the bytes.
    """
    tokens = workload.micro_batch_size * workload.seq_len
    passes = 1 + BACKWARD_TRAFFIC_RATIO + (1 if workload.gradient_checkpointing else 0)
    per_token = passes * spec.num_layers * layer_traffic_bytes(spec)
    if workload.task == "causal-lm":
        per_token += _LOSS_BYTES_PER_LOGIT * spec.vocab_size
        if spec.config.get("final_logit_softcapping"):
            per_token += _SOFTCAP_BYTES_PER_LOGIT * spec.vocab_size
    scale = 2 if workload.precision == "fp32" else 1
    return float(tokens * per_token * scale)


def peak_flops(gpu: GPU, precision: str) -> float:
    """Returns the GPU's peak in FLOP/s for `precision`: the dense 16-bit tensor-core peak, or plain fp32."""
    tflops = gpu.peak_tflops_fp32 if precision == "fp32" else gpu.peak_dense_tflops_16bit
    return tflops * 1e12


@lru_cache(maxsize=1)
def reference_fractions() -> tuple[float, float, float]:
    """Returns the measured GPU's achieved/peak ratios: (matmul, device memory, attention)."""
    ref = load_gpu_catalog()[REFERENCE_GPU]
    peak = ref.peak_dense_tflops_16bit
    matmul = (ref.achieved_matmul_tflops_16bit or peak) / peak
    memory = (ref.achieved_memory_bandwidth_bytes_per_s or ref.memory_bandwidth_bytes_per_s) / ref.memory_bandwidth_bytes_per_s
    attention = (ref.achieved_attention_tflops_16bit or peak) / peak
    return matmul, memory, attention


def matmul_flops_per_s(gpu: GPU, precision: str) -> float:
    """Returns the matmul rate a training step reaches on `gpu`, in FLOP/s.

    The GPU's measured rate where the catalog has one (H100-SXM); otherwise its peak times the H100's
    measured achieved/peak ratio (an assumption for T4, A100, RTX 4090, H200, ...: same kernels, same share
    of the peak). fp32 uses the plain fp32 peak (PyTorch's default keeps TF32 off for matmuls) at that ratio.
    """
    if precision != "fp32" and gpu.achieved_matmul_tflops_16bit:
        return gpu.achieved_matmul_tflops_16bit * 1e12
    return peak_flops(gpu, precision) * reference_fractions()[0]


def attention_flops_per_s(gpu: GPU, precision: str) -> float:
    """Returns the rate at which SDPA's attention kernels get through attention_flops on `gpu`, in FLOP/s:
    measured where the catalog has it, else the peak times the H100's measured ratio."""
    if precision != "fp32" and gpu.achieved_attention_tflops_16bit:
        return gpu.achieved_attention_tflops_16bit * 1e12
    return peak_flops(gpu, precision) * reference_fractions()[2]


def memory_bytes_per_s(gpu: GPU) -> float:
    """Returns the device-memory rate the step's memory-bound kernels reach on `gpu`, in bytes/s: measured
    where the catalog has it, else the catalog bandwidth times the H100's measured ratio."""
    if gpu.achieved_memory_bandwidth_bytes_per_s:
        return float(gpu.achieved_memory_bandwidth_bytes_per_s)
    return gpu.memory_bandwidth_bytes_per_s * reference_fractions()[1]


def stage3_fetches(spec: ModelSpec, workload: Workload, persistence_threshold: int | None = None) -> int:
    """Returns the parameter tensors ZeRO-3 gathers and releases in one micro-step.

    Tensors above stage3_param_persistence_threshold (our dsconfig's 10 * hidden unless given) are fetched
    once in the forward, once in the backward and once more for a checkpointed forward; smaller ones (norms,
    biases) stay resident.
    """
    threshold = bucket_sizes(spec.hidden_size)["stage3_param_persistence_threshold"] if persistence_threshold is None else persistence_threshold
    fetched = sum(count for numel, count in spec.tensor_sizes if numel > threshold)
    return fetched * (3 if workload.gradient_checkpointing else 2)


def link_bandwidth_bytes_per_s(gpu: GPU, workload: Workload) -> float:
    """Returns the bandwidth a ring collective runs at: the intra-node link, or the slower node-to-node link
    when the job spans nodes (in a ring every link carries the same bytes, so the slowest one sets the pace)."""
    bandwidth = float(gpu.intra_node_bandwidth_bytes_per_s)
    if workload.world_size > workload.gpus_per_node:
        inter = getattr(gpu, "inter_node_bandwidth_bytes_per_s", None) or INTER_NODE_BANDWIDTH_BYTES_PER_S
        bandwidth = min(bandwidth, float(inter))
    return bandwidth


def communication_bytes(spec: ModelSpec, strategy: Strategy, workload: Workload) -> float:
    """Returns the bytes each GPU sends per optimizer step for ZeRO's collectives (0 on one GPU).

    ZeRO paper (Rajbhandari et al. 2020, section 7): with Psi parameters of `b` bytes, an all-reduce moves
    2 * Psi * b * (n-1)/n per GPU (reduce-scatter + all-gather); stages 1 and 2 move the same (reduce-scatter
    of gradients, all-gather of updated parameters); stage 3 moves 3 * Psi * b (all-gather in forward and in
    backward, reduce-scatter of gradients), plus one all-gather more when checkpointing recomputes the forward.
    When it happens: stages 0 and 1 reduce gradients once per optimizer step (at the accumulation boundary);
    stage 2 reduces in every backward (each micro-step); stage 3 gathers and reduces every micro-step.
    """
    n = workload.world_size
    if n <= 1:
        return 0.0
    psi = trainable_params(spec, workload)  # gradients are reduced for trainable parameters only
    b = 4 if workload.precision == "fp32" else 2
    accum = workload.gradient_accumulation_steps
    ring = (n - 1) / n
    if strategy.stage in (0, 1):
        volume = 2 * psi * b
    elif strategy.stage == 2:
        volume = psi * b * accum + psi * b  # reduce-scatter per micro-step + one all-gather after the step
    else:
        gathers = 3 if workload.gradient_checkpointing else 2
        # every stored weight (frozen ones too, 4-bit for QLoRA) is gathered; trainable gradients reduced
        volume = (gathers * weight_bytes(spec, workload) + psi * b) * accum
    return volume * ring


def offload_seconds(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload) -> float:
    """Returns PCIe transfer time plus CPU Adam time per optimizer step (0 without offload).

    Optimizer offload (ZeRO-Offload): each GPU sends its gradient partition down (2 bytes * Psi/n, every
    micro-step, as stages 2/3 reduce every micro-step) and receives its updated 16-bit parameters back up
    (2 bytes * Psi/n, once per step); the node's CPUs run Adam over the node's share, Psi * gpus_per_node / n.
    ZeRO-3 keeping parameters on the GPU brings them up from pageable memory instead
    (STAGE3_OFFLOAD_COPY_BYTES_PER_S).
    Parameter offload (ZeRO-Infinity, stage 3): the parameter partition comes up from host memory for the
    forward and again for the backward (one more time for a recomputed forward), every micro-step.
    """
    if strategy.offload_optimizer == "none" and strategy.offload_param == "none":
        return 0.0
    n = workload.world_size
    psi = trainable_params(spec, workload)
    b = 4 if workload.precision == "fp32" else 2
    accum = workload.gradient_accumulation_steps
    partition_bytes = b * psi / n
    pcie = float(gpu.pcie_bandwidth_bytes_per_s)
    seconds = 0.0
    if strategy.offload_optimizer != "none":
        seconds += (partition_bytes * accum + partition_bytes) / pcie
        seconds += psi * workload.gpus_per_node / n / CPU_ADAM_PARAMS_PER_S_PER_NODE
        if strategy.stage == 3 and strategy.offload_param == "none":
            seconds += partition_bytes / STAGE3_OFFLOAD_COPY_BYTES_PER_S
    if strategy.offload_param != "none":
        transfers = 3 if workload.gradient_checkpointing else 2
        seconds += transfers * weight_bytes(spec, workload) / n * accum / pcie
    return seconds


def micro_step_gpu_seconds(spec: ModelSpec, gpu: GPU, workload: Workload) -> float:
    """Returns the GPU's seconds for one micro-step: weight matmuls and attention at their achieved rates plus
    memory-bound traffic at the achieved HBM rate."""
    matmul_s = matmul_flops(spec, workload) / matmul_flops_per_s(gpu, workload.precision)
    attention_s = attention_flops(spec, workload) / attention_flops_per_s(gpu, workload.precision)
    return matmul_s + attention_s + activation_traffic_bytes(spec, workload) / memory_bytes_per_s(gpu)


def optimizer_seconds(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload) -> float:
    """Returns the GPU optimizer step's seconds (once per optimizer step; 0 when the optimizer is offloaded).

    Stages 1-3 step the rank's partition only: trainable params / world size.
    """
    if strategy.offload_optimizer != "none":
        return 0.0
    psi = trainable_params(spec, workload)
    if strategy.stage >= 1:
        psi /= workload.world_size
    return OPTIMIZER_BYTES_PER_PARAM * psi / memory_bytes_per_s(gpu)


def estimate_step_time(spec: ModelSpec, strategy: Strategy, gpu: GPU, workload: Workload) -> StepTime:
    """Returns the estimated StepTime of one optimizer step of `workload` under `strategy` on `gpu`s.

    `workload.world_size` GPUs each run `gradient_accumulation_steps` micro-steps of `micro_batch_size` x
    `seq_len` tokens; compute is per GPU (data parallel), so more GPUs never slow it down.
    """
    accum = workload.gradient_accumulation_steps
    gpu_s = micro_step_gpu_seconds(spec, gpu, workload)
    host_s = stage3_fetches(spec, workload) * STAGE3_SECONDS_PER_FETCH if strategy.stage == 3 else 0.0
    compute_s = accum * gpu_s
    stage3_s = accum * max(0.0, host_s - gpu_s)
    optimizer_s = optimizer_seconds(spec, strategy, gpu, workload)
    communication_s = communication_bytes(spec, strategy, workload) / link_bandwidth_bytes_per_s(gpu, workload)
    offload_s = offload_seconds(spec, strategy, gpu, workload)
    step_s = compute_s + stage3_s + optimizer_s + communication_s + offload_s
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
        optimizer_s=optimizer_s,
    )

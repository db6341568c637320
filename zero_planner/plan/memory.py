"""The memory model: per-GPU and per-host bytes for one training step, per ZeRO strategy.

Pure functions of a ModelSpec, a Strategy and a Workload; no torch. Every term names where it comes from.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from zero_planner.hardware import catalog_gpu
from zero_planner.models.activations import closed_form_coefficients
from zero_planner.models.spec import ModelSpec
from zero_planner.phases import PHASES
from zero_planner.plan.dsconfig import bucket_sizes
from zero_planner.plan.dsdefaults import zero_settings
from zero_planner.plan.nccl import nccl_buffer_bytes
from zero_planner.plan.nccl import note as nccl_note
from zero_planner.strategies import Strategy

GiB = 2**30
MiB = 2**20

# cuBLAS workspaces, allocated through PyTorch's caching allocator (so inside memory_allocated): one per
# (thread, stream) handle, 32 MiB each on sm90+ and 4096 KiB*2 + 16 KiB*8 before (ATen CublasHandlePool.cpp).
# Two handles: the forward runs on the main thread, the backward on autograd's device thread. Measured:
# 64.5 MiB of allocation that no tensor of the model explains, on H100 and H200 (benchmarks/results).
CUBLAS_WORKSPACE_SM90_BYTES = 32 * MiB
CUBLAS_WORKSPACE_OLDER_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
CUBLAS_HANDLES = 2

# Device memory the process holds outside the caching allocator: CUDA context, kernels, cuDNN/cuBLAS
# handles. Measured as mem_get_info used minus max_memory_reserved at the end of exclusive single-GPU
# cases on an H100 80GB, torch 2.11+cu130: 1.30 GiB in every case (benchmarks/results/h100x1-*.jsonl).
CUDA_CONTEXT_BYTES = int(1.30 * GiB)

# The caching allocator's setting zero-run launches with (PYTORCH_CUDA_ALLOC_CONF). Without it, a freed block
# is only reused by requests that fit inside it, so the cache fragments: on an H100, Qwen2.5-0.5B at stage 1,
# 5 x 4096 tokens, ran out of memory asking for 11.6 GiB (its fp32 logits gradient) with 56.2 GiB allocated and
# 14 GiB cached in pieces, although its predicted peak, 68.5 GiB, fits in 77.9 (benchmarks/results/
# h100x1-op-2026-11-23.jsonl). Expandable segments map and unmap 2 MiB pages of one growing virtual range,
# so what is cached is given back page by page when a request needs it: the peak allocation is what must fit.
ALLOC_CONF = "expandable_segments:True"

# DeepSpeed ZeRO-3 splits each rank's partition into optimizer sub-groups of at most this many elements
# and steps them one at a time (deepspeed/runtime/zero/config.py: sub_group_size default 1e9).
SUB_GROUP_SIZE = 1_000_000_000

# QLoRA's NF4 storage: 4 bits per weight plus double-quantised constants, an 8-bit absmax per 64-weight
# block and an fp32 scale per 256 blocks: 0.5 + 1/64 + 4/(64*256) bytes (Dettmers et al. 2023, section 3:
# 0.127 bits per parameter of constants).
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)

# Host memory of one training process before any offload: torch, CUDA runtime, transformers, deepspeed.
# Measured peak RSS 1.98-2.07 GiB for every non-offload case on H100/H200 (benchmarks/results).
PROCESS_RSS_BYTES = int(2.1 * GiB)

# The same for a CPU process (--gpus cpu:N): no CUDA runtime or context; torch's CPU build, deepspeed, transformers,
# datasets and the data, gloo and DeepSpeed's shared-memory all-reduce buffer. Its model's tensors (the "device"
# peak) and any offloaded states come on top, in the same host memory. Measured: zero-run's peak RSS per rank
# (run_report.json host_rss_bytes) less the predicted peak allocated, for llama-tiny (benchmarks/model_configs,
# 0.5M parameters) on cpu:2, seq 128, micro-batch 4 x accumulation 2, 4 steps, each of the seven strategies: RSS
# 0.574-0.594 GiB, less 0.018-0.023 GiB = 0.552-0.574 GiB; the largest is taken (the development machine, 2 x86-64
# cores, Python 3.11, torch 2.13.0+cpu, deepspeed 0.19.8, transformers 5.24.0, datasets 5.2.0, 2026-11-25;
# benchmarks/cpu_rss.py, benchmarks/results/cpu-rss-2026-11-25.jsonl: per node 1.154-1.184 GiB measured,
# 1.193-1.199 predicted). The GPU baseline above predicted 4.20 GiB per node for the demo's two processes, which
# ran in 1.15. Not explained yet: a 58M-parameter Llama (fp32 states 0.87 GiB at stage 0) measured 13-20% above
# this prediction, at every strategy (same file).
CPU_PROCESS_RSS_BYTES = int(0.575 * GiB)


@dataclass(frozen=True)
class Workload:
    """What one rank runs per micro-step."""

    micro_batch_size: int
    seq_len: int
    gradient_checkpointing: bool
    precision: str
    """bf16 | fp16 | fp32 (mixed precision keeps fp32 master weights for bf16/fp16)."""
    world_size: int = 1
    gpus_per_node: int = 1
    attn_implementation: str = "sdpa"
    method: str = "full"
    task: str = "causal-lm"
    gradient_accumulation_steps: int = 1
    lora_r: int = 16
    """LoRA / QLoRA adapter rank (peft's "all-linear" targets)."""
    lora_dropout: float = 0.05
    lora_targets: tuple[str, ...] | None = None
    """--lora-targets as module names; None: "all-linear"."""
    num_labels: int = 2
    """seq-cls: classes of the classification head that replaces the LM head."""
    expandable_segments: bool = True
    """PyTorch's allocator runs with ALLOC_CONF (zero-run sets it): cached blocks are returned page by page
    under pressure, so `total` is the peak allocation plus the context. False: the default allocator, whose
    fragmented cache is part of `total` (`reserved` below)."""
    pretrained: bool = False
    """The weights are read with from_pretrained (the model is built on the meta device first); False: built
    from the config and initialised randomly, which allocates a tied LM head before tying it (load phase)."""
    data_bytes: int = 0
    """Host bytes each rank holds for its tokenized training data (zero-run's: every rank loads the whole dataset;
    data.held_data_bytes estimates them from the files). 0: the built-in corpus, which PROCESS_RSS_BYTES holds."""
    data_peak_bytes: int = 0
    """Host bytes each rank takes at once while it tokenizes and packs that data, before the model is built: the
    host's load phase (0: not counted, as for the built-in corpus)."""
    keeps_outputs: bool = False
    """The training loop holds the model's outputs through backward and step (`outputs = model(**batch);
    engine.backward(outputs.loss)`, as DeepSpeed's and accelerate's examples write it): the 16-bit logits stay
    alive one step longer than in zero-run and HF Trainer, which keep only the loss."""


@dataclass(frozen=True)
class ZeroBuffers:
    """DeepSpeed bucket and stage-3 window sizes, in elements (deepspeed/runtime/zero/config.py)."""

    reduce_bucket_size: int
    allgather_bucket_size: int
    prefetch_bucket_size: int
    param_persistence_threshold: int
    max_live_parameters: int
    overlap_comm: bool
    contiguous_gradients: bool
    sub_group_size: int = SUB_GROUP_SIZE
    """Stage 3 steps the optimizer over sub-groups of at most this many elements (0: one tensor each)."""
    pin_memory: bool = True
    """Offloaded optimizer states and parameters live in pinned host memory (DeepSpeed's default)."""
    stage2_overlap_comm: bool = True
    """overlap_comm as a stage-2 run reads it: on in our JSON (dsconfig); a user's JSON, its value (`overlap_comm`
    above is stage 1's, off in ours)."""

    @classmethod
    def for_model(cls, hidden_size: int) -> "ZeroBuffers":
        """Returns the sizes our own dsconfig emits for this hidden size, and its two switches as it writes them
        at the stage whose memory reads each: overlap_comm at stage 1 (off there; on at stages 2-3, where the
        gradients are partitioned in backward either way), contiguous_gradients at stage 3 (on)."""
        sizes = bucket_sizes(hidden_size)
        return cls(
            reduce_bucket_size=sizes["reduce_bucket_size"],
            allgather_bucket_size=sizes["allgather_bucket_size"],
            prefetch_bucket_size=sizes["stage3_prefetch_bucket_size"],
            param_persistence_threshold=sizes["stage3_param_persistence_threshold"],
            max_live_parameters=1_000_000_000,
            overlap_comm=False,
            contiguous_gradients=True,
        )

    @classmethod
    def from_ds_config(cls, config: dict[str, Any], hidden_size: int) -> "ZeroBuffers":
        """Returns the sizes a DeepSpeed JSON sets: its own values, the installed DeepSpeed's defaults where it is
        silent (dsdefaults.zero_settings), ours where it says "auto" (Hugging Face fills those as we do)."""
        zero = config.get("zero_optimization", {}) or {}
        settings = zero_settings(zero)
        ours = cls.for_model(hidden_size)
        auto = {"reduce_bucket_size": ours.reduce_bucket_size, "allgather_bucket_size": ours.allgather_bucket_size,
                "prefetch_bucket_size": ours.prefetch_bucket_size,
                "param_persistence_threshold": ours.param_persistence_threshold}  # fmt: skip

        def number(key: str) -> int:
            raw = settings[key]
            return auto.get(key, 0) if raw == "auto" else int(float(raw))

        offloads = [settings[s] for s in ("offload_optimizer", "offload_param") if s in settings]
        return cls(
            reduce_bucket_size=number("reduce_bucket_size"),
            allgather_bucket_size=number("allgather_bucket_size"),
            prefetch_bucket_size=number("prefetch_bucket_size"),
            param_persistence_threshold=number("param_persistence_threshold"),
            max_live_parameters=number("max_live_parameters"),
            overlap_comm=bool(settings["overlap_comm"]),
            contiguous_gradients=bool(settings["contiguous_gradients"]),
            sub_group_size=number("sub_group_size"),
            pin_memory=all(bool(o.get("pin_memory", True)) for o in offloads),
            stage2_overlap_comm=bool(settings["overlap_comm"]),
        )


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU (busiest rank) and per host node; see docs/design.md for what each figure means."""

    params_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    buffers_bytes: int
    overhead_bytes: int
    peak_allocated_bytes: int
    total_bytes: int
    cpu_total_bytes: int
    """Host memory per node: offloaded states and pinned buffers of every local rank, plus process RSS, at the
    larger of training and a checkpoint save (checkpoint_staging_bytes)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    fragmented_total_bytes: int = 0
    """What `total` would be with PyTorch's default allocator (no expandable segments): peak allocated plus
    the cache it cannot hand to a larger request, plus context. Reported so users launching without
    zero-run know what setting ALLOC_CONF buys."""
    cpu_training_bytes: int = 0
    """Host memory per node while training, without a checkpoint save: what the GPU harness measures."""
    floor_bytes: int = 0
    """peak_allocated + CUDA context (+ NCCL): what no allocator cache policy can do without. Between this
    and total, a run depends on PyTorch releasing cached blocks when memory runs short (measured both ways:
    Gemma 2 2B at 4096 tokens ran at 66.5 of a predicted 86.0 GiB on an 79.2 GiB H100; Llama 3.2 3B stage 0
    ran out at 73.2 of 93.8, unable to find 12 GiB contiguous among 11.8 GiB of cached blocks)."""
    phase_peaks: dict[str, int] = field(default_factory=dict)
    """Peak allocated bytes of each phase of a run (phases.PHASES); peak_allocated_bytes is the largest."""
    binding_phase: str = "train"
    """The phase whose peak is peak_allocated_bytes (the first of equals, in PHASES order)."""
    host_phase_peaks: dict[str, int] = field(default_factory=dict)
    """Host memory per node at the peak of the phases that hold more of it than training: checkpoint save,
    export, resume (and train itself); cpu_total_bytes is the largest."""
    train_peak_bytes: int = 0
    """The training steps' own peak (steps 1..4, the first optimizer step included): what benchmarks/gpu_step.py
    measures after deepspeed.initialize."""
    data_bytes: int = 0
    data_peak_bytes: int = 0
    """The workload's dataset in each rank's host memory, held and while packed (Workload's), as the host figures
    count it: zero-run compares it with the data it finds at launch."""


MOE_REGATHERED_LAYERS = 3
"""Decoder layers whose expert weights exist twice at a ZeRO-3 MoE backward peak: kept by the forward's grouped
matmul, and gathered again for backward (the current layer and its prefetch). Read off measured peaks (memory.py)."""


def workspace_bytes(gpu_name: str | None) -> int:
    """Returns the cuBLAS workspace bytes the caching allocator holds on this GPU (0 on CPU)."""
    if gpu_name is None:
        return CUBLAS_HANDLES * CUBLAS_WORKSPACE_SM90_BYTES
    if gpu_name.lower().startswith("cpu"):
        return 0
    gpu = catalog_gpu(gpu_name)  # a catalog name, an alias or a device name; its compute capability decides
    sm90 = gpu is not None and gpu.sm90_or_later
    return CUBLAS_HANDLES * (CUBLAS_WORKSPACE_SM90_BYTES if sm90 else CUBLAS_WORKSPACE_OLDER_BYTES)


@dataclass(frozen=True)
class Activations:
    """Activation bytes of one micro-batch on one rank."""

    saved_bytes: int
    """Everything autograd keeps from forward to backward, the fp32 log-softmax of the loss included."""
    forward_peak_bytes: int
    """saved + what is alive at once while the loss is computed (16-bit logits and their fp32 copy)."""
    backward_peak_bytes: int
    """saved + the loss backward: fp32 gradient of the log-softmax and of the logits."""


def activation_bytes(spec: ModelSpec, workload: Workload, zero3_linear: bool = False) -> Activations:
    """Returns the activation terms, from the model's traced coefficients (or the closed form).

    zero3_linear: the model was built under deepspeed.zero.Init, whose F.linear keeps every input (matters
    for frozen LoRA bases only)."""
    table = spec.activations or closed_form_coefficients(_arch(spec))
    width = 4 if workload.precision == "fp32" else 2
    coef = table["fp32" if width == 4 else "16bit"][workload.attn_implementation]
    tokens = workload.micro_batch_size * workload.seq_len
    layer = coef["layer"] + coef["layer_per_seq"] * workload.seq_len  # bytes per token, one layer
    rest = coef["rest"]
    adapters = workload.method in ("lora", "qlora")
    lora = table.get("lora", {}).get("fp32" if width == 4 else "16bit") if adapters else None
    stacks = param_adapters(spec, workload)
    if lora is not None:
        # Traced with peft adapters on a frozen base (SDPA); eager attention adds its score terms on top.
        dropout = workload.lora_dropout > 0
        eager_extra = layer - (table["fp32" if width == 4 else "16bit"]["sdpa"]["layer"])
        layer = lora["layer"] + lora["layer_per_r"] * workload.lora_r + eager_extra
        layer += lora["layer_dropout"] if dropout else 0
        if zero3_linear:
            layer += lora.get("zero3_layer_extra_dropout" if dropout else "zero3_layer_extra", 0)
        rest = lora["rest"] + (lora["rest_dropout"] if dropout else 0)
        if stacks:
            # The table is traced with the expert stacks frozen; adapted, each keeps its input for the gradient of
            # its folded weight: the stacks' inputs in every one of the top-k experts, the router's once (measured
            # 49,152 B per token and layer on Qwen3-MoE, H100, results/moe-lora-probe-h100-2026-12-05: exactly this)
            routed = max(1, spec.num_experts_per_tok) * stacks["layer_in_routed"]
            layer += width * (routed + stacks["layer_in_dense"])
    # A sliding window the sequence reaches (seq_len >= window) makes transformers pass SDPA a boolean mask; PyTorch turns
    # it into a bias in the query's dtype, per call, and the memory-efficient kernel (flash takes no mask) keeps
    # it for backward: width * seq bytes per token in every masked layer (benchmarks/saved_census.py on H100:
    # Phi-3-mini at 2,048 and 4,096 tokens keeps 2.0 B per token per position more than at 1,024, where the
    # window is not reached; the traced table, at 64-128 tokens, never sees it).
    masked = sdpa_masked_layers(spec, workload.seq_len) if _fused_sdpa(spec, workload) else 0
    mask_per_token = width * -(-workload.seq_len // 16) * 16 if masked else 0  # last dim padded to 16
    if workload.gradient_checkpointing:
        # HF checkpointing keeps each layer's input hidden states only; one layer is recomputed at a time.
        kept_per_layer = width * spec.hidden_size
    else:
        kept_per_layer = layer
    logits = tokens * spec.vocab_size
    if workload.task == "seq-cls":
        # One score row per sequence instead of a vocabulary row per token: the LM head's log-softmax
        # (4 B per vocabulary entry per token, inside `rest`) and the loss's logits copies are gone.
        rest = max(rest - 4 * spec.vocab_size, 0)
        logits = workload.micro_batch_size * workload.num_labels
    saved = tokens * (spec.num_layers * kept_per_layer + rest)
    if not workload.gradient_checkpointing:
        saved += tokens * masked * mask_per_token
    # LoRA on expert stacks (peft's lora.ParamWrapper): each forward of an experts module folds the adapters into a
    # new weight, W + s * lhs @ rhs (one baddbmm per stack, in the weights' dtype), that the grouped matmul keeps for
    # its weight gradient: every stack's elements once more, per layer alive; its backward makes the gradient of
    # the largest. Measured (H100, benchmarks/moe_lora_probe.py, results/moe-lora-probe-h100-2026-12-05: Qwen3-MoE
    # and OLMoE at full width, 2-4 layers, torch 2.11, transformers 5.24, peft 0.21.2): without checkpointing the
    # forward kept the stacks' bytes plus what the tokens keep, to 0.1%; with it the recomputed layer's fold and
    # the largest gradient came on top of the checkpoints.
    folded = width * stacks["numel"] if stacks else 0
    fold_layer = width * stacks["layer_numel"] if stacks else 0
    fold_grad = width * stacks["largest_numel"] if stacks else 0
    if not workload.gradient_checkpointing:
        saved += folded
    if adapters and lora is None and workload.lora_dropout > 0 and not workload.gradient_checkpointing:
        # No traced adapter table (closed-form models): peft runs each target's input through its own
        # dropout and lora_A keeps the result and the 1-byte mask: per token, (width + 1) * the sum of the
        # targets' input widths. An upper bound: frozen base layers no longer keep their shared inputs.
        saved += tokens * (width + 1) * _linear(spec)["in_sum"]
    # Forward: the 16-bit logits and their fp32 upcast (transformers' ForCausalLMLoss) live together with
    # the saved log-softmax: 2 + 4 bytes per logit above `saved`; fp32 runs skip the upcast copy.
    # Backward of the loss: fp32 grad of log-softmax and of the logits, 4 + 4 bytes per logit.
    # Both measured at exactly 6.0 and 8.0 bytes per logit on six architectures (benchmarks/results).
    forward_extra = (2 + 4 if width == 2 else 4) * logits
    backward_extra = 8 * logits
    scores = math_attention_backward_bytes(spec, workload)
    if scores and not workload.gradient_checkpointing:
        # the last layer's attention backward, after the loss's: its gradients and the fp32 log-softmax it kept (4
        # bytes per logit, inside `saved`) are freed by then, as before a checkpointed layer's recompute below
        backward_extra = max(backward_extra, tokens * scores - 4 * logits)
    if stacks and not workload.gradient_checkpointing:
        # the last layer's backward: the gradient of its largest folded stack
        backward_extra = max(backward_extra, fold_grad - 4 * logits)
    if stacks and workload.gradient_checkpointing:
        # a checkpointed layer's first forward folds its stacks (alive together while the experts run), before the
        # loss exists: measured within 4% of the activations, 1% of the step (OLMoE, 4 layers, 1 x 1,024)
        forward_extra = max(forward_extra, fold_layer + tokens * layer - 4 * logits)
    if workload.gradient_checkpointing:
        # The recomputed layer's saved activations, plus the MLP backward's intermediate-sized gradients that
        # are alive together: of down_proj's input, of act(gate) and of up (two without a gate). Measured
        # where it is the backward peak (seq-cls with checkpointing, Llama 3.2 1B/3B with LoRA, H100): 175 and
        # 218 KB per token above the checkpoints; this term gives 187 and 220.
        grads = (3 if spec.gated_mlp else 2) * width * spec.intermediate_size
        # By then the loss, the LM head and the final norm have run backward: the fp32 log-softmax they kept
        # (4 bytes per logit, inside `saved`) is freed before the first layer is recomputed. Measured: Mistral-7B
        # shape (8 layers, 32k vocabulary) at 8 x 4096 tokens peaked in the loss backward, 1.1 GiB below a
        # recompute term that still counted it (H200, 24 GiB slice).
        backward_extra = max(backward_extra, tokens * (layer + mask_per_token + grads + scores) + fold_layer + fold_grad
                             - 4 * logits)  # fmt: skip
    saved = math.ceil(saved)
    return Activations(saved, saved + forward_extra, saved + math.ceil(backward_extra))


MATH_SDPA_BACKWARD_SCORE_BYTES = 12
"""Bytes per attention score alive at once in the backward of SDPA's math kernel (fp32 scores), while the
probabilities it kept are still saved: the PV matmul's gradient of the probabilities, _safe_softmax's gradient
through its fully-masked-row guard, and softmax backward's gradient of the scores, 4 + 4 + 4 (torch 2.11's
composite math kernel; models/activations.fused_sdpa_takes says when it runs). Measured on one H200 (2026-11-29,
benchmarks/sdpa_path.py: SDPA alone at Falcon-7B's 71 query heads and one K/V head, 1 x 2,048, bf16): the backward
peaked 12.0 bytes per score above what the forward left. In the trimmed Falcon's whole step (4 layers) the
backward rose 9.5 bytes per score above the forward's end, where the loss's kept log-softmax (1.8 bytes per score
there) is already freed; with it freed the model is 2-3% under at 2 and 4 x 2,048 without checkpointing and -1.6%
in a whole zero-run at 12 (what else is alive then is not found). Falcon-7B's ZeRO-3 at 4 x 2,048
with checkpointing peaked at 124.25 GiB against 124.8 with this term (120.4 with 8 bytes, which put the planner's
pick at 7 sequences: it ran out of memory)."""


MATH_SDPA_FORWARD_SCORE_BYTES = 9
"""Bytes per attention score alive at once in the forward of SDPA's math kernel: the QK^T product (fp32) and the
probabilities (fp32) beside _safe_softmax's -inf mask (1). Measured with SDPA alone (the probe above): 9.3 above
the call's start. Under autograd the probabilities stay (kept, in the traced table); in eval, without gradients,
this is the forward's peak inside a layer (eval_peak), with the fp32 query and the key and value it expanded over
the heads. Measured in a whole zero-run of Falcon trimmed to 4 layers at 12 x 2,048 on one H200 (2026-11-29,
h200x1-phases-r13-falcon): eval peaked at 50.10 GB, 49.75 with these terms (48.41 with the scores alone)."""


def sdpa_math_kernel(spec: ModelSpec, workload: Workload) -> bool:
    """Whether the model's SDPA call runs torch's math kernel, fp32 scores materialized and kept: its traced SDPA table
    keeps bytes that grow with the sequence (models/activations.fused_sdpa_takes: fewer key/value heads than query
    heads without enable_gqa, Falcon-7B's multi-query attention; fp32 with grouped-query attention)."""
    if workload.attn_implementation != "sdpa" or not spec.activations:
        return False  # the closed form (closed_form_coefficients) keeps no scores under SDPA
    return spec.activations["fp32" if workload.precision == "fp32" else "16bit"]["sdpa"].get("layer_per_seq", 0) > 0


def math_attention_backward_bytes(spec: ModelSpec, workload: Workload) -> float:
    """Returns the bytes per token one layer's attention backward holds beyond what it saved, where SDPA runs its
    math kernel (sdpa_math_kernel); 0 otherwise (fused kernels, eager)."""
    if not sdpa_math_kernel(spec, workload):
        return 0.0
    return MATH_SDPA_BACKWARD_SCORE_BYTES * spec.num_attention_heads * workload.seq_len


# Types whose every layer takes the config's sliding window (transformers: create_sliding_window_causal_mask
# whenever config.sliding_window is set); others list it per layer in layer_types, or derive that list.
_ALL_LAYERS_SLIDE = ("mistral", "mixtral", "phi3", "starcoder2")
_USE_SLIDING_FLAG = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")  # window only with use_sliding_window
_ALTERNATE_SLIDE = ("gemma2", "cohere2")  # every other layer, the first one sliding


def sdpa_masked_layers(spec: ModelSpec, seq_len: int) -> int:
    """Returns how many layers attend through an explicit mask at `seq_len`: those with a sliding window the
    sequence reaches (transformers' masking_utils keeps is_causal, and no mask, while seq_len < window)."""
    config = spec.config or {}
    window = config.get("sliding_window")
    if spec.model_type in _USE_SLIDING_FLAG and not config.get("use_sliding_window", False):
        return 0
    if not isinstance(window, int) or window <= 0 or seq_len < window:
        return 0
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        return sum(kind == "sliding_attention" for kind in types[: spec.num_layers])
    if spec.model_type in _USE_SLIDING_FLAG:
        return max(spec.num_layers - int(config.get("max_window_layers", spec.num_layers)), 0)
    if spec.model_type in _ALTERNATE_SLIDE:
        return (spec.num_layers + 1) // 2
    return spec.num_layers if spec.model_type in _ALL_LAYERS_SLIDE else 0


def _fused_sdpa(spec: ModelSpec, workload: Workload) -> bool:
    """Whether attention runs in a fused SDPA kernel (the only path that keeps a mask for backward): fp32 with
    grouped-query attention takes SDPA's math kernel, which adds the mask to the scores it keeps anyway."""
    if workload.attn_implementation != "sdpa":
        return False
    return workload.precision != "fp32" or spec.num_key_value_heads == spec.num_attention_heads


def _arch(spec: ModelSpec) -> dict[str, Any]:
    return {
        "hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
        "num_attention_heads": spec.num_attention_heads, "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim, "vocab_size": spec.vocab_size, "num_experts": spec.num_experts,
        "num_experts_per_tok": spec.num_experts_per_tok, "gated_mlp": spec.gated_mlp,
    }  # fmt: skip


def _linear(spec: ModelSpec) -> dict[str, int]:
    """Returns the "all-linear" table, from the spec or, lacking it, from the architecture (dense llama)."""
    if spec.linear:
        return spec.linear
    h, i = spec.hidden_size, spec.intermediate_size
    q = spec.num_attention_heads * spec.head_dim
    kv = spec.num_key_value_heads * spec.head_dim
    mlp = [(h, i), (h, i), (i, h)] if spec.gated_mlp else [(h, i), (i, h)]
    layer = [(h, q), (h, kv), (h, kv), (q, h)] + mlp
    return {
        "count": len(layer) * spec.num_layers,
        "in_out_sum": spec.num_layers * sum(a + b for a, b in layer),
        "in_sum": spec.num_layers * sum(a for a, _ in layer),
        "numel": spec.num_layers * sum(a * b for a, b in layer),
        "largest_numel": max(a * b for a, b in layer),
    }


# Names a --lora-targets list adapts a mixture-of-experts stack by: the fused parameters' own, and the transformers 4
# per-expert module names peft maps onto them (peft/utils/transformers_weight_conversion.py), the router's included.
EXPERT_TARGET_NAMES = frozenset({"gate_up_proj", "down_proj", "gate_proj", "up_proj", "w1", "w2", "w3", "gate", "experts"})


def param_adapters(spec: ModelSpec, workload: "Workload") -> dict[str, Any] | None:
    """Returns the expert stacks LoRA adapts through peft's lora.ParamWrapper (spec.param_adapters), or None.

    "all-linear" adapts them where peft says so (models/count.py asks it); a list of module names where one of them
    names an expert stack or its transformers 4 per-expert modules (EXPERT_TARGET_NAMES), which peft maps onto it."""
    stacks = spec.param_adapters
    if workload.method not in ("lora", "qlora") or not stacks or not stacks.get("count"):
        return None
    if workload.lora_targets is None:
        return stacks
    return stacks if any(t.rsplit(".", 1)[-1] in EXPERT_TARGET_NAMES for t in workload.lora_targets) else None


def adapted_linears(spec: ModelSpec) -> int:
    """Returns the linear layers LoRA's "all-linear" adapts (each gets an A and a B matrix)."""
    return int(_linear(spec)["count"])


def task_params(spec: ModelSpec, workload: Workload) -> int:
    """Returns the model's parameters for the task: seq-cls swaps the LM head for a num_labels score head."""
    if workload.task != "seq-cls":
        return spec.num_params
    head = 0 if spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size
    return spec.num_params - head + spec.hidden_size * workload.num_labels


def trainable_params(spec: ModelSpec, workload: Workload) -> int:
    """Returns the parameters the optimizer updates: all, or the LoRA adapters (plus a seq-cls score head)."""
    if workload.method not in ("lora", "qlora"):
        return task_params(spec, workload)
    adapters = workload.lora_r * _linear(spec)["in_out_sum"]
    stacks = param_adapters(spec, workload)
    if stacks:
        # lora.ParamWrapper: an A [r * experts, in] and a B [out, r * experts] per stack, at the rank peft gives it
        # (2r for a fused gate_up): in_out_sum is their elements at r = 1
        adapters += workload.lora_r * stacks["in_out_sum"]
    head = spec.hidden_size * workload.num_labels if workload.task == "seq-cls" else 0
    return adapters + head


def weight_bytes(spec: ModelSpec, workload: Workload) -> int:
    """Returns the bytes of all weights in their stored form (16/32-bit; NF4 linear layers for QLoRA)."""
    w = 4 if workload.precision == "fp32" else 2
    total = task_params(spec, workload)
    adapters = trainable_params(spec, workload) if workload.method in ("lora", "qlora") else 0
    if workload.method == "qlora":
        quantised = _linear(spec)["numel"]
        return math.ceil(NF4_BYTES_PER_PARAM * quantised) + w * (total - quantised) + w * adapters
    return w * (total + adapters)


def sub_group_numel(spec: ModelSpec, P: int, n: int, sub_group_size: int) -> int:
    """Returns the elements of ZeRO-3's largest optimizer sub-group on one rank: stage3.py _create_fp16_sub_groups
    closes a group once it holds sub_group_size elements (0: every tensor is a group of its own)."""
    Pn = -(-P // n)
    if sub_group_size == 0:
        return min(Pn, -(-spec.largest_tensor_numel // n))
    return min(Pn, sub_group_size)


def moe_expert_numel(spec: ModelSpec) -> int:
    """Returns the elements of all routed-expert weights: layers x experts x (3 or 2) x hidden x intermediate."""
    matrices = 3 if spec.gated_mlp else 2
    return spec.num_layers * spec.num_experts * matrices * spec.hidden_size * spec.intermediate_size


def persistent_numel(spec: ModelSpec, threshold: int) -> int:
    """Returns the elements ZeRO-3 keeps whole on every rank: tensors with numel <= threshold (norms, biases)."""
    return sum(numel * count for numel, count in spec.tensor_sizes if numel <= threshold)


def working_bytes(workload: Workload) -> int:
    """Returns the bytes of a working-precision parameter, gradient or activation: 2 in bf16 and fp16 (mixed
    precision), 4 in fp32."""
    return 2 if workload.precision in ("bf16", "fp16") else 4


def largest_trainable_numel(spec: ModelSpec, workload: Workload) -> int:
    """Returns the elements of the largest trainable tensor, the size of ZeRO-1/2's offload staging buffers
    (stage_1_and_2.py largest_param_numel over the trainable groups): an adapter's widest LoRA matrix (r x the
    wider of hidden and intermediate), or the model's largest tensor in full fine-tuning."""
    if workload.method in ("lora", "qlora"):
        return workload.lora_r * max(spec.hidden_size, spec.intermediate_size)
    return spec.largest_tensor_numel


def estimate_memory(
    spec: ModelSpec,
    strategy: Strategy,
    workload: Workload,
    buffers: ZeroBuffers | None = None,
    gpu_name: str | None = None,
) -> MemoryEstimate:
    """Returns the predicted memory of the busiest rank for `workload` under `strategy`, in bytes.

    The training steps' peak (train_peak_bytes) is the largest of three moments of a step (steady state, after
    the first optimizer step; train_step_moments):
      forward  = resident + workspaces + forward activations (+ gathered stage-3 parameters)
      backward = resident + workspaces + backward activations (+ gathered parameters, gradient buffers)
      step     = resident + workspaces + the optimizer step's transient copies
    `resident` is what lives across steps: 16-bit weights, fp32 master weights, Adam moments and (stage 3)
    the gradient partition (model_states). The reported components are those resident terms plus each phase's
    own part. peak_allocated is the largest peak of a whole run: the train phase's and those of loading,
    initialize, resume, eval, checkpoint save and export (phase_peaks, see run_phase_peaks). `total` adds what the
    process holds beyond its tensors (reserved_bytes, CUDA context, NCCL); the host figures come from
    host_memory. No figure depends on the card's size: where DeepSpeed decides by the free memory it sees, the
    worse branch is counted (initialize_peak).
    """
    buffers = buffers or ZeroBuffers.for_model(spec.hidden_size)
    n = workload.world_size
    P = trainable_params(spec, workload)  # what gradients, master weights and Adam are kept for
    W = weight_bytes(spec, workload)  # every weight as stored on the GPU, frozen ones included
    w = working_bytes(workload)
    stage = strategy.stage
    ws = workspace_bytes(gpu_name)
    notes: list[str] = []
    if workload.method in ("lora", "qlora") and "lora" not in (spec.activations or {}):
        notes.append("LoRA activations: closed-form upper bound (no adapter trace for this model)")
    states = model_states(spec, strategy, workload, buffers, W=W, P=P)
    notes += states.notes
    # LoRA's base is built under deepspeed.zero.Init at stage 3 (QLoRA's 4-bit layers do not call F.linear).
    act = activation_bytes(spec, workload, zero3_linear=stage == 3 and workload.method == "lora")
    bwd_act = backward_activation_bytes(spec, strategy, workload, act, states)
    held = kept_outputs_bytes(spec, workload)
    moments = train_step_moments(states, act, backward_activations=bwd_act, ws=ws, held=held)
    train_peak = max(moments)
    if states.backward_end_bytes and train_peak == backward_end_moment(states, ws=ws, held=held):
        notes.append(f"ZeRO-1 without overlap_comm holds every gradient until backward ends "
                     f"({states.backward_end_bytes / GiB:.2f} GiB, its peak); ZeRO-2 keeps only its partition")
    # NCCL's buffers (nccl.py: from its defaults, not measured); none on CPU, where ranks talk over gloo.
    context = (CUDA_CONTEXT_BYTES + nccl_buffer_bytes(n, workload.gpus_per_node)) if ws else 0
    phases = run_phase_peaks(
        spec, strategy, workload, W=W, P=P, train_peak=train_peak, resident=states.resident_bytes,
        ws=ws, gathered=states.gathered_bytes, forward_activations=act.forward_peak_bytes,
        sub_group_size=buffers.sub_group_size,
        ipg=w * buffers.reduce_bucket_size if stage == 3 and buffers.contiguous_gradients else 0)  # fmt: skip
    peak = max(phases.values())
    binding = next(name for name in PHASES if phases.get(name) == peak)

    reserved = reserved_bytes(spec, strategy, workload, buffers, gpu_name, states=states, act=act,
                              backward_activations=bwd_act, peak=peak, ws=ws)  # fmt: skip
    if ws and n > 1:
        notes.append(nccl_note(n, workload.gpus_per_node))
    # The reduction stream's pool stands beside the training steps' peak; a phase after them (eval, save, export)
    # that needs its pages takes them with one retry, not one a step: only what it adds over the run's peak counts.
    pool = reduction_stream_bytes(strategy, buffers, workload, P) if ws else 0
    side = max(train_peak + pool - peak, 0)
    if pool:
        notes.append(f"overlap_comm builds the {pool / GiB:.2f} GiB gradient partition on DeepSpeed's reduction "
                     f"stream, whose pool the compute stream cannot use: counted in total beside the steps' peak")
    fragmented_total = reserved + side + context
    if workload.expandable_segments or not ws:
        # The cache is returned on demand (see ALLOC_CONF), but not across streams without a retry every step
        # (reduction_stream_bytes); on CPU there is no caching allocator.
        overhead = side + context
    else:
        overhead = reserved - peak + side + context
    total = peak + overhead

    host, host_phases = host_memory(spec, strategy, workload, W=W, P=P, device_peak=peak, gpu_name=gpu_name,
                                    pin_memory=buffers.pin_memory)  # fmt: skip
    buffers_bytes = states.gathered_bytes + (2 * w * buffers.reduce_bucket_size if stage in (1, 2) and n > 1 else 0)
    return MemoryEstimate(
        params_bytes=states.params_bytes,
        gradients_bytes=states.gradients_bytes,
        optimizer_bytes=states.optimizer_bytes,
        activations_bytes=max(act.forward_peak_bytes, bwd_act),
        buffers_bytes=buffers_bytes,
        overhead_bytes=overhead,
        peak_allocated_bytes=peak,
        total_bytes=total,
        cpu_total_bytes=max(host, *host_phases.values()),
        cpu_training_bytes=host,
        notes=tuple(notes),
        fragmented_total_bytes=fragmented_total,
        floor_bytes=peak + context,
        phase_peaks=phases,
        binding_phase=binding,
        host_phase_peaks=host_phases,
        train_peak_bytes=train_peak,
        data_bytes=workload.data_bytes,
        data_peak_bytes=workload.data_peak_bytes,
    )


@dataclass(frozen=True)
class ModelStates:
    """What one rank holds on the GPU for training under a ZeRO strategy, beyond activations, in bytes."""

    params_bytes: int
    """16-bit weights (fp32 in fp32 runs): all of them below ZeRO-3; the partition and the persistent ones at 3."""
    gradients_bytes: int
    """Gradient storage: the full gradients (stage 0), their partition (1-2, and 3 with its reduce bucket), or
    the offload staging buffer."""
    optimizer_bytes: int
    """fp32 master weights and Adam's two moments held on the GPU (0 where offloaded)."""
    resident_gradients_bytes: int
    """The part of gradients_bytes allocated across steps: stage 3's partition, the offload staging buffer (the
    others are made in backward)."""
    accumulated_gradients_bytes: int
    """Gradients kept between the micro-steps of gradient accumulation (stages 0-2 on the GPU)."""
    step_transient_bytes: int
    """The optimizer step's transient copies (casts, flattened buffers), on top of the resident states."""
    gathered_bytes: int
    """ZeRO-3 parameters gathered whole and kept alive between uses (stage3_max_live_parameters, MoE experts)."""
    head_after_loss_bytes: int
    """An untied LM head's gradient while an offloaded optimizer takes it to the CPU (offloaded_head_bytes)."""
    partition_at_activation_peak: bool
    """ZeRO-2 on the GPU (ZeRO-1 only with overlap_comm) with an untied head: its gradient, the first of backward,
    allocates the contiguous gradient partition while every activation is still alive."""
    backward_end_bytes: int = 0
    """Stage 1 without overlap_comm: every gradient, held whole until backward ends (and a tied embedding's last
    accumulation), on top of the resident states; 0 where gradients are reduced as backward makes them."""
    notes: tuple[str, ...] = ()

    @property
    def resident_bytes(self) -> int:
        """What lives on the GPU between steps: weights, optimizer states, resident gradients."""
        return self.params_bytes + self.optimizer_bytes + self.resident_gradients_bytes


def model_states(spec: ModelSpec, strategy: Strategy, workload: Workload, buffers: ZeroBuffers, *, W: int,
                 P: int) -> ModelStates:  # fmt: skip
    """Returns the weights, gradients and optimizer states one rank holds on the GPU, and the step's transients,
    for each stage and offload (W: every weight's stored bytes; P: trainable parameters). Each term cites the
    DeepSpeed source that allocates it or the measurement that found it."""
    n = workload.world_size
    adapters = workload.method in ("lora", "qlora")
    mixed = workload.precision in ("bf16", "fp16")
    w = 2 if mixed else 4  # bytes of a working-precision parameter or gradient
    # fp32 master copy. Stage 0 trains fp32 parameters in place; ZeRO's optimizers clone an fp32 partition
    # whatever the precision (stage_1_and_2.py single_partition_of_fp32_groups, stage3.py
    # fp32_partitioned_groups_flat: `.clone().float()`). Measured: fp32 stage 2 holds 4 B/param more than
    # fp32 stage 0 in every phase (Qwen2.5-0.5B, H100).
    master = 4 if mixed or strategy.stage > 0 else 0
    adam = 8  # exp_avg + exp_avg_sq, fp32
    stage = strategy.stage
    off_opt = strategy.offload_optimizer != "none"
    off_param = strategy.offload_param != "none"
    accum = workload.gradient_accumulation_steps > 1
    # A trainable untied LM head is the first gradient produced in backward (full causal-LM training only).
    untied_head = 0 if spec.tie_word_embeddings or adapters or workload.task == "seq-cls" else spec.vocab_size * spec.hidden_size
    notes: list[str] = []

    gathered = 0
    head_after_loss = 0
    backward_end = 0
    # ZeRO-2 on the GPU (and ZeRO-1 with overlap_comm): the lm_head gradient is the first one produced, so the
    # contiguous gradient partition (2P/n) is allocated while every activation is still alive.
    partition_at_activation_peak = False
    if stage == 0:
        params = W
        # FP16_Optimizer (bf16 too, at stage 0: engine._do_optimizer_sanity_check -> DDP_BFLOAT16) creates
        # fp32 master weights and Adam moments at initialize; plain fp32 creates Adam at the first step.
        optimizer = (master + adam) * P
        gradients = w * P
        if mixed:
            # fp16/fused_optimizer.py step(): each grad cast to fp32 (4P), then flattened (4P), while the
            # 16-bit grads are still alive (2P).
            step_transient = w * P + 4 * P + 4 * P
        else:
            step_transient = w * P
        grads_between_micro_steps = w * P if accum else 0
    elif stage in (1, 2) and not off_opt:
        params = W
        optimizer = (master + adam) * P // n
        gradients = w * P // n
        # stage_1_and_2.py step(): the 16-bit grad partition, its flattened copy and the fp32 copy handed
        # to Adam: (2 + 2 + 4) P / n. In fp32 runs the partition is already fp32: the flattened copy alone,
        # 4 P / n (measured 1.9 GiB on Qwen2.5-0.5B, H100).
        step_transient = (w + w + 4) * P // n if mixed else w * P // n
        # Not ZeRO-1 without overlap_comm: its backward hooks reduce nothing (stage_1_and_2.py process_gradients
        # acts only with partition_gradients or overlap_comm), so no partition is allocated while activations
        # live. Counting it there over-predicted Mistral-7B's first 8 layers at ZeRO-1 by +4.3% (H100, 2 x
        # 4,096, 43.46 GiB where 41.67 was measured; ZeRO-2 43.04) and +3.3% on 4 H200s; without it both are exact.
        partition_at_activation_peak = bool(untied_head) and (stage == 2 or buffers.overlap_comm)
        # ZeRO-1 reduces gradients only at the accumulation boundary (engine.py allreduce_gradients): between
        # micro-steps each rank keeps every gradient whole. ZeRO-2 reduces in every backward and keeps its partition.
        # (Read from the code; no ZeRO-1 accumulation case was measured.)
        grads_between_micro_steps = (w * P if stage == 1 else gradients) if accum else 0
        if stage == 1 and not buffers.overlap_comm:
            # ZeRO-1 without overlap_comm reduces nothing while backward runs (stage_1_and_2.py process_gradients
            # reduces only with partition_gradients or overlap_comm; reduce_gradients then walks every parameter
            # once backward is done): each rank holds every gradient whole at backward's end. A tied embedding's
            # last gradient arrives while its head's is held, and autograd sums the two into a third tensor:
            # 2 x V x H more at that moment. Measured at the end of backward (bf16; peak = resident + 2P + 2 x
            # embedding to the MiB): Llama 3.2 3B on 4 and 1 GPUs, Gemma 2 2B on 4 (+44 MB); untied Mistral-8L
            # and Mixtral-tiny had 92-131 MB above resident + 2P that this does not count.
            tied_tail = w * spec.vocab_size * spec.hidden_size * 2 if (
                spec.tie_word_embeddings and not adapters and workload.task == "causal-lm") else 0
            backward_end = w * P + tied_tail
    elif stage in (1, 2):  # optimizer offloaded to the CPU
        params = W
        optimizer = 0
        # stage_1_and_2.py: temp_grad_buffer_for_gpu_offload, one largest-trainable-tensor-sized buffer.
        gradients = w * largest_trainable_numel(spec, workload)
        step_transient = 0
        head_after_loss = offloaded_head_bytes(untied_head, w, n, stage)
        grads_between_micro_steps = 0
    else:  # stage 3
        persistent = w * persistent_numel(spec, buffers.param_persistence_threshold)
        params = 0 if off_param else W // n
        params += persistent
        # stage3.py _setup_for_real_optimizer: with contiguous_gradients, one reduce bucket (reduce_bucket_size
        # elements in the gradients' dtype) is allocated at initialize and kept, offloaded or not: 0.93 GiB at
        # DeepSpeed's default 5e8 elements in bf16, which a minimal JSON gets.
        ipg = w * buffers.reduce_bucket_size if buffers.contiguous_gradients else 0
        gradients = (0 if off_opt else w * P // n) + ipg
        optimizer = 0 if off_opt else (master + adam) * P // n
        # stage3.py steps one sub-group at a time: fp32 grad (4) and its 16-bit source copy (2) per element.
        step_transient = 0 if off_opt else (4 + 2) * sub_group_numel(spec, P, n, buffers.sub_group_size)
        if n > 1 or off_param:
            # Gathered parameters kept alive between uses: up to stage3_max_live_parameters elements.
            # Measured: +2.0 bytes per gathered element, capped at 1e9 elements, on four architectures.
            gathered = min(W, w * buffers.max_live_parameters)
            if spec.num_experts > 1 and not adapters and not workload.gradient_checkpointing:
                # (Checkpointed layers run forward without autograd, so nothing holds their experts.)
                # ZeRO-3 releases a gathered weight after use only for nn.Linear (it wraps F.linear in
                # LinearFunctionForZeroStage3, which saves the parameter, not its data). transformers' fused
                # 3-D expert tensors go through grouped_mm, whose autograd node keeps the gathered data until
                # backward; backward gathers each layer's experts again (and prefetches the next) while the
                # forward's copies of the layers not yet reached are still held. Measured on a scaled Mixtral
                # (6 layers; 1 GPU with parameters offloaded, 2 and 4 GPUs; H200): W plus 0.66-0.85 GiB, about
                # three layers' experts, at the backward peak (the whole experts again was 6-9% over); with
                # checkpointing 0.0-0.6% over without this term.
                layer_experts = moe_expert_numel(spec) // max(spec.num_layers, 1)
                gathered += w * min(moe_expert_numel(spec), MOE_REGATHERED_LAYERS * layer_experts)
                notes.append("MoE under ZeRO-3: expert weights kept by autograd, a few layers' gathered twice")
        head_after_loss = offloaded_head_bytes(untied_head, w, n, stage) if off_opt else 0
        grads_between_micro_steps = 0

    # QLoRA adds no activation term. bitsandbytes (0.50) dequantises one weight at a time, a transient that
    # does not reach the phase peaks: QLoRA's forward and backward peaks above the resident memory equal
    # LoRA's within 3.5 MiB in 16 paired cases (Llama 3.2 1B and 3B; bf16 and fp16, checkpointing on and
    # off, stages 0/2/3, seq-cls) and within 9 MiB on Qwen2.5-1.5B (H100).

    # Gradient storage that stays allocated across steps: stage 3's partition, the offload staging buffer.
    resident_grads = gradients if stage == 3 or (stage in (1, 2) and off_opt) else 0
    return ModelStates(
        params_bytes=params,
        gradients_bytes=gradients,
        optimizer_bytes=optimizer,
        resident_gradients_bytes=resident_grads,
        accumulated_gradients_bytes=grads_between_micro_steps,
        step_transient_bytes=step_transient,
        gathered_bytes=gathered,
        head_after_loss_bytes=head_after_loss,
        partition_at_activation_peak=partition_at_activation_peak,
        backward_end_bytes=backward_end,
        notes=tuple(notes),
    )


def backward_activation_bytes(spec: ModelSpec, strategy: Strategy, workload: Workload, act: Activations,
                              states: ModelStates) -> int:  # fmt: skip
    """Returns the activation bytes at the backward peak: the loss's backward (act.backward_peak_bytes), or a later
    moment where it is higher: stages 1-2 allocating the gradient partition at the head's gradient, an offloaded
    optimizer taking the untied head's gradient or the input embedding's to the CPU."""
    w = working_bytes(workload)
    adapters = workload.method in ("lora", "qlora")
    bwd_act = act.backward_peak_bytes
    if states.partition_at_activation_peak:
        bwd_act = max(bwd_act, act.saved_bytes + states.gradients_bytes)
    if states.head_after_loss_bytes:
        # The offloaded head's gradient is handled once the loss and the head have run backward: the loss's fp32
        # buffers and log-softmax are freed by then (4 bytes per logit out of `saved`), the gradient of the
        # hidden states is alive. Measured (Mistral-7B shape, 2,048 tokens, H200): the backward peaked 1.02
        # (stage 2) and 1.21 GiB (stage 3) above the forward's end, where this counts 0.99 and 1.24; at 8-40k
        # tokens the loss's own peak is the higher one, as predicted.
        logits = workload.micro_batch_size * workload.seq_len * spec.vocab_size
        hidden_grad = w * workload.micro_batch_size * workload.seq_len * spec.hidden_size
        bwd_act = max(bwd_act, act.saved_bytes - 4 * logits + hidden_grad + states.head_after_loss_bytes)
    if strategy.offload_optimizer != "none" and not adapters:
        # The input embedding's gradient is the last one backward makes, and an offloaded optimizer handles it as
        # it does the head's (offloaded_head_bytes): its 16-bit gradient whole, and the fp64 norm over this rank's
        # part, when next to no activation is left. Binds where activations are small: Qwen2.5-3B fp16, 2-offload,
        # 1 x 1024 with checkpointing peaked at 9.31 GiB in training (H200 capped at a T4, 2026-11-25), W + the
        # staging buffer + this = 9.29.
        tail = offloaded_head_bytes(spec.vocab_size * spec.hidden_size, w, workload.world_size, strategy.stage)
        bwd_act = max(bwd_act, tail)
    return bwd_act


def kept_outputs_bytes(spec: ModelSpec, workload: Workload) -> int:
    """Returns the logits a loop that keeps the model's outputs holds (in the model's dtype) through backward and
    the step (Workload.keeps_outputs; causal-lm), 0 for a loop that keeps only the loss."""
    if not (workload.keeps_outputs and workload.task == "causal-lm"):
        return 0
    return working_bytes(workload) * workload.micro_batch_size * workload.seq_len * spec.vocab_size


class StepMoments(NamedTuple):
    """Allocated bytes at the three moments of a training step that can peak (steady state)."""

    forward: int
    """At the loss: resident states, accumulated gradients, workspaces, gathered parameters, forward activations."""
    backward: int
    """The same with the backward's activations, and the kept outputs."""
    step: int
    """The optimizer step: resident states, workspaces, the step's transient copies, the kept outputs."""


def backward_end_moment(states: ModelStates, *, ws: int, held: int) -> int:
    """Returns the allocated bytes at backward's end (ModelStates.backward_end_bytes; the accumulated gradients
    are those same tensors, so they are not added again); ws: cuBLAS workspaces; held: kept_outputs_bytes."""
    return states.resident_bytes + ws + states.gathered_bytes + states.backward_end_bytes + held


def train_step_moments(states: ModelStates, act: Activations, *, backward_activations: int, ws: int,
                       held: int) -> StepMoments:  # fmt: skip
    """Returns the three moments' allocated bytes (their largest is the training steps' peak); ws: cuBLAS
    workspaces; held: kept_outputs_bytes. The backward's is the larger of the loss's backward and its end, where
    ZeRO-1 without overlap_comm holds every gradient (backward_end_moment)."""
    resident = states.resident_bytes
    between = states.accumulated_gradients_bytes + ws + states.gathered_bytes
    return StepMoments(
        forward=resident + between + act.forward_peak_bytes,
        backward=max(resident + between + backward_activations + held, backward_end_moment(states, ws=ws, held=held)),
        step=resident + ws + states.step_transient_bytes + held,
    )


def reduction_stream_bytes(strategy: Strategy, buffers: ZeroBuffers, workload: Workload, P: int) -> int:
    """Returns the pool PyTorch's caching allocator keeps for DeepSpeed's reduction stream: ZeRO-1/2 with
    overlap_comm and contiguous_gradients build the 16-bit gradient partition inside `with stream(reduction_stream)`
    (stage_1_and_2.py copy_grads_in_partition) and drop it after each step. The allocator keeps a pool per stream,
    so those pages stay reserved for that stream; when the compute stream's next forward needs them, the allocator
    frees its cache and retries, and the next backward's partition makes it retry again: every step.

    Measured (benchmarks/stream_pools.py, H200, torch 2.11, deepspeed 0.19.8; h200x2-i26-pools*-2026-11-28): the
    reduction stream's pool was the partition to within 0.04 GiB in all eight ZeRO-2 runs with overlap_comm
    (Qwen2-MoE 5.43 GiB on one GPU, Llama 3.2 1B 2.30 and 1.17 on one and two, Qwen2.5-7B 7.13 on two), and the
    compute stream's pool beside it no smaller than ZeRO-1's at the same shape but once (Qwen2.5-7B, by 3.8 GiB). Where both do not fit, the
    allocator retried 12 times in five steps (Qwen2-MoE at 10 x 2,048 capped to an H100: 0.791 s a step against
    ZeRO-1's 0.368 and 0.434 without overlap_comm) and 8 times (Qwen2.5-7B at 19 x 2,048 on two H200s: 5.26 s
    against 4.26 and 4.32). Stage 1 with both switches takes the same path (read, not measured); offload copies
    each gradient to the host instead."""
    overlap = buffers.stage2_overlap_comm if strategy.stage == 2 else buffers.overlap_comm
    if strategy.stage not in (1, 2) or strategy.offload_optimizer != "none" or not (overlap and buffers.contiguous_gradients):
        return 0
    return working_bytes(workload) * math.ceil(P / workload.world_size)


def reserved_bytes(spec: ModelSpec, strategy: Strategy, workload: Workload, buffers: ZeroBuffers,
                   gpu_name: str | None, *, states: ModelStates, act: Activations, backward_activations: int,
                   peak: int, ws: int) -> int:  # fmt: skip
    """Returns PyTorch's reserved memory at the run's peak without expandable segments: the peak allocation plus
    the caching allocator's slack (blocks freed by one phase that cannot serve the next)."""
    # Caching-allocator slack: blocks freed by one phase are kept reserved and cannot serve the next phase's
    # differently sized tensors, so reserved memory holds the activation peak and the step transients at
    # once. (Checked against max_memory_reserved in benchmarks/memory_regression.py.)
    activation_peak = max(act.forward_peak_bytes, backward_activations) + states.gathered_bytes
    reserved = max(peak, states.resident_bytes + ws + activation_peak + states.step_transient_bytes)
    if strategy.offload_optimizer != "none":
        # With no optimizer step on the GPU, the slack is the loss's two block pools, which no other phase
        # reuses: forward copies (6 B/logit) and backward gradients (8 B/logit). Measured slack on the
        # offload cases: 0.6-3.6 GiB, this term 0.9-4.1 GiB (benchmarks/memory_regression.py). On large
        # activations without offload the allocator splits those blocks for reuse, so it is not added there.
        loss_pools = (act.forward_peak_bytes - act.saved_bytes) + (act.backward_peak_bytes - act.saved_bytes)
        # An offloaded run allocates a subset of what the same stage allocates without offload, so its
        # reserved memory is bounded by that run's (where the two pools would be reused anyway).
        on_gpu = estimate_memory(spec, Strategy(strategy.stage), workload, buffers, gpu_name)
        bound = on_gpu.peak_allocated_bytes + on_gpu.overhead_bytes - (CUDA_CONTEXT_BYTES if ws else 0)
        bound -= nccl_buffer_bytes(workload.world_size, workload.gpus_per_node) if ws else 0
        reserved = max(reserved, min(peak + loss_pools, max(bound, peak)))
    return reserved


def host_memory(spec: ModelSpec, strategy: Strategy, workload: Workload, *, W: int, P: int, device_peak: int,
                gpu_name: str | None, pin_memory: bool = True) -> tuple[int, dict[str, int]]:  # fmt: skip
    """Returns (host bytes per node while training, {phase: host bytes per node} of the phases that hold more:
    host_phase_peaks): every local rank's process and offloaded states (host_parts), and what a checkpoint save,
    the export and a resume add (module_checkpoint_bytes, checkpoint_staging_bytes). device_peak: a CPU process
    (--gpus cpu:N) holds its "device" tensors in host memory too. pin_memory: the offload sections' pin_memory
    (DeepSpeed's default True); without it the offloaded buffers are plain host tensors of their own size."""
    n = workload.world_size
    w = working_bytes(workload)
    adapters = workload.method in ("lora", "qlora")
    # Parameters offloaded: each one's partition is pinned on its own. With adapters the trainable ones are
    # small and the frozen weights are counted at their stored bytes. A tied LM head is partitioned (and its
    # partition pinned and kept) under zero.Init before transformers ties it to the embedding: one partition
    # more than the model has tensors (147 pinned for Llama-3.2-1B's 146 tensors, measured).
    tied_head = ((spec.vocab_size * spec.hidden_size, 1),) if spec.tie_word_embeddings else ()
    offloaded = () if adapters else spec.tensor_sizes + tied_head
    # A CPU process (--gpus cpu:N) holds its "device" tensors in host memory too; torch.save of CPU storages
    # copies nothing, and ZeRO-3 takes no trip through host memory to defragment (benchmarks/cpu_rss.py).
    on_cpu = gpu_name is not None and gpu_name.lower().startswith("cpu")
    process = CPU_PROCESS_RSS_BYTES + device_peak if on_cpu else PROCESS_RSS_BYTES
    parts = host_parts(strategy, P, n, w, offloaded, workload.precision, process=process, cpu=on_cpu,
                       largest_trainable=largest_trainable_numel(spec, workload), pinned=pin_memory,
                       data=workload.data_bytes)  # fmt: skip
    if strategy.offload_param != "none" and adapters:
        # Frozen weights offloaded too: their stored bytes in pinned host memory, per local rank's partition.
        parts = dataclasses.replace(parts, states=parts.states + (W - w * P) // n)
    host = max(parts.process + parts.states + parts.step_transient, parts.defragment) * workload.gpus_per_node
    staging = 0 if on_cpu else checkpoint_staging_bytes(spec, strategy, P, n, workload.precision)
    module_file, module_storage = module_checkpoint_bytes(spec, strategy, workload, W=W, P=P)
    if on_cpu:
        module_storage = 0
    host_phases = host_phase_peaks(strategy, workload, parts=parts, staging=staging, module_storage=module_storage,
                                   module_file=module_file, W=W, P=P,
                                   random_base=0 if on_cpu else qlora_random_base_bytes(spec, workload))  # fmt: skip
    return host, host_phases


def qlora_random_base_bytes(spec: ModelSpec, workload: Workload) -> int:
    """Returns the host bytes local rank 0 holds at once while it builds a QLoRA run's random base (0 for other runs).

    bitsandbytes quantises while from_pretrained reads a file, so a model given only as a config is first built
    whole on the CPU in the compute dtype and written (modeling.build_qlora_base): w bytes per parameter, plus the
    tied LM head, which from_config allocates before tying it (w V H). from_pretrained then moves each weight to
    the GPU before quantising it (transformers integrations/bitsandbytes.py), holding no second host copy; the file
    it maps shows as page cache, not anonymous memory. Measured step by step on one H100 (benchmarks/
    qlora_host_probe.py, 2026-12-06, transformers 5.17 and 5.24): Llama 3.2 1B 1.03 GiB of imports and CUDA + 2.30
    (w N) + 0.49 (w V H) = 3.82 at the build, from_pretrained 3.40 (file pages); Qwen2.5-0.5B 2.21 (2.20 so
    counted). zero-run's load phase (H100, RSS_AT_QLORA_BUILD_BYTES as the process): Llama 3.2 1B 4.16 GiB (phases-r5;
    3.82 in r2) against 4.15 predicted, Qwen3-4B 9.58 against 9.57, Gemma 2 2B 7.32 against 7.33, Qwen2.5-1.5B 4.66
    against 4.67 (the last two predicted at 7.07 and 4.41 before they ran, with the data phase's process)."""
    if workload.method != "qlora" or workload.pretrained:
        return 0
    w = 4 if workload.precision == "fp32" else 2
    head = w * spec.vocab_size * spec.hidden_size if spec.tie_word_embeddings else 0
    return w * spec.num_params + head


def module_checkpoint_bytes(spec: ModelSpec, strategy: Strategy, workload: Workload, *, W: int,
                            P: int) -> tuple[int, int]:  # fmt: skip
    """Returns (the bytes of the module's own checkpoint file, rank 0's; its largest storage, which a save stages
    in host memory at once)."""
    # torch.save copies the file to the host a storage at a time, so a save holds its largest storage: below
    # ZeRO-3 the trainable weights are views of one flat 16-bit buffer (FP16_Optimizer, stage_1_and_2.py
    # bit16_groups_flat), the whole W; fp32 at stage 0 keeps separate tensors (the largest: the embedding).
    # Measured save RSS: Qwen2.5-0.5B 2-offload + W, fp32 stage 0 + 0.36 GiB. A resume reads the file whole. An
    # adapter run leaves frozen tensors out by name (engine.module_state_dict: exclude_frozen_parameters over
    # named_parameters()), which lists a tied LM head once, under the embedding: below ZeRO-3 `lm_head.weight`
    # stays in the file (Llama 3.2 1B LoRA: save +0.5 GiB RSS, resume reads it back).
    stage = strategy.stage
    adapters = workload.method in ("lora", "qlora")
    mixed = workload.precision in ("bf16", "fp16")
    w = 2 if mixed else 4
    tied_in_file = adapters and spec.tie_word_embeddings and workload.task == "causal-lm" and stage < 3
    head16 = w * spec.vocab_size * spec.hidden_size
    module_file = (w * P + (head16 if tied_in_file else 0)) if adapters else (0 if stage == 3 else W)
    if adapters:
        module_storage = max(w * P if stage < 3 else 0, head16 if tied_in_file else 0)
    elif stage == 0 and not mixed:
        module_storage = w * spec.largest_tensor_numel
    else:
        module_storage = module_file
    return module_file, module_storage


def run_phase_peaks(spec: ModelSpec, strategy: Strategy, workload: Workload, *, W: int, P: int, train_peak: int,
                    resident: int, ws: int, gathered: int, forward_activations: int,
                    sub_group_size: int = SUB_GROUP_SIZE, ipg: int = 0) -> dict[str, int]:
    """Returns {phase: peak allocated bytes} for every phase of a run.

    W: every weight as stored on the GPU; P: trainable parameters; train_peak: the training steps' peak;
    resident: what lives on the GPU between steps (16-bit weights or their partition, fp32 master weights, Adam
    moments, stage 3's gradient partition, the offload staging buffer); ws: cuBLAS workspaces (allocated by the
    first matmul, so not in load, initialize or resume); gathered: ZeRO-3 parameters gathered while a forward
    runs; forward_activations: the training forward's activation peak (eval keeps less: no saved tensors). Each term is read from DeepSpeed 0.19 and transformers 5 and was measured by zero-run per phase
    (benchmarks/phases.py: Qwen2.5-0.5B every strategy, GPT-2 medium fp16, Llama 3.2 1B LoRA; H100, 2026-11-25).
    One function per phase below: load_peak, initialize_peak, resume_peak, eval_peak, save_peak, export_peak.
    """
    load, cast_peak = load_peak(spec, strategy, workload, W=W)
    initialize = initialize_peak(spec, strategy, workload, W=W, P=P, sub_group_size=sub_group_size, ipg=ipg)
    phases = {
        "load": load,
        "initialize": max(initialize, cast_peak),
        "resume": resume_peak(strategy, workload, W=W, P=P, resident=resident),
        "train": train_peak,
        "eval": eval_peak(spec, workload, resident=resident, ws=ws, gathered=gathered,
                          forward_activations=forward_activations),  # fmt: skip
        "save": save_peak(resident=resident, ws=ws, gathered=gathered),
        "export": export_peak(spec, strategy, workload, resident=resident, ws=ws),
    }
    return {name: int(phases[name]) for name in PHASES}


def _weights_on_gpu(strategy: Strategy, W: int, n: int) -> int:
    """Returns the bytes of this rank's weights on the GPU after ZeRO partitioning: W / n at stage 3 (none with
    parameters offloaded), all of W below."""
    return W // n if strategy.stage == 3 and strategy.offload_param == "none" else (0 if strategy.stage == 3 else W)


def load_peak(spec: ModelSpec, strategy: Strategy, workload: Workload, *, W: int) -> tuple[int, int]:
    """Returns (the load phase's peak: the model as built, before deepspeed.initialize; the part of it QLoRA's
    initialize holds again, 0 otherwise)."""
    stage, n = strategy.stage, workload.world_size
    off_param = strategy.offload_param != "none"
    w = 4 if workload.precision == "fp32" else 2
    causal = workload.task == "causal-lm"
    largest = w * spec.largest_tensor_numel  # the embedding (or LM head) in every catalog model but MoE experts
    largest_part = w * -(-spec.largest_tensor_numel // n)
    # A tied LM head: from_config allocates the head's own weight and transformers ties it to the embedding
    # afterwards (freed then); from_pretrained builds on the meta device and allocates no such copy. Measured:
    # load = W + the head's weight (Qwen2.5-0.5B 1.174 GiB = 0.920 + 0.254; Llama 3.2 1B LoRA 2.791 = 2.32 + 0.49).
    head = w * spec.vocab_size * spec.hidden_size if spec.tie_word_embeddings and causal and not workload.pretrained else 0
    cast_peak = 0
    if workload.method == "qlora":
        # bitsandbytes quantises each linear weight as from_pretrained reads it (the 4-bit model, W), one 16-bit
        # weight read at a time beside it. zero-run does not upcast the weights it keeps in 16 bits to fp32 as
        # peft's prepare_model_for_kbit_training would (modeling.prepare_for_kbit_training: deepspeed.initialize
        # casts them back anyway); with that upcast the load peak was the fp32 embedding (0.98 GiB), the 16-bit
        # one being read (0.49) and the 4-bit linear weights (census, benchmarks/phase_census.py, Llama 3.2 1B,
        # H100), 4 + 2 bytes per kept weight where 2 remain. Below ZeRO-3 initialize then casts nothing (the
        # weights are in the training dtype already); under ZeRO-3 it partitions the model it finds whole on
        # the GPU (not built under zero.Init), holding the load phase's figure again.
        load = W + w * spec.largest_tensor_numel
        cast_peak = load if stage == 3 else 0
    elif stage < 3:
        load = W + head
    else:
        # zero.Init partitions each tensor as it is made; the model's weights are then initialised (random init:
        # modeling._init_partitioned_weights) or loaded (from_pretrained) one module at a time, gathered whole.
        # Measured: Qwen2.5-0.5B (tied) W + 2 x embedding at stage 3, 2 x embedding with parameters offloaded
        # (the gathered weight and its partition brought up to the GPU; 1.25 x at 4 GPUs, 1.5 x at 2 for Llama
        # 3.2 1B); untied Mistral-8L W + 1.13 x (2026-11-22 results: after_init).
        tied_partition = w * -(-spec.vocab_size * spec.hidden_size // n) if head and not off_param else 0
        load = _weights_on_gpu(strategy, W, n) + tied_partition + largest + (largest_part if off_param else 0)
    return load, cast_peak


def initialize_peak(spec: ModelSpec, strategy: Strategy, workload: Workload, *, W: int, P: int,
                    sub_group_size: int = SUB_GROUP_SIZE, ipg: int = 0) -> int:  # fmt: skip
    """Returns deepspeed.initialize's peak allocated bytes, from the loaded model. ipg: stage 3's reduce bucket."""
    stage, n = strategy.stage, workload.world_size
    off_opt, off_param = strategy.offload_optimizer != "none", strategy.offload_param != "none"
    w = 4 if workload.precision == "fp32" else 2
    mixed = w == 2
    Pn = -(-P // n) if stage > 0 else P
    adapters = workload.method in ("lora", "qlora")
    if stage == 0:
        # fp16/fused_optimizer.py FP16_Optimizer.__init__ (bf16 too at stage 0): the trainable weights flattened
        # into one buffer (the originals freed), an fp32 master copy (4P), then initialize_optimizer_states: an
        # fp32 zero gradient (4P) and one optimizer step that creates Adam's moments (8P). Measured 18 B/param on
        # every full fine-tuning case (Qwen2.5-0.5B, GPT-2 medium fp16: 8.28 and 5.95 GiB). fp32: a plain torch
        # optimizer, whose states are made by the first step.
        initialize = W + (4 + 4 + 8) * P if mixed else W
    elif stage in (1, 2):
        # stage_1_and_2.py: the trainable weights flattened into one buffer, on the GPU when NVML reports room for
        # it (`available_memory() >= flat_buffer_bytes`), else through host memory; then the fp32 master
        # partition (4Pn) and, in initialize_optimizer_states, an fp32 gradient partition (4Pn, freed again
        # unless the optimizer is offloaded, where both live on the host). Offloaded, the GPU keeps a staging
        # buffer of the largest trainable tensor (temp_grad_buffer_for_gpu_offload).
        # The branch turns on free memory at run time, so the plan counts the worse one (docs/design.md): the flat
        # buffer beside the weights, W + wP. Counting the host branch at W failed where it was relied on: Phi-3-mini
        # 2-offload planned for a T4 (initialize 7.30 GiB predicted) ran out of memory in initialize 4 times of 4 on
        # an H200 capped at the T4 less the plan's overhead, and peaked at 14.23 GiB = 2.00 W uncapped (issue 58,
        # 2026-12-04). Measured why (benchmarks/flatten_gpu.sh, one H100, 2026-12-05; results/flatten-phi3-t4-*):
        # under the cap DeepSpeed saw 6.78e9 free < 7.64e9 and took the host branch, and it too holds 2 W: moving
        # the weights to the host left them allocated on the GPU (7.64e9 still allocated) and the copy back
        # (stage_1_and_2.py:524, flattened_buffer.to(device)) asked for 7.64e9 more; forcing the host branch gave
        # the same. Either branch holds W + wP.
        flat = w * P
        staging = w * largest_trainable_numel(spec, workload)
        initialize = W + max(flat, staging if off_opt else 8 * Pn)
    else:
        # stage3.py: the partitions defragmented into one flat buffer (through host memory), then per optimizer
        # sub-group (<= SUB_GROUP_SIZE elements) the fp32 master copy (4Pn), and initialize_optimizer_states' fp32
        # gradient buffer of the largest sub-group (4 x group, freed); last the flat gradient partition (w Pn).
        # At the end one parameter is gathered whole: measured w x the largest tensor above the resident
        # partitions on every stage-3 case (Llama 3.2 3B 8Pn + 0.73 GiB, Phi-3 8Pn + 0.18, Gemma 2 8Pn + 1.10;
        # with parameters offloaded, twice the embedding: the gathered weight and its partition brought up). It is
        # a trainable one: none of the frozen base under LoRA (Llama 3.2 1B LoRA: the resident figure, measured).
        largest = w * spec.largest_tensor_numel
        trainable_largest = w * workload.lora_r * max(spec.hidden_size, spec.intermediate_size) if adapters else largest
        end_gather = trainable_largest + (-(-trainable_largest // n) if off_param else 0)
        partition = _weights_on_gpu(strategy, W, n)
        if off_opt:
            initialize = partition + ipg + end_gather
        else:
            group = sub_group_numel(spec, P, n, sub_group_size)
            initialize = partition + 4 * Pn + max(4 * group, w * Pn + ipg + end_gather)
    return initialize


def resume_peak(strategy: Strategy, workload: Workload, *, W: int, P: int, resident: int) -> int:
    """Returns engine.load_checkpoint's peak, after initialize."""
    # FP16_Optimizer's torch optimizer loads Adam's moments into new tensors while the ones made at initialize are
    # still held (+8P; measured 22 B/param in all at stage 0: Qwen2.5-0.5B 10.12 GiB, GPT-2 medium fp16 7.27);
    # ZeRO-1/2/3 create them from the checkpoint (no earlier ones: the resident figure, 14 B/param at stage 1-2
    # and 16 at stage 3 on one GPU, measured).
    if strategy.stage == 0:
        return W + (4 + 8 + 8) * P if workload.precision != "fp32" else W + 8 * P
    return resident


def eval_peak(spec: ModelSpec, workload: Workload, *, resident: int, ws: int, gathered: int,
              forward_activations: int) -> int:  # fmt: skip
    """Returns the eval phase's peak: a forward without gradients at the training micro-batch, after an optimizer
    step."""
    # No activations are kept; at the loss, the 16-bit logits, their fp32 copy and the fp32 log-softmax (2 + 4 + 4
    # bytes per logit; fp32 runs have no copy) and the final hidden states. Measured Qwen2.5-0.5B at 2 x 1024:
    # resident + 2.93 GiB.
    mixed = workload.precision != "fp32"
    w = 2 if mixed else 4
    tokens = workload.micro_batch_size * workload.seq_len
    logits = tokens * spec.vocab_size if workload.task == "causal-lm" else workload.micro_batch_size * workload.num_labels
    at_loss = (10 if mixed else 8) * logits + 2 * w * tokens * spec.hidden_size
    peak = min(at_loss, forward_activations)
    if sdpa_math_kernel(spec, workload):
        # one layer's attention: its fp32 scores and probabilities, the fp32 query and the key and value expanded over
        # the heads, with the hidden states in and out around it
        per_token = spec.num_attention_heads * (MATH_SDPA_FORWARD_SCORE_BYTES * workload.seq_len + 3 * 4 * spec.head_dim)
        peak = max(peak, tokens * (per_token + 2 * w * spec.hidden_size))
    return resident + ws + gathered + peak


def save_peak(*, resident: int, ws: int, gathered: int) -> int:
    """Returns a checkpoint save's peak: DeepSpeed's checkpoint copies each tensor to the host (torch.save, a storage
    at a time), so nothing more on the GPU (measured: resident + workspaces), except what ZeRO-3 still holds
    gathered from the eval forward before it (its live-parameter window; census: a save alone holds none,
    zero-run's after eval all of W with parameters offloaded)."""
    return resident + ws + gathered


def export_peak(spec: ModelSpec, strategy: Strategy, workload: Workload, *, resident: int, ws: int) -> int:
    """Returns the final export's peak."""
    # Stages 0-2 hand the state dict's tensors to the host a shard at a time (train._write_hf_folder); ZeRO-3
    # gathers each module whole (engine._zero3_consolidated_16bit_state_dict), the largest one at a time
    # (measured: + the embedding, twice it with parameters offloaded). LoRA's merged export computes each
    # adapter's delta (B @ A) beside its weight: two of the largest adapted weight. An adapted expert stack the
    # same: peft's ParamWrapper.get_delta_weight keeps the einsum's [experts, in, out] product while it scales it
    # (`torch.einsum(...) * scaling`), then adds that to the stack in place (measured on one H100, phases-r15:
    # Qwen3-MoE 8 layers and OLMoE, export = save + 2 x the largest stack, to 0.01%).
    w = 4 if workload.precision == "fp32" else 2
    adapters = workload.method in ("lora", "qlora")
    export = resident + ws
    if strategy.stage == 3 and not adapters:
        largest_part = w * -(-spec.largest_tensor_numel // workload.world_size)
        export += w * spec.largest_tensor_numel + (largest_part if strategy.offload_param != "none" else 0)
    elif workload.method == "lora" and strategy.stage < 3:  # QLoRA's 4-bit base is not merged (saves.py)
        stacks = param_adapters(spec, workload)
        export += 2 * w * max(_linear(spec)["largest_numel"], stacks["largest_numel"] if stacks else 0)
    return export


STAGE3_NORM_CHUNK = 250_000_000  # stage3.py _constant_buffered_norm2(buffer_size=250000000)


def offloaded_head_bytes(head_numel: int, w: int, n: int, stage: int) -> int:
    """Returns the GPU bytes an untied LM head's gradient holds at once while ZeRO hands it to the CPU optimizer.

    The 16-bit gradient (w per element, whole on every rank until reduced) and, over this rank's partition,
    the gradient norm DeepSpeed takes in fp64 before the copy out (stage_1_and_2.py set_norm_for_param_grad_in_gpu
    and stage3.py _constant_buffered_norm2: `.to(get_norm_dtype())`, 8 bytes per element on CUDA); stage 3
    first reduces the gradient into a partition of its own (w per partition element) and takes the norm in
    chunks of at most 250M elements."""
    if not head_numel:
        return 0
    part = -(-head_numel // n)
    if stage == 3:
        return w * head_numel + w * part + 8 * min(part, STAGE3_NORM_CHUNK)
    return w * head_numel + 8 * part



EXPORT_SHARD_BYTES = 2 * 2**30
"""Largest safetensors file zero-run's final export writes (train._write_hf_folder): shards are copied to host
memory and written one at a time."""


def host_phase_peaks(strategy: Strategy, workload: Workload, *, parts: HostParts, staging: int, module_storage: int,
                     module_file: int, W: int, P: int, random_base: int = 0) -> dict[str, int]:
    """Returns host bytes per node at the peak of initialize (ZeRO-3 with parameters on the GPU), train, save,
    export and resume (every local rank's process; the first node's, which holds rank 0), and load where a
    user's dataset is counted (Workload.data_peak_bytes: every rank tokenizes and packs it before the model).

    parts: one rank's process and offloaded states (host_parts); staging: what each rank holds at once while it
    saves its optimizer state (checkpoint_staging_bytes); module_storage: the largest storage of the module's
    file, which rank 0 alone saves; module_file: the bytes of the module's checkpoint file, read whole on
    resume; W: the weights' stored bytes; P: trainable parameters; random_base: what local rank 0 holds while it
    builds a QLoRA run's random base (qlora_random_base_bytes), in the load phase.
    save: every rank stages its own optimizer state at once; rank 0 saves the module's file too, a storage at
    a time, before its optimizer state, so it holds the larger of the two. Measured per phase with zero-run
    (benchmarks/phases.py, RSS peak per phase, Qwen2.5-0.5B every strategy, GPT-2 medium fp16, Llama 3.2 1B
    LoRA; H100, 2026-11-25). On four GPUs (Llama 3.2 1B, 4 x H100, 2026-11-27) the node's save was training +
    W + 3 x 4Pn at ZeRO-1 and 2 (14.54 GiB measured), training + W with the optimizer offloaded: the other
    ranks hold no module storage (counting W on every rank over-predicted by 21% and 12%). On one and two GPUs
    the two counts agree (4Pn >= W there).
    export: rank 0 writes while the others wait at their training baseline. Stages 0-2 copy one shard
    (<= EXPORT_SHARD_BYTES) at a time to the host; ZeRO-3 first gathers the whole 16-bit state dict into rank 0's
    host memory (engine._zero3_consolidated_16bit_state_dict), whose tensors the shards then reuse. Measured:
    Qwen2.5-0.5B + 0.92 GiB (its W) at stages 1 and 3, Llama 3.2 1B LoRA's merged export + 2.05 GiB (one shard).
    resume: every rank reads its checkpoint files whole (engine.load_checkpoint: torch.load with
    map_location cpu), the module's file first, then its optimizer partition: at stage 0 one file holds both
    (16-bit weights and the optimizer's fp32 master and Adam moments, 12 B per trainable parameter); ZeRO keeps
    them apart (the larger of W and 12 Pn). It comes right after initialize, when a process holds
    RSS_AT_ZERO3_INIT_BYTES (measured: resume - loaded = 1.52 GiB on Qwen2.5-0.5B stages 0-3). With the optimizer
    offloaded, CPU Adam makes its two moments at the first step (DeepSpeedCPUAdam.step), so they are not there
    yet: the module's file is read into a process without them, then the optimizer's file (12 Pn), whose moments
    stay as the optimizer's state and whose fp32 master partition is copied into the pinned master buffer:
    the peak is the trained states plus that 4 Pn, and at stage 3 with parameters on the GPU the 16-bit
    conversion of a sub-group, as in a step (step_transient). Measured over training, per rank: Qwen2.5-0.5B
    on one GPU 2-offload +1.30 GiB, 3-offload +1.28, 3-offload-all +1.26 (4 Pn = 1.84 less the process's
    PROCESS_RSS_BYTES - RSS_AT_ZERO3_INIT_BYTES = 0.55); Llama 3.2 1B on two GPUs +1.79 and +1.74 (4 Pn = 2.30),
    on four +0.63 and +0.60 (1.15), 3-offload +0.64 (+ its 0.58 GiB conversion). Counting W instead, as
    before 2026-11-27, over-predicted the four-GPU resumes by 11-15%.
    """
    g, n = workload.gpus_per_node, workload.world_size
    adapters = workload.method in ("lora", "qlora")
    w = 4 if workload.precision == "fp32" else 2
    weights16 = module_file
    adapter16 = w * P  # an adapter run exports its adapter (and the merged model, below)
    Pn = -(-P // n) if strategy.stage > 0 else P
    if strategy.stage == 3 and not adapters:
        export = W
    elif workload.method == "lora" and strategy.stage < 3:
        export = min(W, EXPORT_SHARD_BYTES)  # the merged model (LoRA below ZeRO-3), a shard at a time
    else:
        export = min(adapter16 if adapters else W, EXPORT_SHARD_BYTES)
    states = 12 * P if strategy.stage == 0 else 12 * Pn  # fp32 master + Adam moments in the checkpoint
    held = parts.process + parts.states  # between steps, outside the optimizer step's host transients
    if strategy.offload_optimizer != "none":
        moments = 8 * Pn
        resume = parts.process_at_initialize + max(parts.states - moments + weights16,
                                                   parts.states + 4 * Pn + parts.step_transient)  # fmt: skip
    elif strategy.stage == 0:
        resume = parts.process_at_initialize + weights16 + states
    else:
        resume = parts.process_at_initialize + max(weights16, states)
    save = held * g + max(staging, module_storage) + staging * (g - 1)
    phases = {"train": (held + parts.step_transient) * g, "save": save, "export": held * g + export, "resume": resume * g}
    load = (parts.process_at_data + workload.data_peak_bytes) * g if workload.data_peak_bytes else 0
    if random_base:
        # QLoRA of a config: local rank 0 builds the random 16-bit base on the host while the others wait
        # (qlora_random_base_bytes), after every rank has packed its data (held: Workload.data_bytes).
        load = max(load, (parts.process_at_data + workload.data_bytes) * g + random_base
                   + RSS_AT_QLORA_BUILD_BYTES - parts.process_at_data)  # rank 0's process at its build
    if load:
        # every rank packs its data before it builds the model: the process then, and the data's peak
        phases = {"load": load, **phases}
    if parts.defragment and strategy.offload_optimizer == "none":
        # (With the optimizer offloaded its states, created during initialize and the first step, are larger.)
        phases = {"initialize": parts.defragment * g, **phases}
    return phases


def pinned_bytes(num_bytes: int) -> int:
    """Returns the host bytes a pinned buffer of `num_bytes` takes: PyTorch's CachingHostAllocator rounds every
    pinned allocation up to a power of two (c10 PowerOf2Ceil in CachingHostAllocator.h)."""
    return 1 << (num_bytes - 1).bit_length() if num_bytes > 0 else 0


# ZeRO-3 keeping parameters on the GPU defragments its 16-bit partition through host memory at initialize
# (zero/utils.py defragment: the whole partition copied into one CPU buffer, then back to a flat GPU buffer),
# so peak RSS is the process at that moment plus w bytes per partitioned parameter. The process holds this much
# then: peak RSS minus the buffer on Llama 3.2 1B/3B, Qwen2.5-0.5B, Phi-3-mini, Mistral-8L and Gemma 2 2B is
# 1.46-1.55 GiB (H100/H200, benchmarks/results); its own peak before, PROCESS_RSS_BYTES, is higher.
RSS_AT_ZERO3_INIT_BYTES = int(1.55 * GiB)
# A GPU process while it tokenizes and packs a user's dataset, before the model is built: torch, transformers,
# datasets and deepspeed imported, the process group up, no model. Measured as the load phase's peak RSS less the
# data's packing peak (data.PEAK_BYTES_PER_TOKEN x the tokens packed: run_report blocks x seq_len), per rank on two
# H200s (2026-11-28): Llama 3.2 1B over 20,000 rows, prompt/response 1.06 and 1.01 GiB, text 1.07 and 0.99; Gemma 2
# 2B over 4,000 prompt/response rows 1.09 and 1.08 (benchmarks/zero_run/*user-data-20k*, *user-llamafactory*-28b).
# The process after initialize (RSS_AT_ZERO3_INIT_BYTES) counted in its place over-predicted those peaks by 20-34%.
RSS_AT_DATA_BYTES = int(1.10 * GiB)


# The process of local rank 0 when it builds a QLoRA run's random 16-bit base (qlora_random_base_bytes): torch,
# transformers, datasets, deepspeed and bitsandbytes imported, the process group up, the tokenizer and the data
# loaded, CUDA initialised. Measured as zero-run's load-phase peak RSS less w N + w V H on one H100 (transformers
# 5.17, bitsandbytes 0.50.2): Gemma 2 2B 1.35 GiB and Qwen2.5-1.5B 1.35 (qlora-host-load-h100-2026-12-06, predicted
# beforehand with RSS_AT_DATA_BYTES in its place: -3.4% and -5.3%), Qwen3-4B 1.37 (phases-r5b), Llama 3.2 1B 1.37
# (phases-r5; 1.03 in phases-r2, before the k-bit preparation stopped upcasting).
RSS_AT_QLORA_BUILD_BYTES = int(1.36 * GiB)


def data_process_bytes(cpu: bool) -> int:
    """Returns one rank's process while it packs its data, before the model: RSS_AT_DATA_BYTES for a GPU process,
    CPU_PROCESS_RSS_BYTES for a CPU one (no model tensors yet)."""
    return CPU_PROCESS_RSS_BYTES if cpu else RSS_AT_DATA_BYTES


# Not counted: QLoRA's peak RSS exceeds this model by the 16-bit checkpoint it quantises while loading (1.06
# GiB + 2 bytes/param on Llama 3.2 1B/3B, H100). Those are memory-mapped safetensors pages: file-backed,
# shared by every rank that maps the file and given back under pressure, so they are not memory a node must
# have free (counting them per rank refused QLoRA of Llama-3-8B on two 29 GiB Kaggle T4 hosts).


def checkpoint_staging_bytes(spec: ModelSpec, strategy: Strategy, P: int, n: int, precision: str) -> int:
    """Returns the host bytes one rank holds at once while DeepSpeed saves a checkpoint (beyond the process).

    torch.save copies every GPU storage to host memory whole, one at a time (torch/serialization.py _save:
    `storage.cpu()` per storage), so the peak is the largest storage. The largest are the optimizer's flat fp32
    tensors, the master partition and Adam's two moments, 4 bytes per element each: stages 0-2 keep one flat
    group of the rank's Pn trainable elements (bf16/fp16 at stage 0: BF16_Optimizer/FP16_Optimizer; stages 1-2:
    single_partition_of_fp32_groups), stage 3 one per optimizer sub-group (<= SUB_GROUP_SIZE elements). Every
    rank saves its own optimizer state at once (engine._configure_checkpointing: save_zero_checkpoint on each
    rank of the optimizer's dp group). fp32 at stage 0 keeps per-parameter states (largest: an embedding).
    An offloaded optimizer's states already live in host memory: nothing is staged.
    Measured (zero-run, Llama-3.2-1B, 1 x H100, 2026-11-23, peak RSS after a checkpoint save): stage 0 6.73 GiB
    (2.1 + 4 x 1.236e9 B = 6.70 predicted), stage 3 5.84 GiB (2.1 + 4 x 1e9 B = 5.83); before the save 3.67
    and 3.91 GiB.
    """
    if strategy.offload_optimizer != "none":
        return 0
    Pn = math.ceil(P / n) if strategy.stage > 0 else P
    if strategy.stage == 3:
        return 4 * min(Pn, SUB_GROUP_SIZE)
    if strategy.stage == 0 and precision == "fp32":
        return 4 * min(P, spec.vocab_size * spec.hidden_size)
    return 4 * Pn


@dataclass(frozen=True)
class HostParts:
    """One rank's host memory, in bytes, by what holds it."""

    process: int
    """The training process itself (PROCESS_RSS_BYTES)."""
    states: int
    """Offloaded optimizer states, parameters and their pinned buffers, held from initialize to the end."""
    step_transient: int
    """Host buffers of the optimizer step only (a sub-group's 16-bit copy, fp16's overflow check)."""
    defragment: int
    """ZeRO-3's peak at initialize with parameters on the GPU (the partition copied through host memory)."""
    process_at_initialize: int = RSS_AT_ZERO3_INIT_BYTES
    """The process right after deepspeed.initialize, before training (a CPU process: the whole of `process`)."""
    process_at_data: int = RSS_AT_DATA_BYTES
    """The process while it packs its data, before the model (a CPU process: CPU_PROCESS_RSS_BYTES)."""


def host_parts(strategy: Strategy, P: int, n: int, w: int, tensor_sizes: tuple[tuple[int, int], ...],
               precision: str, *, process: int = PROCESS_RSS_BYTES, cpu: bool = False,
               largest_trainable: int = 0, pinned: bool = True, data: int = 0) -> HostParts:
    """Returns one rank's host memory by part: its process (`process` bytes: PROCESS_RSS_BYTES for a GPU process;
    for a CPU one, cpu=True, CPU_PROCESS_RSS_BYTES and its tensors) with `data` bytes of tokenized training data
    (Workload.data_bytes: prepared before the model, so held from initialize on), plus the offloaded states of
    its partition.

    `pinned` False (a user's JSON with `"pin_memory": false`) or a CPU process (the CPU accelerator's pin_memory is
    a no-op): each buffer named pinned below is a plain tensor of its own size instead (measured on a GPU for
    ZeRO-2 offload: Llama 3.2 1B fp32 at 8 x 1,024, every host phase within +0.4%, suite phases-r10; the CPU
    processes' figures stay within +2% .. +5% of benchmarks/cpu_rss.py's measurements).
    With the optimizer offloaded (pin_memory, DeepSpeed's default), per rank and partition of Pn elements:
      stages 1-2 (stage_1_and_2.py): pinned fp32 master copy pinned(4 Pn), pinned 16-bit staging copy
        pinned(w Pn), pinned fp32 gradient partition pinned(4 Pn), CPU Adam's two fp32 moments (8 Pn), and
        temp_grad_buffer_for_cpu_offload, a w-byte buffer of the largest trainable tensor's `largest_trainable`
        elements, pinned (the host side of the GPU's temp_grad_buffer_for_gpu_offload). It was missing here
        until 2026-11-27: every 2-offload case measured that much above the prediction, on one GPU and on
        two and four (Llama 3.2 1B -0.4 and -0.5 GiB, 3B -0.95, Gemma 2 2B -1.9, Mistral-8L -0.13: pinned(2 x
        the embedding) is 0.5, 1, 2 and 0.25 GiB), and no stage-3 case;
      stage 3 (stage3.py): the fp32 master copy 4 Pn (not pinned), a pinned fp32 gradient buffer per optimizer
        sub-group (<= SUB_GROUP_SIZE elements, initialize_optimizer_states), the pinned flat gradient buffer
        (grad_partitions_flat_buffer) in the gradient-accumulation dtype, which DeepSpeed takes from the model
        (engine.get_data_types: w bytes, not fp32), and Adam's moments 8 Pn. Transients of the step, one at a
        time: with 16-bit parameters on the GPU, each sub-group's fp32 master converted to w bytes on the host
        before the copy up (w * group; none in fp32); with fp16's loss scaling, the overflow check on the flat
        gradient buffer (torch.isinf/isnan on the CPU: a w-byte abs() copy and a bool per element, (w + 1) Pn).
      parameters offloaded (stage 3, partition_parameters.py): every parameter's partition pinned on its own
        (each rounded, and kept), plus the flat 16-bit buffer they are defragmented into, pinned(w Pn).
    Measured buffer by buffer (gpu_step host marks: PyTorch's pinned-memory statistics and RSS after
    initialize and after each phase; Llama-3.2-1B, Phi-3-mini, Qwen2.5-0.5B, H200 and H100, 2026-11-23): every
    pinned allocation above, its size and rounding, and the step transients (bf16 1.86-1.89 GiB, fp16 3.45 GiB
    on Llama-3.2-1B, none in fp32) as counted here.
    """
    states = transient = 0
    Pn = math.ceil(P / n)

    def buffer_bytes(num_bytes: int) -> int:
        # A pinned buffer is rounded up to a power of two (pinned_bytes); with pin_memory off, and on the CPU
        # accelerator, whose pin_memory is a no-op, a buffer is a plain tensor of its own size.
        return pinned_bytes(num_bytes) if pinned and not cpu else num_bytes

    # The defragment copy is a GPU process's trip through host memory; a CPU process's partition stays where it is.
    gpu_zero3 = not cpu and strategy.stage == 3 and strategy.offload_param == "none"
    defragment = RSS_AT_ZERO3_INIT_BYTES + data + w * Pn if gpu_zero3 else 0
    if strategy.offload_optimizer != "none":
        if strategy.stage == 3:
            groups = [SUB_GROUP_SIZE] * (Pn // SUB_GROUP_SIZE) + ([Pn % SUB_GROUP_SIZE] if Pn % SUB_GROUP_SIZE else [])
            states += 4 * Pn + sum(buffer_bytes(4 * g) for g in groups) + buffer_bytes(w * Pn) + 8 * Pn
            convert = w * max(groups) if w < 4 and strategy.offload_param == "none" else 0
            overflow_check = (w + 1) * Pn if precision == "fp16" else 0
            transient = max(convert, overflow_check)
        else:
            states += 2 * buffer_bytes(4 * Pn) + buffer_bytes(w * Pn) + 8 * Pn + buffer_bytes(w * largest_trainable)
    if strategy.offload_param != "none":
        partitions = sum(buffer_bytes(w * math.ceil(numel / n)) * count for numel, count in tensor_sizes)
        states += buffer_bytes(w * Pn) + partitions
    return HostParts(process + data, states, transient, defragment, process + data if cpu else RSS_AT_ZERO3_INIT_BYTES + data,
                     data_process_bytes(cpu))  # fmt: skip

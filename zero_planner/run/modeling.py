"""Building the Hugging Face model that zero-run trains and the GPU harness measures.

Everything here imports torch and transformers lazily: the planner's import path must stay light.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from zero_planner.models.hf import hf_config

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def attn_implementation_for(config_dict: dict[str, Any], task: str = "causal-lm") -> str:
    """Returns "sdpa" where transformers accepts it for this architecture, else "eager".

    Decided by asking transformers itself on the meta device (no memory, no weights): Gemma 2 is accepted
    by some releases and refused by others, so no hard-coded list would stay right.
    """
    import torch

    auto = _auto_class(task)
    try:
        with torch.device("meta"):
            auto.from_config(hf_config(config_dict), attn_implementation="sdpa")
        return "sdpa"
    except (ValueError, ImportError):
        return "eager"


def _auto_class(task: str):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    return AutoModelForSequenceClassification if task == "seq-cls" else AutoModelForCausalLM


def build_model(
    config_dict: dict[str, Any],
    *,
    precision: str,
    ds_config: dict[str, Any] | None = None,
    device: str | None = None,
    attn_implementation: str | None = None,
    task: str = "causal-lm",
    gradient_checkpointing: bool = False,
    weights_path: str | None = None,
    num_labels: int | None = None,
):
    """Returns (model, attn_implementation): a randomly initialised (or loaded) model ready for deepspeed.

    The model is created in the training dtype directly on `device` for stages 0-2, and under
    `deepspeed.zero.Init` for stage 3 so that no rank ever holds the whole model. `num_labels` sizes a
    seq-cls head (None: the config's own).
    """
    import torch

    attn = attn_implementation or attn_implementation_for(config_dict, task)
    dtype = getattr(torch, TORCH_DTYPES[precision])
    zero_stage = (ds_config or {}).get("zero_optimization", {}).get("stage", 0)
    config = hf_config(config_dict)
    if num_labels is not None:
        config.num_labels = num_labels
    auto = _auto_class(task)
    # Resolve the model class before any zero.Init scope: importing a modeling module inside it breaks
    # DeepSpeed's tensor-constructor patching ("Signature mismatch ... tensor_pynew").
    auto._model_mapping[type(config)]
    if zero_stage == 3 and weights_path is None and config.pad_token_id is not None:
        # Random init zeroes embedding[padding_idx], which fails on a ZeRO-3 partitioned (empty) tensor
        # (measured: every Gemma 2 stage-3 case on transformers 5.17). The padding row is only an init
        # detail: no parameter or activation changes size.
        config.pad_token_id = None
    if zero_stage == 3 and weights_path is None:
        import deepspeed

        # dtype=None: the config's bf16/fp16 section decides, as it names the plan's precision. A dtype passed
        # here is ignored on accelerators without fp16 (deepspeed 0.19 partition_parameters.py _set_dtype:
        # `dtype or torch.float16 if fp16_supported else torch.bfloat16 ...`), so a CPU fp32 plan got bf16.
        scope = deepspeed.zero.Init(config_dict_or_path=ds_config, dtype=None if ds_config else dtype)
    elif device is not None:
        scope = torch.device(device)
    else:
        scope = contextlib.nullcontext()

    if zero_stage == 3 and weights_path is not None:
        model = _pretrained_partitioned(auto, weights_path, ds_config, dtype, attn, num_labels)
    else:
        with scope:
            if weights_path is not None:
                extra = {"num_labels": num_labels} if num_labels is not None else {}
                model = auto.from_pretrained(weights_path, dtype=dtype, attn_implementation=attn, **extra)
            else:
                model = auto.from_config(config, dtype=dtype, attn_implementation=attn)
    if zero_stage == 3 and weights_path is None:
        _init_partitioned_weights(model)
    if task == "seq-cls" and model.config.pad_token_id is None:
        model.config.pad_token_id = 0
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model, attn


def _pretrained_partitioned(auto, weights_path: str, ds_config, dtype, attn: str, num_labels: int | None):
    """Returns the pretrained model partitioned while it loads (ZeRO-3): with an HfDeepSpeedConfig alive,
    from_pretrained enters deepspeed.zero.Init itself and loads each shard straight into the partitions, so a
    rank never holds the whole model (wrapping it in zero.Init from outside would load weights into
    already-partitioned parameters)."""
    from transformers.integrations import HfDeepSpeedConfig

    hf_ds = HfDeepSpeedConfig(ds_config)  # transformers holds only a weak reference to it
    extra = {"num_labels": num_labels} if num_labels is not None else {}
    model = auto.from_pretrained(weights_path, dtype=dtype, attn_implementation=attn, **extra)
    model._zero_planner_hf_ds = hf_ds  # alive as long as the model
    return model


def resolve_pretrained(source: str, *, option: str = "--init random") -> str:
    """Returns a local folder holding `source`'s config, weights and tokenizer files: `source` itself when it
    is a folder, else the hub id's snapshot in the Hugging Face cache (downloaded unless HF_HUB_OFFLINE is
    set). Raises InputError naming the fix when the weights cannot be had."""
    import os

    from zero_planner.errors import InputError

    if Path(source).expanduser().is_dir():
        return str(Path(source).expanduser())
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    fix = f"run `huggingface-cli download {source}` (or `hf download {source}`) where there is network, or pass {option}"
    try:
        folder = snapshot_download(source, allow_patterns=PRETRAINED_FILES, local_files_only=offline)
        if not any(Path(folder).glob("*.safetensors")):  # older repositories: PyTorch pickles only
            folder = snapshot_download(source, allow_patterns=[*PRETRAINED_FILES, "*.bin"], local_files_only=offline)
    except Exception as error:  # offline cache misses, gated repositories, network errors
        why = "not in the Hugging Face cache (HF_HUB_OFFLINE is set)" if offline else f"not available ({type(error).__name__})"
        raise InputError(f"the weights of {source!r} are {why}: {fix}") from None
    if not any(Path(folder).glob(pattern) for pattern in ("*.safetensors", "*.bin")):
        raise InputError(f"the Hugging Face cache holds no weight files for {source!r}: {fix}")
    return folder


# What a pretrained model needs from its hub repository: config, weights, tokenizer, chat template. Not
# `original/` checkpoints nor other frameworks' weights (Llama repositories carry a second copy there).
PRETRAINED_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]


def build_training_model(
    config_dict: dict[str, Any],
    *,
    method: str = "full",
    task: str = "causal-lm",
    precision: str,
    ds_config: dict[str, Any],
    device: str,
    local_rank: int = 0,
    attn_implementation: str | None = None,
    gradient_checkpointing: bool = False,
    num_labels: int | None = None,
    pad_token_id: int | None = None,
    weights_path: str | None = None,
    lora: dict[str, Any] | None = None,
    lora_seed: int = 0,
    scratch_dir: str | None = None,
):
    """Returns (model, attn): the model zero-run trains and the GPU harness measures, in training mode.

    The base: from `weights_path` (a local folder) or randomly initialised from `config_dict`, partitioned at
    creation under ZeRO-3; for qlora the 4-bit NF4 base (a random one is written under `scratch_dir` first).
    For lora/qlora it is wrapped in peft adapters (`lora`: r, alpha, dropout, target_modules), initialised
    from `lora_seed` whatever the base's init consumed. Plan-free: zero-run and benchmarks/gpu_step.py both
    call it, so what is measured is what is trained.
    """
    import torch

    config = dict(config_dict)
    if task == "seq-cls" and num_labels is not None:
        config["num_labels"] = num_labels
    else:
        num_labels = None
    # Always asked on the meta device, even when the caller knows attn: it also imports the architecture's
    # modules, which must not happen first inside deepspeed.zero.Init (its patched tensor constructors
    # break transformers' lazy module import: "Signature mismatch ... tensor_pynew").
    probed = attn_implementation_for(config, task)
    attn = attn_implementation or probed
    if method == "qlora":
        model = build_qlora_base(config, precision=precision, ds_config=ds_config, local_rank=local_rank,
                                 attn_implementation=attn, task=task, gradient_checkpointing=gradient_checkpointing,
                                 weights_path=weights_path, scratch_dir=scratch_dir)  # fmt: skip
    else:
        model, attn = build_model(config, precision=precision, ds_config=ds_config, device=device,
                                  attn_implementation=attn, task=task, gradient_checkpointing=gradient_checkpointing,
                                  weights_path=weights_path, num_labels=num_labels)  # fmt: skip
    if pad_token_id is not None:
        model.config.pad_token_id = pad_token_id  # the seq-cls head pools the last token that is not padding
    if method in ("lora", "qlora"):
        lora = lora or {}
        torch.manual_seed(lora_seed)  # same adapter init on every rank
        model = apply_lora(model, r=lora.get("r", 16), alpha=lora.get("alpha", 32), dropout=lora.get("dropout", 0.05),
                           target_modules=lora.get("target_modules", "all-linear"), task=task,
                           gradient_checkpointing=gradient_checkpointing)  # fmt: skip
    # from_pretrained returns a model in eval mode, where dropout is off and transformers silently skips
    # gradient checkpointing (measured on an H100: QLoRA with checkpointing "on" kept every activation).
    model.train()
    return model, attn


def _init_partitioned_weights(model) -> None:
    """Re-runs the model's own weight init with each module's parameters gathered (ZeRO-3 random init).

    Under deepspeed.zero.Init, transformers' _init_weights runs on already partitioned (empty) tensors and
    does nothing, leaving torch's defaults: a tied embedding with std 1 as the LM head gave a first loss of
    1653 instead of ln(vocab) = 11.8 (Llama-3.2-1B, H100). Rank 0's values are broadcast to every rank.
    """
    import deepspeed

    for module in model.modules():
        params = list(module.parameters(recurse=False))
        if not params:
            continue
        with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
            model._init_weights(module)


# --- LoRA and QLoRA (peft, bitsandbytes) ---

PEFT_TASK_TYPES = {"causal-lm": "CAUSAL_LM", "seq-cls": "SEQ_CLS"}
QLORA_REQUIREMENT = "QLoRA needs a CUDA GPU with bitsandbytes installed (pip install bitsandbytes)"


def apply_lora(model, *, r: int, alpha: int, dropout: float, target_modules, task: str, gradient_checkpointing: bool):
    """Returns the peft PeftModel wrapping `model`: base weights frozen, adapters (and for seq-cls the
    classification head, peft's modules_to_save) trainable.

    Called before deepspeed.initialize, so only the trainable parameters reach DeepSpeed's optimizer.
    """
    from peft import LoraConfig, get_peft_model

    if gradient_checkpointing:
        # With every base weight frozen the embeddings' output needs no gradient, and checkpointed blocks
        # whose inputs need none would give the adapters none either (peft/HF Trainer do the same).
        model.enable_input_require_grads()
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        task_type=PEFT_TASK_TYPES[task],
    )
    # autocast_adapter_dtype=False: adapters in the base's (training) dtype. peft's default upcasts them to
    # fp32, which ZeRO-3 cannot mix with a 16-bit head in one partition (stage3.py defragment), and
    # DeepSpeed keeps fp32 master weights of the trainable parameters anyway.
    model = get_peft_model(model, config, autocast_adapter_dtype=False)
    _detach_zero3_copies(model)
    return model


def _detach_zero3_copies(model) -> None:
    """Gives peft's modules_to_save copies (the seq-cls head) parameters of their own under ZeRO-3.

    peft deep-copies the head; a copy of a ZeRO-3 partitioned parameter keeps the original's ds_id and
    partition bookkeeping, and deepspeed.initialize then fails (stage3.py defragment: mixed dtypes). Each
    copied parameter is replaced by a plain one holding the gathered original values, which
    deepspeed.initialize partitions like any parameter created outside zero.Init. Collective: every rank.
    """
    import torch
    from peft.utils import ModulesToSaveWrapper

    for wrapper in [m for m in model.modules() if isinstance(m, ModulesToSaveWrapper)]:
        originals = dict(wrapper.original_module.named_parameters())
        if not any(hasattr(p, "ds_id") for p in originals.values()):
            continue
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(originals.values())):
            full = {name: p.data.detach().clone() for name, p in originals.items()}
        for copy in wrapper.modules_to_save.values():
            for name, value in full.items():
                owner_name, _, leaf = name.rpartition(".")
                owner = copy.get_submodule(owner_name) if owner_name else copy
                setattr(owner, leaf, torch.nn.Parameter(value, requires_grad=True))


def qlora_unavailable_reason(on_cuda: bool) -> str | None:
    """Returns why QLoRA cannot run in this process (no CUDA, no bitsandbytes), or None when it can."""
    if not on_cuda:
        return f"{QLORA_REQUIREMENT}; this run has no CUDA device"
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return f"{QLORA_REQUIREMENT}; bitsandbytes is not importable"
    return None


def bnb_4bit_config(precision: str, zero_stage: int):
    """Returns the transformers BitsAndBytesConfig for QLoRA: NF4 with double quantisation (QLoRA paper §2).

    Compute in the plan's precision. Under ZeRO-3 the packed 4-bit weights are stored in that same dtype
    (bnb_4bit_quant_storage), because DeepSpeed partitions and gathers floating-point tensors of one dtype;
    below stage 3 they stay in uint8 (bitsandbytes' default).
    """
    import torch
    from transformers import BitsAndBytesConfig

    compute = getattr(torch, TORCH_DTYPES[precision])
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute,
        bnb_4bit_quant_storage=compute if zero_stage == 3 else torch.uint8,
    )


def save_random_base(model, folder) -> None:
    """Writes `model` as a folder from_pretrained reads (safetensors + config.json), from any rank.

    save_pretrained writes nothing but the weights on ranks other than global rank 0 once torch.distributed
    is up (transformers 5.23, distributed/mixin.py should_save_on_this_rank), so the local rank 0 of a second
    node, or whichever rank takes a lock first, would leave a folder without its config.
    """
    import os

    from safetensors.torch import save_model

    os.makedirs(folder, exist_ok=True)
    save_model(model, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})  # ties stored once
    model.config.to_json_file(os.path.join(folder, "config.json"))


def prepare_for_kbit_training(model, *, gradient_checkpointing: bool, zero_stage: int) -> None:
    """Prepares a 4-bit model for adapter training as peft's prepare_model_for_kbit_training does (peft 0.21,
    utils/other.py), less its upcast of every weight it did not quantise (embeddings, norms, a seq-cls head) to
    fp32: every base weight frozen, and with checkpointing, non-reentrant checkpointing and the embeddings'
    output requiring grad (peft's forward hook for that case).

    The upcast changes nothing in a DeepSpeed run: deepspeed.initialize casts every parameter back to the
    16-bit training dtype (engine._configure_distributed_model, _cast_module_mixed_precision), so the fp32
    copies only raised the load phase's peak (the fp32 weight beside its 16-bit original while casting: 4 + 2
    bytes per kept weight where 2 remain). Under ZeRO-3 the upcast is skipped anyway: ZeRO-3 cannot partition
    fp32 weights beside the 16-bit quant storage (TRL skips it for this "sharded QLoRA" case too)."""
    for param in model.parameters():
        param.requires_grad = False
    if not gradient_checkpointing:
        return
    if zero_stage != 3:
        def make_inputs_require_grad(module, inputs, output):
            output.requires_grad_(True)

        model.get_input_embeddings().register_forward_hook(make_inputs_require_grad)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def build_qlora_base(
    config_dict: dict[str, Any],
    *,
    precision: str,
    ds_config: dict[str, Any],
    local_rank: int,
    attn_implementation: str,
    task: str = "causal-lm",
    gradient_checkpointing: bool = False,
    weights_path: str | None = None,
    scratch_dir: str | None = None,
):
    """Returns the base model loaded in 4-bit NF4 and prepared for k-bit training (peft), on CUDA.

    bitsandbytes quantises while from_pretrained loads, so a model given only as a config is first
    initialised randomly in the compute dtype and written under `scratch_dir` by local rank 0 of each node
    (the other ranks wait, then every rank loads the same weights; the folder is removed after). Under
    ZeRO-3 each rank loads the quantised model whole onto its GPU and deepspeed.initialize partitions it.
    Not run in CI (it needs a CUDA GPU with bitsandbytes).
    """
    import os
    import shutil
    import tempfile

    import torch

    zero_stage = ds_config.get("zero_optimization", {}).get("stage", 0)
    dtype = getattr(torch, TORCH_DTYPES[precision])
    source = weights_path
    if source is None:
        import socket

        import torch.distributed as dist

        source = os.path.join(scratch_dir or tempfile.gettempdir(), f"qlora-random-base-{socket.gethostname()}")
        if local_rank == 0:
            # The other local ranks wait at the barrier, so this one may use the node's cores: the launcher sets
            # OMP_NUM_THREADS=1, and a 1B model's random init then took over 2 minutes on one core (H100 host).
            threads = torch.get_num_threads()
            torch.set_num_threads(max(threads, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                      else os.cpu_count() or 1))  # fmt: skip
            try:
                model, _ = build_model(config_dict, precision=precision, device="cpu",
                                       attn_implementation=attn_implementation, task=task)  # fmt: skip
                save_random_base(model, source)
                del model
            finally:
                torch.set_num_threads(threads)
        if dist.is_initialized():
            dist.barrier()
    # No HfDeepSpeedConfig under ZeRO-3: with one alive, transformers refuses device_map ("DeepSpeed Zero-3 is
    # not compatible with passing a `device_map`", 5.17 on an H100). The 4-bit model is small, so each rank
    # loads it whole onto its GPU and deepspeed.initialize partitions it (the bf16 quant storage allows that).
    model = _auto_class(task).from_pretrained(
        source,
        dtype=dtype,
        attn_implementation=attn_implementation,
        quantization_config=bnb_4bit_config(precision, zero_stage),
        # CUDA in zero-run; the CPU (bitsandbytes >= 0.50 has a CPU backend) only in the tests of this path.
        device_map={"": local_rank if torch.cuda.is_available() else "cpu"},
    )
    if task == "seq-cls" and model.config.pad_token_id is None:
        model.config.pad_token_id = 0
    prepare_for_kbit_training(model, gradient_checkpointing=gradient_checkpointing, zero_stage=zero_stage)
    if gradient_checkpointing:
        model.config.use_cache = False
    if weights_path is None:
        if dist.is_initialized():
            dist.barrier()  # every rank on this node has loaded it
        if local_rank == 0:
            shutil.rmtree(source, ignore_errors=True)
    return model

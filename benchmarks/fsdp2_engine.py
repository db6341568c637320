"""PyTorch FSDP2 (`fully_shard`) behind the three calls gpu_step.py's loop makes on a DeepSpeed engine, so that one
measured step, with the same phases, counters and records, runs under either engine (issue 61: measure FSDP2 beside
ZeRO before modelling it).

A case with `"engine": "fsdp2"` is wrapped in the units Hugging Face Accelerate 1.16 makes (accelerate/utils/
fsdp_utils.py fsdp2_prepare_model, which HF Trainer's FSDP2 runs through): each module whose class the model names in
`_no_split_modules` (its decoder layers), the input embedding where it is not tied, a tail of the final norm and the
output head (with the tied embedding) that stays gathered from forward to backward, then the root under torch's
default (the root is not resharded). Parameters are kept sharded in fp32 (Accelerate upcasts them), gathered in the
case's precision for compute (MixedPrecisionPolicy param_dtype), gradients reduced in fp32 (reduce_dtype). Fields:
    fsdp_reshard_after_forward  true (default): free the gathered layer after its forward, gather again for
                                backward (ZeRO-3's schedule); false: keep it to backward (ZeRO-2's memory for
                                parameters, one all-gather fewer)
    fsdp_offload                true: CPUOffloadPolicy(pin_memory=True), shards, gradients and the optimizer step
                                on the host
    fsdp_optimizer              "fused" (default on CUDA: torch.optim.AdamW(fused=True), HF Trainer's default
                                adamw_torch_fused) or "foreach" (the default where fused cannot run: offload, CPU)
The optimizer's moments are created at its first step, as DeepSpeed's are, so the first step's peak holds them.
"""

from __future__ import annotations

FSDP2_PRECISIONS = ("bf16", "fp32")
"""fp16 needs a gradient scaler (ShardedGradScaler) the loop does not run: such cases are refused, not measured."""


def layer_classes(model) -> set[str]:
    """Returns the class names of the modules FSDP2 wraps one by one: the model's `_no_split_modules` (its decoder
    layers), as Accelerate's transformer-based wrap policy takes them."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    if not names:
        raise ValueError(f"{type(model).__name__} names no _no_split_modules: no layer to shard one by one")
    return names


def final_norm(model):
    """Returns the last norm among the base model's direct children (`model.norm`, `transformer.ln_f`), or None:
    accelerate's _find_final_norm, which the GPU machines' environment lacks."""
    prefix = getattr(model, "base_model_prefix", "")
    base = getattr(model, prefix, None) if prefix else model
    found = None
    for _, module in (base or model).named_children():
        if "Norm" in type(module).__name__:
            found = module
    return found


class Fsdp2Engine:
    """The model under fully_shard and a torch AdamW on its sharded parameters; call, backward and step as
    DeepSpeed's engine has them (gpu_step.py's loop), and `device` for the batches."""

    def __init__(self, model, case: dict, device: str):
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        precision = case["precision"]
        if precision not in FSDP2_PRECISIONS:
            raise ValueError(f"fsdp2 case precision {precision!r}: measured in {', '.join(FSDP2_PRECISIONS)} only")
        on_cuda = device.startswith("cuda")
        mesh = init_device_mesh("cuda" if on_cuda else "cpu", (torch.distributed.get_world_size(),))
        compute = torch.bfloat16 if precision == "bf16" else torch.float32
        mp = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
        offload = case.get("fsdp_offload", False)
        policy = CPUOffloadPolicy(pin_memory=on_cuda) if offload else OffloadPolicy()
        reshard = case.get("fsdp_reshard_after_forward", True)
        kwargs = {"mesh": mesh, "mp_policy": mp, "offload_policy": policy}
        wrapped = layer_classes(model)
        layers = [m for m in model.modules() if type(m).__name__ in wrapped]
        for layer in layers:
            fully_shard(layer, reshard_after_forward=reshard, **kwargs)
        embed, head = model.get_input_embeddings(), model.get_output_embeddings()
        tied = head is not None and embed.weight is head.weight
        if not tied:
            fully_shard(embed, reshard_after_forward=reshard, **kwargs)
        tail = [m for m in (final_norm(model), *((embed,) if tied else ()), head) if m is not None]
        fully_shard(tail, reshard_after_forward=False, **kwargs)
        fully_shard(model, **kwargs)
        self.module, self.layers = model, len(layers)
        kind = case.get("fsdp_optimizer") or ("fused" if on_cuda and not offload else "foreach")
        adamw = case["deepspeed_config"].get("optimizer", {}).get("params", {})  # the same hyperparameters as ZeRO
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=adamw.get("lr", 2e-5),
            betas=tuple(adamw.get("betas", (0.9, 0.999))), eps=adamw.get("eps", 1e-8),
            weight_decay=adamw.get("weight_decay", 0.0), **({"fused": True} if kind == "fused" else {"foreach": True}))
        self.optimizer_kind = kind
        self.clip = case["deepspeed_config"].get("gradient_clipping", 0.0)
        self.device = torch.device(device)

    def __call__(self, **batch):
        return self.module(**batch)

    def backward(self, loss) -> None:
        loss.backward()

    def step(self) -> None:
        import torch

        if self.clip:  # DeepSpeed's config clips at 1.0: the same norm over the sharded gradients (a DTensor)
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

"""What LoRA on fused 3-D expert weights costs on the GPU (issue 58): one forward and backward of a mixture-of-
experts model built as zero-run builds it (zero_planner.run.modeling.build_training_model, bf16, no DeepSpeed), with
peft adapters on `--targets` ("all-linear", which peft 0.21 extends to the 3-D expert stacks of the model types it
converts from transformers 4, through lora.ParamWrapper; or "attention": q/k/v/o only), and the CUDA allocator's
figures at each point:

    python benchmarks/moe_lora_probe.py --config CONFIG.json --layers N --mb 2 --seq 1024 --targets all-linear \
        [--gc] [--r 16] --out result.json

Writes: trainable and frozen parameter bytes, what peft wrapped (lora.Linear and lora.ParamWrapper counts), the
allocated bytes after the build, after the forward (what the forward keeps for the backward) and after the
backward, and the peaks of the forward and of the backward. One process per case (the caller loops).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--config", required=True)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--mb", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--targets", default="all-linear")
    parser.add_argument("--r", type=int, default=16)
    parser.add_argument("--gc", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test (every memory figure 0)")
    args = parser.parse_args(argv)

    import peft
    import torch
    import transformers

    from zero_planner.run.modeling import build_training_model

    config = json.loads(Path(args.config).read_text())
    if args.layers:
        config["num_hidden_layers"] = args.layers
        config.pop("layer_types", None)
        if "max_window_layers" in config:
            config["max_window_layers"] = args.layers
    targets = ["q_proj", "k_proj", "v_proj", "o_proj"] if args.targets == "attention" else args.targets
    cuda = args.device == "cuda"
    allocated = torch.cuda.memory_allocated if cuda else (lambda: 0)
    peak = torch.cuda.max_memory_allocated if cuda else (lambda: 0)
    reset = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    reset()
    model, attn = build_training_model(
        config, method="lora", precision="bf16", ds_config={"bf16": {"enabled": True}}, device=args.device,
        gradient_checkpointing=args.gc, lora={"r": args.r, "alpha": 2 * args.r, "dropout": 0.0, "target_modules": targets},
    )  # fmt: skip
    wrapped = {}
    for module in model.modules():
        name = type(module).__name__
        if type(module).__module__.startswith("peft.tuners.lora"):
            wrapped[name] = wrapped.get(name, 0) + 1
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    experts = [(n, list(p.shape)) for n, p in model.named_parameters() if p.dim() == 3]
    sync()
    built = allocated()
    build_peak = peak()
    ids = torch.randint(0, config["vocab_size"], (args.mb, args.seq), device=args.device)
    reset()
    with torch.autocast(args.device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    sync()
    after_forward = allocated()
    forward_peak = peak()
    reset()
    loss.backward()
    sync()
    after_backward = allocated()
    backward_peak = peak()
    result = {
        "config": Path(args.config).name, "model_type": config["model_type"], "layers": config["num_hidden_layers"],
        "mb": args.mb, "seq": args.seq, "targets": args.targets, "r": args.r, "gc": args.gc, "attn": attn,
        "wrapped": wrapped, "trainable_bytes": trainable, "frozen_bytes": frozen,
        "expert_params": experts[:4], "expert_param_count": len(experts),
        "expert_bytes": sum(p.numel() * p.element_size() for p in model.parameters() if p.dim() == 3),
        "built_bytes": built, "build_peak_bytes": build_peak,
        "after_forward_bytes": after_forward, "forward_peak_bytes": forward_peak,
        "after_backward_bytes": after_backward, "backward_peak_bytes": backward_peak,
        "kept_by_forward_bytes": after_forward - built, "loss": float(loss),
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "device": torch.cuda.get_device_name() if cuda else "cpu"},
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("targets", "gc", "mb", "wrapped", "kept_by_forward_bytes",
                                             "forward_peak_bytes", "backward_peak_bytes", "expert_bytes")}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The kernels of one mixture-of-experts block as transformers runs them, counted from an aten-level trace on CPU.

    python benchmarks/moe_ops.py [--out benchmarks/results/moe-ops-transformers-VERSION.json] [CONFIG ...]

For each config (default: the committed MoE suites' configs, the Qwen2-MoE one at reduced width), builds a
one-layer model in bf16 with transformers' default experts implementation (grouped_mm), runs its MoE block
forward and backward under a TorchDispatchMode at two token counts, and counts every aten op that launches a
kernel: bytes read and written by the memory-bound ones (per token: the difference of the two runs), GEMM
FLOPs apart. Then a one-layer model with checkpointing (use_reentrant=False, as zero-run trains) shows which of
the layer's forward ops the recomputation skips, and one without it what the KV cache that use_cache builds adds. Prints each op, the totals beside throughput.moe_layer_bytes,
and writes them as JSON: tests/test_throughput.py holds moe_layer_bytes to the committed file. Byte rules: an op
reads its tensor inputs (an expanded input once) and writes its outputs; a gather reads the rows it returns; an
index_put_ reads and writes its destination; fills and zeros only write; views and allocations are free. On a
GPU the same ops run (autograd's formulas are the backend's), except that CUDA's histc takes an int cast where
the CPU's takes a float one (same bytes). Needs torch and transformers (CPU is enough; ~1 minute on 2 cores).
The GPU runs used transformers 5.17.0: run under that version to reproduce the committed file.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zero_planner.models.spec import spec_from_config  # noqa: E402
from zero_planner.plan.throughput import _KV_CACHE_BYTES, BACKWARD_TRAFFIC_RATIO, moe_layer_bytes, shared_expert_bytes  # noqa: E402

CONFIGS = [
    ("mixtral-32e-top8", "benchmarks/model_configs/mixtral-32e-top8.json", {}),
    ("mixtral-8e-tiny", "benchmarks/model_configs/mixtral-8e-tiny.json", {}),
    ("qwen2-moe-a2.7b-4l, width / 4", "benchmarks/model_configs/qwen2-moe-a2.7b-4l.json",
     {"hidden_size": 512, "moe_intermediate_size": 352, "shared_expert_intermediate_size": 1408,
      "intermediate_size": 1408, "num_attention_heads": 4, "num_key_value_heads": 4}),
]  # fmt: skip
"""(name, config file, overrides): what the committed MoE suites run (benchmarks/suites/i26.md)."""
TOKENS = (128, 256)
VIEWS = {"view", "_unsafe_view", "expand", "t", "transpose", "permute", "unsqueeze", "squeeze", "slice", "select",
         "split", "split_with_sizes", "as_strided", "alias", "detach", "_reshape_alias", "unbind", "view_as",
         "chunk", "narrow", "diagonal", "lift_fresh"}  # fmt: skip
FREE = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_local_scalar_dense"}
WRITE_ONLY = {"fill_", "zero_", "zeros", "zeros_like", "full", "full_like", "ones", "ones_like", "arange", "new_zeros",
              "new_full", "new_ones", "scalar_tensor"}  # fmt: skip
GEMMS = {"mm", "addmm", "bmm", "baddbmm", "_grouped_mm"}


def _bytes(t) -> int:
    """Returns the bytes a kernel reads of `t`: an expanded (stride 0) tensor once."""
    return min(t.numel(), t.untyped_storage().nbytes() // t.element_size()) * t.element_size()


def _gemm_flops(name: str, args) -> int:
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    if name in ("bmm", "baddbmm"):
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    return 2 * a.shape[-2] * a.shape[-1] * b.shape[-1]  # mm, and grouped_mm's (S, k) x (E, k, n) or (k, S) x (S, n)


def tracer():
    """Returns a TorchDispatchMode that records every kernel-launching aten op as a dict (phase set by .phase)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Trace(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[dict] = []
            self.phase = "forward"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in VIEWS or name in FREE:
                return out
            inputs = [a for a in tree_leaves((args, kwargs or {})) if isinstance(a, torch.Tensor)]
            outputs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
            if name in WRITE_ONLY:
                read, write = 0, sum(map(_bytes, outputs))
            elif name == "copy_":
                read, write = _bytes(args[1]), _bytes(args[0])
            elif name == "index":  # a gather reads the rows it returns and its indices
                read = _bytes(out) + sum(_bytes(i) for i in args[1] if i is not None)
                write = _bytes(out)
            elif name in ("index_put", "index_put_", "_index_put_impl_"):
                read = _bytes(args[0]) + _bytes(args[2]) + sum(_bytes(i) for i in args[1] if i is not None)
                write = _bytes(args[0])
            else:
                read = sum(map(_bytes, inputs))
                write = _bytes(args[0]) if name.endswith("_") else sum(map(_bytes, outputs))
            self.ops.append({"phase": self.phase, "op": name, "read": read, "write": write,
                             "flops": _gemm_flops(name, args) if name in GEMMS else 0,
                             "out": [[list(o.shape), str(o.dtype).removeprefix("torch.")] for o in outputs]})  # fmt: skip
            return out

    return Trace()


def one_layer_model(config: dict):
    """Returns a one-layer, 256-token-vocabulary bf16 model of `config`'s architecture in training mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in config.items() if k != "model_type"}
    values.update(num_hidden_layers=1, vocab_size=256, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **values))
    return model.to(torch.bfloat16).train()


def trace_block(config: dict, tokens: int) -> list[dict]:
    """Returns the ops of one MoE block's forward and backward on `tokens` tokens (random input and gradient)."""
    import torch

    model = one_layer_model(config)
    block = model.model.layers[0].mlp
    x = torch.randn(1, tokens, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    mode = tracer()
    with mode:
        y = block(x)
        y = y[0] if isinstance(y, tuple) else y
        mode.phase = "backward"
        y.backward(torch.randn_like(y))
    return mode.ops


def not_recomputed(config: dict, tokens: int = 64) -> list[str]:
    """Returns the decoder layer's forward ops that a checkpointed backward does not run again: the layer's
    forward ops (between its hooks, without checkpointing) less the ops a checkpointed backward adds."""
    import torch

    runs = {}
    for checkpointing in (False, True):
        model = one_layer_model(config)
        model.config.use_cache = False  # as checkpointing sets it: no KV cache's cat in either run
        mode = tracer()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            layer = model.model.layers[0]
            layer.register_forward_pre_hook(lambda *_: setattr(mode, "phase", "layer"))
            layer.register_forward_hook(lambda *_: setattr(mode, "phase", "forward"))
        ids = torch.randint(0, 256, (1, tokens))
        with mode:
            loss = model(input_ids=ids, labels=ids).loss
            mode.phase = "backward"
            loss.backward()
        runs[checkpointing] = mode.ops
    missing = collections.Counter(o["op"] for o in runs[False] if o["phase"] == "layer")
    missing.subtract(o["op"] for o in runs[True] if o["phase"] == "backward")  # the recomputed forward ...
    missing.update(o["op"] for o in runs[False] if o["phase"] == "backward")  # ... is what checkpointing adds
    return [f"{op} x{n}" for op, n in missing.items() if n > 0]


def cache_bytes(config: dict, tokens: int = 64) -> float:
    """Returns the bytes per token that a one-layer training forward moves more with use_cache on (no
    checkpointing, as zero-run trains then) than with it off: the KV cache's concatenations, and the mask's."""
    import torch

    moved = []
    for use_cache in (True, False):
        model = one_layer_model(config)
        mode = tracer()
        with mode:
            model(input_ids=torch.randint(0, 256, (1, tokens)), use_cache=use_cache)
        moved.append(sum(o["read"] + o["write"] for o in mode.ops if o["op"] not in GEMMS))
    return (moved[0] - moved[1]) / tokens


def per_token(ops_low: list[dict], ops_high: list[dict], phase: str, low: int, high: int) -> dict:
    """Returns the memory-bound bytes per token of `phase` (two runs' difference), its kernel count and GEMM FLOPs."""
    def total(ops, key):
        return sum(o[key] for o in ops if o["phase"] == phase and (o["op"] in GEMMS) == (key == "flops"))

    memory = [sum(o["read"] + o["write"] for o in ops if o["phase"] == phase and o["op"] not in GEMMS)
              for ops in (ops_low, ops_high)]  # fmt: skip
    return {"bytes_per_token": (memory[1] - memory[0]) / (high - low),
            "gemm_flops_per_token": (total(ops_high, "flops") - total(ops_low, "flops")) / (high - low),
            "kernels": sum(1 for o in ops_high if o["phase"] == phase)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import torch
    import transformers

    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", help="config.json files (default: the committed MoE suites' configs)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--ops", action="store_true", help="print every op of the first config's block")
    args = parser.parse_args(argv)
    configs = [(c, c, {}) for c in args.configs] or CONFIGS
    result = {"transformers": transformers.__version__, "torch": torch.__version__, "date": dt.date.today().isoformat(),
              "tokens": list(TOKENS), "command": "python benchmarks/moe_ops.py", "blocks": []}  # fmt: skip
    for n, (name, path, overrides) in enumerate(configs):
        config = dict(json.loads((ROOT / path).read_text()), **overrides)
        low, high = (trace_block(config, t) for t in TOKENS)
        if args.ops and n == 0:
            for o in low:
                print(f"  {o['phase'][:3]} {o['op']:26s} read {o['read']:>10,d} write {o['write']:>10,d} {o['out']}")
        spec = spec_from_config(config, name)
        counted = moe_layer_bytes(spec)
        entry = {"name": name, "config": config,
                 "forward": per_token(low, high, "forward", *TOKENS),
                 "backward": per_token(low, high, "backward", *TOKENS),
                 "not_recomputed": not_recomputed(config), "use_cache_bytes_per_token": cache_bytes(config)}  # fmt: skip
        result["blocks"].append(entry)
        traced = entry["forward"]["bytes_per_token"] + entry["backward"]["bytes_per_token"]
        shared = (1 + BACKWARD_TRAFFIC_RATIO) * shared_expert_bytes(spec)  # in layer_traffic_bytes
        model = counted.forward + counted.backward - counted.sort_passes + shared
        print(f"{name}: traced {entry['forward']['bytes_per_token']:,.0f} + {entry['backward']['bytes_per_token']:,.0f} "
              f"B/token in {entry['forward']['kernels']} + {entry['backward']['kernels']} kernels; "
              f"counted (throughput.moe_layer_bytes less the sorts' inner passes, with the shared expert) {model:,.0f} "
              f"({model / traced - 1:+.2%}); "
              f"checkpointing does not recompute: {', '.join(entry['not_recomputed'])}; "
              f"use_cache adds {entry['use_cache_bytes_per_token']:,.0f} B/token (counted "
              f"{_KV_CACHE_BYTES * 2 * spec.num_key_value_heads * spec.head_dim:,d})")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

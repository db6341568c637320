"""What autograd keeps on a real GPU, tensor by tensor, against the meta-device trace the memory model uses.

models/activations.py counts saved activations on the meta device, with SDPA replaced by a stand-in for what
the fused CUDA kernels keep. This runs the same one- and two-layer models on CUDA with the real kernels
(flash / memory-efficient SDPA, grouped expert matmuls), counts every saved storage once by its device
address (parameters excluded), and prints both tables per token: a difference is a tensor the trace gets
wrong, found without fitting anything to a peak.

    python benchmarks/saved_census.py --out census.json [--models llama3.2-1b,mixtral-8e-tiny]   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cases import model_config  # noqa: E402

SEQS = (128, 256)
DEFAULT_MODELS = ("llama3.2-1b", "phi3-mini", "gpt2-medium", "gemma2-2b", "mixtral-8e-tiny", "qwen2.5-0.5b",
                  "mistral-7b-8l", "qwen3-1.7b")  # fmt: skip


def saved_bytes_cuda(config: dict, layers: int, seq: int, dtype: str, attn: str, device: str = "cuda") -> tuple[int, dict[str, int]]:
    """Returns (bytes autograd keeps, by dtype) for one forward with loss on CUDA, each storage once."""
    import torch
    from transformers import AutoModelForCausalLM

    from zero_planner.models.hf import hf_config

    values = dict(config)
    values["n_layer" if "n_layer" in values else "num_hidden_layers"] = layers
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(values), dtype=getattr(torch, dtype), attn_implementation=attn)
    model.to(device).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, tuple[int, str]] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key and key not in params and key not in seen:
            seen[key] = (storage.nbytes(), str(tensor.dtype).replace("torch.", ""))
        return tensor

    ids = torch.randint(0, values["vocab_size"], (1, seq), device=device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
    del loss, model
    torch.cuda.empty_cache()
    by_dtype: dict[str, int] = {}
    for nbytes, kind in seen.values():
        by_dtype[kind] = by_dtype.get(kind, 0) + nbytes
    return sum(n for n, _ in seen.values()), by_dtype


def coefficients(measure, seqs: tuple[int, int] = SEQS) -> dict[str, float]:
    """Returns {layer, layer_per_seq, rest} per token from one- and two-layer runs at both seqs."""
    s1, s2 = seqs
    one = [measure(1, s) for s in seqs]
    two = [measure(2, s) for s in seqs]
    layer = [(b - a) / s for a, b, s in zip(one, two, seqs)]
    per_seq = (layer[1] - layer[0]) / (s2 - s1)
    base = layer[0] - per_seq * s1
    return {"layer": round(base, 1), "layer_per_seq": round(per_seq, 3), "rest": round(one[0] / s1 - layer[0], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kinds", default="bfloat16/sdpa,bfloat16/eager,float32/sdpa", help="dtype/attention,...")
    parser.add_argument("--seqs", default=",".join(map(str, SEQS)),
                        help="two sequence lengths, e.g. 2048,4096 to see what a sliding window's mask keeps")
    args = parser.parse_args(argv)
    seqs = tuple(int(s) for s in args.seqs.split(","))
    if len(seqs) != 2 or seqs[0] >= seqs[1]:
        parser.error(f"--seqs {args.seqs!r}: give two increasing sequence lengths, e.g. 128,256")

    import torch
    import transformers

    from zero_planner.models import activations as traced

    results = {"torch": torch.__version__, "transformers": transformers.__version__,
               "gpu": torch.cuda.get_device_name(0), "seqs": seqs, "models": {}}  # fmt: skip
    for name in args.models.split(","):
        config = model_config(name)
        row: dict = {}
        for dtype, attn in (kind.split("/") for kind in args.kinds.split(",")):
            key = f"{dtype}/{attn}"
            try:
                cuda = coefficients(lambda n, s: saved_bytes_cuda(config, n, s, dtype, attn)[0], seqs)
                _, kinds = saved_bytes_cuda(config, 1, seqs[0], dtype, attn)
            except Exception as error:  # recorded: one model's failure does not stop the census
                cuda, kinds = {"error": f"{type(error).__name__}: {str(error)[:200]}"}, {}
            try:
                meta = traced.attention_coefficients(config, dtype, attn)
            except Exception as error:
                meta = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
            row[key] = {"cuda": cuda, "meta": meta, "cuda_one_layer_by_dtype": kinds}
            diff = {k: round(meta[k] - cuda[k], 1) for k in ("layer", "rest") if k in meta and k in cuda}
            print(f"{name:16s} {key:15s} cuda {cuda}  meta {meta}  meta-cuda {diff}", flush=True)
        results["models"][name] = row
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

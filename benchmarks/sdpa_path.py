"""Which kernel a model's SDPA call takes on this GPU, and what its attention keeps for backward.

    python3 benchmarks/sdpa_path.py --out sdpa.json falcon-7b llama3.2-1b [--seq 2048] [--micro 1]

Transformers hands torch's scaled_dot_product_attention the model's own head layout. Where the key and value have
fewer heads than the query and no `enable_gqa` is passed (Falcon-7B's multi-query attention: one K/V head for 71
query heads), torch's fused kernels refuse the shapes (sdp_utils: "both fused kernels require query, key and value
to have the same batch_size and num_heads") and the math kernel runs: the scores materialized in fp32 and kept.
The memory model's trace (models/activations.py) replaces SDPA by what the fused kernels keep, so such a model would
be counted as if fused. This script settles it on the GPU: per model (benchmarks/model_configs/NAME.json, trimmed to
one and to two decoder layers), one forward and backward at micro x seq tokens in bf16, with

- `sdpa_grad_fn`: the autograd node of SDPA's output (ScaledDotProductFlashAttentionBackward,
  ...EfficientAttention..., ...CudnnAttention..., or the math kernel's ToCopyBackward / BmmBackward);
- `attention_kernels`: the CUDA kernels of that call, from the profiler (names with flash, fmha, cudnn, attention,
  softmax or bmm);
- `layer_saved_bytes`: the memory one more decoder layer keeps after forward (two layers' allocation minus one's);
- `layer_forward_peak_bytes`: one more layer's forward peak above its allocation after forward;
- `attention_alone`: SDPA by itself at the model's head counts: bytes per score element kept, the forward's and
  the backward's peaks above what each started from, and the milliseconds of its forward and backward beside those
  of its two products alone in fp32 (QK^T and PV with the key and value expanded over the heads, as the math kernel
  runs them): the difference is its elementwise kernels' time; and the same call with enable_gqa, which the fused
  kernels take.

Needs CUDA; writes a JSON list.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cases import model_config  # noqa: E402

ATTENTION_WORDS = ("flash", "fmha", "cudnn", "attention", "softmax", "bmm", "Attention")


def _layers_key(config: dict) -> str:
    return "n_layer" if "n_layer" in config else "num_hidden_layers"


def _run(config: dict, layers: int, micro: int, seq: int, profile: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(config, **{_layers_key(config): layers})
    model_type = values.pop("model_type")
    hf = AutoConfig.for_model(model_type, **values)
    model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().train()
    ids = torch.randint(0, hf.vocab_size, (micro, seq), device="cuda")
    seen: list[str] = []
    original = F.scaled_dot_product_attention

    def watched(*args, **kwargs):
        out = original(*args, **kwargs)
        q, k = args[0], args[1]
        seen.append(f"{type(out.grad_fn).__name__} q{tuple(q.shape)} k{tuple(k.shape)} "
                    f"enable_gqa={kwargs.get('enable_gqa', False)}")
        return out

    F.scaled_dot_product_attention = watched
    torch.nn.functional.scaled_dot_product_attention = watched
    try:
        model(input_ids=ids, labels=ids).loss.backward()  # warm-up (cuBLAS, kernels)
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        kernels: dict[str, int] = {}
        if profile:
            from torch.profiler import ProfilerActivity, profile as run_profile

            with run_profile(activities=[ProfilerActivity.CUDA]) as prof:
                loss = model(input_ids=ids, labels=ids).loss
                after_forward = torch.cuda.memory_allocated()
                forward_peak = torch.cuda.max_memory_allocated()
                loss.backward()
                torch.cuda.synchronize()
            for event in prof.key_averages():
                if any(word in event.key for word in ATTENTION_WORDS):
                    kernels[event.key[:160]] = event.count
        else:
            loss = model(input_ids=ids, labels=ids).loss
            after_forward = torch.cuda.memory_allocated()
            forward_peak = torch.cuda.max_memory_allocated()
            loss.backward()
        torch.cuda.synchronize()
    finally:
        F.scaled_dot_product_attention = original
        torch.nn.functional.scaled_dot_product_attention = original
    result = {"layers": layers, "saved_bytes": after_forward - before, "forward_peak_bytes": forward_peak - before,
              "sdpa_calls": sorted(set(seen)), "attention_kernels": kernels}
    del model, loss
    torch.cuda.empty_cache()
    return result


def attention_alone(config: dict, micro: int, seq: int) -> dict:
    """Returns what SDPA alone holds, at the model's query and key/value head counts in bf16 (is_causal, no
    enable_gqa, as Falcon calls it): bytes per score element kept after forward, the forward's peak above that, and
    the backward's peak above what forward left, each over micro x heads x seq x seq."""
    import torch
    import torch.nn.functional as F

    heads = config.get("num_attention_heads") or config["n_head"]
    kv = 1 if config.get("multi_query") else config.get("num_key_value_heads") or config.get("num_kv_heads") or heads
    dim = (config.get("hidden_size") or config["n_embd"]) // heads
    make = lambda n: torch.randn(micro, n, seq, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # noqa: E731
    q, k, v = make(heads), make(kv), make(kv)
    grad = torch.randn(micro, heads, seq, dim, device="cuda", dtype=torch.bfloat16)
    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)  # warm-up
    q.grad = k.grad = v.grad = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    kept = torch.cuda.memory_allocated() - start
    forward_peak = torch.cuda.max_memory_allocated() - start
    torch.cuda.reset_peak_memory_stats()
    after_forward = torch.cuda.memory_allocated()
    out.backward(grad)
    torch.cuda.synchronize()
    backward_peak = torch.cuda.max_memory_allocated() - after_forward
    scores = micro * heads * seq * seq
    del out

    def sdpa_step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    # the math kernel's two products alone, as it runs them: fp32, the key and value expanded over the heads
    q32, k32, v32 = (t.detach().float().expand(micro, heads, seq, dim).contiguous().requires_grad_() for t in (q, k, v))
    grad32 = grad.float()

    def matmul_step():
        probs = torch.matmul(q32, k32.transpose(-2, -1))
        torch.matmul(probs, v32).backward(grad32)

    def gqa_step():  # what the fused kernels do with the same call given enable_gqa (Llama's transformers code)
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv).backward(grad)

    return {"heads": heads, "kv_heads": kv, "kept_per_score": kept / scores,
            "enable_gqa_forward_backward_ms": _median_ms(gqa_step),
            "forward_peak_per_score": forward_peak / scores, "backward_peak_per_score": backward_peak / scores,
            "sdpa_forward_backward_ms": _median_ms(sdpa_step), "fp32_matmuls_forward_backward_ms": _median_ms(matmul_step),
            "scores": scores}  # fmt: skip


def _median_ms(step, repeats: int = 7) -> float:
    """Returns the median milliseconds of `step` over `repeats` calls after two warm-ups, each timed by CUDA events."""
    import statistics

    import torch

    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("models", nargs="+", help="names of benchmarks/model_configs/*.json")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--micro", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch
    import transformers

    results = []
    for name in args.models:
        config = model_config(name)
        one = _run(config, 1, args.micro, args.seq, profile=True)
        two = _run(config, 2, args.micro, args.seq, profile=False)
        row = {
            "model": name, "micro_batch_size": args.micro, "seq_len": args.seq,
            "sdpa_grad_fn": one["sdpa_calls"], "attention_kernels": one["attention_kernels"],
            "layer_saved_bytes": two["saved_bytes"] - one["saved_bytes"],
            "layer_forward_peak_bytes": two["forward_peak_bytes"] - one["forward_peak_bytes"],
            "one_layer": {k: one[k] for k in ("saved_bytes", "forward_peak_bytes")},
            "attention_alone": attention_alone(config, args.micro, args.seq),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
        }  # fmt: skip
        print(json.dumps(row), flush=True)
        results.append(row)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

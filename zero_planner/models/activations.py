"""Saved-activation coefficients of a model, counted from what autograd actually keeps.

One and two decoder layers of the real Hugging Face model run forward on the meta device (no memory, no
compute) under `saved_tensors_hooks`; every tensor autograd saves is counted once per storage, parameters
excluded. The difference between the two runs is one layer; the rest is embeddings, final norm, logits and
loss. SDPA is replaced by a function that keeps what the CUDA flash / memory-efficient kernels keep for
backward (q, k, v, output and the fp32 logsumexp), since the meta device would otherwise take the math path
and keep the score matrix. Eager attention runs as written (it does keep the scores), at two sequence
lengths so the part that grows with seq_len**2 is separated from the linear part.

Mixture-of-experts layers route tokens with data-dependent shapes that the meta device cannot run; for
those, `closed_form_coefficients` (the llama-style count, with each token's MLP run in top-k experts) is used
and the result says so. Everything imports torch lazily; catalog models carry the coefficients precomputed.
"""

from __future__ import annotations

from typing import Any

# Shapes of the tracing runs: one micro-batch row, two short sequence lengths (all terms are per token,
# or per token per position for eager attention scores, so the size does not matter).
TRACE_SEQ = (64, 128)


def _layer_key(config: dict[str, Any]) -> str:
    return "n_layer" if "n_layer" in config else "num_hidden_layers"


def _saved_bytes(config_dict: dict[str, Any], layers: int, seq: int, dtype: str, attn: str,
                 lora: tuple[int, float] | None = None, zero3_linear: bool = False) -> int:
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from zero_planner.models.hf import hf_config

    class KeptBySdpaKernels(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            # The flash kernel takes q as (batch, seq, heads, dim), allocates its output with empty_like of that
            # and returns it transposed back. Where q's memory is (batch, seq, heads, dim) already (q_proj's
            # output viewed per head, rope keeping its strides; GPT-2's split), the output is too, and the o_proj
            # input transformers makes with .transpose(1, 2).contiguous() is the same storage, not a copy
            # (benchmarks/saved_census.py, H100: 2 * heads * head_dim bytes per token and layer fewer on Llama
            # 3.2 1B). Where rope wrote q in (batch, heads, seq, dim) order (Phi-3: q sliced from the fused
            # qkv_proj output), the output follows it and transformers copies it (measured: Phi-3-mini's peaks
            # need that copy).
            shape = q.shape[:-1] + (v.shape[-1],)
            out = torch.empty_like(q.transpose(1, 2)).transpose(1, 2) if v.shape[-1] == q.shape[-1] else \
                torch.empty(shape, dtype=q.dtype, device=q.device)
            lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad):
            q, k, v, _, _ = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    math_sdpa = F.scaled_dot_product_attention

    def sdpa(q, k, v, *args, **kwargs):
        if fused_sdpa_takes(q, k, kwargs.get("enable_gqa", False)):
            return KeptBySdpaKernels.apply(q, k, v)
        return math_sdpa(q, k, v, *args, **kwargs)  # the math kernel, as CUDA runs it: it keeps the scores

    class KeptByFusedDropout(torch.autograd.Function):
        # CUDA's fused dropout keeps a 1-byte mask; on the meta device dropout is composite and keeps a
        # mask in the input's dtype instead.
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(torch.empty(x.shape, dtype=torch.bool, device=x.device))
            return torch.empty_like(x)

        @staticmethod
        def backward(ctx, grad):
            return torch.empty_like(grad)

    def fused_dropout(x, p=0.5, training=True, inplace=False):
        return KeptByFusedDropout.apply(x) if training and p > 0 else x

    class KeptByZero3Linear(torch.autograd.Function):
        # deepspeed.zero.Init replaces F.linear for good (runtime/zero/linear.py LinearFunctionForZeroStage3),
        # and that function saves its input even where the weight is frozen.
        @staticmethod
        def forward(ctx, x, weight, bias=None):
            ctx.save_for_backward(x, weight)
            return torch.empty(x.shape[:-1] + (weight.shape[0],), dtype=x.dtype, device=x.device)

        @staticmethod
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            return torch.empty_like(x), None, None

    values = dict(config_dict)
    values[_layer_key(values)] = layers
    if attn == "sdpa" and values.get("attn_logit_softcapping"):
        # Newer releases refuse SDPA with a logit softcap; the fused kernel keeps the same tensors either way.
        values["attn_logit_softcapping"] = None
    hf = hf_config(values)
    torch_dtype = getattr(torch, dtype)
    with torch.device("meta"):
        # Build eager, then switch: some releases refuse SDPA for an architecture (Gemma 2) at build time
        # while the GPU machines' release accepts it; the forward reads the choice from the config.
        model = AutoModelForCausalLM.from_config(hf, dtype=torch_dtype, attn_implementation="eager")
    model.config._attn_implementation = attn
    if lora is not None:
        # peft all-linear adapters (rank, dropout) on a frozen base: the base's linear layers no longer keep
        # their inputs for weight gradients, and each adapter keeps its own (dropped-out) input and r outputs.
        from peft import LoraConfig, get_peft_model

        r, p_drop = lora
        targets: str | list[str] = "all-linear"
        if any(p.dim() == 3 for p in model.parameters()):
            # Mixture-of-experts stacks (3-D): traced frozen, with the nn.Linear targets named (a list peft does not
            # extend to the stacks); what adapting them adds is memory.py's (its folded weights are per layer, not
            # per token, and peft's fold cannot run on the meta device).
            head = model.get_output_embeddings()
            targets = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                              if isinstance(m, torch.nn.Linear) and m is not head})  # fmt: skip
        config = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=p_drop, target_modules=targets)
        model = get_peft_model(model, config, autocast_adapter_dtype=False)
        if any(type(m).__name__ == "ParamWrapper" for m in model.modules()):
            raise RuntimeError("peft adapted 3-D parameters in the trace")
    model.train()
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in params and key not in seen:
            seen[key] = storage.nbytes()
        return tensor

    ids = torch.zeros(1, seq, dtype=torch.long, device="meta")
    original = F.scaled_dot_product_attention, F.dropout, F.linear
    F.dropout = fused_dropout
    F.scaled_dot_product_attention = sdpa
    if zero3_linear:
        F.linear = KeptByZero3Linear.apply
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids, labels=ids)
    finally:
        F.scaled_dot_product_attention, F.dropout, F.linear = original
    return sum(seen.values())


def fused_sdpa_takes(q, k, enable_gqa: bool) -> bool:
    """Whether CUDA's fused SDPA kernels (flash, memory-efficient, cuDNN) take a call with these query and key
    shapes, as torch 2.11's sdp_utils decides: they need as many key/value heads as query heads unless the caller
    passes enable_gqa, and none takes fp32 with enable_gqa. Otherwise the math kernel runs, upcasting 16-bit
    inputs to fp32 and keeping the fp32 attention probabilities, as eager attention keeps its scores (the meta
    device runs the same composite).

    Measured on one H200 (benchmarks/sdpa_path.py, torch 2.11, transformers 5.17, 2026-11-29): Falcon-7B's
    multi-query attention (71 query heads, one K/V head, no enable_gqa) took the math kernel (ToCopyBackward0,
    softmax_warp_forward<float>) and a decoder layer kept 1.434 GB at 1 x 2,048 tokens, 700 KB per token where
    the fused kernels' count is 110 KB; Llama 3.2 1B's grouped-query attention (enable_gqa) took cuDNN's flash
    kernel. Measured earlier: fp32 Qwen2.5-0.5B (grouped-query) kept 61 KB per token and layer more than the
    fused-kernel count (H100)."""
    import torch

    if q.shape[-3] == k.shape[-3]:
        return True
    return bool(enable_gqa) and q.dtype != torch.float32


def _runs(config_dict: dict[str, Any], dtype: str) -> bool:
    try:
        _saved_bytes(config_dict, 1, TRACE_SEQ[0], dtype, "sdpa")
        return True
    except RuntimeError:
        return False


EAGER_TRACE_SEQ = 256
"""A third length for eager attention's score term: a layer can keep tensors that do not grow with the tokens
(Gemma 2's four RMSNorms each keep `(1 + weight).float()`, 9,216 bytes a layer), which per token fall as 1/seq and
bend a slope read from two lengths (Gemma 2: 59.5 bytes per token per position where its scores keep 64; measured
on the H200, its eager peaks 1.4-1.6% above the prediction, 2026-11-28). Three lengths separate a + b seq + c / seq."""


def attention_coefficients(config_dict: dict[str, Any], dtype: str, attn: str) -> dict[str, float]:
    """Returns {layer, layer_per_seq, rest} in bytes per token for one dtype ("bfloat16"/"float32") and
    attention implementation: one and two layers traced at both TRACE_SEQ lengths (four runs), and for eager
    attention at EAGER_TRACE_SEQ too (six runs: the score term's slope without what does not grow with the tokens)."""
    s1, s2 = TRACE_SEQ
    one = [_saved_bytes(config_dict, 1, s, dtype, attn) for s in (s1, s2)]
    two = [_saved_bytes(config_dict, 2, s, dtype, attn) for s in (s1, s2)]
    layer = [(b - a) / s for a, b, s in zip(one, two, (s1, s2))]  # bytes per token, at s1 and s2
    per_seq = (layer[1] - layer[0]) / (s2 - s1)
    base = layer[0] - per_seq * s1
    if attn == "eager" or per_seq >= 1:  # scores kept (eager, or SDPA's math kernel): at least one head's 16-bit row
        s3 = EAGER_TRACE_SEQ
        layer3 = (_saved_bytes(config_dict, 2, s3, dtype, attn) - _saved_bytes(config_dict, 1, s3, dtype, attn)) / s3
        # layer(s) = a + b s + c / s through the three points: b from the two slopes, the 1/s part cancelled
        slope12, slope23 = per_seq, (layer3 - layer[1]) / (s3 - s2)
        per_seq = (slope23 * s3 - slope12 * s1) / (s3 - s1)
        base = layer[0] - per_seq * s1
    rest = one[0] / s1 - layer[0]
    return {"layer": round(base, 3), "layer_per_seq": round(max(per_seq, 0.0), 6), "rest": round(rest, 3)}


def runs_on_meta(config_dict: dict[str, Any], dtype: str) -> bool:
    """Returns whether one layer runs forward on the meta device in `dtype` (fp32 fails for grouped MoE matmuls)."""
    return _runs(config_dict, dtype)


def traced_coefficients(config_dict: dict[str, Any]) -> dict[str, Any]:
    """Returns saved-activation bytes per token: {dtype: {attn: {layer, layer_per_seq, rest}}}.

    `layer`: one decoder layer, per token; `layer_per_seq`: eager only, extra bytes per token per sequence
    position (the score matrices); `rest`: embeddings, final norm, logits and loss, per token.
    Raises RuntimeError where the model cannot run on the meta device (mixture of experts).
    """
    result: dict[str, Any] = {"method": "traced"}
    for dtype in ("bfloat16", "float32"):
        per_attn = {}
        if dtype == "float32" and not _runs(config_dict, dtype):
            # transformers' grouped expert matmul takes 16-bit inputs only; fp32 keeps every tensor at twice
            # the bytes, so its figures are the 16-bit ones doubled.
            result["fp32"] = {a: {k: v * 2 for k, v in c.items()} for a, c in result["16bit"].items()}
            result["fp32_derived"] = True
            continue
        for attn in ("sdpa", "eager"):
            per_attn[attn] = attention_coefficients(config_dict, dtype, attn)
        result["16bit" if dtype == "bfloat16" else "fp32"] = per_attn
    try:
        result["lora"] = _lora_coefficients(config_dict, result)
    except Exception as error:  # the adapter trace is optional: memory.py falls back to the closed form
        result["lora_why"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
    return result


# Adapter shapes traced for the LoRA table: two ranks separate the per-rank term, a dropout run the copies.
LORA_TRACE_RANKS = (8, 16)
LORA_TRACE_DROPOUT = 0.05


def _lora_coefficients(config_dict: dict[str, Any], tables: dict[str, Any]) -> dict[str, Any]:
    """Returns saved-activation bytes per token with peft all-linear adapters on a frozen base (SDPA).

    {dtype: {layer, layer_per_r, layer_dropout, rest, rest_dropout}}: one decoder layer at rank r without
    dropout is layer + r * layer_per_r; dropout > 0 adds layer_dropout (each target's dropped-out input and
    its 1-byte mask, less the shared inputs no one else keeps). Frozen linear layers keep no inputs for
    weight gradients, so these differ from the full fine-tuning figures in both directions. Eager attention
    adds the same score terms as without adapters. zero3_layer_extra(_dropout): what one layer keeps in
    addition under ZeRO-3, whose replacement F.linear saves every input. `tables`: the SDPA and eager tables
    traced_coefficients made (each width's SDPA layer_per_seq).
    """
    return {key: lora_dtype_coefficients(config_dict, dtype, tables[key]["sdpa"]["layer_per_seq"])
            for dtype, key in (("bfloat16", "16bit"), ("float32", "fp32"))}  # fmt: skip


def lora_dtype_coefficients(config_dict: dict[str, Any], dtype: str, scores_per_seq: float) -> dict[str, float]:
    """Returns one dtype's entry of the LoRA table (see _lora_coefficients): ten traced runs, imports peft.
    `scores_per_seq`: the same dtype's SDPA layer_per_seq (attention_coefficients), the scores a layer keeps where
    SDPA takes the math kernel."""
    s = TRACE_SEQ[0]
    r1, r2 = LORA_TRACE_RANKS
    runs = {}
    for lora in ((r1, 0.0), (r2, 0.0), (r1, LORA_TRACE_DROPOUT)):
        one = _saved_bytes(config_dict, 1, s, dtype, "sdpa", lora)
        two = _saved_bytes(config_dict, 2, s, dtype, "sdpa", lora)
        runs[lora] = ((two - one) / s, one / s - (two - one) / s)  # (layer, rest) per token
    (l1, rest), (l2, _), (ld, rest_d) = runs[(r1, 0.0)], runs[(r2, 0.0)], runs[(r1, LORA_TRACE_DROPOUT)]
    per_r = (l2 - l1) / (r2 - r1)
    # where SDPA takes the math kernel (fused_sdpa_takes), the layer keeps scores that grow with the sequence: the
    # table holds the rest, and memory.py adds the SDPA table's layer_per_seq at the run's length, as for eager
    out = {"layer": round(l1 - scores_per_seq * s - per_r * r1, 3), "layer_per_r": round(per_r, 3),
           "layer_dropout": round(ld - l1, 3), "rest": round(rest, 3), "rest_dropout": round(rest_d - rest, 3)}  # fmt: skip
    # LoRA under ZeRO-3 (base built in deepspeed.zero.Init): frozen linear layers keep their inputs again.
    for lora, name in (((r1, 0.0), "zero3_layer_extra"), ((r1, LORA_TRACE_DROPOUT), "zero3_layer_extra_dropout")):
        one = _saved_bytes(config_dict, 1, s, dtype, "sdpa", lora, zero3_linear=True)
        two = _saved_bytes(config_dict, 2, s, dtype, "sdpa", lora, zero3_linear=True)
        out[name] = round((two - one) / s - runs[lora][0], 3)
    return out


def closed_form_coefficients(arch: dict[str, Any]) -> dict[str, Any]:
    """Returns the same table from the llama-style count, for models the tracer cannot run.

    Per token and layer, in elements of the activation dtype (fp32 upcasts noted): two RMSNorms keep their
    fp32 input and bf16 output (4h + 2h bytes each at 16-bit); attention keeps the q/k/v input, q, k, v,
    and the kernel output, which is the o_proj input too with 16-bit SDPA (the fused kernels' layout makes
    transformers' transpose-and-contiguous a view; eager attention and fp32 copy it); a gated MLP keeps its input, gate, act(gate), up and their
    product, each in every one of the top-k experts a token is routed to. Checked against the traced count
    for dense llama models in tests/test_activations.py.
    """
    h, i = arch["hidden_size"], arch["intermediate_size"]
    q = arch["num_attention_heads"] * arch["head_dim"]
    kv = arch["num_key_value_heads"] * arch["head_dim"]
    k = max(1, arch.get("num_experts_per_tok") or 1)
    mlp_elems = (4 * i if arch.get("gated_mlp", True) else 2 * i) * k + h
    router = arch["num_experts"] * 4 if arch.get("num_experts", 1) > 1 else 0
    vocab = arch["vocab_size"]
    table: dict[str, Any] = {"method": "closed-form"}
    for name, width, norm_extra in (("16bit", 2, 4), ("fp32", 4, 0)):
        norms = 2 * (norm_extra * h + width * h)
        attn = width * (h + 3 * q + 2 * kv)
        layer = norms + attn + width * mlp_elems + router
        shared = width * q if width == 2 else 0  # 16-bit SDPA: o_proj's input is the kernel's output
        scores = arch["num_attention_heads"] * (width + 4 + width)  # eager: scores, fp32 softmax, probs
        rest = norm_extra * h + width * h + 4 * vocab
        table[name] = {"sdpa": {"layer": layer - shared, "layer_per_seq": 0.0, "rest": rest},
                       "eager": {"layer": layer, "layer_per_seq": scores, "rest": rest}}  # fmt: skip
    return table


def activation_coefficients(config_dict: dict[str, Any], arch: dict[str, Any]) -> dict[str, Any]:
    """Returns traced coefficients, or the closed form where the model cannot be traced on meta."""
    try:
        return traced_coefficients(config_dict)
    except Exception as error:  # data-dependent shapes (MoE routing) are not supported on meta
        table = closed_form_coefficients(arch)
        table["why"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
        return table

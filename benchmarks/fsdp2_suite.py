"""Writes a GPU suite of FSDP2 cases beside their ZeRO twins (issue 61: measure FSDP2 before modelling it):

    python benchmarks/fsdp2_suite.py --out benchmarks/suites/fsdp2-r1-h100.jsonl [--gpu H100] [--setting M:SEQ ...]

For each setting, the operating point's ZeRO-3 and ZeRO-2 candidates (operating_point.operating_cases: the
micro-batch the planner picks for each, and the next one up), each followed by its FSDP2 twin at the same micro-batch,
sequence and checkpointing: ZeRO-3's twin reshards after forward (fully_shard's default: each layer gathered for
forward and again for backward), ZeRO-2's keeps the gathered layers to backward (reshard_after_forward False).
benchmarks/gpu_harness.py runs them all through gpu_step.py (fsdp2_engine.py for the twins). The planner models no
FSDP2 memory yet; each twin carries a first-principles prediction of its training steps' peak (fsdp2_train_peak),
written before any FSDP2 case ran, to be held to what they measure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.operating_point import operating_cases  # noqa: E402

SETTINGS = [("llama3.2-1b", 2048, ("3", "2"), (False, True)), ("qwen2.5-1.5b", 1024, ("3",), (False,))]
"""(model, sequence, ZeRO strategies, checkpointing) of the first suite: two architectures of the operating-point
suite (128k and 152k vocabularies; the 1B's embedding tied) at lengths where the activations bind, sized to run in
one lent call (about 30 s a case)."""

TWINS = {"3": ("fsdp2", True), "2": ("fsdp2-noreshard", False)}
"""ZeRO strategy -> (name of its FSDP2 twin in the case id, reshard_after_forward)."""


def fsdp2_train_peak(spec, zero_memory, *, reshard: bool) -> dict:
    """Returns the predicted peak allocated bytes of an FSDP2 twin's training steps on one GPU, with its terms:
    the larger of the start of backward and the optimizer step (bytes per parameter as fsdp2_engine.py runs it).

    At the start of backward (steady state: zero_grad(set_to_none) freed last step's gradients):
        12 N            fp32 parameter shards (4) + AdamW's two fp32 moments (8); world 1, so the shard is all of it
        A               the activations at their backward peak, logits and their gradient included: the memory
                        model's figure for the ZeRO twin (the same model, batch and checkpointing)
        gathered        the 16-bit copies fully_shard all-gathers: the tail unit (final norm and head, tied
                        embedding included), kept from forward to backward (2 x embedding params); the layer in
                        backward and the one prefetched (2 x 2 x layer params); without resharding, every layer
                        gathered in forward stays to backward (2 x layers x layer params)
    At the optimizer step: 16 N (the fp32 gradients, 4 N, all reduced) plus the layers still gathered where
    reshard_after_forward is off. Not counted, so the measurement will say: FSDP2's all-gather and reduce-scatter
    staging buffers, the fp32 copy of a layer's gradient before its reduce-scatter, the caching allocator's blocks
    between the units."""
    n, layer, embed = spec.num_params, spec.num_layer_params, spec.num_embedding_params
    layers_gathered = spec.num_layers if not reshard else 2
    gathered = 2 * embed + 2 * layers_gathered * layer
    backward_start = 12 * n + zero_memory.activations_bytes + gathered
    step = 16 * n + (0 if reshard else 2 * spec.num_layers * layer)
    return {"train_peak_bytes": max(backward_start, step), "backward_start_bytes": backward_start,
            "optimizer_step_bytes": step, "activations_bytes": zero_memory.activations_bytes,
            "gathered_bytes": gathered, "model": "fsdp2_suite.fsdp2_train_peak, written 2026-12-08 before any run"}


def twin(zero_case: dict) -> dict:
    """Returns the FSDP2 case of a ZeRO case: the same model, shapes and AdamW hyperparameters (read from its
    DeepSpeed JSON), no prediction."""
    name, reshard = TWINS[zero_case["strategy"]]
    c = json.loads(json.dumps(zero_case))
    c.pop("planned", None)
    parts = c["id"].split("|")
    parts[1] = name
    c.update(id="|".join(parts), engine="fsdp2", fsdp_reshard_after_forward=reshard,
             twin_of=zero_case["id"])  # fmt: skip
    return c


def zero_memory(case: dict):
    """Returns the memory model's estimate of a ZeRO case (its workload on one GPU of the planned type)."""
    from benchmarks.cases import model_config
    from zero_planner.models.spec import spec_from_config
    from zero_planner.plan.memory import Workload, ZeroBuffers, estimate_memory
    from zero_planner.strategies import STRATEGIES

    spec = spec_from_config(model_config(case["model"]), case["model"])
    workload = Workload(case["micro_batch_size"], case["seq_len"], case["gradient_checkpointing"], case["precision"],
                        attn_implementation=spec.attn_implementation or "sdpa")  # fmt: skip
    buffers = ZeroBuffers.from_ds_config(case["deepspeed_config"], spec.hidden_size)
    return spec, estimate_memory(spec, STRATEGIES[case["strategy"]], workload, buffers, case["planned"]["gpu"])


def suite(settings, *, gpu: str, host: int) -> list[dict]:
    """Returns the cases of (model, seq, strategies, checkpointing) settings, each ZeRO case followed by its twin,
    which carries its predicted training peak (fsdp2_train_peak)."""
    cases = []
    for model, seq, strategies, ckpts in settings:
        for c in operating_cases(model, seq, gpu=gpu, capacity=None, host=host):
            if c["strategy"] in strategies and c["strategy"] in TWINS and c["gradient_checkpointing"] in ckpts:
                spec, memory = zero_memory(c)
                other = twin(c)
                other["predicted"] = fsdp2_train_peak(spec, memory, reshard=other["fsdp_reshard_after_forward"])
                cases += [dict(c, suite="fsdp2"), dict(other, suite="fsdp2")]
    # ZeRO-3 against FSDP2's default first, without checkpointing first: what a cut call still brings back
    pairs = [cases[i:i + 2] for i in range(0, len(cases), 2)]
    pairs.sort(key=lambda pair: (pair[0]["strategy"] != "3", pair[0]["gradient_checkpointing"]))
    return [c for pair in pairs for c in pair]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--host-gib", type=int, default=120, help="host memory of the GPU machine (default 120)")
    parser.add_argument("--setting", action="append",
                        help="MODEL:SEQ, ZeRO-3 and ZeRO-2 with and without checkpointing (default: SETTINGS)")
    args = parser.parse_args(argv)
    settings = SETTINGS
    if args.setting:
        settings = [(s.split(":")[0], int(s.split(":")[1]), tuple(TWINS), (False, True)) for s in args.setting]
    cases = suite(settings, gpu=args.gpu, host=args.host_gib * 2**30)
    Path(args.out).write_text("".join(json.dumps(c) + "\n" for c in cases))
    print(f"{len(cases)} cases -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

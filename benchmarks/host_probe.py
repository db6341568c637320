"""This machine's host times for the step-time model, measured on its GPU with a model too small to keep it busy.

    python benchmarks/host_probe.py [--json]    measure now on GPU 0 and print (needs CUDA and deepspeed)

A training step waits for the host wherever the GPU's work is shorter (throughput.host_seconds): the Python,
autograd and kernel launches of each decoder layer, ZeRO-2's work per gradient bucket (overlap_comm synchronizes
the device before each) and ZeRO-3's hooks per fetched parameter. All three are host Python: they differ between
machines (ZeRO-3's per fetch 1.0 ms on one lent H200 host, 2.1 ms on an H100's). Here a Llama-layout model of
hidden size PROBE_HIDDEN, whose kernels take microseconds, trains single-process DeepSpeed engines (bf16, world
size 1) and the wall time of forward + backward is the host's:

  per layer   the slope of ZeRO-1's micro-step between SHALLOW and DEEP layers (ZeRO-1 without overlap_comm, as
              our JSON writes it, has no gradient hooks);
  per bucket  (ZeRO-2 - ZeRO-1) / the buckets ZeRO-2 reduces (buckets of PROBE_HIDDEN^2 elements, as our JSON's
              hidden^2: one per weight matrix, counted by throughput.stage2_reductions);
  per fetch   (ZeRO-3 - ZeRO-1) / the tensors ZeRO-3 fetches (persistence threshold 10 x hidden, as ours).

Each engine runs WARMUP then STEPS micro-steps; the median is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROBE_HIDDEN = 64
SHALLOW, DEEP = 4, 24
SEQ = 16
WARMUP, STEPS = 4, 12


@dataclass(frozen=True)
class HostTimes:
    """Host seconds measured on this machine, as throughput.Calibration's fields name them."""

    host_seconds_per_layer: float
    stage2_seconds_per_reduction: float
    stage3_seconds_per_fetch: float
    micro_step_s: dict[str, float]
    """The median forward + backward of each engine (stage:layers), seconds."""
    gpu: str
    torch: str
    deepspeed: str
    date: str


def probe_config(layers: int) -> dict:
    """Returns the probe model's config: Llama's layout, every tensor tiny."""
    return {
        "model_type": "llama", "vocab_size": 256, "hidden_size": PROBE_HIDDEN, "intermediate_size": 2 * PROBE_HIDDEN,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 4,
        "head_dim": PROBE_HIDDEN // 4, "tie_word_embeddings": False, "max_position_embeddings": 128,
    }  # fmt: skip


def layout_config(name: str, layers: int) -> dict:
    """Returns benchmarks/model_configs/`name`.json with its layout kept (type, norms, biases, soft-caps, query and
    key norms, the ratio of query to key-value heads, experts) and every width tiny (head size 8, vocabulary 256):
    a model whose kernels take microseconds, so that forward + backward is the host's time."""
    from benchmarks.cases import model_config

    config = dict(model_config(name))
    heads = config.get("num_attention_heads") or config["n_head"]
    group = heads // (config.get("num_key_value_heads") or heads)
    heads = max(4, group) // group * group
    width = 8 * heads
    tiny = {"vocab_size": 256, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}
    if "n_embd" in config:
        tiny.update(n_embd=width, n_head=heads, n_positions=128, n_layer=layers)
    else:
        tiny.update(hidden_size=width, num_attention_heads=heads, num_key_value_heads=heads // group, head_dim=8,
                    intermediate_size=2 * width, max_position_embeddings=128, num_hidden_layers=layers)
        for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):
            if key in config:
                tiny[key] = 16
        if "query_pre_attn_scalar" in config:
            tiny["query_pre_attn_scalar"] = 8
        if config.get("sliding_window"):
            tiny["sliding_window"] = min(config["sliding_window"], SEQ // 2)
        config.pop("rope_scaling", None)
    return dict(config, **tiny)


_NO_LAUNCH = ("detach.default", "empty.memory_format", "empty_strided.default", "_local_scalar_dense.default",
              "lift_fresh.default", "_unsafe_view.default", "alias.default")  # fmt: skip
"""Aten ops that launch no work on the device (views and allocations), beside those whose schema returns a view."""


def _launch_counter():
    """Returns a TorchDispatchMode that counts, while active (`with`), the aten ops that launch work: `.count`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class LaunchCounter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            view = any(a.alias_info is not None and not a.alias_info.is_write for a in func._schema.returns)
            if not view and func.__name__ not in _NO_LAUNCH:
                self.count += 1
            return out

    return LaunchCounter()


def time_layout(name: str, attn: str, layers: int) -> dict:
    """Returns the median forward + backward seconds of ZeRO-1 on `name`'s tiny layout at `layers` (attention
    `attn`), and the ops its forward and backward launch (counted once, after the timing)."""
    engine, ids = _engine(layout_config(name, layers), 1, attn)
    seconds = _median_micro_step(engine, ids)
    forward, backward = _launch_counter(), _launch_counter()
    with forward:
        loss = engine(input_ids=ids, labels=ids).loss
    with backward:
        engine.backward(loss)
    engine.step()
    if hasattr(engine, "destroy"):
        engine.destroy()
    return {"seconds": seconds, "forward_ops": forward.count, "backward_ops": backward.count}


def measure_layouts(layouts: list[str], require_gpu: bool = True) -> list[dict]:
    """Returns, per `name:attn` layout, the host's seconds and launched ops per decoder layer (the slope between
    SHALLOW and DEEP layers of ZeRO-1's forward + backward), printing each as one JSON line. Without
    require_gpu also on DeepSpeed's CPU accelerator (the code path; its seconds are not a GPU host's)."""
    import datetime as dt

    import torch

    _require_gpu(require_gpu)
    _init_single_process()
    rows = []
    for layout in layouts:
        name, _, attn = layout.partition(":")
        shallow, deep = (time_layout(name, attn or "sdpa", n) for n in (SHALLOW, DEEP))
        per = {k: (deep[k] - shallow[k]) / (DEEP - SHALLOW) for k in deep}
        rows.append({"layout": name, "attn": attn or "sdpa", "host_seconds_per_layer": per["seconds"],
                     "forward_ops_per_layer": per["forward_ops"], "backward_ops_per_layer": per["backward_ops"],
                     "shallow": shallow, "deep": deep, "gpu": _device_name(),
                     "torch": torch.__version__, "date": dt.date.today().isoformat()})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def ds_config(stage: int) -> dict:
    """Returns the DeepSpeed JSON of one probe engine: bf16, our stage's switches, buckets of hidden^2 elements."""
    h2 = PROBE_HIDDEN * PROBE_HIDDEN
    zero: dict = {"stage": stage}
    if stage == 2:
        zero.update(overlap_comm=True, contiguous_gradients=True, reduce_bucket_size=h2, allgather_bucket_size=h2)
    if stage == 3:
        zero.update(overlap_comm=True, contiguous_gradients=True, reduce_bucket_size=h2,
                    stage3_prefetch_bucket_size=int(0.9 * h2), stage3_param_persistence_threshold=10 * PROBE_HIDDEN)
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}, "zero_optimization": zero,
            "steps_per_print": 10**9}  # fmt: skip


def _engine(config: dict, stage: int, attn: str | None = None):
    """Returns a fresh DeepSpeed engine of `config` at `stage` (ds_config) and its probe batch of token ids."""
    import deepspeed
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    kwargs = {"attn_implementation": attn} if attn else {}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), **kwargs)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config(stage))
    return engine, torch.randint(0, 256, (1, SEQ), device=engine.device)


def _median_micro_step(engine, ids) -> float:
    """Returns the median seconds of the engine's forward + backward over STEPS after WARMUP (the step apart)."""
    from deepspeed.accelerator import get_accelerator

    sync = get_accelerator().synchronize
    times = []
    for _ in range(WARMUP + STEPS):
        sync()
        start = time.perf_counter()
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        sync()
        times.append(time.perf_counter() - start)
        engine.step()
    return statistics.median(times[WARMUP:])


def time_engine(stage: int, layers: int) -> float:
    """Returns the median seconds of one forward + backward of a fresh probe engine (the step apart)."""
    engine, ids = _engine(probe_config(layers), stage)
    seconds = _median_micro_step(engine, ids)
    if hasattr(engine, "destroy"):
        engine.destroy()
    return seconds


def _device_name() -> str:
    import torch
    from deepspeed.accelerator import get_accelerator

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else get_accelerator().device_name()


def _require_gpu(require: bool) -> None:
    from deepspeed.accelerator import get_accelerator

    name = get_accelerator().device_name()
    if require and name != "cuda":
        raise RuntimeError(f"no CUDA GPU (DeepSpeed's accelerator is {name!r}): the host times are measured against "
                           "a GPU")  # fmt: skip


def _init_single_process() -> None:
    """Starts a one-rank process group on DeepSpeed's accelerator (device 0)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    accelerator.set_device(0)
    if not deepspeed.comm.is_initialized():
        deepspeed.init_distributed(dist_backend=accelerator.communication_backend_name(), verbose=False)


def measure_here(require_gpu: bool = True) -> HostTimes:
    """Returns this machine's host times (GPU 0; imports torch, transformers and deepspeed). Without
    require_gpu it also runs on DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu: the code path, not a host time
    the model can use: there the "GPU" work is the host's too)."""
    import datetime as dt

    import deepspeed
    import torch

    from zero_planner.models.spec import spec_from_config
    from zero_planner.plan.memory import Workload
    from zero_planner.plan.throughput import stage2_reductions, stage3_fetches

    _require_gpu(require_gpu)
    _init_single_process()
    runs = {f"{stage}:{layers}": time_engine(stage, layers) for stage, layers in ((1, SHALLOW), (1, DEEP), (2, DEEP), (3, DEEP))}
    spec = spec_from_config(probe_config(DEEP), "host-probe")
    work = Workload(micro_batch_size=1, seq_len=SEQ, gradient_checkpointing=False, precision="bf16")
    per_layer = (runs[f"1:{DEEP}"] - runs[f"1:{SHALLOW}"]) / (DEEP - SHALLOW)
    per_bucket = (runs[f"2:{DEEP}"] - runs[f"1:{DEEP}"]) / stage2_reductions(spec, work, bucket=PROBE_HIDDEN**2)
    per_fetch = (runs[f"3:{DEEP}"] - runs[f"1:{DEEP}"]) / stage3_fetches(spec, work, persistence_threshold=10 * PROBE_HIDDEN)
    return HostTimes(
        host_seconds_per_layer=per_layer, stage2_seconds_per_reduction=per_bucket, stage3_seconds_per_fetch=per_fetch,
        micro_step_s=runs, gpu=_device_name(),
        torch=torch.__version__, deepspeed=deepspeed.__version__, date=dt.date.today().isoformat(),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the measurement as one JSON line")
    parser.add_argument("--any-device", action="store_true", help="run on DeepSpeed's CPU accelerator too (a test)")
    parser.add_argument("--layouts", nargs="+", metavar="MODEL[:ATTN]",
                        help="instead: per layer host seconds and launched ops of these benchmarks/model_configs "
                             "layouts, tiny (ZeRO-1, SDPA unless :eager)")
    args = parser.parse_args(argv)
    if args.layouts:
        measure_layouts(args.layouts, require_gpu=not args.any_device)
        return 0
    times = measure_here(require_gpu=not args.any_device)
    if args.json:
        print(json.dumps(asdict(times)))
    else:
        print(f"host per layer {times.host_seconds_per_layer * 1e3:.2f} ms, per ZeRO-2 bucket "
              f"{times.stage2_seconds_per_reduction * 1e3:.2f} ms, per ZeRO-3 fetch {times.stage3_seconds_per_fetch * 1e3:.2f} ms "
              f"({times.gpu}); micro-steps {json.dumps({k: round(v, 5) for k, v in times.micro_step_s.items()})}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One measured case, run on every rank by the `deepspeed` launcher: the reference step of docs/design.md.

Writes OUT_DIR/rank{N}.json with peak allocated/reserved memory (overall and per phase), device memory in
use at the end, peak host RSS and step times. A CUDA OOM is recorded with its phase, not raised.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 4
"""Steps run by default; a case may ask for more (`steps`: timing suites, whose ZeRO-3 cases leave two out)."""


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--case", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--go-file", default=None,
                        help="after the imports, wait until this file exists before touching the GPU (the harness "
                             "starts the next case while the current one runs; nothing is on the GPU while waiting)")
    args = parser.parse_args()
    case = json.loads(Path(args.case).read_text())
    started = time.time()

    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator

    from zero_planner.models.hf import hf_config
    from zero_planner.run.modeling import _auto_class

    # The model's module too (transformers imports it lazily): all before the GPU is touched.
    _auto_class(case.get("task", "causal-lm"))._model_mapping[type(hf_config(dict(case["model_config"])))]
    imported = time.time()
    if args.go_file:
        (Path(args.out_dir) / f"ready{os.environ.get('RANK', 0)}").touch()
        while not Path(args.go_file).exists():
            time.sleep(0.1)
    went = time.time()

    deepspeed.init_distributed()
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    acc = get_accelerator()
    on_cuda = acc.device_name() == "cuda"
    device = f"cuda:{local_rank}" if on_cuda else "cpu"
    if on_cuda:
        torch.cuda.set_device(local_rank)
        limit = case.get("memory_limit_bytes")
        if limit:
            # A smaller GPU, emulated: the caching allocator refuses to reserve past `limit` and raises the
            # same OutOfMemoryError (after releasing its cache and retrying) as on a card of that size.
            total = torch.cuda.get_device_properties(local_rank).total_memory
            torch.cuda.set_per_process_memory_fraction(limit / total, local_rank)

    record: dict = {"rank": rank, "status": "ok", "phases": [],
                    "timing_s": {"import": round(imported - started, 2), "wait": round(went - imported, 2)}}
    phase = "init"
    out = Path(args.out_dir) / f"rank{rank}.json"

    def device_stats() -> dict:
        if not on_cuda:
            return {}
        free, total = torch.cuda.mem_get_info()
        return {
            "allocated_bytes": torch.cuda.memory_allocated(),
            "reserved_bytes": torch.cuda.memory_reserved(),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "device_used_bytes": total - free,
            # cumulative: the phase in which the allocator freed its cache and retried (a step slowed by it)
            "alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries", 0),
        }

    def stream_pools() -> dict:
        """Per CUDA stream, what the caching allocator holds (benchmarks/stream_pools.py): bytes reserved, bytes
        allocated and the largest blocks (size, state). Pages one stream freed serve no other stream's request
        until a retry unmaps them."""
        pools: dict = {}
        for segment in torch.cuda.memory_snapshot():
            pool = pools.setdefault(str(segment["stream"]), {"reserved": 0, "allocated": 0, "blocks": []})
            pool["reserved"] += segment["total_size"]
            pool["allocated"] += segment["allocated_size"]
            pool["blocks"] += [[block["size"], block["state"]] for block in segment["blocks"]]
        for pool in pools.values():
            pool["blocks"] = sorted(pool["blocks"], reverse=True)[:8]
        return pools

    def host_mark(tag: str) -> None:
        """Host memory now: RSS and its peak so far (/proc/self/status), the pinned memory PyTorch's caching
        host allocator holds (requested vs reserved, i.e. after its power-of-two rounding) and what DeepSpeed
        pinned through the accelerator: which host buffer is which size, not only the peak."""
        mark: dict = {"tag": tag}
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith(("VmRSS:", "VmHWM:")):
                    mark[line.split(":")[0]] = int(line.split()[1]) * 1024
        except OSError:
            pass
        if on_cuda and hasattr(torch.cuda, "host_memory_stats"):
            stats = torch.cuda.host_memory_stats()
            mark["pinned"] = {k: v for k, v in stats.items() if k.endswith((".current", ".peak")) or "num_host" in k}
        try:
            from deepspeed.utils.pin_memory_tracker import _tracker

            mark["deepspeed_pinned_bytes"], mark["deepspeed_pin_calls"] = _tracker._bytes, _tracker._calls
        except (ImportError, AttributeError):
            pass
        record.setdefault("host_marks", []).append(mark)

    try:
        ds_config = case["deepspeed_config"]
        fsdp = case.get("engine") == "fsdp2"  # PyTorch FSDP2 in place of DeepSpeed (fsdp2_engine.py)
        # FSDP2 keeps fp32 master shards: built in fp32 on the host, each unit's shard moved to the GPU by fully_shard
        model, attn = case_model(case, {} if fsdp else ds_config, "cpu" if fsdp else device, local_rank)
        record["attn_implementation"] = attn
        record["num_params"] = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
        record["trainable_params"] = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if p.requires_grad)
        record["timing_s"]["model"] = round(time.time() - went, 2)
        host_mark("model")
        if fsdp:
            from fsdp2_engine import Fsdp2Engine

            engine = Fsdp2Engine(model, case, device)
            record["fsdp2"] = {"layers": engine.layers, "optimizer": engine.optimizer_kind}
        else:
            engine, *_ = deepspeed.initialize(
                model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=ds_config
            )
        if on_cuda:
            torch.cuda.synchronize()
            record["after_init"] = device_stats()
            # The contract measures peaks after deepspeed.initialize: drop init-time transients first.
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            record["after_init_empty_cache"] = device_stats()
        record["timing_s"]["initialize"] = round(time.time() - went, 2)
        host_mark("initialize")
        micro, seq = case["micro_batch_size"], case["seq_len"]
        generator = torch.Generator().manual_seed(1234 + rank)
        step_times = []
        phase_times = []  # seconds of forward, backward and optimizer step, each synchronised: the step's parts
        # phase_sync False: one wait per step, at its end, as zero-run's loop (its parts then go untimed). The
        # memory counters need no wait (the caching allocator keeps them on the host as it hands out blocks).
        phase_sync = case.get("phase_sync", True)
        losses = []
        for step in range(int(case.get("steps", STEPS))):
            batch = random_batch(case, generator, engine.device)
            start = time.perf_counter()
            parts = {}
            for phase in ("forward", "backward", "step"):
                began = time.perf_counter()
                if on_cuda:
                    torch.cuda.reset_peak_memory_stats()
                if phase == "forward":
                    # keep_outputs: the loop DeepSpeed's and accelerate's examples write, which holds the model's
                    # outputs (their logits) through backward and the step; the reference step keeps the loss only.
                    outputs = engine(**batch)
                    loss = outputs.loss
                    if not case.get("keep_outputs"):
                        del outputs
                elif phase == "backward":
                    engine.backward(loss)
                else:
                    engine.step()
                    outputs = None
                if on_cuda:
                    if phase_sync or phase == "step":
                        torch.cuda.synchronize()
                    if phase_sync:
                        parts[phase] = time.perf_counter() - began
                    record["phases"].append({"step": step, "phase": phase, **device_stats()})
                    if case.get("stream_pools"):
                        record["phases"][-1]["pools"] = stream_pools()
                if step == 0:
                    host_mark(phase)  # which phase of a step holds a host transient
            step_times.append(time.perf_counter() - start)
            phase_times.append(parts)
            losses.append(float(loss.detach().float().item()))
        phase = "done"
        host_mark("steps")
        if on_cuda and case.get("profile_steps"):
            # the profiler keeps every event in this process's memory: the training's host peak is the one before
            record["host_rss_peak_before_profile_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            record["profile"] = profile_steps(engine, case, generator, int(case["profile_steps"]))
        record["timing_s"]["steps"] = round(time.time() - went, 2)
        record["step_times_s"] = step_times
        record["phase_times_s"] = phase_times
        if on_cuda:
            # cudaFree-and-retry rounds of the caching allocator: each one synchronises and slows the step
            # it lands in (a suspect for slow steps at the edge of memory).
            stats = torch.cuda.memory_stats()
            record["num_alloc_retries"] = stats.get("num_alloc_retries")
            record["num_device_alloc"] = stats.get("num_device_alloc")
        record["tokens_per_micro_step"] = micro * seq  # each loop iteration is one micro-step
        record["losses"] = losses
    except torch.OutOfMemoryError as error:
        record["status"] = "oom"
        record["oom_phase"] = phase
        record["error"] = str(error).splitlines()[0][:300]
    except Exception as error:  # recorded, so one broken case never stops the batch
        import traceback

        record["status"] = "error"
        record["oom_phase"] = phase
        record["error"] = f"{type(error).__name__}: {error}"[:2000]
        record["traceback"] = traceback.format_exc()[-4000:]
    if on_cuda:
        phases = record["phases"]
        record["peak_allocated_bytes"] = max((p["peak_allocated_bytes"] for p in phases), default=None)
        record["peak_reserved_bytes"] = max((p["peak_reserved_bytes"] for p in phases), default=None)
        record["end"] = device_stats()
    record["host_rss_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out.write_text(json.dumps(record))
    from zero_planner.run.train import release_shm_buffer  # CPU runs only: DeepSpeed leaks it otherwise

    release_shm_buffer()
    # Ranks that hit OOM may leave collectives hanging in their peers; leave at once, and with a failing status
    # where there are peers: the launcher then ends them (launch.py sigkill_handler) instead of their waiting in
    # a collective until the harness's timeout (Llama 3.2 3B ZeRO-1 on 4 GPUs, 2026-11-26: one rank out of
    # memory, three waiting 140 s).
    sys.stdout.flush()
    os._exit(1 if record["status"] != "ok" and int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0)


def random_batch(case: dict, generator, device) -> dict:
    """Returns one micro-batch of random token ids for the case's task (seq-cls: class labels and a full mask)."""
    import torch

    micro, seq = case["micro_batch_size"], case["seq_len"]
    ids = torch.randint(0, case["model_config"]["vocab_size"], (micro, seq), generator=generator).to(device)
    if case.get("task") == "seq-cls":
        labels = torch.randint(0, case["num_labels"], (micro,), generator=generator).to(device)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    return {"input_ids": ids, "labels": ids}


def profile_steps(engine, case: dict, generator, steps: int) -> dict:
    """Returns `steps` more steps (after the timed ones) under torch.profiler: their wall seconds and each step's
    device seconds by kernel kind (recompute_profile.kind_of: GEMMs, attention, NCCL's collectives, the fused
    optimizer, the memory-bound rest), the step's parts as the GPU ran them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.recompute_profile import kernel_seconds

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            engine.backward(engine(**random_batch(case, generator, engine.device)).loss)
            engine.step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / steps
    by_kind, top = kernel_seconds(prof, steps)
    result = {"steps": steps, "wall_s": wall, "kernel_s": by_kind, "top_kernels": top}
    if case.get("idle_trace"):
        # where the GPU idles, and what the host was doing (idle_profile.py): without, then with Python stacks
        from benchmarks.idle_profile import profile_idle

        batches = iter(lambda: random_batch(case, generator, engine.device), None)
        result["idle"] = [profile_idle(engine, batches, steps, with_stack) for with_stack in (False, True)]
    return result


def planned_attention(config: dict, model: str | None = None) -> str | None:
    """Returns "eager" where zero-plan's plans run eager attention (zero-run trains what the plan records), else None:
    the builder then takes SDPA where this transformers accepts it. Gemma 2: SDPA has no soft-cap, and transformers
    5.17 took SDPA for it anyway, dropping its attention soft-capping, where the plans (and 5.24) run eager."""
    from zero_planner.models.spec import spec_from_config

    return "eager" if spec_from_config(config, model).attn_implementation == "eager" else None


def random_base(config: dict, precision: str, task: str, attn: str, device: str) -> str:
    """Returns a folder holding a randomly initialised base for QLoRA to quantise while loading, written once
    per machine and reused by every case of the same model (zero-run writes its own per run instead).

    Initialised on the GPU: under the launcher (OMP_NUM_THREADS=1) a 3B model's CPU init outlasted the case
    timeout. Its memory is returned before any peak counter is read."""
    import fcntl
    import hashlib

    import torch

    from zero_planner.run.modeling import build_model, save_random_base

    key = hashlib.sha256(json.dumps([config, precision, task, attn], sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"zp-random-base-{key}"
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "complete").exists():
            model, _ = build_model(config, precision=precision, device=device, attn_implementation=attn, task=task)
            save_random_base(model, folder)
            (folder / "complete").touch()
            del model
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return str(folder)


def case_model(case: dict, ds_config: dict, device: str, local_rank: int):
    """Returns (model, attn) through modeling.build_training_model, the builder zero-run trains with: the base
    (4-bit NF4 for qlora, from a random base cached per machine; seq-cls head for seq-cls) wrapped in peft
    all-linear adapters for lora/qlora, in training mode."""
    import torch

    from zero_planner.run.modeling import attn_implementation_for, build_training_model

    method, task = case.get("method", "full"), case.get("task", "causal-lm")
    precision = case["precision"]
    if case.get("engine") == "fsdp2":
        if method != "full":
            raise ValueError(f"fsdp2 cases measure full fine-tuning only so far, not {method}")
        precision = "fp32"  # the master shards; MixedPrecisionPolicy gathers them in the case's precision
    num_labels = case.get("num_labels") if task == "seq-cls" else None
    weights = None
    attn = case.get("attn_implementation") or planned_attention(case["model_config"], case.get("model"))
    if method == "qlora":
        config = dict(case["model_config"], **({"num_labels": num_labels} if num_labels is not None else {}))
        attn = attn or attn_implementation_for(config, task)
        weights = random_base(config, case["precision"], task, attn, device)
        if torch.cuda.is_available():
            # Building the base (once per machine) is not part of the case: its peak must not be in after_init.
            torch.cuda.reset_peak_memory_stats()
    lora = None
    if method in ("lora", "qlora"):
        lora = {"r": case["lora_r"], "alpha": case["lora_alpha"], "dropout": case["lora_dropout"],
                "target_modules": "all-linear"}  # fmt: skip
    return build_training_model(case["model_config"], method=method, task=task, precision=precision,
                                ds_config=ds_config, device=device, local_rank=local_rank, attn_implementation=attn,
                                gradient_checkpointing=case["gradient_checkpointing"], num_labels=num_labels,
                                weights_path=weights, lora=lora, lora_seed=0)  # fmt: skip


if __name__ == "__main__":
    main()

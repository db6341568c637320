"""What holds GPU memory in each phase of a run: PyTorch's allocation trace, replayed (one rank, on a GPU).

For the phases whose peaks the memory model reads off DeepSpeed's and transformers' code (loading,
deepspeed.initialize, a checkpoint save, the final export), records every allocation the phase makes with
torch.cuda.memory._record_memory_history, replays the trace to find the phase's peak, and writes which of the
phase's own allocations were alive at that peak, and every large one it made, each with the Python frames that
made it. A term the model misses shows up as a named tensor and a line of code, not a residual.

    deepspeed --num_gpus 1 benchmarks/phase_census.py --case CASE.json --out census.json
A case: {"model_config": {...}, "deepspeed_config": {...}, "method": "full"|"lora"|"qlora", "precision": ...,
         "micro_batch_size": N, "seq_len": N, "gradient_checkpointing": bool, "name": "..."}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LARGE_BYTES = 32 * 2**20  # allocations listed whole: at least this big
KEEP_FRAMES = ("deepspeed", "transformers", "zero_planner", "peft", "bitsandbytes", "safetensors", "benchmarks")


def frames_text(frames: list[dict]) -> list[str]:
    """Returns the Python frames of an allocation that belong to the libraries in KEEP_FRAMES, innermost first."""
    out = []
    for frame in frames:
        name = frame.get("filename", "")
        if any(f"/{key}/" in name for key in KEEP_FRAMES):
            short = name.split("site-packages/")[-1]
            out.append(f"{short}:{frame.get('line')} {frame.get('name')}")
    return out[:6]


def replay(trace: list[dict]) -> dict:
    """Returns the phase's own peak (bytes above what was allocated when it began), the allocations alive at it,
    and every allocation of at least LARGE_BYTES, from one device's trace."""
    live: dict[int, dict] = {}
    current = peak = 0
    at_peak: list[dict] = []
    large = []
    for event in trace:
        action, addr, size = event.get("action"), event.get("addr"), event.get("size", 0)
        if action == "alloc":
            entry = {"size": size, "frames": frames_text(event.get("frames", []))}
            live[addr] = entry
            current += size
            if size >= LARGE_BYTES:
                large.append(entry | {"freed": False, "addr": addr})
            if current > peak:
                peak = current
                at_peak = [dict(e) for e in live.values() if e["size"] >= 2**20]
        elif action == "free_completed" and addr in live:
            current -= live.pop(addr)["size"]
            for entry in large:
                if entry["addr"] == addr and not entry["freed"]:
                    entry["freed"] = True
    at_peak.sort(key=lambda e: -e["size"])
    return {"phase_peak_above_start_bytes": peak, "alive_at_peak": at_peak[:15],
            "large_allocations": [{k: v for k, v in e.items() if k != "addr"} for e in large][:40]}


class Census:
    def __init__(self):
        import torch

        self.torch = torch
        self.results: dict[str, dict] = {}

    def start(self) -> None:
        torch = self.torch
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(enabled=None)
        torch.cuda.memory._record_memory_history(max_entries=500_000, stacks="python")
        self.allocated_at_start = torch.cuda.memory_allocated()

    def stop(self, phase: str) -> None:
        torch = self.torch
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        trace = snapshot["device_traces"][torch.cuda.current_device()]
        result = replay(trace)
        result["allocated_at_start_bytes"] = self.allocated_at_start
        result["phase_peak_bytes"] = self.allocated_at_start + result["phase_peak_above_start_bytes"]
        self.results[phase] = result
        print(f"census {phase}: peak {result['phase_peak_bytes'] / 2**30:.3f} GiB "
              f"(start {self.allocated_at_start / 2**30:.3f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--case", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    case = json.loads(Path(args.case).read_text())

    import deepspeed
    import torch

    from zero_planner.run.modeling import build_training_model

    deepspeed.init_distributed()
    torch.cuda.set_device(0)
    census = Census()
    ds_config = case["deepspeed_config"]
    method = case.get("method", "full")
    lora = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"} if method != "full" else None
    scratch = tempfile.mkdtemp(prefix="zp-census-")
    census.start()
    model, _ = build_training_model(case["model_config"], method=method, task="causal-lm",
                                    precision=case["precision"], ds_config=ds_config, device="cuda:0",
                                    gradient_checkpointing=case["gradient_checkpointing"], lora=lora,
                                    scratch_dir=scratch)  # fmt: skip
    census.stop("load")
    census.start()
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
                                      config=ds_config)  # fmt: skip
    census.stop("initialize")
    vocab = case["model_config"]["vocab_size"]
    ids = torch.randint(0, vocab, (case["micro_batch_size"], case["seq_len"]), device="cuda:0")
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    del loss
    torch.cuda.empty_cache()
    work = Path(scratch)
    census.start()
    engine.save_checkpoint(str(work / "ckpt"), tag="step1", exclude_frozen_parameters=method != "full")
    census.stop("save")
    if method == "full":
        from zero_planner.run.tokenizer import ByteTokenizer
        from zero_planner.run.train import _write_hf_folder

        census.start()
        stage = ds_config.get("zero_optimization", {}).get("stage", 0)
        state = engine._zero3_consolidated_16bit_state_dict() if stage == 3 else engine.module.state_dict()
        _write_hf_folder(engine.module, state, work / "final", ByteTokenizer(vocab), step=0)
        census.stop("export")
    Path(args.out).write_text(json.dumps({"case": case.get("name"), "phases": census.results}, indent=1))
    from zero_planner.run.train import release_shm_buffer

    release_shm_buffer()
    os._exit(0)


if __name__ == "__main__":
    main()

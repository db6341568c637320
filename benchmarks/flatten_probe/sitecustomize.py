"""GPU diagnosis of ZeRO-1/2's weight flattening (issue 58), loaded into every rank through PYTHONPATH.

On a rank (LOCAL_RANK set) with FLATTEN_PROBE_OUT set: records CUDA allocations with their Python stacks; when
DeepSpeedZeroOptimizer is constructed, logs each available_memory() answer DeepSpeed reads (the flatten branch turns
on it) and the allocated/reserved bytes before and after; FLATTEN_PROBE_FORCE=host answers 0 there (the host
branch, forced); on a CUDA out-of-memory, writes the live allocations grouped by the first frame in deepspeed,
transformers, peft or zero_planner to FLATTEN_PROBE_OUT/oom-rankN.txt. Nothing here is used by zero-run itself.
"""

import os
import sys

OUT = os.environ.get("FLATTEN_PROBE_OUT")
if OUT and "LOCAL_RANK" in os.environ:
    import importlib.abc
    import importlib.util
    import json
    import time

    RANK = os.environ["LOCAL_RANK"]
    LOG = os.path.join(OUT, f"flatten-rank{RANK}.jsonl")

    def _log(**row):
        with open(LOG, "a") as f:
            f.write(json.dumps({"t": time.time(), **row}) + "\n")

    def _mem():
        import torch

        return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                "max_allocated": torch.cuda.max_memory_allocated()}

    def _oom_observer(device, alloc, device_alloc, device_free):
        import torch
        from collections import Counter

        snap = torch.cuda.memory._snapshot()
        by_site = Counter()
        for seg in snap["segments"]:
            for block in seg["blocks"]:
                if block["state"] != "active_allocated":
                    continue
                frames = block.get("frames") or []
                site = next((f"{fr['filename'].split('site-packages/')[-1]}:{fr['line']} {fr['name']}" for fr in frames
                             if any(k in fr["filename"] for k in ("deepspeed", "transformers", "peft", "zero_planner"))),
                            "?")
                by_site[site] += block["size"]
        with open(os.path.join(OUT, f"oom-rank{RANK}.txt"), "w") as f:
            f.write(f"OOM asking {alloc} bytes; device_alloc {device_alloc} device_free {device_free}; {_mem()}\n")
            for site, size in by_site.most_common(40):
                f.write(f"{size / 2**30:9.3f} GiB  {site}\n")

    def _patch_stage12(module):
        cls = module.DeepSpeedZeroOptimizer
        original = cls.__init__

        def init(self, *args, **kwargs):
            from deepspeed.accelerator import get_accelerator

            acc = get_accelerator()
            real = acc.available_memory

            def available_memory(device_index=None):
                value = real(device_index)
                answer = 0 if os.environ.get("FLATTEN_PROBE_FORCE") == "host" else value
                _log(event="available_memory", value=value, answer=answer, **_mem())
                return answer

            acc.available_memory = available_memory
            _log(event="zero_optimizer_init_start", **_mem())
            try:
                original(self, *args, **kwargs)
            finally:
                acc.available_memory = real
                _log(event="zero_optimizer_init_end", **_mem())

        cls.__init__ = init

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "deepspeed.runtime.zero.stage_1_and_2":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            sys.meta_path.insert(0, self)
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                _patch_stage12(module)

            loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _Finder())
    import torch

    torch.cuda.memory._record_memory_history(max_entries=200000)
    torch._C._cuda_attach_out_of_memory_observer(_oom_observer)

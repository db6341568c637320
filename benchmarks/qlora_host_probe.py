#!/usr/bin/env python3
"""Host RSS of each step of QLoRA's base load (issue 58), one case per fresh process.

Runs the steps of zero_planner.run.modeling.build_qlora_base by hand (--mode steps), or the real
build_training_model -> build_qlora_base -> apply_lora path with its sub-steps labelled (--mode e2e), for a
random-init base (`--init random`): the bf16 model built on the CPU, written as safetensors, then loaded in
4-bit NF4 by from_pretrained with device_map {"": 0}, prepared for k-bit training, wrapped in LoRA adapters.

After each step one JSON line: current RSS (VmRSS) and its split (RssAnon, RssFile, RssShmem), the step's peak
(VmHWM, reset between steps by writing 5 to /proc/self/clear_refs where the kernel allows it, and the peak seen
by a sampler thread every 50 ms, which also snapshots the largest mappings at the step's sampled peak), glibc's
mallinfo2 and arena count, torch.cuda's allocated/peak, versions. Usage (on a GPU; on CPU it uses device_map cpu):

    python benchmarks/qlora_host_probe.py --case llama1b --model-config benchmarks/model_configs/llama3.2-1b.json \
        --out results.jsonl
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import json
import os
import platform
import socket
import sys
import tempfile
import threading
import time

T0 = time.time()
STATUS_KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSwap", "VmSize", "Threads")


def proc_status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in STATUS_KEYS:
                n = int(value.split()[0])
                out[key] = n if key == "Threads" else n * 1024
    return out


def reset_hwm() -> bool:
    """Resets VmHWM to the current RSS; True when the kernel took it (VmHWM then within 64 MiB of VmRSS)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    s = proc_status()
    return s["VmHWM"] - s["VmRSS"] < 64 * 2**20


def top_mappings(n: int = 8) -> dict[str, list]:
    """The largest resident mappings (/proc/self/smaps): by file name (summed), and the largest anonymous ones."""
    named: dict[str, int] = {}
    anon: list[tuple[int, int, str]] = []
    try:
        with open("/proc/self/smaps") as f:
            name, size, start = "", 0, ""
            for line in f:
                first = line.split(None, 1)[0]
                if "-" in first and not first.endswith(":"):
                    fields = line.split()
                    start_s, end_s = fields[0].split("-")
                    size = int(end_s, 16) - int(start_s, 16)
                    start = start_s
                    name = fields[5] if len(fields) > 5 else "[anon]"
                elif first == "Rss:":
                    rss = int(line.split()[1]) * 1024
                    if name in ("[anon]", "[heap]"):
                        anon.append((rss, size, f"{name}@{start}"))
                    named[name] = named.get(name, 0) + rss
    except OSError:
        return {}
    by_name = sorted(named.items(), key=lambda kv: -kv[1])[:n]
    anon.sort(reverse=True)
    big_anon = [a for a in anon if a[0] >= 32 * 2**20]
    return {
        "by_name": [[k, v] for k, v in by_name],
        "largest_anon": [[rss, size, where] for rss, size, where in anon[:n]],
        "anon_maps_over_32MiB": [len(big_anon), sum(a[0] for a in big_anon)],
        "anon_maps": [len(anon), sum(a[0] for a in anon)],
    }


class MallInfo2(ctypes.Structure):
    _fields_ = [(k, ctypes.c_size_t) for k in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


try:
    LIBC = ctypes.CDLL("libc.so.6")
except OSError:
    LIBC = None


def malloc_stats() -> dict:
    """glibc's view: arena = bytes in sbrk/mmap'd heaps of all arenas, hblkhd = bytes in mmap'd chunks,
    uordblks = allocated in arenas, fordblks = free in arenas (held, not returned to the kernel); heaps = number
    of arenas from malloc_info."""
    if LIBC is None:
        return {}
    out = {}
    try:
        LIBC.mallinfo2.restype = MallInfo2
        m = LIBC.mallinfo2()
        out = {k: int(getattr(m, k)) for k in ("arena", "hblks", "hblkhd", "uordblks", "fordblks", "keepcost")}
    except AttributeError:
        pass
    try:
        path = tempfile.mktemp(prefix="malloc_info")
        LIBC.fopen.restype = ctypes.c_void_p
        LIBC.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        LIBC.fclose.argtypes = [ctypes.c_void_p]
        LIBC.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        fp = LIBC.fopen(path.encode(), b"w")
        LIBC.malloc_info(0, fp)
        LIBC.fclose(fp)
        with open(path) as f:
            xml = f.read()
        os.unlink(path)
        out["heaps"] = xml.count("<heap nr=")
    except (AttributeError, OSError):
        pass
    return out


class Sampler(threading.Thread):
    """Samples VmRSS/RssAnon/RssFile every `period` s; per step: the peaks, and the mappings at the peak."""

    def __init__(self, period: float = 0.05):
        super().__init__(daemon=True)
        self.period = period
        self.lock = threading.Lock()
        self.step = "start"
        self.peak = {}
        self.peak_maps = None
        self.last_maps_t = 0.0
        self.maps_rss = 0
        self.error = None
        self.timeline = []  # (t, step, rss, anon, file), every 5th sample
        self.samples = 0
        self._halt = threading.Event()

    def begin(self, step: str) -> None:
        with self.lock:
            self.step = step
            self.peak = {}
            self.peak_maps = None
            self.maps_rss = 0

    def take(self) -> tuple[dict, dict | None]:
        with self.lock:
            return dict(self.peak), self.peak_maps

    def run(self) -> None:
        try:
            self._run()
        except Exception as error:  # recorded in the summary rather than lost with the thread
            self.error = repr(error)

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                s = proc_status()
            except OSError:
                break
            now = time.time() - T0
            with self.lock:
                self.samples += 1
                if s["VmRSS"] > self.peak.get("rss", -1):
                    self.peak.update(rss=s["VmRSS"], anon_at_rss_peak=s["RssAnon"], file_at_rss_peak=s["RssFile"],
                                     t_s=round(now, 2))  # fmt: skip
                self.peak["anon"] = max(self.peak.get("anon", 0), s["RssAnon"])
                self.peak["file"] = max(self.peak.get("file", 0), s["RssFile"])
                self.peak["threads"] = max(self.peak.get("threads", 0), s["Threads"])
                want_maps = s["VmRSS"] > self.maps_rss * 1.05 + 128 * 2**20 and now - self.last_maps_t > 1.0
                if self.samples % 5 == 0:
                    self.timeline.append([round(now, 2), self.step, s["VmRSS"], s["RssAnon"], s["RssFile"]])
            if want_maps:
                maps = top_mappings()
                with self.lock:
                    self.peak_maps = {"rss": s["VmRSS"], "t_s": round(now, 2), **maps}
                    self.maps_rss = s["VmRSS"]
                    self.last_maps_t = time.time() - T0
            self._halt.wait(self.period)

    def stop(self) -> None:
        self._halt.set()


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version(), "glibc": "-".join(platform.libc_ver()), "kernel": platform.release(),
           "host": socket.gethostname(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}  # fmt: skip
    for name in ("torch", "transformers", "peft", "bitsandbytes", "accelerate", "safetensors", "huggingface_hub"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__version__", None):
            out[name] = mod.__version__
            out[name + "_path"] = os.path.dirname(getattr(mod, "__file__", "") or "")
        else:
            try:
                out[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                out[name] = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda"] = torch.version.cuda
        try:
            out["gpu_mem_bytes"] = torch.cuda.get_device_properties(0).total_memory
        except RuntimeError:
            pass
    try:
        with open("/proc/meminfo") as f:
            out["mem_total_bytes"] = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    env = {k: os.environ.get(k) for k in ("MALLOC_ARENA_MAX", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
                                          "CUDA_MODULE_LOADING", "HF_DEACTIVATE_ASYNC_LOAD", "PYTHONPATH")}  # fmt: skip
    out["env"] = {k: v for k, v in env.items() if v is not None}
    return out


class Recorder:
    def __init__(self, args):
        self.args = args
        self.sampler = Sampler(args.sample_period)
        self.sampler.start()
        self.step_t = time.time()
        self.hwm_ok = reset_hwm()
        self.lines = []
        self.extra: dict = {}
        self.open = False

    def begin(self, step: str) -> None:
        if self.open:
            self.end()  # a step left open (e2e labels) ends where the next begins
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()
        self.hwm_ok = reset_hwm()
        self.sampler.begin(step)
        self.step_t = time.time()
        self.current = step
        self.open = True
        print(f"[{time.time() - T0:7.1f}s] {self.args.case}: {step} ...", flush=True)

    def end(self, **extra) -> dict:
        self.open = False
        s = proc_status()
        peak, peak_maps = self.sampler.take()
        torch = sys.modules.get("torch")
        cuda = {}
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            cuda = {"cuda_allocated": torch.cuda.memory_allocated(), "cuda_max_allocated": torch.cuda.max_memory_allocated(),
                    "cuda_reserved": torch.cuda.memory_reserved()}  # fmt: skip
        rec = {
            "kind": "step", "case": self.args.case, "mode": self.args.mode, "step": self.current,
            "t_s": round(time.time() - T0, 2), "dt_s": round(time.time() - self.step_t, 2),
            "rss": s["VmRSS"], "hwm": s["VmHWM"], "hwm_reset_ok": self.hwm_ok,
            "anon": s["RssAnon"], "file": s["RssFile"], "shmem": s["RssShmem"], "threads": s["Threads"],
            "vm_size": s["VmSize"], "sampled_peak": peak, **cuda, "malloc": malloc_stats(),
            "maps_now": top_mappings(), "maps_at_sampled_peak": peak_maps, **self.extra, **extra,
            "model_config": self.args.model_config, "versions": versions(),
        }  # fmt: skip
        self.lines.append(rec)
        g = 2**30
        print(f"[{rec['t_s']:7.1f}s] {self.args.case}: {self.current:<22} rss {s['VmRSS'] / g:6.2f} GiB  peak "
              f"{s['VmHWM'] / g:6.2f} (sampled {peak.get('rss', 0) / g:6.2f}, reset {self.hwm_ok})  anon "
              f"{s['RssAnon'] / g:6.2f} file {s['RssFile'] / g:6.2f}  cuda max "
              f"{cuda.get('cuda_max_allocated', 0) / g:6.2f}  {rec['dt_s']} s", flush=True)  # fmt: skip
        self.write(rec)
        return rec

    def write(self, rec: dict) -> None:
        if self.args.out:
            with open(self.args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")


def tensor_bytes(model) -> dict:
    by_device: dict[str, int] = {}
    params = 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = t.device.type
        by_device[key] = by_device.get(key, 0) + t.numel() * t.element_size()
    for p in model.parameters():
        params += p.numel()
    return {"tensor_bytes_by_device": by_device, "param_numel": params}


def main() -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True)
    ap.add_argument("--model-config", required=True, help="an HF config JSON (benchmarks/model_configs/...)")
    ap.add_argument("--mode", choices=("steps", "e2e"), default="steps")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--zero-stage", type=int, default=0)
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--scratch", default=tempfile.gettempdir())
    ap.add_argument("--low-cpu-mem-usage", choices=("unset", "true", "false"), default="unset",
                    help="pass low_cpu_mem_usage to from_pretrained (transformers 5 pops and ignores it)")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--sample-period", type=float, default=0.05)
    ap.add_argument("--out", default=None, help="append JSON lines here")
    args = ap.parse_args()

    rec = Recorder(args)
    rec.begin("start")
    rec.end()

    rec.begin("import_torch_tf_bnb")
    import torch
    import transformers  # noqa: F401
    import bitsandbytes  # noqa: F401

    rec.end(torch_threads=torch.get_num_threads())

    rec.begin("import_zero_planner")
    from zero_planner.run import modeling

    rec.end()

    on_cuda = torch.cuda.is_available()
    if on_cuda:
        rec.begin("cuda_init")
        torch.cuda.init()
        x = torch.zeros(16, device="cuda")
        torch.cuda.synchronize()
        del x
        rec.end()

        rec.begin("bnb_kernel_init")
        import bitsandbytes.functional as bnbf

        w = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
        q, state = bnbf.quantize_4bit(w, quant_type="nf4", compress_statistics=True)
        torch.cuda.synchronize()
        del w, q, state
        rec.end()

    with open(args.model_config) as f:
        config_dict = json.load(f)
    config_dict = config_dict.get("config", config_dict)  # catalog entries wrap the HF config
    task = "causal-lm"
    ds_config = {"zero_optimization": {"stage": args.zero_stage}}
    gckpt = args.gradient_checkpointing

    if args.mode == "e2e":
        return run_e2e(rec, modeling, torch, config_dict, ds_config, task, args)

    rec.begin("attn_probe_meta")
    attn = modeling.attn_implementation_for(config_dict, task)
    rec.end(attn=attn)

    source = os.path.join(args.scratch, f"qlora-host-probe-{os.getpid()}")
    rec.begin("build_model_cpu_bf16")
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, len(os.sched_getaffinity(0))))
    model, _ = modeling.build_model(config_dict, precision=args.precision, device="cpu", attn_implementation=attn,
                                    task=task)  # fmt: skip
    rec.extra["bf16_model"] = tensor_bytes(model)
    rec.end(torch_threads_during=torch.get_num_threads(), torch_threads_before=threads)

    rec.begin("save_random_base")
    modeling.save_random_base(model, source)
    rec.end(file_bytes=os.path.getsize(os.path.join(source, "model.safetensors")))

    rec.begin("del_model_gc")
    del model
    gc.collect()
    torch.set_num_threads(threads)
    rec.end()

    rec.begin("from_pretrained_4bit")
    kwargs = {}
    if args.low_cpu_mem_usage != "unset":
        kwargs["low_cpu_mem_usage"] = args.low_cpu_mem_usage == "true"
    model = modeling._auto_class(task).from_pretrained(
        source,
        dtype=getattr(torch, modeling.TORCH_DTYPES[args.precision]),
        attn_implementation=attn,
        quantization_config=modeling.bnb_4bit_config(args.precision, args.zero_stage),
        device_map={"": 0 if on_cuda else "cpu"},
        **kwargs,
    )
    rec.end(**tensor_bytes(model))

    rec.begin("gc_after_load")
    gc.collect()
    rec.end()

    rec.begin("prepare_for_kbit")
    modeling.prepare_for_kbit_training(model, gradient_checkpointing=gckpt, zero_stage=args.zero_stage)
    if gckpt:
        model.config.use_cache = False
    rec.end()

    rec.begin("apply_lora")
    torch.manual_seed(0)
    model = modeling.apply_lora(model, r=args.lora_r, alpha=2 * args.lora_r, dropout=0.05, target_modules="all-linear",
                                task=task, gradient_checkpointing=gckpt)  # fmt: skip
    model.train()
    rec.end(**tensor_bytes(model))

    finish(rec, source)
    return 0


def finish(rec: Recorder, source: str | None) -> None:
    import shutil

    rec.begin("rmtree_gc")
    if source:
        shutil.rmtree(source, ignore_errors=True)
    gc.collect()
    rec.end()

    rec.begin("malloc_trim")
    trimmed = LIBC.malloc_trim(0) if LIBC is not None else None
    rec.end(malloc_trim_returned=trimmed)

    rec.sampler.stop()
    s = proc_status()
    summary = {"kind": "summary", "case": rec.args.case, "mode": rec.args.mode, "wall_s": round(time.time() - T0, 1),
               "process_hwm_max_of_steps": max(r["hwm"] for r in rec.lines),
               "sampled_peak_max": max(r["sampled_peak"].get("rss", 0) for r in rec.lines),
               "peak_step": max(rec.lines, key=lambda r: max(r["hwm"], r["sampled_peak"].get("rss", 0)))["step"],
               "final_rss": s["VmRSS"], "sampler_error": rec.sampler.error, "samples": rec.sampler.samples,
               "timeline": rec.sampler.timeline, "versions": versions()}  # fmt: skip
    rec.write(summary)
    g = 2**30
    print(f"{rec.args.case}: peak {summary['process_hwm_max_of_steps'] / g:.2f} GiB (sampled "
          f"{summary['sampled_peak_max'] / g:.2f}) in {summary['peak_step']}; {summary['wall_s']} s", flush=True)


def run_e2e(rec: Recorder, modeling, torch, config_dict, ds_config, task, args) -> int:
    """modeling.build_training_model (zero-run's path: attn probe, build_qlora_base, apply_lora), each sub-step
    labelled through wrappers of the module's functions (build_qlora_base looks them up at call time)."""

    def labelled(name, fn):
        def wrapper(*a, **k):
            rec.begin(name)
            out = fn(*a, **k)
            rec.end()
            return out

        return wrapper

    class Auto:
        def __init__(self, auto):
            self._auto = auto

        def __getattr__(self, name):
            return getattr(self._auto, name)

        def from_pretrained(self, *a, **k):
            rec.begin("from_pretrained_4bit")
            out = self._auto.from_pretrained(*a, **k)
            rec.end(**tensor_bytes(out))
            return out

    orig_auto_class = modeling._auto_class
    orig_save = modeling.save_random_base

    def save(model, folder):
        rec.extra["bf16_model"] = tensor_bytes(model)
        rec.begin("save_random_base")  # ends build_model_cpu_bf16
        orig_save(model, folder)
        rec.begin("del_model")  # build_qlora_base's `del model`, up to from_pretrained

    orig_build = modeling.build_model

    def build(*a, **k):
        rec.begin("build_model_cpu_bf16")
        return orig_build(*a, **k)

    modeling.build_model = build
    modeling.save_random_base = save
    modeling._auto_class = lambda t: Auto(orig_auto_class(t))
    modeling.prepare_for_kbit_training = labelled("prepare_for_kbit", modeling.prepare_for_kbit_training)
    modeling.apply_lora = labelled("apply_lora", modeling.apply_lora)

    rec.begin("attn_probe_meta")  # build_training_model starts with the meta probe
    model, attn = modeling.build_training_model(
        config_dict, method="qlora", task=task, precision=args.precision, ds_config=ds_config,
        device="cuda:0" if torch.cuda.is_available() else "cpu", local_rank=0, attn_implementation=None,
        gradient_checkpointing=args.gradient_checkpointing, weights_path=None,
        lora={"r": args.lora_r, "alpha": 2 * args.lora_r, "dropout": 0.05, "target_modules": "all-linear"},
        lora_seed=0, scratch_dir=args.scratch,
    )  # fmt: skip
    rec.begin("after_build_training_model")
    rec.end(**tensor_bytes(model), attn=attn)
    finish(rec, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long zero-plan takes, whether it is quiet, and whether its output fits 100 columns.

    python benchmarks/plan_speed.py [--runs 3] [--json OUT.json]
    python benchmarks/plan_speed.py --auto-only [--runs 5] [--json OUT.json]     # on a GPU host

Every case runs `python -m zero_planner ...` in a fresh process (interpreter start, imports, model spec, planning,
table) with COLUMNS=100, and records the wall time, the lines on stderr and the widest line on stdout:
- catalog models and hub ids of the catalog, on several --gpus (multi-node and --method auto included):
  median < CATALOG_TARGET_S;
- a config.json path and a model folder (config.json, a safetensors index and its shards) of a catalog
  architecture (Llama 3.2 1B's config as a user has it), Phi-3 mini's config.json (a catalog architecture of
  another layout), a llama and a mixtral config outside the catalog (llama-tiny, mixtral-8e-tiny: closed-form
  16-bit activations), and one config of each type added to models/analytic.py for issue 58 (NEW_TYPE_FILES:
  Pythia 1.4B, OLMo-2 1B, Qwen3-30B-A3B at 4 layers, OLMoE 1B-7B, on NEW_TYPE_GPUS, where each fits: a plan that
  fits nowhere suggests LoRA, whose table is traced): every run with an empty cache, so each is the first plan
  of that config; median < CONFIG_TARGET_S (models/analytic.py: no torch);
- a config.json whose activations models/analytic.py neither borrows nor computes (Gemma 2 2B with three
  added tokens: no catalog twin, no closed form for gemma2's eager attention): the first plan counts it from the config and traces
  its activations on the meta device (importing torch and transformers), later ones read the cache
  (~/.cache/zero-planner, here a temporary folder); both are printed, the cached median is gated, the first is
  reported against the target;
- and the planning call alone, in process, for every catalog model on every --gpus of the cases.
Exits 1 on a clear regression only: any stderr line, any line wider than 100 columns, an exit status other than
0/1, or a median above REGRESSION_FACTOR x its target (a torch import on the catalog path costs more than that).

--lora-only times the first LoRA plan (`--method lora`, empty cache) of each NEW_TYPE_FILES config and of
CLOSED_FORM_FILE (llama-tiny) on NEW_TYPE_GPUS: median < LORA_TARGET_S (issue 58: the 16-bit LoRA entry from
models/analytic.py, no torch or peft). --code PATH times
another checkout's zero_planner with this script's cases (before/after comparisons: --code /path/to/main).

--auto-only times `--gpus auto` (AUTO_CASES: a hub id of the catalog, and a config.json path) and the same plans
with the detected GPUs spelled out, median and max of --runs fresh processes each; median < AUTO_TARGET_S. Where
there is no GPU, `--gpus auto` exits 2 with a one-line error: that is reported (exit status and message), not
failed. --json writes every run with its provenance (host, GPUs as nvidia-smi lists them, Python, library
versions, git commit, load average before and after, date).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOG_CASES = [
    ["--model", "meta-llama/Meta-Llama-3-8B", "--gpus", "2xT4"],
    ["--model", "google/gemma-2-9b", "--gpus", "4xRTX4090"],
    ["--model", "meta-llama/Llama-3.2-1B", "--gpus", "2x8xH100"],
    ["--model", "Qwen/Qwen2.5-72B", "--gpus", "8xA100-80GB", "--global-batch", "128"],
    ["--model", "meta-llama/Meta-Llama-3-8B", "--gpus", "2xT4", "--cpu-mem", "29GiB", "--method", "auto"],
]
CONFIG_FILE = "llama3.2-1b.json"
"""A config of a catalog architecture: planned from the config alone (models/analytic.py)."""
OTHER_LAYOUT_FILE = "phi3-mini.json"
"""A config of a catalog architecture of another layout (fused qkv_proj): counted from the config, the catalog's
activations."""
CLOSED_FORM_FILE = "llama-tiny.json"
"""A llama config outside the catalog: counted and its 16-bit SDPA activations from the config (models/analytic.py)."""
CLOSED_FORM_MOE_FILE = "mixtral-8e-tiny.json"
"""A mixtral config outside the catalog: the same, with the mixture-of-experts closed form."""
NEW_TYPE_FILES = ["pythia-1.4b.json", "olmo2-1b.json", "qwen3-30b-a3b-4l.json", "olmoe-1b-7b.json"]
"""gpt_neox, olmo2, qwen3_moe and olmoe configs outside the catalog: counted and their 16-bit SDPA activations from
the config (models/analytic.py)."""
NEW_TYPE_GPUS = ["--gpus", "1xH100"]
"""Where each NEW_TYPE_FILES config's full fine-tune fits (OLMoE's 6.9B parameters do not fit one A100-80GB)."""
TRACED_FILE = "gemma2-2b.json"
TRACED_CHANGE = {"vocab_size": 256003}
"""Gemma 2 2B with three added tokens: no catalog twin and no closed form, activations traced on the meta device
the first time."""
LORA_TARGET_S = 2.0
"""First LoRA plan of a NEW_TYPE_FILES config (issue 58; traced with torch, transformers and peft it took 6.0-6.8 s)."""
CONFIG_GPUS = ["--gpus", "1xA100-80GB"]
AUTO_MODEL = "meta-llama/Llama-3.2-1B"
AUTO_TARGET_S = 2.0
IN_PROCESS_GPUS = ["2xT4", "4xRTX4090", "8xA100-80GB", "2x8xH100"]
CATALOG_TARGET_S = 1.0
CONFIG_TARGET_S = 3.0
REGRESSION_FACTOR = 1.5
"""A median this many times its target fails the run: well above the noise of a shared 2-core machine."""
MAX_COLUMNS = 100


def run_plan(argv: list[str], cache_dir: str, expect_error: bool = False, code: Path = ROOT) -> dict:
    """Returns {argv, seconds, rc, stderr_lines, stderr_first, widest} of one zero-plan process running the
    zero_planner of checkout `code`."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": str(MAX_COLUMNS), "ZERO_PLANNER_CACHE_DIR": cache_dir,
           "PYTHONPATH": str(code) + os.pathsep + os.environ.get("PYTHONPATH", "")}  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "zero_planner", *argv], capture_output=True, text=True, env=env,
                          cwd=code)  # fmt: skip
    seconds = time.perf_counter() - start
    if (done.returncode not in (0, 1) and not expect_error) or "Traceback" in done.stderr:
        print(done.stdout[-2000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
    return {
        "argv": argv,
        "seconds": seconds,
        "rc": done.returncode,
        "stderr_lines": len(done.stderr.splitlines()),
        "stderr_first": (done.stderr.splitlines() or [""])[0][:300],
        "widest": max((len(line) for line in done.stdout.splitlines()), default=0),
    }


def in_process(gpus_specs: list[str]) -> list[tuple[float, str, str]]:
    """Returns (seconds, model, gpus) of planning every catalog model on every --gpus, in this process."""
    sys.path.insert(0, str(ROOT))
    from zero_planner.hardware import parse_gpus
    from zero_planner.models.catalog import list_catalog
    from zero_planner.models.spec import load_model_spec
    from zero_planner.plan.request import PlanRequest
    from zero_planner.plan.search import plan

    times = []
    for name in list_catalog():
        spec = load_model_spec(name)
        for gpus in gpus_specs:
            cluster = parse_gpus(gpus)
            start = time.perf_counter()
            plan(spec, cluster, PlanRequest(seq_len=min(2048, spec.max_position_embeddings)))
            times.append((time.perf_counter() - start, name, gpus))
    return times


def verdict(median: float, target: float) -> str:
    if median < target:
        return "ok"
    return "REGRESSION" if median > REGRESSION_FACTOR * target else "above target (not failed: noise margin)"


def check_median(what: str, median: float, target: float, failures: list[str], extra: str = "") -> None:
    """Prints `median` against `target`; records a failure beyond REGRESSION_FACTOR x target."""
    print(f"  median {median:.3f} s = {median / target:.2f} x target {target:.1f} s{extra}: {verdict(median, target)}")
    if median > REGRESSION_FACTOR * target:
        failures.append(f"{what} median {median:.2f} s")


def provenance(code: Path = ROOT) -> dict:
    """Returns where and how this run was taken: host, GPUs (nvidia-smi), Python, versions, the commit of the timed
    checkout `code`, load, date."""
    def package(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "none"

    gpus = "no nvidia-smi"
    if shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True)  # fmt: skip
        gpus = done.stdout.strip().splitlines() or done.stderr.strip()[:200]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=code)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=code).stdout.strip()  # fmt: skip
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "gpus": gpus,
        "python": platform.python_version(),
        "versions": {name: package(name) for name in ("torch", "transformers", "pydantic", "rich")},
        "commit": (commit.stdout.strip() + ("+uncommitted changes" if dirty else "")) or "unknown",
        "load_average_before": os.getloadavg()[0],
    }


def summary(runs: list[dict]) -> str:
    seconds = [r["seconds"] for r in runs]
    return f"median {statistics.median(seconds):.3f} s, max {max(seconds):.3f} s"


def auto_only(runs: int, tmp: str) -> tuple[list[dict], list[str]]:
    """Returns (every run, failures) of `--gpus auto` plans and the same plans with the GPUs spelled out."""
    config = ROOT / "benchmarks" / "model_configs" / CONFIG_FILE
    every: list[dict] = []
    failures: list[str] = []
    print(f"--gpus auto, end to end ({runs} fresh processes each):")
    auto_runs = []
    for model in (AUTO_MODEL, str(config)):
        case = ["--model", model, "--gpus", "auto"]
        results = [run_plan(case, tmp, expect_error=True) for _ in range(runs)]
        every += results
        auto_runs += results
        rcs = sorted({r["rc"] for r in results})
        print(f"  {summary(results)}  (exit {rcs}, widest {results[0]['widest']})  {' '.join(case)}")
        if rcs == [2]:
            print(f"    no GPU here, as the error says: {results[0]['stderr_first']}")
    detected = [r for r in auto_runs if r["rc"] in (0, 1)]
    if detected:
        median = statistics.median(r["seconds"] for r in detected)
        check_median("--gpus auto", median, AUTO_TARGET_S, failures)
        spelled = _detected_spec()
        if spelled:
            print(f"the same plans with --gpus {spelled} (what auto found), for comparison:")
            for model in (AUTO_MODEL, str(config)):
                case = ["--model", model, "--gpus", spelled]
                results = [run_plan(case, tmp) for _ in range(runs)]
                every += results
                print(f"  {summary(results)}  (exit {results[0]['rc']})  {' '.join(case)}")
    else:
        print("  --gpus auto found no GPU on this host (exit 2 with a one-line error): not timed against the target")
    return every, failures


def _detected_spec() -> str | None:
    """Returns `NxTYPE` for the GPUs `--gpus auto` finds here, or None."""
    sys.path.insert(0, str(ROOT))
    from zero_planner.errors import InputError
    from zero_planner.hardware import parse_gpus

    try:
        cluster = parse_gpus("auto")
    except InputError:
        return None
    return f"{cluster.gpus_per_node}x{cluster.gpu.name}"


def write_folder(folder: Path, config: dict) -> None:
    """Writes a model folder as the hub has it: config.json, a safetensors index and its (here empty) shards."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    index = {"metadata": {"total_size": 0}, "weight_map": {"model.embed_tokens.weight": shards[0],
                                                           "lm_head.weight": shards[1]}}  # fmt: skip
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for shard in shards:  # a valid safetensors file with no tensors: 8-byte header length, then the header
        (folder / shard).write_bytes((8).to_bytes(8, "little") + b"{}      ")


def config_cases(runs: int, tmp: str) -> tuple[list[dict], list[str]]:
    """Returns (every run, failures) of the config.json / folder cases."""
    every: list[dict] = []
    failures: list[str] = []
    config = json.loads((ROOT / "benchmarks" / "model_configs" / CONFIG_FILE).read_text())
    folder = Path(tmp) / "my-model"
    write_folder(folder, config)
    print(f"models outside the catalog by path, end to end ({runs} fresh processes each):")
    medians = []
    other = Path(tmp) / "other.json"
    other.write_text((ROOT / "benchmarks" / "model_configs" / CLOSED_FORM_FILE).read_text())
    layout = Path(tmp) / "layout.json"
    layout.write_text((ROOT / "benchmarks" / "model_configs" / OTHER_LAYOUT_FILE).read_text())
    moe = Path(tmp) / "moe.json"
    moe.write_text((ROOT / "benchmarks" / "model_configs" / CLOSED_FORM_MOE_FILE).read_text())
    cases = [("config.json path", folder / "config.json", f"{CONFIG_FILE}, a catalog architecture"),
             ("model folder", folder, f"{CONFIG_FILE}, a catalog architecture"),
             ("config.json path", layout, f"{OTHER_LAYOUT_FILE}, a catalog architecture"),
             ("config.json path", other, f"{CLOSED_FORM_FILE}, llama outside the catalog"),
             ("config.json path", moe, f"{CLOSED_FORM_MOE_FILE}, mixtral outside the catalog")]  # fmt: skip
    cases = [(*case, CONFIG_GPUS) for case in cases]
    for name in NEW_TYPE_FILES:
        path = Path(tmp) / f"new-{name}"
        path.write_text((ROOT / "benchmarks" / "model_configs" / name).read_text())
        cases.append(("config.json path", path, f"{name} outside the catalog, {NEW_TYPE_GPUS[1]}", NEW_TYPE_GPUS))
    for k, (label, model, what, gpus) in enumerate(cases):
        results = []
        for i in range(runs):  # an empty cache every time: each run is a first plan of this config
            results.append(run_plan(["--model", str(model), *gpus], str(Path(tmp) / f"empty-{k}-{i}")))
        every += results
        medians.append(statistics.median(r["seconds"] for r in results))
        print(f"  {summary(results)}  {label} ({what}, empty cache)")
    median = statistics.median(medians)
    check_median("config", median, CONFIG_TARGET_S, failures)

    traced = Path(tmp) / "traced.json"
    traced.write_text(json.dumps({**json.loads((ROOT / "benchmarks" / "model_configs" / TRACED_FILE).read_text()),
                                  **TRACED_CHANGE}))  # fmt: skip
    cache = str(Path(tmp) / "cache")
    argv = ["--model", str(traced), *CONFIG_GPUS]
    cold = run_plan(argv, cache)
    warm = [run_plan(argv, cache) for _ in range(runs)]
    every += [cold, *warm]
    warm_median = statistics.median(r["seconds"] for r in warm)
    met = "within" if cold["seconds"] < CONFIG_TARGET_S else "over"
    print(f"  {TRACED_FILE} with {TRACED_CHANGE} (no catalog twin, no closed form): first plan "
          f"{cold['seconds']:.2f} s (activations traced on the meta device, torch and transformers imported: {met} "
          f"the {CONFIG_TARGET_S:.0f} s target, not gated), then from the cache {summary(warm)}")  # fmt: skip
    if warm_median > REGRESSION_FACTOR * CONFIG_TARGET_S:
        failures.append(f"cached config median {warm_median:.2f} s")
    return every, failures


def lora_cases(runs: int, tmp: str, code: Path) -> tuple[list[dict], list[str]]:
    """Returns (every run, failures) of the first LoRA plan of each NEW_TYPE_FILES config and of CLOSED_FORM_FILE,
    an empty cache each run."""
    every: list[dict] = []
    failures: list[str] = []
    print(f"first LoRA plans of configs outside the catalog, end to end ({runs} fresh processes each, empty cache):")
    medians = []
    for name in NEW_TYPE_FILES + [CLOSED_FORM_FILE]:
        path = Path(tmp) / f"lora-{name}"
        path.write_text((ROOT / "benchmarks" / "model_configs" / name).read_text())
        argv = ["--model", str(path), *NEW_TYPE_GPUS, "--method", "lora"]
        results = [run_plan(argv, str(Path(tmp) / f"empty-lora-{name}-{i}"), code=code) for i in range(runs)]
        every += results
        medians.append(statistics.median(r["seconds"] for r in results))
        times = ", ".join(f"{r['seconds']:.2f}" for r in results)
        print(f"  {summary(results)}  ({times} s; exit {results[0]['rc']})  {name} {' '.join(argv[2:])}")
    check_median("LoRA config", statistics.median(medians), LORA_TARGET_S, failures)
    return every, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per case (median reported)")
    parser.add_argument("--auto-only", action="store_true", help="time --gpus auto plans only (for a GPU host)")
    parser.add_argument("--lora-only", action="store_true", help="time first LoRA plans of configs outside the catalog")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose zero_planner runs (default: this one)")
    parser.add_argument("--json", type=Path, help="write every run and its provenance to this file")
    args = parser.parse_args(argv)
    failures: list[str] = []
    every: list[dict] = []
    where = provenance(args.code.resolve())

    print(f"machine: {where['machine']}, GPUs: {where['gpus']}, Python {where['python']}, commit {where['commit']}, "
          f"load average {where['load_average_before']:.2f}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="zero-plan-speed-") as tmp:
        if args.lora_only:
            every, failures = lora_cases(args.runs, tmp, args.code.resolve())
        elif args.auto_only:
            every, failures = auto_only(args.runs, tmp)
        else:
            print(f"catalog models and hub ids, end to end ({args.runs} fresh processes each):")
            medians = []
            for case in CATALOG_CASES:
                runs = [run_plan(case, tmp) for _ in range(args.runs)]
                every += runs
                median = statistics.median(r["seconds"] for r in runs)
                medians.append(median)
                print(f"  {median:6.3f} s  (exit {runs[0]['rc']}, widest {runs[0]['widest']})  {' '.join(case)}")
            catalog = statistics.median(medians)
            check_median("catalog", catalog, CATALOG_TARGET_S, failures, extra=f", slowest {max(medians):.3f} s")
            runs, config_failures = config_cases(args.runs, tmp)
            every += runs
            failures += config_failures

    if not (args.auto_only or args.lora_only):
        planning = in_process(IN_PROCESS_GPUS)
        slowest = max(planning)
        print(f"planning call alone, {len(planning)} plans (every catalog model x {', '.join(IN_PROCESS_GPUS)}): "
              f"median {statistics.median(t for t, _, _ in planning) * 1000:.1f} ms, slowest {slowest[0] * 1000:.1f} ms "
              f"({slowest[1]} on {slowest[2]})")  # fmt: skip

    planned = [r for r in every if r["rc"] in (0, 1)]  # exit 2 (no GPU for --gpus auto) prints its error on stderr
    stderr_lines = sum(r["stderr_lines"] for r in planned)
    widest = max((r["widest"] for r in every), default=0)
    bad_exit = [r["rc"] for r in every if r["rc"] not in (0, 1) and "auto" not in r["argv"]]
    print(f"stderr lines over {len(planned)} plans: {stderr_lines} (must be 0)")
    print(f"widest stdout line at COLUMNS={MAX_COLUMNS}: {widest} (must be <= {MAX_COLUMNS})")
    if stderr_lines:
        failures.append(f"{stderr_lines} stderr lines")
    if widest > MAX_COLUMNS:
        failures.append(f"a {widest}-column line")
    if bad_exit:
        failures.append(f"exit statuses {bad_exit}")
    where["load_average_after"] = os.getloadavg()[0]
    print(f"load average after: {where['load_average_after']:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"provenance": where, "failures": failures, "runs": every}, indent=1) + "\n")
        print(f"wrote {args.json}")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

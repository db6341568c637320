"""Validates zero-plan's hand-off exports with each tool's own loader, every tool in a virtualenv of its own.

    python benchmarks/export_tools.py [--tools axolotl,llamafactory,trl] [--venvs DIR] [--out FILE] [--keep DIR]

Axolotl, LLaMA-Factory and TRL pin torch, transformers and each other to versions that conflict with each other
and with zero-planner's, so each gets its own venv (created once under --venvs, default
~/.cache/zero-planner/tool-venvs, reused afterwards): torch (the build this interpreter runs, or --torch), the
tool with --no-deps, and only the packages its config loading imports, at the versions the tool itself pins.
Every case below is planned here with `--export hf-trainer,accelerate,axolotl,llamafactory,trl`, then each
export is read by the tool that would read it:

- axolotl: axolotl.utils.config.validate_config(cfg, capabilities, env_capabilities): the input schema and every
  validator `axolotl train` runs on a YAML (axolotl/cli/config.py load_cfg), with the capabilities of the plan's
  GPUs (bf16, count, compute capability) in place of this machine's. load_cfg's later normalize step, which
  fetches the base model's config from the hub, is not run.
- llamafactory: llamafactory.hparams.get_train_args(yaml), in one process set up as torchrun sets up a rank
  (command.sh launches with FORCE_TORCHRUN=1); with use_cpu where there is no CUDA, since TrainingArguments
  refuses bf16/fp16 without a GPU; then HF's DeepSpeed check (below) on the TrainingArguments it built.
- trl: the SFTConfig(**...) of train_sft.py through trl.SFTConfig, with HF's DeepSpeed integration comparing the
  JSON with it (HfTrainerDeepSpeedConfig.trainer_config_process: the check that raises at Trainer start), its
  LoraConfig through peft, and the whole script compiled.
- hf-trainer, accelerate (in TRL's venv, which holds transformers and accelerate): TrainingArguments of
  training_args.json with the same DeepSpeed check; accelerate's load_config_from_file on the YAML.

One process cannot have the plan's world size, so train_batch_size (micro x accumulation x GPUs) is compared with
the plan's GPU count by hand instead of by HF's check. Any warning or log record at WARNING or above that a
loader emits is listed (deprecated keys, for instance). Prints a table of pass/fail per case x export and writes
the details with every package version to --out (JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("axolotl", "llamafactory", "trl")
EXPORTS = ("axolotl", "llamafactory", "trl", "hf-trainer", "accelerate")
VALIDATED_IN = {"axolotl": "axolotl", "llamafactory": "llamafactory", "trl": "trl", "hf-trainer": "trl",
                "accelerate": "trl"}  # fmt: skip
DEFAULT_VENVS = Path(os.environ.get("ZERO_PLANNER_CACHE_DIR", Path.home() / ".cache" / "zero-planner")) / "tool-venvs"

CASES = {
    "llama3-8b full 8xA100": ["--model", "meta-llama/Meta-Llama-3-8B", "--gpus", "8xA100-80GB", "--global-batch", "64"],
    "llama3-8b qlora 2xT4": ["--model", "meta-llama/Meta-Llama-3-8B", "--gpus", "2xT4", "--cpu-mem", "29GiB",
                             "--method", "qlora"],
    "qwen0.5b lora s3 1xA100": ["--model", "Qwen/Qwen2.5-0.5B", "--gpus", "1xA100-80GB", "--seq-len", "1024",
                                "--method", "lora", "--lora-r", "64", "--stage", "3", "--grad-checkpointing"],
    "gpt2 2-offload 2xT4": ["--model", "gpt2", "--gpus", "2xT4", "--seq-len", "512", "--stage", "2-offload",
                            "--cpu-mem", "64GiB"],
    "llama3-8b 2x8xH100": ["--model", "meta-llama/Meta-Llama-3-8B", "--gpus", "2x8xH100", "--seq-len", "4096"],
    "llama-tiny cpu:2 (demo)": ["--model", str(ROOT / "benchmarks" / "model_configs" / "llama-tiny.json"), "--gpus",
                                "cpu:2", "--cpu-mem", "8GiB", "--seq-len", "128", "--micro-batch", "4",
                                "--global-batch", "16"],
}  # fmt: skip
"""What is planned and exported: full, LoRA and QLoRA; stages 0-3 and offload; bf16, fp16 and fp32; 1, 2, 8 and 16
GPUs (two nodes); a config-only model. Catalog models plan offline."""

COMPUTE_CAPABILITY = {"T4": "sm_75", "P100": "sm_60", "V100": "sm_70", "A10": "sm_86", "L4": "sm_89", "RTX3090": "sm_86",
                      "RTX4090": "sm_89", "A6000": "sm_86", "L40S": "sm_89", "A100": "sm_80", "H100": "sm_90",
                      "H200": "sm_90", "B200": "sm_100"}  # fmt: skip
"""Axolotl's capabilities name the GPU's architecture (torch's major.minor as sm_XY); longest prefix wins."""


@dataclass(frozen=True)
class Recipe:
    """How a tool's venv is built: the tool with --no-deps, then `pinned` at the versions the tool's own metadata
    requires (with their dependencies), `extra` as they come, and `no_deps` without dependencies."""

    package: str
    pinned: tuple[str, ...]
    extra: tuple[str, ...] = ()
    no_deps: tuple[str, ...] = ()
    deepspeed: bool = False
    """DeepSpeed (this interpreter's version, no dependencies, built against the venv's torch): TrainingArguments
    with `deepspeed=` imports it."""
    versions: tuple[str, ...] = field(default_factory=tuple)
    """Packages whose versions are recorded with the results."""


# The import lists were found by importing each tool's config loader in an empty venv until it imported.
RECIPES = {
    "axolotl": Recipe("axolotl", pinned=("transformers", "pydantic", "peft", "accelerate", "PyYAML"),
                      extra=("addict", "pillow"),
                      versions=("axolotl", "torch", "transformers", "pydantic", "peft", "accelerate")),
    "llamafactory": Recipe("llamafactory", pinned=("transformers", "datasets", "peft", "accelerate", "trl",
                                                   "omegaconf", "pyyaml", "pydantic"),
                           deepspeed=True,
                           versions=("llamafactory", "torch", "transformers", "peft", "accelerate", "trl", "deepspeed")),
    "trl": Recipe("trl", pinned=("transformers", "accelerate", "datasets", "pyyaml"), extra=("peft", "pydantic"),
                  deepspeed=True, versions=("trl", "torch", "transformers", "accelerate", "peft", "deepspeed")),
}  # fmt: skip
DEEPSPEED_DEPS = ("hjson", "ninja", "psutil", "py-cpuinfo", "msgpack", "einops")

PINS_SCRIPT = """
import sys
from importlib import metadata
from packaging.requirements import Requirement

tool, names = sys.argv[1], sys.argv[2:]
pins = {}
for text in metadata.requires(tool) or []:
    req = Requirement(text)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        pins[req.name.lower().replace("_", "-")] = str(req)
print("\\n".join(pins.get(n.lower().replace("_", "-"), n) for n in names))
"""

VALIDATOR = r'''
import ast, contextlib, json, logging, os, sys, warnings
from pathlib import Path

tool, cases_file, out_file = sys.argv[1:4]
cases = json.loads(Path(cases_file).read_text())


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.name}: {record.getMessage()}")


def batch_note(case, micro, accum, ds):
    # HF's own check compares train_batch_size with this process's world size (1): done here with the plan's.
    want = micro * accum * case["world_size"]
    if ds.get("train_batch_size") != want:
        raise ValueError(f"train_batch_size {ds.get('train_batch_size')} != micro({micro}) x accum({accum}) x "
                         f"GPUs({case['world_size']})")


def hf_mismatches(args, ds):
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    hf = HfTrainerDeepSpeedConfig(json.loads(json.dumps(ds)))
    hf.trainer_config_process(args)
    wrong = [m for m in hf.mismatches if not m.strip().startswith("- ds train_batch_size=")]  # batch_note's
    if wrong:
        raise ValueError("DeepSpeed JSON disagrees with the arguments: " + "; ".join(w.strip() for w in wrong))


def cpu_only():
    import torch

    return not torch.cuda.is_available()


def validate_axolotl(case):
    import yaml
    from axolotl.utils.config import validate_config
    from axolotl.utils.dict import DictDefault

    cfg = DictDefault(yaml.safe_load(Path(case["files"]["axolotl"]).read_text()))
    import torch

    caps = {"bf16": case["bf16"], "fp8": False, "tf32": case["compute_capability"] is not None,
            "n_gpu": case["world_size"], "compute_capability": case["compute_capability"]}
    env = {"torch_version": torch.__version__.split("+")[0]}
    validate_config(cfg, capabilities=caps, env_capabilities=env)


def validate_llamafactory(case):
    import yaml
    from llamafactory.hparams import get_train_args

    args = yaml.safe_load(Path(case["files"]["llamafactory"]).read_text())
    if cpu_only():
        args["use_cpu"] = True
    _, _, training, _, _ = get_train_args(args)
    ds = json.loads(Path(args["deepspeed"]).read_text())
    hf_mismatches(training, ds)  # get_train_args records them; the Trainer raises them at its start
    batch_note(case, training.per_device_train_batch_size, training.gradient_accumulation_steps, ds)


def _call_kwargs(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
            for kw in node.keywords:
                if kw.arg is None:
                    return ast.literal_eval(kw.value)
    return None


def validate_trl(case):
    import trl

    source = Path(case["files"]["trl"]).read_text()
    tree = ast.parse(source)
    compile(source, "train_sft.py", "exec")
    kwargs = _call_kwargs(tree, "SFTConfig")
    config = trl.SFTConfig(**{**kwargs, "use_cpu": kwargs.get("use_cpu", False) or cpu_only()})
    ds = json.loads(Path(kwargs["deepspeed"]).read_text())
    hf_mismatches(config, ds)
    batch_note(case, config.per_device_train_batch_size, config.gradient_accumulation_steps, ds)
    lora = _call_kwargs(tree, "LoraConfig")
    if lora is not None:
        from peft import LoraConfig

        LoraConfig(**lora)


def validate_hf_trainer(case):
    from transformers import TrainingArguments

    kwargs = json.loads(Path(case["files"]["hf-trainer"]).read_text())
    args = TrainingArguments(**{**kwargs, "use_cpu": kwargs.get("use_cpu", False) or cpu_only()})
    ds = json.loads(Path(kwargs["deepspeed"]).read_text())
    hf_mismatches(args, ds)
    batch_note(case, args.per_device_train_batch_size, args.gradient_accumulation_steps, ds)


def validate_accelerate(case):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(case["files"]["accelerate"])
    if config.num_processes != case["world_size"]:
        raise ValueError(f"num_processes {config.num_processes} != the plan's {case['world_size']} GPUs")
    json.loads(Path(config.deepspeed_config["deepspeed_config_file"]).read_text())


VALIDATORS = {"axolotl": validate_axolotl, "llamafactory": validate_llamafactory, "trl": validate_trl,
              "hf-trainer": validate_hf_trainer, "accelerate": validate_accelerate}
exports = [e for e, venv in json.loads(sys.argv[4]).items() if venv == tool]
results = {}
for case in cases:
    for export in exports:
        handler = Collect()
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.WARNING)
        env = {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29600 + len(results))}
        saved = {k: os.environ.get(k) for k in env}
        if export == "llamafactory":
            os.environ.update(env)  # a rank as torchrun starts it (command.sh: FORCE_TORCHRUN=1)
        error = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    VALIDATORS[export](case)
            except BaseException as exc:  # the tools raise ValueError, pydantic errors, SystemExit
                error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        logging.getLogger().removeHandler(handler)
        notes = [f"{w.category.__name__}: {w.message}" for w in caught
                 if not issubclass(w.category, ResourceWarning)]
        notes = list(dict.fromkeys(" ".join(n.split())[:300] for n in handler.messages + notes))
        results[f"{case['id']}|{export}"] = {"ok": error is None, "error": error, "warnings": notes}
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass
        try:
            from accelerate.state import AcceleratorState, PartialState

            AcceleratorState._reset_state(True)
            PartialState._reset_state()
        except Exception:
            pass
Path(out_file).write_text(json.dumps(results))
'''


def _run(argv: list[str], log, **kw) -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} ... failed (exit {done.returncode}); see {log.name}")


def ensure_venv(tool: str, venvs: Path, torch_spec: str, log) -> Path:
    """Returns the python of `tool`'s venv, building it first when it is missing (marked complete by a file)."""
    recipe = RECIPES[tool]
    venv = venvs / tool
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    print(f"building {venv} (pip output: {log.name})", flush=True)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], log)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    _run([*pip, torch_spec, "packaging", "wheel", "setuptools"], log)
    _run([*pip, "--no-deps", recipe.package], log)
    pins = subprocess.run([str(python), "-c", PINS_SCRIPT, recipe.package, *recipe.pinned], capture_output=True,
                          text=True, check=True).stdout.split("\n")  # fmt: skip
    # torch named again so that the resolver keeps the build just installed rather than fetching another.
    _run([*pip, torch_spec, *[p for p in pins if p], *recipe.extra], log)
    if recipe.no_deps:
        _run([*pip, "--no-deps", *recipe.no_deps], log)
    if recipe.deepspeed:
        # DeepSpeed's setup.py imports torch: built against the venv's own, not in an isolated build env.
        _run([*pip, *DEEPSPEED_DEPS], log)
        _run([*pip, "--no-deps", "--no-build-isolation", f"deepspeed=={metadata.version('deepspeed')}"], log)
    (venv / ".complete").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    return python


def venv_versions(python: Path, names: tuple[str, ...]) -> dict[str, str]:
    code = ("import json, sys\nfrom importlib import metadata\nout = {}\nfor n in sys.argv[1:]:\n    try:\n"
            "        out[n] = metadata.version(n)\n    except metadata.PackageNotFoundError:\n        out[n] = None\n"
            "print(json.dumps(out))")  # fmt: skip
    return json.loads(subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True,
                                     check=True).stdout)  # fmt: skip


def plan_cases(workdir: Path) -> list[dict]:
    """Plans every case with all five exports; returns one record per case: its files and hardware facts."""
    sys.path.insert(0, str(ROOT))
    from zero_planner.cli import main
    from zero_planner.hardware import parse_gpus
    from zero_planner.planfile import load_plan

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cases = []
    for n, (case_id, argv) in enumerate(CASES.items()):
        plan_path = workdir / f"case{n}" / "plan.json"
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main([*argv, "-o", str(plan_path), "--export", ",".join(EXPORTS)])
        if rc != 0:
            raise RuntimeError(f"zero-plan {' '.join(argv)} exited {rc}")
        plan = load_plan(plan_path)
        gpu = parse_gpus(argv[argv.index("--gpus") + 1], "64GiB").gpu
        arch = next((cc for prefix, cc in sorted(COMPUTE_CAPABILITY.items(), key=lambda kv: -len(kv[0]))
                     if plan.hardware.gpu.upper().startswith(prefix.upper())), None)  # fmt: skip
        files = {"axolotl": "plan.axolotl/axolotl.yml", "llamafactory": "plan.llamafactory/llamafactory.yaml",
                 "trl": "plan.trl/train_sft.py", "hf-trainer": "plan.hf-trainer/training_args.json",
                 "accelerate": "plan.accelerate/accelerate_config.yaml"}  # fmt: skip
        cases.append({"id": case_id, "argv": argv, "world_size": plan.hardware.world_size,
                      "bf16": bool(gpu.bf16) and plan.hardware.gpu != "cpu", "compute_capability": arch,
                      "files": {k: str(plan_path.parent / v) for k, v in files.items()}})  # fmt: skip
    return cases


def table(cases: list[dict], results: dict, exports: list[str]) -> str:
    """Returns the pass/fail table (within 100 columns) and the lines that explain each failure and warning."""
    width = max(len(c["id"]) for c in cases)
    lines = [f"{'case':<{width}}  " + "  ".join(f"{e:<13}" for e in exports)]
    details = []
    for case in cases:
        cells = []
        for export in exports:
            r = results.get(f"{case['id']}|{export}")
            if r is None:
                cells.append("-")
                continue
            cell = "pass" if r["ok"] else "FAIL"
            if r["warnings"]:
                cell += f" ({len(r['warnings'])} warn)"
            cells.append(cell)
            for text in ([r["error"]] if r["error"] else []) + r["warnings"]:
                details.append(f"{case['id']} / {export}: {text}")
        lines.append(f"{case['id']:<{width}}  " + "  ".join(f"{c:<13}" for c in cells))
    out = "\n".join(line.rstrip() for line in lines)
    if details:
        out += "\n\n" + "\n".join(textwrap.fill(d, 100, subsequent_indent="    ") for d in dict.fromkeys(details))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma list of {', '.join(TOOLS)}")
    parser.add_argument("--venvs", type=Path, default=DEFAULT_VENVS, help=f"where the venvs live (default {DEFAULT_VENVS})")
    parser.add_argument("--torch", default=f"torch=={metadata.version('torch')}",
                        help="pip requirement for torch in each venv (default: this interpreter's build)")
    parser.add_argument("--out", type=Path, default=None, help="JSON results (default benchmarks/results/"
                        "export-tools-DATE.json)")  # fmt: skip
    parser.add_argument("--keep", type=Path, default=None, help="plan and export here instead of a temporary folder")
    args = parser.parse_args(argv)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        parser.error(f"--tools {','.join(unknown)}: not one of {', '.join(TOOLS)}")
    exports = [e for e in EXPORTS if VALIDATED_IN[e] in tools]
    args.venvs.mkdir(parents=True, exist_ok=True)
    date = datetime.now(timezone.utc).date().isoformat()
    out = args.out or ROOT / "benchmarks" / "results" / f"export-tools-{date}.json"
    with contextlib.ExitStack() as stack:
        workdir = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="export-tools-")))
        workdir.mkdir(parents=True, exist_ok=True)
        cases = plan_cases(workdir)
        (workdir / "cases.json").write_text(json.dumps(cases, indent=2))
        (workdir / "validate.py").write_text(VALIDATOR)
        results, versions = {}, {}
        for tool in tools:
            with open(args.venvs / f"{tool}.pip.log", "a") as log:
                python = ensure_venv(tool, args.venvs, args.torch, log)
            versions[tool] = venv_versions(python, RECIPES[tool].versions)
            answer = workdir / f"{tool}.results.json"
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
            env.pop("PYTHONPATH", None)  # the tool's venv alone: no zero-planner, no other packages
            done = subprocess.run([str(python), str(workdir / "validate.py"), tool, str(workdir / "cases.json"),
                                   str(answer), json.dumps(VALIDATED_IN)], env=env, capture_output=True, text=True,
                                  cwd=workdir)  # fmt: skip
            if done.returncode != 0 or not answer.exists():
                print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                raise RuntimeError(f"the {tool} validator failed (exit {done.returncode})")
            results.update(json.loads(answer.read_text()))
    text = table(cases, results, exports)
    print(text)
    record = {"date": date, "machine": f"{platform.machine()}, {os.cpu_count()} cores, no GPU" if not _cuda() else
              f"{platform.machine()}, {os.cpu_count()} cores",
              "python": platform.python_version(), "zero_planner_git": _git_head(), "venv_versions": versions,
              "validated_in": VALIDATED_IN,
              "cases": [{"id": c["id"], "argv": [a.replace(f"{ROOT}/", "") for a in c["argv"]],
                         "world_size": c["world_size"]} for c in cases],
              "results": results}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print("\nversions: " + "; ".join(f"{t}: " + ", ".join(f"{k} {v}" for k, v in vs.items())
                                      for t, vs in versions.items()))  # fmt: skip
    print(f"results: {out}")
    return 0 if all(r["ok"] for r in results.values()) else 1


def _cuda() -> bool:
    import shutil

    return shutil.which("nvidia-smi") is not None


def _git_head() -> str | None:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main())

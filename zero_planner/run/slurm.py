"""zero-run --slurm: the sbatch script that starts one zero-run per node with srun.

The script asks for the plan's nodes, one task per node and the GPUs of each node; node 0's first host name is
the rendezvous address; srun then runs, on every node at once, the same zero-run command with that node's
`--node-rank $SLURM_NODEID`. Each node's zero-run does its own checks (GPUs, the rendezvous port) and starts
its ranks with DeepSpeed's per-node launcher (plan/command.py build_launch). Options and variables are SLURM's own
(catalog/slurm_options.json, read from its man pages); `sbatch_script` is pure text, written or printed by
`write_sbatch` (zero-run --slurm). No torch import.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shlex
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from zero_planner.errors import InputError
from zero_planner.planfile import Plan
from zero_planner.run import launcher
from zero_planner.run.training_args import given

SCRIPT_NAME = "zero-run.sbatch"
PORT_BASE, PORT_SPAN = 20000, 20000
"""Without --master-port the rendezvous port is 20000 + job id mod 20000, so two jobs sharing a node differ."""
PLANNED = ("--nodes", "--ntasks-per-node", "--gres", "--gpus-per-node", "--gpus", "--ntasks")
"""sbatch options the plan decides: given with --slurm-option they are refused (plan again instead)."""


@lru_cache(maxsize=1)
def documented() -> dict:
    """Returns catalog/slurm_options.json: {command: {"options": {--name: argument form}, ...}}."""
    return json.loads((Path(__file__).resolve().parents[1] / "catalog" / "slurm_options.json").read_text())


def parse_option(text: str) -> tuple[str, str | None]:
    """Returns (--name, value or None) of one `--slurm-option` (`--partition=gpu`, `partition=gpu`,
    `--exclusive`); raises InputError for an option sbatch does not document, naming the closest ones."""
    name, sep, value = text.strip().lstrip("-").partition("=")
    option = "--" + name
    known = documented()["sbatch"]["options"]
    if not re.fullmatch(r"[a-z0-9-]+", name) or option not in known:
        close = difflib.get_close_matches(option, known, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (see man sbatch)"
        raise InputError(f"--slurm-option {text!r}: {option} is not an sbatch option{hint}")
    if option in PLANNED:
        raise InputError(f"--slurm-option {text!r}: the plan decides {option} (plan again with zero-plan --gpus)")
    form = known[option]
    if form.startswith("=") and not sep:
        raise InputError(f"--slurm-option {text!r}: {option} takes a value ({option}{form})")
    if not form and sep:
        raise InputError(f"--slurm-option {text!r}: {option} takes no value")
    return option, value if sep else None


def sbatch_script(
    *,
    job_name: str,
    nodes: int,
    gpus_per_node: int | None,
    node_argv: Sequence[str],
    script_args: Sequence[str] = (),
    output_dir: str,
    workdir: str,
    master_port: int | None = None,
    options: Sequence[tuple[str, str | None]] = (),
    package_root: str | None = None,
) -> str:
    """Returns the text of the sbatch script.

    node_argv: the zero-run command every node runs (absolute paths); the script adds `--node-rank`,
    `--master-addr` and `--master-port` to it, then `-- script_args`. gpus_per_node None: a CPU plan (no GPUs
    asked for). options: parsed --slurm-option values, replacing ours of the same name. package_root: put
    first on PYTHONPATH, so every node imports this copy of zero_planner.
    """
    directives: dict[str, str | None] = {
        "--job-name": re.sub(r"[^A-Za-z0-9._-]+", "-", job_name)[:64],
        "--nodes": str(nodes),
        "--ntasks-per-node": "1",  # one zero-run per node; it starts that node's ranks
        "--output": str(Path(output_dir) / "slurm-%j.out"),
        "--chdir": workdir,
    }
    if gpus_per_node:
        directives["--gres"] = f"gpu:{gpus_per_node}"  # job steps get the job's GPUs (srun --gres NOTE)
    for option, value in options:
        directives[option] = value
    rendezvous = ['--node-rank "$SLURM_NODEID"', '--master-addr "$MASTER_ADDR"', '--master-port "$MASTER_PORT"']
    node = " ".join([shlex.join(node_argv), *rendezvous, *(["--", shlex.join(script_args)] if script_args else [])])
    port = str(master_port) if master_port is not None else f"$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))"
    lines = ["#!/bin/bash", *(f"#SBATCH {o}" + (f"={v}" if v is not None else "") for o, v in directives.items())]
    lines += [
        "# Written by zero-run --slurm. SLURM reads the #SBATCH lines above the first command only. Where tasks",
        "# are bound to the CPUs they ask for, add --cpus-per-task (the cores of a node) with --slurm-option.",
        "set -eu",
        *([f'export PYTHONPATH={shlex.quote(package_root)}"${{PYTHONPATH:+:$PYTHONPATH}}"'] if package_root else []),
        '# Node 0, the first host of the allocation, serves the rendezvous.',
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f'export MASTER_PORT="{port}"',
        "# One zero-run per node: each checks its node, then starts its ranks. A node that fails ends the step.",
        f"srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {shlex.quote('exec ' + node)}",
    ]
    return "\n".join(lines) + "\n"


def node_command(args: argparse.Namespace) -> list[str]:
    """Returns the zero-run command the sbatch script runs on every node (absolute paths; the script adds
    --node-rank, --master-addr, --master-port and the --script arguments)."""
    argv = [sys.executable, "-m", "zero_planner.launch", str(Path(args.plan).absolute())]
    if args.output_dir:
        argv += ["--output-dir", str(Path(args.output_dir).absolute())]
    if args.max_steps is not None:
        argv += ["--max-steps", str(args.max_steps)]
    if args.resume:
        argv.append("--resume")
    if getattr(args, "resume_if_any", False):
        argv.append("--resume-if-any")  # a requeued job continues; its first start has nothing to resume
    if args.master_wait is not None:
        argv += ["--master-wait", str(args.master_wait)]
    if args.script is not None:
        argv += ["--script", str(Path(args.script).absolute()), "--config-flag", args.config_flag]
    return argv + given(args)


def write_sbatch(args: argparse.Namespace, plan: Plan, script_args: Sequence[str], output_dir: str) -> int:
    """--slurm: prints (--dry-run) or writes OUTPUT_DIR/zero-run.sbatch, and submits it with --submit; returns
    the exit status (sbatch's with --submit)."""
    hw = plan.hardware
    text = sbatch_script(
        job_name=f"zero-run-{plan.model.name.rstrip('/').split('/')[-1]}",
        nodes=hw.nodes,
        gpus_per_node=None if hw.gpu == "cpu" else hw.gpus_per_node,
        node_argv=node_command(args),
        script_args=script_args,
        output_dir=str(Path(output_dir).absolute()),
        workdir=str(Path.cwd()),
        master_port=args.master_port,
        options=[parse_option(o) for o in args.slurm_option or []],
        package_root=str(Path(__file__).resolve().parents[2]),
    )
    if args.dry_run:
        print(text, end="")
        return 0
    path = Path(output_dir).absolute() / SCRIPT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)  # SLURM writes slurm-%j.out there and creates no folder
    path.write_text(text)
    print(f"zero-run: wrote {path}")
    if not args.submit:
        print(f"Submit it with: sbatch {shlex.quote(str(path))}")
        return 0
    import shutil

    if shutil.which("sbatch") is None:
        raise InputError(f"--submit needs sbatch on PATH (a SLURM login node); {path} is written, submit it there")
    rc, _ = launcher.spawn(["sbatch", str(path)], {}, multi_node=False)
    return rc

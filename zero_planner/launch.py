"""zero-run: turn a plan into a `deepspeed` launcher command, check this machine, and run it.

    zero-run PLAN.json [--dry-run] [--hostfile FILE] [--max-steps N] [--output-dir DIR] [--resume]
    zero-run PLAN.json --script TRAIN.py -- ARGS...
    zero-run PLAN.json --node-rank N --master-addr ADDR [--master-port P]     (on every node, N = 0..nodes-1)
    zero-run PLAN.json --slurm [--submit] [--slurm-option=--partition=gpu ...]

Several nodes, three ways: a hostfile (DeepSpeed's runner reaches the other nodes through pdsh/ssh); one
zero-run per node started by whatever starts processes there (`--node-rank`: DeepSpeed's per-node launcher,
what `deepspeed --no_ssh --node_rank` runs); `--slurm`, an sbatch script whose srun starts that per-node
command on every node (slurm.py).

The command and its environment come from one pure function, `build_launch` (argv, env); `launch_command`
is what the planner stores in `launch.command`. `_spawn` is the only place a process is started. No torch
or deepspeed import at module level: zero-run must start fast and `--dry-run` needs neither.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zero_planner import checkpoint as ckpt
from zero_planner import slurm
from zero_planner.checkpoint import DiskNeed, disk_need, exports_merged_model
from zero_planner.dsconfig import monitors_enabled
from zero_planner.errors import InputError
from zero_planner.memory import ALLOC_CONF
from zero_planner.plan import Plan, load_plan
from zero_planner.training_args import add_training_arguments, apply_training_args, given, positive_int

LAUNCHER_MODULE = "deepspeed.launcher.runner"
"""What the `deepspeed` console script runs. zero-run runs it as a module of its own interpreter, so a
`deepspeed` script missing from PATH (a venv not activated) or another environment's one never matters."""
NODE_LAUNCHER_MODULE = "deepspeed.launcher.launch"
"""DeepSpeed's per-node launcher: starts one node's ranks given every node's slots (`--world_info`) and this
node's index. Its runner runs exactly this for `deepspeed --no_ssh --node_rank N` (runner.py main)."""
DEFAULT_MASTER_PORT = 29500  # DeepSpeed's own default; one node: zero-run picks a free port at run time instead
MASTER_WAIT_S = 300
"""How long a node other than 0 waits for node 0's rendezvous port before refusing to start (seconds)."""
TRAIN_MODULE = "zero_planner.train"
DS_CONFIG_NAME = "ds_config.json"
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed")
GPU_MEMORY_TOLERANCE = 0.10
"""A GPU may report up to 10% less memory than the catalog's figure for its type (16 GB T4 = 14.6 GiB)."""
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
SCRIPT_FLAGS = ("--lr", "--report-to")
"""Training flags a --script run takes too: they change the DeepSpeed JSON it is handed (optimizer lr, monitor)."""


def ds_config_path(plan: Plan, output_dir: str | None = None) -> str:
    """Returns where zero-run writes the plan's DeepSpeed JSON for a user script."""
    return str(Path(output_dir or plan.training.output_dir) / DS_CONFIG_NAME)


def parse_hostfile(text: str) -> list[tuple[str, int]]:
    """Returns [(host, slots)] from a DeepSpeed hostfile (`host slots=N` per line, # comments)."""
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        slots = [p for p in parts[1:] if p.startswith("slots=")]
        if len(parts) != 2 or not slots or not slots[0][6:].isdigit():
            raise InputError(f"hostfile line {number} {line!r} is not 'HOST slots=N'")
        hosts.append((parts[0], int(slots[0][6:])))
    if not hosts:
        raise InputError("hostfile lists no hosts (expected lines of 'HOST slots=N')")
    return hosts


def encode_world_info(world: dict[str, list]) -> str:
    """Returns DeepSpeed's `--world_info`: {node: [device ids]} as URL-safe base64 JSON (runner.py
    encode_world_info). The per-node launcher numbers ranks node by node in this order."""
    return base64.urlsafe_b64encode(json.dumps(world).encode("utf-8")).decode("utf-8")


def build_launch(
    plan: Plan,
    *,
    plan_path: str,
    script: str | None = None,
    script_args: Sequence[str] = (),
    hostfile: str | None = None,
    hosts: list[tuple[str, int]] | None = None,
    num_nodes: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    max_steps: int | None = None,
    output_dir: str | None = None,
    resume: bool = False,
    config_flag: str = "--deepspeed_config",
    overrides: Sequence[str] = (),
    node_rank: int | None = None,
    visible_devices: Sequence[str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Returns (argv, env): the launcher argument list and the environment variables it adds.

    One node: `deepspeed --num_gpus`. Several (plan.hardware.nodes > 1 or a hostfile): `--hostfile`,
    `--num_nodes`, `--num_gpus` per node and `--master_addr` (default: the hostfile's first host, from `hosts`).
    node_rank: this node's ranks only, through DeepSpeed's per-node launcher (`python -u -m
    deepspeed.launcher.launch --world_info=... --node_rank=N`); `visible_devices` (this node's
    CUDA_VISIBLE_DEVICES, GPU plans) name its devices, else 0..gpus_per_node-1.
    `overrides`: training flags (training_args.given) passed on to zero-run's own trainer.
    """
    hw = plan.hardware
    nodes = num_nodes or hw.nodes
    argv = ["deepspeed"]
    if node_rank is not None:
        argv = _node_launcher(hw, nodes, node_rank, hostfile, master_addr, master_port, visible_devices)
    elif nodes > 1 or hostfile:
        if not hostfile:
            raise InputError(f"the plan is for {nodes} nodes; pass --hostfile FILE listing them ('HOST slots=N')")
        if hosts is not None:
            if len(hosts) < nodes:
                raise InputError(f"hostfile {hostfile!r} lists {len(hosts)} hosts; the plan needs nodes({nodes})")
            short = [f"{h}(slots={s})" for h, s in hosts[:nodes] if s < hw.gpus_per_node]
            if short:
                raise InputError(
                    f"hostfile {hostfile!r}: {', '.join(short)} below the plan's gpus_per_node({hw.gpus_per_node})"
                )
        addr = master_addr or (hosts[0][0] if hosts else None)
        argv += ["--hostfile", hostfile, "--num_nodes", str(nodes), "--num_gpus", str(hw.gpus_per_node)]
        if addr:
            argv += ["--master_addr", addr]
    else:
        argv += ["--num_gpus", str(hw.gpus_per_node)]
        if master_addr:
            argv += ["--master_addr", master_addr]
    if node_rank is None:
        argv += ["--master_port", str(master_port or DEFAULT_MASTER_PORT)]

    if script is not None:
        if config_flag not in CONFIG_FLAGS:
            raise InputError(f"config flag {config_flag!r} is not one of {', '.join(CONFIG_FLAGS)}")
        argv += [script, config_flag, ds_config_path(plan, output_dir), *script_args]
    else:
        if script_args:
            raise InputError("arguments after -- are for --script TRAIN.py; zero-run's own trainer takes none")
        argv += ["--module", TRAIN_MODULE, "--plan", plan_path]
        if output_dir:
            argv += ["--output-dir", output_dir]
        if max_steps is not None:
            argv += ["--max-steps", str(max_steps)]
        if resume:
            argv.append("--resume")
        argv += overrides

    env = {}
    if hw.gpu == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    else:
        # The memory plan assumes it (memory.ALLOC_CONF): without it the cache fragments and a plan that fits
        # can run out of memory. A value the user exported wins (_spawn), with a note.
        env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF
    return argv, env


def _node_launcher(hw, nodes: int, node_rank: int, hostfile: str | None, master_addr: str | None,
                   master_port: int | None, visible_devices: Sequence[str] | None) -> list[str]:  # fmt: skip
    """Returns the head of the per-node launcher's argument list (build_launch with node_rank)."""
    if hostfile:
        raise InputError("--node-rank starts this node's ranks only; --hostfile starts every node from one "
                         "(through pdsh/ssh): give one of them")  # fmt: skip
    if not 0 <= node_rank < nodes:
        raise InputError(f"--node-rank {node_rank} is not a node of this plan: use 0..{nodes - 1} (nodes({nodes}))")
    if not master_addr:
        raise InputError("--node-rank needs --master-addr: the address of node 0, reachable from every node")
    world = {f"node{i}": list(range(hw.gpus_per_node)) for i in range(nodes)}
    if hw.gpu != "cpu" and visible_devices and len(visible_devices) >= hw.gpus_per_node:
        world[f"node{node_rank}"] = list(visible_devices[: hw.gpus_per_node])  # DeepSpeed sets them, not 0..N-1
    return ["python", "-u", "-m", NODE_LAUNCHER_MODULE, f"--world_info={encode_world_info(world)}",
            f"--node_rank={node_rank}", f"--master_addr={master_addr}",
            f"--master_port={master_port or DEFAULT_MASTER_PORT}"]  # fmt: skip


def runnable(argv: Sequence[str], python: str | None = None) -> list[str]:
    """Returns the command zero-run actually spawns: a leading `deepspeed` replaced by `python -m
    deepspeed.launcher.runner`, a leading `python` by the interpreter (the one running zero-run by default). On
    one node, where the installed runner takes it, with `--log_level error`: the runner's WARNING that it found no
    hostfile (there is none to find on one node) and its INFO lines (the command zero-run prints itself, each rank
    spawned and exiting) are left out; its errors still show."""
    if argv and argv[0] == "deepspeed":
        quiet = ["--log_level", "error"] if "--hostfile" not in argv and launcher_takes_log_level() else []
        return [python or sys.executable, "-m", LAUNCHER_MODULE, *quiet, *argv[1:]]
    if argv and argv[0] == "python":
        return [python or sys.executable, *argv[1:]]
    return list(argv)


@functools.lru_cache(maxsize=1)
def launcher_takes_log_level() -> bool:
    """Returns True when the installed DeepSpeed's runner has --log_level (a recent option: 0.19.8 has it, and a
    runner without it refuses the launch). Reads the runner's source rather than importing deepspeed (torch)."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.origin:
        return False
    try:
        return '"--log_level"' in (Path(spec.origin).parent / "launcher" / "runner.py").read_text()
    except OSError:
        return False


def launch_command(plan: Plan, plan_path: str = "plan.json") -> list[str]:
    """Returns the launcher argument list stored in the plan (`launch.command`): the environment build_launch
    adds (DS_ACCELERATOR=cpu for cpu plans, PYTORCH_CUDA_ALLOC_CONF for GPU plans) leads it as `env K=V ...`, so it
    stays one runnable command."""
    argv, env = build_launch(plan, plan_path=plan_path, hostfile="hostfile" if plan.hardware.nodes > 1 else None)
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]


# --- checks before launch: "can this machine run the plan" (the plan's coherence is pydantic's job) ---


@dataclass(frozen=True)
class Machine:
    """What this node has, as preflight sees it; gpus is [(name, total bytes)], None when not probed."""

    gpus: list[tuple[str, int]] | None
    host_available_bytes: int
    disk_free_bytes: int
    notes: list[str] = field(default_factory=list)
    capabilities: list[tuple[int, int]] = field(default_factory=list)
    """CUDA compute capabilities of the GPUs (major, minor), for TORCH_CUDA_ARCH_LIST."""


def existing_parent(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def probe_machine(plan: Plan, output_dir: str) -> Machine:
    """Returns this node's GPUs, available host memory and free disk under `output_dir` (imports torch for GPUs)."""
    import shutil

    import psutil

    gpus, capabilities = None, []
    if plan.hardware.gpu != "cpu":
        import torch

        gpus = []
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                gpus.append((props.name, int(props.total_memory)))
                capabilities.append((props.major, props.minor))
    disk = shutil.disk_usage(existing_parent(Path(output_dir))).free
    return Machine(gpus=gpus, host_available_bytes=int(psutil.virtual_memory().available), disk_free_bytes=disk,
                   capabilities=capabilities)  # fmt: skip


_ARCH_TOKEN = re.compile(r"^\d+\.\d+(\+PTX)?$")


def fix_cuda_arch_list(value: str | None, capabilities: Sequence[tuple[int, int]]) -> tuple[str | None, str | None]:
    """Returns (replacement TORCH_CUDA_ARCH_LIST, note), or (None, None) when `value` is absent or parses.

    DeepSpeed's JIT op builder reads every entry as MAJOR.MINOR[+PTX] (deepspeed 0.19
    op_builder/builder.py compute_capability_args: int(...) of each part), so the arch-specific forms some
    CUDA images set (`9.0a`, `sm_90`) crash the first fused-Adam build with "invalid literal for int()".
    The replacement is the detected GPUs' architectures, else the numeric part of each entry.
    """
    if value is None or not value.strip():
        return None, None
    tokens = value.replace(" ", ";").split(";")
    tokens = [t.strip() for t in tokens if t.strip()]
    if all(_ARCH_TOKEN.match(t) for t in tokens):
        return None, None
    if capabilities:
        fixed = ";".join(sorted({f"{major}.{minor}" for major, minor in capabilities}))
        source = "this machine's GPUs"
    else:
        numeric = []
        for t in tokens:
            match = re.search(r"(\d+)\.?(\d)", t)
            if match and f"{match[1]}.{match[2]}" not in numeric:
                numeric.append(f"{match[1]}.{match[2]}")
        if not numeric:
            return "", f"TORCH_CUDA_ARCH_LIST={value!r} is not MAJOR.MINOR[+PTX]; unset, DeepSpeed will probe the GPUs"
        fixed, source = ";".join(numeric), "the numeric form"
    return fixed, (f"TORCH_CUDA_ARCH_LIST={value!r} is not in DeepSpeed's MAJOR.MINOR[+PTX] form; "
                   f"using {fixed!r} ({source})")  # fmt: skip


def fix_launch_env(plan: Plan, env: dict[str, str], machine: Machine) -> str | None:
    """Puts a TORCH_CUDA_ARCH_LIST that DeepSpeed can parse into the ranks' `env` when this process's own
    cannot be parsed (fix_cuda_arch_list); returns the note to print, or None. Every launch of ranks goes
    through here: zero-run's training run and each candidate of --probe."""
    if plan.hardware.gpu == "cpu":
        return None
    arch, note = fix_cuda_arch_list(os.environ.get("TORCH_CUDA_ARCH_LIST"), machine.capabilities)
    if note:
        env["TORCH_CUDA_ARCH_LIST"] = arch or ""
    return note


def preflight(plan: Plan, machine: Machine, *, output_dir: str, start_step: int = 0) -> list[str]:
    """Returns one line per reason this machine cannot run the plan (empty when it can).

    start_step: the step a --resume continues from (fewer checkpoints left to write)."""
    gib = 2**30
    hw, problems = plan.hardware, []
    if plan.training.method == "qlora" and hw.gpu == "cpu":
        # Refused here, before any rank starts (modeling.QLORA_REQUIREMENT says the same inside a rank).
        problems.append("QLoRA needs a CUDA GPU with bitsandbytes; this plan is for CPU processes (use --method lora)")
    if hw.gpu != "cpu" and machine.gpus is not None:
        if len(machine.gpus) < hw.gpus_per_node:
            problems.append(
                f"the plan needs {hw.gpus_per_node} GPUs per node ({hw.gpu}); this machine has {len(machine.gpus)}"
            )
        need = plan.estimate.per_gpu.total
        used = list(enumerate(machine.gpus[: hw.gpus_per_node]))
        # The smallest GPU decides; one line for it, not one per GPU.
        for i, (name, total) in sorted(used, key=lambda g: g[1][1])[:1]:
            if total < need:
                problems.append(
                    f"GPU {i} ({name}) has {total / gib:.1f} GiB; the plan needs {need / gib:.1f} GiB per GPU "
                    f"(planned for {hw.gpu}); plan again with --gpus auto"
                )
            elif total < hw.gpu_memory_bytes * (1 - GPU_MEMORY_TOLERANCE):
                problems.append(
                    f"GPU {i} ({name}) has {total / gib:.1f} GiB, less than the planned {hw.gpu} "
                    f"({hw.gpu_memory_bytes / gib:.1f} GiB); plan again with --gpus auto"
                )
    offload = plan.strategy.offload_optimizer != "none" or plan.strategy.offload_param != "none"
    if offload and machine.host_available_bytes < plan.estimate.cpu.total:
        problems.append(
            f"offload ({plan.strategy.name or plan.strategy.stage}) needs {plan.estimate.cpu.total / gib:.1f} GiB of "
            f"host memory; {machine.host_available_bytes / gib:.1f} GiB is available"
        )
    disk = disk_problem(plan, machine.disk_free_bytes, output_dir=output_dir, start_step=start_step)
    if disk:
        problems.append(disk)
    problems += monitor_problems(plan.deepspeed_config)
    return problems


def run_disk_need(plan: Plan, *, start_step: int = 0, **save) -> DiskNeed:
    """Returns what this plan's run writes under its output folder (checkpoint.disk_need), with its save policy,
    its length (plan.training.max_steps, as overridden) and its method; `save` overrides save, save_every,
    save_total_limit (the alternatives disk_problem weighs)."""
    t, m = plan.training, plan.model
    adapters = t.method in ("lora", "qlora")
    # QLoRA quantises while from_pretrained reads: a config-only model is first written as a random 16-bit base
    # under the output folder (modeling.build_qlora_base), as large as the model in 16 bits.
    scratch = 2 * m.params if t.method == "qlora" and m.init == "random" else 0
    policy = {"save": t.save, "save_every": t.save_every, "save_total_limit": t.save_total_limit, **save}
    return disk_need(m.params, m.trainable_params, t.precision, stage=plan.strategy.stage, adapters=adapters,
                     merged_export=exports_merged_model(t.method, plan.strategy.stage), max_steps=t.max_steps,
                     start_step=start_step, scratch_bytes=scratch, **policy)  # fmt: skip


def save_alternatives(plan: Plan, *, start_step: int = 0) -> list[tuple[str, DiskNeed]]:
    """Returns (flag, what the run would write with it) for each save setting that writes less than the plan's,
    largest first: the total limit 1, one checkpoint at the end, --save final, --save none."""
    t = plan.training
    need = run_disk_need(plan, start_step=start_step)
    options: list[tuple[str, dict]] = []
    if t.save == "steps":
        if t.max_steps > 0 and need.checkpoints > 1:
            options.append((f"--save-steps {t.max_steps}", {"save_every": t.max_steps}))  # one checkpoint, the last
        if t.save_total_limit > 1:
            options.append(("--save-total-limit 1", {"save_total_limit": 1}))
        options.append(("--save final", {"save": "final"}))
    if t.save != "none":
        options.append(("--save none", {"save": "none"}))
    out: list[tuple[str, DiskNeed]] = []
    for flag, save in options:
        other = run_disk_need(plan, start_step=start_step, **save)
        if other.total_bytes < need.total_bytes and all(other.total_bytes != o.total_bytes for _, o in out):
            out.append((flag, other))
    return sorted(out, key=lambda option: -option[1].total_bytes)


def disk_problem(plan: Plan, free_bytes: int, *, output_dir: str, start_step: int = 0) -> str | None:
    """Returns the one line refusing a run whose files do not fit in `free_bytes` (None when they fit): what the
    run writes, and each save setting that keeps less with what it needs, the ones that fit named first."""
    gib = 2**30
    need = run_disk_need(plan, start_step=start_step)
    if free_bytes >= need.total_bytes:
        return None
    parts = []
    if need.checkpoints:
        s = "s" if need.checkpoints > 1 else ""
        parts.append(f"{need.checkpoints} DeepSpeed checkpoint{s} of {need.checkpoint_bytes / gib:.1f} GiB"
                     + (" at once" if need.checkpoints > 1 else ""))  # fmt: skip
    if need.export_bytes:
        parts.append(f"the final {'adapter' if plan.training.method != 'full' else 'model'} "
                     f"{need.export_bytes / gib:.1f} GiB")  # fmt: skip
    if need.scratch_bytes:
        parts.append(f"QLoRA's random 16-bit base {need.scratch_bytes / gib:.1f} GiB")
    line = (f"this run writes up to {need.total_bytes / gib:.1f} GiB under {output_dir!r} ({', '.join(parts)}; "
            f"{describe_save(plan)}); {free_bytes / gib:.1f} GiB is free")  # fmt: skip
    options = []
    for flag, other in save_alternatives(plan, start_step=start_step):  # largest first, up to the first that fits
        fits = other.total_bytes <= free_bytes
        options.append(f"{flag} {other.total_bytes / gib:.1f} GiB{' (fits)' if fits else ''}")
        if fits:
            break
    if options:
        line += f"; writing less: {', '.join(options)}"
    return line + "; or choose --output-dir elsewhere"


def describe_save(plan: Plan) -> str:
    t = plan.training
    if t.save != "steps":
        return f"--save {t.save}"
    return f"--save steps, --save-steps {t.save_every}, --save-total-limit {t.save_total_limit}"


def monitor_problems(ds_config: dict) -> list[str]:
    """Returns a line for each monitor the DeepSpeed JSON enables whose package this interpreter cannot import
    (DeepSpeed would raise ImportError inside every rank): tensorboard and wandb; csv needs none."""
    import importlib.util

    problems = []
    for name in monitors_enabled(ds_config):
        package = {"tensorboard": "tensorboard", "wandb": "wandb"}.get(name)
        if package and importlib.util.find_spec(package) is None:
            problems.append(f"--report-to {name} needs the {package} package, which is not installed here "
                            f"(pip install {package}, or leave {name} out of --report-to)")  # fmt: skip
    return problems


def check_rendezvous(node_rank: int, addr: str, port: int, *, wait_s: float = MASTER_WAIT_S, say=print) -> str | None:
    """Returns why this node cannot join the rendezvous at addr:port, or None when it can.

    Node 0 serves it (its rank 0 opens the port): `addr` must be one of this machine's addresses and the port
    free. Any other node waits up to `wait_s` seconds for node 0 to accept a TCP connection there (nodes start
    together, node 0's rank 0 a little later), so a wrong address or a closed firewall is one clear line now
    rather than a rank hanging in init_process_group for its 30-minute timeout.
    """
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"--master-addr {addr!r} does not resolve on this node ({error.strerror})"
    if node_rank == 0:
        return _serving_problem(addr, port, infos)
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
                return None
        except ConnectionRefusedError:
            last = "refused"
        except OSError as error:  # timeout, no route, unreachable network
            last = error.strerror or type(error).__name__
        if time.monotonic() >= deadline:
            break
        if not waited:
            say(f"zero-run: node {node_rank}: waiting up to {wait_s:.0f} s for node 0's rendezvous at {addr}:{port}")
            waited = True
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    if last == "refused":
        return (f"node 0's rendezvous {addr}:{port} refused connections for {wait_s:.0f} s: start node 0 "
                "(--node-rank 0) with the same --master-port, or wait longer (--master-wait)")
    return (f"node 0's rendezvous {addr}:{port} did not answer within {wait_s:.0f} s ({last}): is --master-addr node "
            f"0's address, reachable from this node, with port {port} open in its firewall?")  # fmt: skip


def _serving_problem(addr: str, port: int, infos) -> str | None:
    """Returns why node 0 cannot serve the rendezvous at addr:port (None when it can)."""
    ips = sorted({info[4][0] for info in infos})
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((sockaddr[0], 0))
                break
            except OSError:
                continue
    else:
        return (f"--master-addr {addr!r} ({', '.join(ips)}) is not an address of this machine, and node 0 serves "
                f"the rendezvous: give node 0's own address")  # fmt: skip
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the rendezvous server binds: every interface, a port left in TIME_WAIT reusable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return f"--master-port {port} is in use on node 0 (another run?): choose another port"
    return None


def visible_devices() -> list[str] | None:
    """Returns this process's CUDA_VISIBLE_DEVICES entries (None when unset or empty)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return [d.strip() for d in value.split(",") if d.strip()] or None


def check_inputs(plan: Plan, *, resume: bool = False, output_dir: str | None = None) -> None:
    """Raises InputError (one line, exit 2) for what zero-run's own ranks would otherwise find only after the
    launcher has started them: a pretrained plan naming no weights, no tokenizer to be had (a config-only model
    without --tokenizer, a folder without tokenizer files), chat data for a tokenizer without a chat template,
    a malformed local data file (data.check_local_data: the file, the line, an excerpt), QLoRA without
    bitsandbytes, and --resume from checkpoints another number of ranks wrote. Reads files only (no torch)."""
    import importlib.util

    from zero_planner import checkpoint as ckpt
    from zero_planner.data import check_local_data, detect_format, peek_columns, resolve_files
    from zero_planner.tokenizer import TOKENIZER_FIX, check_tokenizer, has_chat_template

    t, m = plan.training, plan.model
    if m.init == "pretrained" and not (m.load_path or m.weights_path):
        raise InputError(f"the plan says pretrained weights for {m.name!r} but names no load_path (plan again, or "
                         f"pass --init random)")  # fmt: skip
    folder = check_tokenizer(plan)
    files = resolve_files(t.dataset) if t.dataset != "synthetic" and t.task == "causal-lm" else None
    columns = peek_columns(files) if files else None
    if columns is not None and detect_format(columns, t) == "chat":
        if t.tokenizer == "bytes" or (folder is not None and not has_chat_template(folder)):
            name = "the byte-level tokenizer" if t.tokenizer == "bytes" else f"the tokenizer in {folder}"
            raise InputError(f"chat data ({t.messages_field} column) goes through a chat template, and {name} has "
                             f"none: {TOKENIZER_FIX.replace('bytes|', '')}")  # fmt: skip
    check_local_data(t)
    if t.method == "qlora" and plan.hardware.gpu != "cpu" and importlib.util.find_spec("bitsandbytes") is None:
        raise InputError("QLoRA needs bitsandbytes, which is not installed here: pip install bitsandbytes")
    if resume:
        usable = ckpt.usable_checkpoints(Path(output_dir or t.output_dir) / ckpt.CHECKPOINTS_DIR)
        if usable:
            step, path = usable[0]
            written = ckpt.read_state(path).get("world_size")
            if written != plan.hardware.world_size:
                raise InputError(f"--resume: checkpoint {path} was written by {written} ranks; this plan has "
                                 f"{plan.hardware.world_size} (resume with the plan it was trained with)")  # fmt: skip


# --- the CLI ---


class _Parser(argparse.ArgumentParser):
    """argparse that raises InputError (one line, exit 2) instead of printing the long usage."""

    def error(self, message: str):
        raise InputError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        allow_abbrev=False,  # a prefix is never read as another option: --save-step is refused, not --save-steps
        prog="zero-run",
        description="Train from a zero-plan plan file through the deepspeed launcher.",
        epilog="Arguments after -- go to the --script.",
    )
    parser.add_argument("plan", help="plan file written by zero-plan -o")
    parser.add_argument("--dry-run", action="store_true", help="print the command and DeepSpeed JSON; launch nothing")
    parser.add_argument("--hostfile", help="DeepSpeed hostfile ('HOST slots=N' lines) for multi-node plans")
    parser.add_argument("--master-addr", help="address of the first node (default: the hostfile's first host)")
    parser.add_argument("--master-port", type=positive_int, help="rendezvous port (default: a free one on one node, "
                        f"{DEFAULT_MASTER_PORT} with --node-rank, from the job id with --slurm)")  # fmt: skip
    parser.add_argument(
        "--node-rank", type=_node_rank, metavar="N",
        help="start this node's ranks only, as node N (0..nodes-1); run it on every node with node 0's --master-addr",
    )  # fmt: skip
    parser.add_argument("--master-wait", type=positive_int, metavar="SECONDS", help="with --node-rank above 0: how "
                        f"long to wait for node 0's rendezvous (default {MASTER_WAIT_S})")  # fmt: skip
    parser.add_argument(
        "--slurm", action="store_true",
        help=f"write OUTPUT_DIR/{slurm.SCRIPT_NAME}: sbatch script whose srun runs this with --node-rank on every node",
    )  # fmt: skip
    parser.add_argument("--submit", action="store_true", help="with --slurm: submit the script with sbatch")
    parser.add_argument(
        "--slurm-option", action="append", metavar="OPTION",
        help="with --slurm: an #SBATCH option to add (repeatable), e.g. --slurm-option=--partition=gpu",
    )  # fmt: skip
    parser.add_argument("--script", help="your own training script, given the DeepSpeed JSON via --deepspeed_config")
    parser.add_argument(
        "--config-flag",
        choices=[f[2:] for f in CONFIG_FLAGS],
        default="deepspeed_config",
        help="how --script receives the JSON: deepspeed_config (DeepSpeed's argument) or deepspeed (HF Trainer)",
    )
    parser.add_argument("--max-steps", type=int, help="overrides training.max_steps")
    parser.add_argument("--output-dir", help="overrides training.output_dir")
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint")
    parser.add_argument("--probe", metavar="K", help="first run the plan's K best candidates a few steps each, write "
                        "PLAN.probed.json, and train with the fastest measured (zero_planner/probe.py)")  # fmt: skip
    parser.add_argument("--probe-only", action="store_true", help="stop after the probe (K defaults to 3)")
    add_training_arguments(parser, run=True)
    return parser


def _node_rank(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a node index (0, 1, ...)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a node index (0, 1, ...)")
    return value


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Returns (zero-run's arguments, the script's arguments after the first `--`)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def run(args: argparse.Namespace, script_args: Sequence[str] = ()) -> int:
    """Checks, then launches (or prints, with --dry-run; writes an sbatch script with --slurm); returns the exit
    status."""
    check_modes(args)
    if getattr(args, "probe", None) is not None or getattr(args, "probe_only", False):
        from zero_planner import probe

        return probe.zero_run(args, script_args)  # probes, then comes back here with PLAN.probed.json
    plan = load_plan(args.plan)
    if args.max_steps is not None and args.max_steps < 1:
        raise InputError(f"--max-steps {args.max_steps} must be at least 1")
    overrides = given(args)
    # Checked here (exit 2 before any rank starts) and applied again by each rank: the ranks read the plan.
    apply_training_args(plan, args, planning=False)
    if overrides and args.script is not None:
        ignored = [o for o in overrides if o.startswith("--") and o not in SCRIPT_FLAGS]
        if ignored:
            raise InputError(f"{', '.join(ignored)} configure zero-run's own trainer; your --script takes its own flags")
        overrides = []  # --lr and --report-to are in the DeepSpeed JSON written for the script
    output_dir = args.output_dir or plan.training.output_dir
    hosts = parse_hostfile(_read(args.hostfile, "hostfile")) if args.hostfile else None
    if args.script is not None and not Path(args.script).is_file():
        raise InputError(f"--script {args.script!r} does not exist")
    if args.script is None:
        # What the ranks would find only after the launcher started them: exit 2 now (--dry-run included).
        check_inputs(plan, resume=args.resume, output_dir=output_dir)
    if args.slurm:
        return write_sbatch(args, plan, script_args, output_dir)
    per_node = args.node_rank is not None
    # Every node must agree on the port: a free one is picked only where one node is the whole run.
    port = args.master_port or (DEFAULT_MASTER_PORT if args.dry_run or per_node else free_port())
    argv, env = build_launch(
        plan,
        plan_path=str(Path(args.plan).absolute()),
        script=args.script,
        script_args=script_args,
        hostfile=args.hostfile,
        hosts=hosts,
        master_addr=args.master_addr,
        master_port=port,
        max_steps=args.max_steps,
        output_dir=args.output_dir,
        resume=args.resume,
        config_flag="--" + args.config_flag,
        overrides=overrides,
        node_rank=args.node_rank,
        visible_devices=visible_devices(),
    )
    shown = " ".join([*(f"{k}={v}" for k, v in sorted(env.items())), shlex.join(runnable(argv))])
    if args.dry_run:
        print(shown)
        print(json.dumps(plan.deepspeed_config, indent=2))
        return 0

    if args.script is None and (plan.hardware.nodes == 1 or per_node) and _hub_offline():
        check_sources_offline(plan)  # one line and exit 2 now, rather than from inside the ranks
    machine = probe_machine(plan, output_dir)
    start_step = resume_step(output_dir) if args.resume and args.script is None else 0
    problems = preflight(plan, machine, output_dir=output_dir, start_step=start_step)
    note = fix_launch_env(plan, env, machine)
    if note:
        print(f"zero-run: note: {note}", file=sys.stderr)
    if per_node and not problems:
        wait_s = args.master_wait if args.master_wait is not None else MASTER_WAIT_S
        problem = check_rendezvous(args.node_rank, args.master_addr, port, wait_s=wait_s,
                                   say=lambda line: print(line, file=sys.stderr, flush=True))  # fmt: skip
        problems += [problem] if problem else []
    if problems:
        where = f"node {args.node_rank}: " if per_node else ""
        for line in problems:
            print(f"zero-run: refusing to launch: {where}{line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    for stale in Path(output_dir).glob("oom_rank*.json"):
        stale.unlink()
    if args.script is not None:
        Path(ds_config_path(plan, output_dir)).write_text(json.dumps(plan.deepspeed_config, indent=2) + "\n")
    print(f"zero-run: {shown}", flush=True)
    rc, signals = _spawn(argv, env, multi_node=bool(args.hostfile), node_launcher=per_node)
    return _explain_exit(rc, signals, output_dir, args, save=plan.training.save if args.script is None else "steps",
                         adapters=plan.training.method != "full")  # fmt: skip


def resume_step(output_dir: str) -> int:
    """Returns the step of the newest complete checkpoint under `output_dir` (what --resume continues from), or 0."""
    usable = ckpt.usable_checkpoints(Path(output_dir) / ckpt.CHECKPOINTS_DIR)
    return usable[0][0] if usable else 0


def check_modes(args: argparse.Namespace) -> None:
    """Raises InputError when options of different ways to launch are mixed."""
    if args.submit and not args.slurm:
        raise InputError("--submit submits the script that --slurm writes: add --slurm")
    if args.slurm_option and not args.slurm:
        raise InputError(f"--slurm-option {args.slurm_option[0]!r} is an #SBATCH option for the script --slurm "
                         "writes: add --slurm")  # fmt: skip
    if args.slurm and (args.node_rank is not None or args.hostfile):
        given_ = "--node-rank" if args.node_rank is not None else "--hostfile"
        raise InputError(f"--slurm writes a script whose srun gives every node its --node-rank; drop {given_}")
    if args.master_wait is not None and args.node_rank is None and not args.slurm:
        raise InputError("--master-wait is how long a node waits for node 0: it goes with --node-rank or --slurm")
    if (args.node_rank is not None or args.slurm) and (args.probe is not None or args.probe_only):
        raise InputError("--probe runs the candidates on this machine: probe on one node (zero-run PLAN --probe-only), "
                         "then run PLAN.probed.json on every node")  # fmt: skip


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
    if args.master_wait is not None:
        argv += ["--master-wait", str(args.master_wait)]
    if args.script is not None:
        argv += ["--script", str(Path(args.script).absolute()), "--config-flag", args.config_flag]
    return argv + given(args)


def write_sbatch(args: argparse.Namespace, plan: Plan, script_args: Sequence[str], output_dir: str) -> int:
    """--slurm: prints (--dry-run) or writes OUTPUT_DIR/zero-run.sbatch, and submits it with --submit; returns
    the exit status (sbatch's with --submit)."""
    hw = plan.hardware
    text = slurm.sbatch_script(
        job_name=f"zero-run-{plan.model.name.rstrip('/').split('/')[-1]}",
        nodes=hw.nodes,
        gpus_per_node=None if hw.gpu == "cpu" else hw.gpus_per_node,
        node_argv=node_command(args),
        script_args=script_args,
        output_dir=str(Path(output_dir).absolute()),
        workdir=str(Path.cwd()),
        master_port=args.master_port,
        options=[slurm.parse_option(o) for o in args.slurm_option or []],
        package_root=str(Path(__file__).resolve().parents[1]),
    )
    if args.dry_run:
        print(text, end="")
        return 0
    path = Path(output_dir).absolute() / slurm.SCRIPT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)  # SLURM writes slurm-%j.out there and creates no folder
    path.write_text(text)
    print(f"zero-run: wrote {path}")
    if not args.submit:
        print(f"Submit it with: sbatch {shlex.quote(str(path))}")
        return 0
    import shutil

    if shutil.which("sbatch") is None:
        raise InputError(f"--submit needs sbatch on PATH (a SLURM login node); {path} is written, submit it there")
    rc, _ = _spawn(["sbatch", str(path)], {}, multi_node=False)
    return rc


def _explain_exit(rc: int, signals: int, output_dir: str, args: argparse.Namespace, *, save: str = "steps",
                  adapters: bool = False) -> int:  # fmt: skip
    if rc == 0 and not signals:
        return 0
    ooms = sorted(Path(output_dir).glob("oom_rank*.json"))
    if ooms:
        message = json.loads(ooms[0].read_text()).get("message", "out of memory")
        print(f"zero-run: {message}", file=sys.stderr)
        return rc or 1
    if signals:
        every = " on every node" if getattr(args, "node_rank", None) is not None else ""
        resume = f"zero-run {shlex.quote(args.plan)} --resume{every}"
        print(f"zero-run: interrupted; {ckpt.after_interruption(save, output_dir, adapters=adapters, resume=resume)}",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED
    if rc == EXIT_BAD_INPUT:
        return rc  # a rank found bad input (a hub dataset, a tokenizer) and said so in one line already
    print(f"zero-run: the launcher exited with status {rc}", file=sys.stderr)
    return rc if rc > 0 else 1


def _spawn(argv: list[str], env: dict[str, str], *, multi_node: bool, node_launcher: bool = False,
           log=None) -> tuple[int, int]:  # fmt: skip
    """Runs the launcher (the only spawn in zero-planner; sbatch too); returns (exit status, signals forwarded).
    `log`: an open file taking the launcher's stdout and stderr (zero-run --probe reads it for OOM messages).

    The launcher gets its own session, so a terminal's Ctrl-C reaches zero-run alone, which passes it on:
    on one node straight to the ranks (each finishes its step and saves; the launcher then exits by itself,
    so waiting on it covers the save), on several through a hostfile to DeepSpeed's runner, which relays it to
    the remote nodes; with `node_launcher` (--node-rank) to this node's ranks, the per-node launcher's children.
    A second signal kills the whole process group.
    """
    import subprocess

    full_env = {**os.environ, **env}
    theirs = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if "PYTORCH_CUDA_ALLOC_CONF" in env and theirs is not None and theirs != env["PYTORCH_CUDA_ALLOC_CONF"]:
        full_env["PYTORCH_CUDA_ALLOC_CONF"] = theirs
        print(f"zero-run: keeping your PYTORCH_CUDA_ALLOC_CONF={theirs}; the memory plan assumes "
              f"{env['PYTORCH_CUDA_ALLOC_CONF']} (without expandable segments the cache can fragment)", file=sys.stderr)
    if full_env.get("TORCH_CUDA_ARCH_LIST") == "":
        del full_env["TORCH_CUDA_ARCH_LIST"]
    # Ranks run `python -m zero_planner.train`: make this copy of the package importable there too.
    package_root = str(Path(__file__).resolve().parents[1])
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    cmd = runnable(argv)
    proc = subprocess.Popen(cmd, env=full_env, start_new_session=True, stdout=log,
                            stderr=None if log is None else subprocess.STDOUT)  # fmt: skip
    received = 0

    def forward(signum, frame):
        nonlocal received
        received += 1
        if received == 1:
            _forward_signal(proc.pid, signum, multi_node=multi_node, node_launcher=node_launcher)
        else:
            _killpg(proc.pid, signal.SIGKILL)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return rc, received


def _forward_signal(pid: int, signum: int, *, multi_node: bool, node_launcher: bool = False) -> None:
    import psutil

    try:
        runner = psutil.Process(pid)
        targets = [runner] if multi_node else []
        if node_launcher:
            targets = runner.children()  # deepspeed.launcher.launch -> ranks
        elif not multi_node:
            # runner -> deepspeed.launcher.launch -> ranks: the ranks are the launcher's children.
            for child in runner.children():
                targets += child.children() or [child]
        for proc in targets or [runner]:
            proc.send_signal(signum)
    except psutil.Error:
        _killpg(pid, signum)


def _killpg(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def check_sources_offline(plan: Plan) -> None:
    """Raises InputError when the plan's pretrained weights or its tokenizer are not in this machine's Hugging
    Face cache (HF_HUB_OFFLINE set: nothing can be fetched). Reads the cache only (huggingface_hub, no torch)."""
    from zero_planner.modeling import resolve_pretrained
    from zero_planner.tokenizer import _tokenizer_folder

    m, t = plan.model, plan.training
    source = (m.load_path or m.weights_path) if m.init == "pretrained" else None
    if source is not None:
        resolve_pretrained(source)
    if t.tokenizer not in (None, "bytes"):
        _tokenizer_folder(t.tokenizer)
    elif t.tokenizer is None and source is None and m.source in ("hub", "catalog") and m.hub_id:
        _tokenizer_folder(m.hub_id)


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as error:
        raise InputError(f"{what} {path!r} is not readable: {error.strerror}") from None


def main(argv: Sequence[str] | None = None) -> int:
    own, script_args = split_argv(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(own)
        return run(args, script_args)
    except InputError as error:
        print(f"zero-run: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())

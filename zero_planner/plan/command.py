"""The `deepspeed` launcher command of a plan, as data: argv and the environment it adds, from one pure function.

    build_launch(plan, plan_path=..., where=Rendezvous(...), ...)    -> (argv, env)
    launch_command(plan, plan_path)                                   -> what the plan file records (launch.command)

The plan file records the command (assemble.py), the hand-off files print it (export.py), zero-run spawns it
(run/launcher.py) and --probe runs each candidate with it. Nothing here starts a process or imports torch.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zero_planner.errors import InputError
from zero_planner.plan.memory import ALLOC_CONF
from zero_planner.planfile import Plan

NODE_LAUNCHER_MODULE = "deepspeed.launcher.launch"
"""DeepSpeed's per-node launcher: starts one node's ranks given every node's slots (`--world_info`) and this
node's index. Its runner runs exactly this for `deepspeed --no_ssh --node_rank N` (runner.py main)."""
DEFAULT_MASTER_PORT = 29500  # DeepSpeed's own default; one node: zero-run picks a free port at run time instead
TRAIN_MODULE = "zero_planner.train"
"""What every rank runs (the entry module zero_planner/train.py): plan files record it, so it never moves."""
DS_CONFIG_NAME = "ds_config.json"
CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed")


def ds_config_path(plan: Plan, output_dir: str | None = None) -> str:
    """Returns where zero-run writes the plan's DeepSpeed JSON for a user script."""
    return str(Path(output_dir or plan.training.output_dir) / DS_CONFIG_NAME)


def encode_world_info(world: dict[str, list]) -> str:
    """Returns DeepSpeed's `--world_info`: {node: [device ids]} as URL-safe base64 JSON (runner.py
    encode_world_info). The per-node launcher numbers ranks node by node in this order."""
    return base64.urlsafe_b64encode(json.dumps(world).encode("utf-8")).decode("utf-8")


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks start and meet: one node by default (a free port picked by zero-run); several through a
    hostfile, or one node's ranks only through DeepSpeed's per-node launcher (`node_rank`)."""

    hostfile: str | None = None
    """DeepSpeed hostfile ('HOST slots=N' lines): every node started from here (pdsh/ssh)."""
    hosts: list[tuple[str, int]] | None = None
    """The hostfile's (host, slots), where it was read: checked against the plan; the first is the master."""
    master_addr: str | None = None
    """Node 0's address (default: the hostfile's first host); needed with `node_rank`."""
    master_port: int | None = None
    """The rendezvous port (default DEFAULT_MASTER_PORT)."""
    node_rank: int | None = None
    """This node's index: start its ranks only (`python -u -m deepspeed.launcher.launch --world_info=...`)."""
    visible_devices: Sequence[str] | None = None
    """This node's CUDA_VISIBLE_DEVICES with `node_rank` (GPU plans): its devices, else 0..gpus_per_node-1."""


def build_launch(
    plan: Plan,
    *,
    plan_path: str,
    script: str | None = None,
    script_args: Sequence[str] = (),
    config_flag: str = "--deepspeed_config",
    output_dir: str | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    overrides: Sequence[str] = (),
    where: Rendezvous = Rendezvous(),
) -> tuple[list[str], dict[str, str]]:
    """Returns (argv, env): the launcher argument list and the environment variables it adds.

    One node: `deepspeed --num_gpus`. Several (plan.hardware.nodes > 1 or a hostfile): `--hostfile`,
    `--num_nodes`, `--num_gpus` per node and `--master_addr`; `where` says how the ranks meet (Rendezvous).
    `script`: the user's own, given the JSON through `config_flag` (under `output_dir`); else zero-run's trainer
    with `max_steps`, `resume` and `overrides` (training flags, training_args.given) passed on.
    """
    hw, nodes = plan.hardware, plan.hardware.nodes
    hostfile, hosts, master_addr, master_port = where.hostfile, where.hosts, where.master_addr, where.master_port
    node_rank = where.node_rank
    argv = ["deepspeed"]
    if node_rank is not None:
        argv = _node_launcher(hw, nodes, node_rank, hostfile, master_addr, master_port, where.visible_devices)
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
        # can run out of memory. A value the user exported wins (run/launcher.py spawn), with a note.
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


def launch_command(plan: Plan, plan_path: str = "plan.json") -> list[str]:
    """Returns the launcher argument list stored in the plan (`launch.command`): the environment build_launch
    adds (DS_ACCELERATOR=cpu for cpu plans, PYTORCH_CUDA_ALLOC_CONF for GPU plans) leads it as `env K=V ...`, so it
    stays one runnable command."""
    hostfile = "hostfile" if plan.hardware.nodes > 1 else None
    argv, env = build_launch(plan, plan_path=plan_path, where=Rendezvous(hostfile=hostfile))
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]

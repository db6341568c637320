"""Before any rank starts: can this machine run the plan, and will the ranks find what they need.

    probe_machine(plan, output_dir) -> Machine       this node's GPUs, available host memory, free disk
    preflight(plan, machine, ...)   -> [problem]      GPUs, host memory, disk for what the run writes,
                                                      the monitors' packages
    check_inputs(plan, ...)                           raises InputError: weights, tokenizer, data, QLoRA, --resume
    check_rendezvous(node_rank, addr, port)           why this node cannot join node 0's rendezvous, or None
    fix_launch_env(plan, env, machine)                a TORCH_CUDA_ARCH_LIST DeepSpeed can parse

"Can this machine run the plan" only: the plan's coherence is pydantic's job (planfile.py). Reads files and asks
the driver; torch only for the GPUs' properties.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zero_planner.errors import InputError
from zero_planner.plan.dsconfig import monitors_enabled
from zero_planner.plan.memory import data_process_bytes
from zero_planner.plan.saves import DiskNeed, disk_need, exports_merged_model, size_text
from zero_planner.planfile import Plan
from zero_planner.run import checkpoint as ckpt
from zero_planner.run.data import check_local_data, detect_format, held_data_bytes, peek_columns, resolve_files
from zero_planner.run.tokenizer import TOKENIZER_FIX, check_tokenizer, has_chat_template

GPU_MEMORY_TOLERANCE = 0.10
"""A GPU may report up to 10% less memory than the catalog's figure for its type (16 GB T4 = 14.6 GiB)."""
MASTER_WAIT_S = 300
"""How long a node other than 0 waits for node 0's rendezvous port before refusing to start (seconds)."""


@dataclass(frozen=True)
class Machine:
    """What this node has, as preflight sees it; gpus is [(name, total bytes)], None when not probed."""

    gpus: list[tuple[str, int]] | None
    host_available_bytes: int
    disk_free_bytes: int
    notes: list[str] = field(default_factory=list)
    capabilities: list[tuple[int, int]] = field(default_factory=list)
    """CUDA compute capabilities of the GPUs (major, minor), for TORCH_CUDA_ARCH_LIST."""
    write_problem: str | None = None
    """Why nothing can be written under the output folder (a read-only file system, no permission), None when a
    file could be created there: told apart from a full disk, which free space alone cannot say."""


def write_problem(folder: Path) -> str | None:
    """Returns why a file cannot be created in `folder` (or the nearest existing folder above it), else None."""
    import errno
    import tempfile

    where = existing_parent(folder)
    try:
        fd, name = tempfile.mkstemp(prefix=".zero-run-write-check-", dir=where)
    except OSError as error:
        if error.errno == errno.EROFS:
            return f"{where} is on a read-only file system"
        if error.errno in (errno.EACCES, errno.EPERM):
            return f"{where} is not writable by this user (permission denied)"
        if error.errno == errno.ENOSPC:
            return None  # full, not read-only: the disk check says how much is needed
        return f"cannot create a file in {where}: {error.strerror}"
    os.close(fd)
    os.unlink(name)
    return None


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
                   capabilities=capabilities, write_problem=write_problem(Path(output_dir)))  # fmt: skip


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


def preflight(plan: Plan, machine: Machine, *, output_dir: str, start_step: int = 0, resume: bool = False,
              own_loop: bool = False, existing_checkpoints: int = 0) -> list[str]:  # fmt: skip
    """Returns one line per reason this machine cannot run the plan (empty when it can).

    start_step: the step a --resume continues from (fewer checkpoints left to write); existing_checkpoints: the
    complete checkpoints already there (a --resume prunes them as it saves: saves.disk_need); resume: the run reads a
    checkpoint first (its host peak); own_loop: zero-run's training loop runs the plan (not --script), so the plan's
    host phases are what its ranks hold, with the data it finds now (host_need). A user's script is checked for
    offload's host memory only."""
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
    need, phase = host_need(plan, resume=resume)
    if (own_loop or offload) and machine.host_available_bytes < need:
        what = f"offload ({plan.strategy.name or plan.strategy.stage})" if offload else "the run"
        problems.append(
            f"{what} needs {need / gib:.1f} GiB of host memory per node at its peak ({phase}); "
            f"{machine.host_available_bytes / gib:.1f} GiB is available: plan again with --cpu-mem "
            f"{int(machine.host_available_bytes / gib)}GiB, or free host memory"
        )
    if machine.write_problem is not None:
        problems.append(f"nothing can be written under {output_dir!r}: {machine.write_problem}; choose --output-dir "
                        "elsewhere")  # fmt: skip
    else:
        disk = disk_problem(plan, machine.disk_free_bytes, output_dir=output_dir, start_step=start_step,
                            existing_checkpoints=existing_checkpoints)  # fmt: skip
        if disk:
            problems.append(disk)
    problems += monitor_problems(plan.deepspeed_config)
    return problems


def host_need(plan: Plan, *, resume: bool = False) -> tuple[int, str]:
    """Returns (host bytes per node at the peak of this run, its phase): the plan's host phases that this run goes
    through (resume only with --resume, save only where checkpoints are saved, export unless nothing is kept),
    with the data its ranks will pack now in place of the data the plan counted (data.held_data_bytes: a file
    that grew since planning, or --dataset OTHER). Older plans without phases: their total; without a recorded
    dataset: as planned."""
    cpu, t = plan.estimate.cpu, plan.training
    phases = dict(cpu.phases) or {"train": cpu.total}
    skipped = {"resume": not resume, "save": t.save != "steps", "export": t.save == "none"}
    phases = {name: v for name, v in phases.items() if not skipped.get(name)} or {"train": cpu.total}
    if cpu.data_bytes is not None:
        held, peak, _ = held_data_bytes(t)
        g = plan.hardware.gpus_per_node
        more = (held - cpu.data_bytes) * g
        phases = {name: v + more for name, v in phases.items() if name != "load"}
        if peak:  # the load phase as memory.host_phase_peaks counts it: the process then and the data's peak
            phases = {"load": (data_process_bytes(plan.hardware.gpu == "cpu") + peak) * g, **phases}
    phase = max(phases, key=lambda name: phases[name])
    return phases[phase], phase


def run_disk_need(plan: Plan, *, start_step: int = 0, existing_checkpoints: int = 0, **save) -> DiskNeed:
    """Returns what this plan's run writes under its output folder (saves.disk_need), with its save policy,
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
                     start_step=start_step, scratch_bytes=scratch, existing_checkpoints=existing_checkpoints,
                     **policy)  # fmt: skip


def save_alternatives(plan: Plan, *, start_step: int = 0, existing_checkpoints: int = 0) -> list[tuple[str, DiskNeed]]:
    """Returns (flag, what the run would write with it) for each save setting that writes less than the plan's,
    largest first: the total limit 1, one checkpoint at the end, --save final, --save none."""
    t = plan.training
    here = {"start_step": start_step, "existing_checkpoints": existing_checkpoints}
    need = run_disk_need(plan, **here)
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
        other = run_disk_need(plan, **here, **save)
        if other.total_bytes < need.total_bytes and all(other.total_bytes != o.total_bytes for _, o in out):
            out.append((flag, other))
    return sorted(out, key=lambda option: -option[1].total_bytes)


def disk_problem(plan: Plan, free_bytes: int, *, output_dir: str, start_step: int = 0,
                 existing_checkpoints: int = 0) -> str | None:  # fmt: skip
    """Returns the one line refusing a run whose files do not fit in `free_bytes` (None when they fit): what the
    run writes, and each save setting that keeps less with what it needs, the ones that fit named first. Sizes in
    the unit that shows them (saves.size_text: MiB below 1 GiB)."""
    here = {"start_step": start_step, "existing_checkpoints": existing_checkpoints}
    need = run_disk_need(plan, **here)
    if free_bytes >= need.total_bytes:
        return None
    parts = []
    if need.checkpoints:
        s = "s" if need.checkpoints > 1 else ""
        more = " more" if existing_checkpoints else ""
        parts.append(f"{need.checkpoints}{more} DeepSpeed checkpoint{s} of {size_text(need.checkpoint_bytes)}"
                     + (" at once" if need.checkpoints > 1 else ""))  # fmt: skip
    if existing_checkpoints:
        parts.append(f"the {existing_checkpoints} already there pruned as it saves")
    if need.export_bytes:
        parts.append(f"the final {'adapter' if plan.training.method != 'full' else 'model'} "
                     f"{size_text(need.export_bytes)}")  # fmt: skip
    if need.scratch_bytes:
        parts.append(f"QLoRA's random 16-bit base {size_text(need.scratch_bytes)}")
    line = (f"this run writes up to {size_text(need.total_bytes)} under {output_dir!r} ({', '.join(parts)}; "
            f"{describe_save(plan)}); {size_text(free_bytes)} is free")  # fmt: skip
    options = []
    for flag, other in save_alternatives(plan, **here):  # largest first, up to the first that fits
        fits = other.total_bytes <= free_bytes
        options.append(f"{flag} {size_text(other.total_bytes)}{' (fits)' if fits else ''}")
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
    bitsandbytes, --resume with no complete checkpoint to resume from, and --resume from checkpoints another number
    of ranks wrote. Reads files only (no torch)."""
    import importlib.util

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
        ckpt_dir = Path(output_dir or t.output_dir) / ckpt.CHECKPOINTS_DIR
        skipped: list[str] = []
        usable = ckpt.usable_checkpoints(ckpt_dir, warn=skipped.append)
        if not usable:
            broken = f" ({len(skipped)} incomplete or damaged: {skipped[0]})" if skipped else ""
            raise InputError(f"--resume: no complete checkpoint under {ckpt_dir} to continue from{broken}; drop "
                             f"--resume to start from step 0 (or --resume-if-any for either)")  # fmt: skip
        if usable:
            step, path = usable[0]
            written = ckpt.read_state(path).get("world_size")
            if written != plan.hardware.world_size:
                raise InputError(f"--resume: checkpoint {path} was written by {written} ranks; this plan has "
                                 f"{plan.hardware.world_size} (resume with the plan it was trained with)")  # fmt: skip


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def check_sources_offline(plan: Plan) -> None:
    """Raises InputError when the plan's pretrained weights or its tokenizer are not in this machine's Hugging
    Face cache (HF_HUB_OFFLINE set: nothing can be fetched). Reads the cache only (huggingface_hub, no torch)."""
    from zero_planner.run.modeling import resolve_pretrained
    from zero_planner.run.tokenizer import _tokenizer_folder

    m, t = plan.model, plan.training
    source = (m.load_path or m.weights_path) if m.init == "pretrained" else None
    if source is not None:
        resolve_pretrained(source)
    if t.tokenizer not in (None, "bytes"):
        _tokenizer_folder(t.tokenizer)
    elif t.tokenizer is None and source is None and m.source in ("hub", "catalog") and m.hub_id:
        _tokenizer_folder(m.hub_id)

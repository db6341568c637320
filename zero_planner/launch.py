"""zero-run: the command line (build_parser, run, main) above the pieces of running a plan in run/.

    zero-run PLAN.json [--dry-run] [--hostfile FILE] [--max-steps N] [--output-dir DIR] [--resume]
    zero-run PLAN.json --script TRAIN.py -- ARGS...
    zero-run PLAN.json --node-rank N --master-addr ADDR [--master-port P]     (on every node, N = 0..nodes-1)
    zero-run PLAN.json --slurm [--submit] [--slurm-option=--partition=gpu ...]
    zero-run PLAN.json --probe K [--probe-only]

Several nodes, three ways: a hostfile (DeepSpeed's runner reaches the other nodes through pdsh/ssh); one
zero-run per node started by whatever starts processes there (`--node-rank`: DeepSpeed's per-node launcher,
what `deepspeed --no_ssh --node_rank` runs); `--slurm`, an sbatch script whose srun starts that per-node
command on every node (run/slurm.py).

An entry point, above the two peers it joins: --probe (run/probe.py) measures candidates and then comes back to
`run` with the probed plan. The command and its environment come from one pure function, plan/command.py's
`build_launch` (argv, env); the checks before launching are run/preflight.py's; run/launcher.py's `spawn` is the
only place a process is started. This module's path is named by pyproject's zero-run script and by the sbatch
scripts --slurm writes (`python -m zero_planner.launch`), so it stays here. No torch or deepspeed import at module
level: zero-run must start fast and `--dry-run` needs neither.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from zero_planner.errors import InputError, InputErrorParser, left_by_the_reader
from zero_planner.plan import saves
from zero_planner.plan.command import CONFIG_FLAGS, DEFAULT_MASTER_PORT, Rendezvous, build_launch, ds_config_path
from zero_planner.planfile import load_plan
from zero_planner.run import checkpoint as ckpt
from zero_planner.run import faults, launcher, lock, preflight, probe, slurm
from zero_planner.run.training_args import add_training_arguments, apply_training_args, given, positive_int

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
SCRIPT_FLAGS = ("--lr", "--report-to")
"""Training flags a --script run takes too: they change the DeepSpeed JSON it is handed (optimizer lr, monitor)."""


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


_Parser = InputErrorParser


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
                        f"long to wait for node 0's rendezvous (default {preflight.MASTER_WAIT_S})")  # fmt: skip
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
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint (an "
                        "error when there is none)")  # fmt: skip
    parser.add_argument("--resume-if-any", action="store_true", help="continue from the latest complete checkpoint "
                        "if there is one, else start from step 0 (a job that may be requeued)")  # fmt: skip
    parser.add_argument("--probe", metavar="K", help="first run the plan's K best candidates a few steps each, write "
                        "PLAN.probed.json, and train with the fastest measured")  # fmt: skip
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


def run(args: argparse.Namespace, script_args: Sequence[str] = ()) -> int:
    """Checks, then launches (or prints, with --dry-run; writes an sbatch script with --slurm); returns the exit
    status."""
    check_modes(args)
    if getattr(args, "probe", None) is not None or getattr(args, "probe_only", False):
        return probe_then_run(args, script_args)  # probes, then comes back here with PLAN.probed.json
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
    if args.resume_if_any:
        if args.resume:
            raise InputError("--resume and --resume-if-any: give one (--resume-if-any also starts a run with nothing "
                             "to resume)")  # fmt: skip
        args.resume = args.script is None and resume_step(output_dir) > 0
    hosts = parse_hostfile(_read(args.hostfile, "hostfile")) if args.hostfile else None
    if args.script is not None and not Path(args.script).is_file():
        raise InputError(f"--script {args.script!r} does not exist")
    if args.script is None:
        # What the ranks would find only after the launcher started them: exit 2 now (--dry-run included).
        preflight.check_inputs(plan, resume=args.resume, output_dir=output_dir)
    if args.slurm:
        return slurm.write_sbatch(args, plan, script_args, output_dir)
    per_node = args.node_rank is not None
    # Every node must agree on the port: a free one is picked only where one node is the whole run.
    port = args.master_port or (DEFAULT_MASTER_PORT if args.dry_run or per_node else launcher.free_port())
    where = Rendezvous(hostfile=args.hostfile, hosts=hosts, master_addr=args.master_addr, master_port=port,
                       node_rank=args.node_rank, visible_devices=preflight.visible_devices())  # fmt: skip
    argv, env = build_launch(plan, plan_path=str(Path(args.plan).absolute()), script=args.script,
                             script_args=script_args, config_flag="--" + args.config_flag, output_dir=args.output_dir,
                             max_steps=args.max_steps, resume=args.resume, overrides=overrides,
                             where=where)  # fmt: skip
    shown = " ".join([*(f"{k}={v}" for k, v in sorted(env.items())), shlex.join(launcher.runnable(argv))])
    if args.dry_run:
        print(shown)
        print(json.dumps(plan.deepspeed_config, indent=2))
        return 0

    problems = _refusals(plan, args, env, output_dir, port)
    if problems:
        where = f"node {args.node_rank}: " if per_node else ""
        for line in problems:
            print(f"zero-run: refusing to launch: {where}{line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    command = ["zero-run", args.plan, *(["--output-dir", args.output_dir] if args.output_dir else [])]
    try:
        held = lock.acquire(output_dir, command=command, node_rank=args.node_rank,
                            say=lambda line: print(f"zero-run: note: {line}", file=sys.stderr))  # fmt: skip
    except OSError as error:
        raise InputError(f"cannot write under --output-dir {output_dir!r}: {error.strerror}") from None
    fault_dir = tempfile.mkdtemp(prefix="zero-run-faults-")
    try:
        for stale in [*Path(output_dir).glob("oom_rank*.json"), *Path(output_dir).glob(f"{faults.FAULT_PREFIX}*.json")]:
            stale.unlink()
        if args.script is not None:
            Path(ds_config_path(plan, output_dir)).write_text(json.dumps(plan.deepspeed_config, indent=2) + "\n")
        print(f"zero-run: {shown}", flush=True)
        rc, signals = launcher.spawn(argv, {**env, faults.FAULT_DIR_ENV: fault_dir}, multi_node=bool(args.hostfile),
                                     node_launcher=per_node, heartbeat=held.refresh,
                                     heartbeat_s=lock.REFRESH_S)  # fmt: skip
        return _explain_exit(rc, signals, output_dir, args, save=plan.training.save if args.script is None else "steps",
                             adapters=plan.training.method != "full", overrides=overrides,
                             fault_dir=fault_dir)  # fmt: skip
    finally:
        held.release()
        shutil.rmtree(fault_dir, ignore_errors=True)


def _refusals(plan, args: argparse.Namespace, env: dict[str, str], output_dir: str, port: int) -> list[str]:
    """Returns why this machine cannot launch the plan now (preflight: memory, disk, data, the checkpoint resumed
    from, and for a per-node launch node 0's rendezvous); [] when it can. DeepSpeed's own parser and offline
    sources are checked first (InputError: exit 2), and `env` is fixed for this machine (preflight.fix_launch_env,
    its note printed)."""
    per_node = args.node_rank is not None
    # DeepSpeed's own parser, as each rank's deepspeed.initialize would, on the accelerator the ranks are given
    check_deepspeed_config(plan, args.plan, accelerator=env.get("DS_ACCELERATOR"))
    if args.script is None and (plan.hardware.nodes == 1 or per_node) and preflight._hub_offline():
        preflight.check_sources_offline(plan)  # one line and exit 2 now, rather than from inside the ranks
    machine = preflight.probe_machine(plan, output_dir)
    resuming = args.resume and args.script is None
    existing = ckpt.usable_checkpoints(Path(output_dir) / ckpt.CHECKPOINTS_DIR) if resuming else []
    start_step = existing[0][0] if existing else 0
    problems = preflight.preflight(plan, machine, output_dir=output_dir, start_step=start_step, resume=args.resume,
                                   own_loop=args.script is None, existing_checkpoints=len(existing))  # fmt: skip
    note = preflight.fix_launch_env(plan, env, machine)
    if note:
        print(f"zero-run: note: {note}", file=sys.stderr)
    if per_node and not problems:
        wait_s = args.master_wait if args.master_wait is not None else preflight.MASTER_WAIT_S
        problem = preflight.check_rendezvous(args.node_rank, args.master_addr, port, wait_s=wait_s,
                                   say=lambda line: print(line, file=sys.stderr, flush=True))  # fmt: skip
        problems += [problem] if problem else []
    return problems


def check_deepspeed_config(plan, path: str, *, accelerator: str | None = None) -> None:
    """Raises InputError when DeepSpeed's own config parser refuses the plan's deepspeed_config (a stage 7, a
    micro-batch of -1): found here, before any rank starts, not as a traceback in each. Imports deepspeed (the
    launch needs it anyway; --dry-run does not call this). Without deepspeed installed the launch itself fails.

    `accelerator` is the DS_ACCELERATOR the ranks are launched with: DeepSpeed picks its accelerator at first use
    and logs a WARNING when it falls back to the CPU by itself, which a CPU run's user would read as a fault."""
    import importlib.util

    from zero_planner.plan.dsconfig import validate_ds_config

    if importlib.util.find_spec("deepspeed") is None:
        return
    exported = os.environ.get("DS_ACCELERATOR")
    if accelerator and exported is None:
        os.environ["DS_ACCELERATOR"] = accelerator
    try:
        validate_ds_config(plan.deepspeed_config)
    except ValueError as error:
        text = " ".join(str(error).split())
        raise InputError(f"plan file {path!r}: deepspeed_config is invalid: {text[:400]}") from None
    finally:
        if exported is None:
            os.environ.pop("DS_ACCELERATOR", None)


def continue_command(args: argparse.Namespace, overrides: Sequence[str] = ()) -> str:
    """Returns the zero-run command that continues this run: the same plan, output folder, length, launch
    options and training overrides, with --resume."""
    argv = ["zero-run", args.plan, "--resume"]
    for flag, value in (("--output-dir", args.output_dir), ("--max-steps", args.max_steps),
                        ("--hostfile", args.hostfile), ("--master-addr", args.master_addr),
                        ("--node-rank", getattr(args, "node_rank", None))):  # fmt: skip
        if value is not None:
            argv += [flag, str(value)]
    return shlex.join([*argv, *overrides])


def probe_then_run(args: argparse.Namespace, script_args: Sequence[str] = ()) -> int:
    """zero-run PLAN --probe K [--probe-only]: probes (run/probe.py), writes PLAN.probed.json, then trains with it
    (unless --probe-only); returns the exit status. --dry-run lists the launches without running them."""
    count = probe.probe_count(args.probe) if args.probe is not None else probe.DEFAULT_PROBE_COUNT
    if args.resume:
        raise InputError("--probe chooses a new plan and --resume continues an existing run; give one of them")
    # Checked now as well as by run, so a bad value does not wait for the probe to finish.
    if args.max_steps is not None and args.max_steps < 1:
        raise InputError(f"--max-steps {args.max_steps} must be at least 1")
    if args.script is not None and not Path(args.script).is_file():
        raise InputError(f"--script {args.script!r} does not exist")
    plan = load_plan(args.plan)
    if not probe.ranked_candidates(plan):
        raise InputError(f"plan file {args.plan!r} lists no candidate that fits; nothing to probe")
    apply_training_args(plan, args, planning=False)  # the flags given: the probe trains as the run after it will
    preflight.check_inputs(plan)  # each candidate's ranks train on this data with this tokenizer: exit 2 now
    hosts = parse_hostfile(_read(args.hostfile, "hostfile")) if args.hostfile else None
    if args.dry_run:
        runner = probe.LaunchRunner(Path("PROBE_DIR"), probe.PROBE_STEPS, hostfile=args.hostfile, hosts=hosts,
                                    master_addr=args.master_addr)  # fmt: skip
        print(probe.selection_text(plan, count, probe.PROBE_STEPS))
        for n, index in enumerate(probe.probe_order(plan, count), 1):
            one = probe.candidate_plan(plan, index)
            argv, env = runner.argv(one, Path("PROBE_DIR/plan.json"), Path("PROBE_DIR/out"), DEFAULT_MASTER_PORT)
            shown = " ".join([*(f"{k}={v}" for k, v in sorted(env.items())), shlex.join(argv)])
            print(f"probe {n}: {probe.describe(plan.candidates[index])}: {shown}")
        return 0
    result, out_path, measured = probe.probe_and_write(args.plan, count, hostfile=args.hostfile, hosts=hosts,
                                                       master_addr=args.master_addr, overrides=args)  # fmt: skip
    if measured.interrupted:
        return EXIT_INTERRUPTED
    if result.probe.chosen is None:
        print("zero-run: no probed candidate ran; not training (see the statuses above)", file=sys.stderr)
        return 1
    if args.probe_only:
        print(f"Train with it: zero-run {shlex.quote(str(out_path))}")
        return 0
    args.plan, args.probe, args.probe_only = str(out_path), None, False
    return run(args, script_args)


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


def _explain_exit(rc: int, signals: int, output_dir: str, args: argparse.Namespace, *, save: str = "steps",
                  adapters: bool = False, overrides: Sequence[str] = (), fault_dir: str | None = None) -> int:  # fmt: skip
    """Returns zero-run's exit status for the launcher's, and prints the one line that says what happened and how
    to go on: an OOM's record, an interruption, a fault a rank recorded (disk full, a read-only folder, a lost
    peer), or a rank that died without a word (killed)."""
    if rc == 0 and not signals:
        return 0
    ooms = sorted(Path(output_dir).glob("oom_rank*.json"))
    if ooms:
        message = json.loads(ooms[0].read_text()).get("message", "out of memory")
        print(f"zero-run: {message}", file=sys.stderr)
        return rc or 1
    every = " on every node" if getattr(args, "node_rank", None) is not None else ""
    resume = continue_command(args, overrides) + every
    if signals:
        print(f"zero-run: interrupted; {saves.after_interruption(save, output_dir, adapters=adapters, resume=resume)}",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED
    if rc == EXIT_BAD_INPUT:
        return rc  # a rank found bad input (a hub dataset, a tokenizer) and said so in one line already
    if args.script is not None:
        print(f"zero-run: your script exited with status {rc} (its error is above)", file=sys.stderr)
        return rc if rc > 0 else 1
    fault = faults.read_fault(Path(output_dir), *([Path(fault_dir)] if fault_dir else []))
    kept = faults.kept_text(Path(output_dir), save=save, adapters=adapters)
    resumable = save == "steps" and resume_step(output_dir) > 0
    again = shlex.join([a for a in shlex.split(continue_command(args, overrides)) if a != "--resume"])
    go_on = f"continue with: {resume}" if resumable else f"run again: {again}"
    if fault is not None:
        print(f"zero-run: {fault['message']}; {kept}; {go_on}", file=sys.stderr)
        return rc if rc > 0 else 1
    print(f"zero-run: a rank failed (launcher status {rc}): its error is above, or none if it was killed (out of "
          f"host memory?); {kept}; {go_on}", file=sys.stderr)  # fmt: skip
    return rc if rc > 0 else 1


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
    except BrokenPipeError:  # the output's reader went away (zero-run --dry-run | head): no traceback for that
        return left_by_the_reader()


if __name__ == "__main__":
    sys.exit(main())

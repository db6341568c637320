"""zero-run's training entry point, run on every rank by the `deepspeed` launcher.

    python -m zero_planner.train --plan PLAN.json [--output-dir DIR] [--max-steps N] [--resume]

One optimizer step is the reference step of docs/design.md: forward with labels=input_ids, engine.backward,
engine.step (once per micro-batch; DeepSpeed steps the optimizer at the accumulation boundary). Peaks are
measured from just after deepspeed.initialize (and the checkpoint load), as benchmarks/gpu_step.py does.

Tasks: causal-lm (packed blocks, labels=input_ids) and seq-cls (one padded example per row with its
attention mask, labels = the class). Methods: full; lora (peft adapters on the frozen base; only the
adapters, and for seq-cls the classification head, reach DeepSpeed's optimizer); qlora (the same on a 4-bit
NF4 base through bitsandbytes: CUDA only).

Outputs under OUTPUT_DIR, by training.save (plan/saves.py: checkpoint_due, exports_model): checkpoints/step{N}/
(save steps: LoRA checkpoints hold the trainable parameters only, the base is rebuilt from the plan on resume),
final/ (a consolidated Hugging Face folder; for LoRA the merged model, written below ZeRO-3 only) and
final-adapter/ (LoRA/QLoRA: the peft adapter folder), unless save is none; always run_report.json and its
picture run_report.html (report_page.py); logs/ with --report-to tensorboard or csv (DeepSpeed's monitor); and
oom_rank{N}.json when a rank ran out of memory.

Several nodes: before any heavy work every rank reports its plan and data digests (fingerprint.py) and the run
stops with one line naming the first rank that differs. Where the nodes do not share OUTPUT_DIR (each writes
to its own disk), checkpoints are node-local: DeepSpeed's `checkpoint.use_node_local_storage` makes each
node's first rank save the module states beside its ranks' optimizer partitions, and each node marks and
prunes its own checkpoints; final/ and run_report.json are written on node 0.

Exit status: 0 done; 2 bad input; 3 out of memory; 128+signal when stopped by SIGINT/SIGTERM after saving.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zero_planner.errors import InputError
from zero_planner.plan import saves
from zero_planner.plan.memory import (
    EXPORT_SHARD_BYTES,  # shards written one at a time (memory.host_phase_peaks counts one)
)
from zero_planner.planfile import Plan, load_plan
from zero_planner.run import checkpoint as ckpt
from zero_planner.run import faults
from zero_planner.run.training_args import add_training_arguments, apply_training_args

EXIT_BAD_INPUT = 2
EXIT_OOM = 3
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m zero_planner.train", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--plan", required=True, help="plan file written by zero-plan")
    parser.add_argument("--output-dir", default=None, help="overrides training.output_dir")
    parser.add_argument("--max-steps", type=int, default=None, help="overrides training.max_steps")
    parser.add_argument("--resume", action="store_true", help="continue from the latest complete checkpoint")
    parser.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)  # set by the launcher
    add_training_arguments(parser, run=True)
    return parser


def main(argv: list[str] | None = None, *, writers: Writers | None = None) -> int:
    """Runs the rank's part of the plan; returns the exit status. `writers`: what the run writes besides
    run_report.json (WRITES; zero-run --probe's ranks pass NO_WRITES)."""
    from zero_planner.quiet import quiet_training_run

    quiet_training_run()  # before torch, deepspeed and bitsandbytes are imported
    remember_cpu_info()  # before DeepSpeed loads its ops
    args = build_parser().parse_args(argv)
    try:
        plan = load_plan(args.plan)
        apply_training_args(plan, args, planning=False)
        if plan.hardware.gpu != "cpu":
            # Before CUDA starts: the memory plan assumes it. zero-run's launcher sets it on this node, but the
            # deepspeed launcher does not forward PYTORCH_* variables to other nodes (runner.py EXPORT_ENVS).
            from zero_planner.plan.memory import ALLOC_CONF

            os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", ALLOC_CONF)
        return train(
            plan,
            output_dir=Path(args.output_dir or plan.training.output_dir),
            max_steps=args.max_steps if args.max_steps is not None else plan.training.max_steps,
            resume=args.resume,
            writers=writers,
        )
    except InputError as error:
        # Once per node: across nodes each node's zero-run shows its own output.
        if int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))) == 0:
            print(f"zero-run: error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT


def remember_cpu_info() -> None:
    """Makes py-cpuinfo's get_cpu_info() answer from its first result in this process.

    Each call probes the CPU in a fresh Python subprocess (1.0-1.3 s here), and DeepSpeed's op builders call it
    twice for every op they load (OpBuilder.cpu_arch and simd_width, to name the op's compiler flags): four
    probes per CPU rank (the shared-memory collectives and FusedAdam), more with CPU Adam. The CPU a process
    runs on does not change, so the first answer stands for the rest; the result is the library's own."""
    try:
        import cpuinfo
    except ImportError:  # DeepSpeed falls back to lscpu
        return
    if not hasattr(cpuinfo.get_cpu_info, "cache_info"):
        cpuinfo.get_cpu_info = functools.lru_cache(maxsize=1)(cpuinfo.get_cpu_info)


def _exit_cleanly(code: int) -> None:
    """Flushes output, tears the process group down and leaves without running C++ static destructors.

    A plain interpreter exit intermittently aborted a rank after training had finished ("terminate called
    without an active exception", launcher status 250; seen in CI under load): the communication backend's
    threads were still joinable when Python destroyed them. os._exit skips that teardown.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    release_shm_buffer()
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # leaving anyway; the run's results are already written
        pass
    os._exit(code)


def release_shm_buffer() -> None:
    """Removes this rank's DeepSpeed shared-memory all-reduce buffer (CPU runs), which DeepSpeed never does.

    deepspeed/ops/csrc/cpu/comm/shm.cpp creates /dev/shm/deepspeed_allreduce_buffer_*_ADDR_PORT_RANK (66 MB
    per rank) and has a shared_close() that nothing calls: 288 leaked files held 19 GB of this machine's
    24 GiB after a day of tests. Called after the run's last collective; peers' mappings stay valid.
    """
    addr, port, rank = (os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK"))
    if not (addr and port and rank):
        return
    for path in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{addr}_{port}_{rank}"):
        path.unlink(missing_ok=True)


class StopRequest:
    """Remembers the first SIGINT/SIGTERM; the loop finishes its step, saves, and leaves."""

    def __init__(self):
        self.signum = 0

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        # The launcher forwards a signal it got too, so a second one is expected and changes nothing.
        self.signum = self.signum or signum


def pretrained_source(plan: Plan) -> str | None:
    """Returns what from_pretrained reads (a folder or hub id) for a pretrained plan, None for random init.

    Plans written before load_path existed name a weights folder only (weights_path)."""
    if plan.model.init != "pretrained":
        return None
    source = plan.model.load_path or plan.model.weights_path
    if source is None:
        raise InputError(f"the plan says pretrained weights for {plan.model.name!r} but names no load_path")
    return source


def has_weights(path: str | None) -> bool:
    """Returns True when `path` is a folder holding model weight files."""
    if not path or not Path(path).is_dir():
        return False
    return any(p.suffix in WEIGHT_SUFFIXES for p in Path(path).iterdir())


class Ranks:
    """The process group's facts and the few collectives the loop needs (torch imported lazily)."""

    def __init__(self):
        import deepspeed
        import torch
        import torch.distributed as dist
        from deepspeed.accelerator import get_accelerator

        deepspeed.init_distributed()
        self.dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.node = int(os.environ.get("CROSS_RANK", "0"))  # set by DeepSpeed's per-node launcher
        self.on_cuda = get_accelerator().device_name() == "cuda"
        if self.on_cuda:
            visible = torch.cuda.device_count()
            if self.local_rank >= visible:
                import socket

                message = (f"node {self.node} ({socket.gethostname()}) has {visible} GPUs visible; rank {self.rank} "
                           f"needs GPU {self.local_rank} (the plan's gpus_per_node on every node)")  # fmt: skip
                if self.local_rank == visible > 0:  # the first rank short of a GPU says it (main prints rank 0's)
                    print(f"zero-run: error: {message}", file=sys.stderr, flush=True)
                raise InputError(message)
            torch.cuda.set_device(self.local_rank)
        self.device = torch.device(f"cuda:{self.local_rank}" if self.on_cuda else "cpu")
        self.checkpoint_writer = self.rank == 0
        """Marks and prunes checkpoints: rank 0, or each node's first rank when checkpoints are node-local."""

    def barrier(self) -> None:
        # The device named, as torch asks (NCCL otherwise guesses it and warns at every checkpoint).
        self.dist.barrier(device_ids=[self.local_rank] if self.on_cuda else None)

    def any(self, flag: bool | int) -> int:
        """Returns the largest `flag` over all ranks (0 when none raised it)."""
        import torch

        if self.world_size == 1:
            return int(flag)  # the loop asks every step: no all-reduce and device round trip for one rank
        t = torch.tensor([int(flag)], dtype=torch.int64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return int(t.item())

    def all_ok(self, ok: bool) -> bool:
        return self.any(not ok) == 0

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Returns rank 0's `obj` on every rank."""
        out = [obj]
        self.dist.broadcast_object_list(out, src=0)
        return out[0]


def train(plan: Plan, *, output_dir: Path, max_steps: int, resume: bool = False,
          writers: Writers | None = None) -> int:
    """Trains the planned model to `max_steps` optimizer steps; returns the exit status.

    The steps below, in order: start the ranks (_start_ranks), adapt the DeepSpeed JSON to this output folder
    (_run_ds_config), read weights, tokenizer and data, rank 0 first (_load_inputs), build the engine and resume
    (_build_engine, _resume), train with evaluation and checkpoints (_train_loop), export the final model
    (_export_final), and report (_report). Out of GPU memory anywhere, the rank records it and leaves (EXIT_OOM).
    Checkpoints and the final model are written through `writers` (WRITES when None; the probe's NO_WRITES).
    """
    import torch

    from zero_planner.plan.throughput import warmup_steps as timing_warmup_steps  # not the LR warm-up below

    t = plan.training
    writers = writers or WRITES
    _refuse_unavailable_method(plan)
    stop = StopRequest()
    stop.install()
    ranks, meter, console = _start_ranks(plan)
    ds_config, node_local = _run_ds_config(plan, output_dir, ranks)
    ckpt_dir = output_dir / ckpt.CHECKPOINTS_DIR
    micro, accum = t.micro_batch_size, t.gradient_accumulation_steps
    stage = ds_config.get("zero_optimization", {}).get("stage", 0)
    peft = t.method in ("lora", "qlora")

    inputs = _load_inputs(plan, ranks)
    order = _block_order(plan, ranks, len(inputs.blocks))
    steps_per_epoch = len(inputs.blocks) / (ranks.world_size * micro * accum)
    max_steps = run_length(max_steps, t.epochs, steps_per_epoch)

    torch.manual_seed(t.seed)
    try:
        engine, attn, trainable, warmup_steps = _build_engine(plan, ds_config, ranks, meter, weights=inputs.weights,
                                                              pad_token_id=inputs.pad_token_id,
                                                              scratch_dir=output_dir, max_steps=max_steps)  # fmt: skip
        start_step, losses, evals = 0, [], []
        if resume:
            meter.enter("resume")
            start_step, losses, evals = _resume(engine, ckpt_dir, ranks, console, ranks.world_size, peft=peft)
        # --save-total-limit never prunes the checkpoint this run continues from.
        resumed_from = ckpt_dir / ckpt.tag_for(start_step) if start_step else None
    except torch.OutOfMemoryError as error:
        _leave_out_of_memory(plan, output_dir, rank=ranks.rank, phase=meter.current or "load", step=0, error=error)
    if ranks.on_cuda:
        torch.cuda.synchronize()
        # Init-time transients are returned to the device before training (the steps' peaks are their own).
        torch.cuda.empty_cache()
    meter.enter("train")
    run = Run(engine, plan, ranks, meter, console, inputs, output_dir=output_dir, max_steps=max_steps, stage=stage,
              warm=timing_warmup_steps(stage, accum), node_local=node_local, resumed_from=resumed_from)  # fmt: skip

    if node_local:
        console.print(f"checkpoints: node-local (the nodes do not share {output_dir}; each saves its own part there)")
    console.print(_start_line(run, ds_config, attn=attn, trainable=trainable, steps_per_epoch=steps_per_epoch,
                              warmup_steps=warmup_steps, start_step=start_step))  # fmt: skip
    state = LoopState(step=start_step, losses=losses, eval_losses=evals, resumed_from_step=start_step,
                      writers=writers)
    try:
        _train_loop(run, stop, state, order)
        _export_final(run, state, start_step)
    except torch.OutOfMemoryError as error:
        _leave_out_of_memory(plan, output_dir, rank=ranks.rank, phase=state.phase, step=state.step + 1, error=error)
    except Exception as error:  # noqa: BLE001 - a fault (disk, folder, lost peer) becomes one line; others re-raise
        _leave_on_fault(plan, output_dir, ranks, state, error)
    try:
        _report(run, state)
    except Exception as error:  # noqa: BLE001
        state.phase = "report"
        _leave_on_fault(plan, output_dir, ranks, state, error)
    ranks.barrier()
    # Interrupted or not, a rank that saved what it had leaves with 0: DeepSpeed's launcher logs an [ERROR] line for
    # any other status and kills the peers (launch.py sigkill_handler), which a Ctrl-C's user would read as a
    # failure. The interruption is zero-run's to say: run_report.json's status, and its launcher's exit status 130
    # from the signal it forwarded (launch._explain_exit, run/probe.outcome_of).
    return 0


def _refuse_unavailable_method(plan: Plan) -> None:
    """Raises InputError when the plan's method cannot run here (QLoRA without CUDA and bitsandbytes), before the
    process group starts, so that every rank leaves at once with the same line."""
    if plan.training.method == "qlora":
        from zero_planner.run.modeling import qlora_unavailable_reason

        why = qlora_unavailable_reason(_accelerator_is_cuda())
        if why:
            raise InputError(why)


def _start_ranks(plan: Plan):
    """Returns (Ranks, PhaseMeter in phase "load", console) once the process group is up, after checking that the
    launch matches the plan: as many ranks as it names, all of them training the same plan on the same data."""
    from zero_planner.run.meter import PhaseMeter, emulate_memory_limit

    ranks = Ranks()
    if ranks.on_cuda:
        emulate_memory_limit(ranks.local_rank)  # benchmarks only (ZERO_RUN_MEMORY_LIMIT_BYTES): a smaller card
    meter = PhaseMeter(ranks.on_cuda)
    meter.enter("load")
    console = _console(ranks.rank)
    if ranks.world_size != plan.hardware.world_size:
        raise InputError(
            f"the plan is for {plan.hardware.world_size} ranks "
            f"(nodes({plan.hardware.nodes}) * gpus_per_node({plan.hardware.gpus_per_node})) "
            f"but {ranks.world_size} were launched"
        )
    check_same_run(plan, ranks)
    return ranks, meter, console


def _run_ds_config(plan: Plan, output_dir: Path, ranks: Ranks) -> tuple[dict[str, Any], bool]:
    """Returns (the DeepSpeed JSON this run hands to deepspeed.initialize, whether checkpoints are node-local), and
    creates `output_dir`.

    The plan's JSON, plus: node-local checkpoint storage where the nodes do not share `output_dir` (each node's
    first rank then marks and prunes its own checkpoints: ranks.checkpoint_writer), and the monitor of
    --report-to writing under `output_dir`, wherever the ranks start."""
    output_dir.mkdir(parents=True, exist_ok=True)
    ds_config = dict(plan.deepspeed_config)
    node_local = plan.hardware.nodes > 1 and not shared_output_dir(output_dir, ranks)
    if node_local:
        # Only where rank 0's folder is not everyone's: on a shared one, two nodes would write one file at once.
        ds_config["checkpoint"] = {**ds_config.get("checkpoint", {}), "use_node_local_storage": True}
        ranks.checkpoint_writer = ranks.local_rank == 0
    if plan.training.report_to:
        from zero_planner.plan.dsconfig import with_monitor

        ds_config = with_monitor(ds_config, plan.training.report_to, str(output_dir.absolute()))
    return ds_config, node_local


@dataclass(frozen=True)
class RunInputs:
    """What a run reads before the model is built: the weights' source, the tokenizer and the data blocks."""

    source: str | None
    """What from_pretrained reads (a folder or hub id; pretrained_source), None for random init."""
    weights: str | None
    """The local folder holding those weights (hub files downloaded), None for random init."""
    tokenizer: Any
    pad_token_id: int | None
    """seq-cls: the token that pads each example to seq_len (None for causal-lm)."""
    blocks: Any
    """Training rows: seq_len-token blocks (causal-lm) or padded examples with their labels (seq-cls)."""
    eval_blocks: Any
    """The eval split's blocks, None without one (seq-cls has none)."""
    data_format: str
    """text, chat or prompt-response (data.load_lm_splits); text for seq-cls."""


def _load_inputs(plan: Plan, ranks: Ranks) -> RunInputs:
    """Returns the run's weights, tokenizer and data, read by rank 0 ahead of the others so that hub files and
    datasets are downloaded and prepared (and cached) once.

    Bad input raises InputError on rank 0 before the others read anything; every rank then learns it from the
    all-reduce and leaves with the same one-line error."""
    from zero_planner.run import data as zdata
    from zero_planner.run.modeling import resolve_pretrained
    from zero_planner.run.tokenizer import load_tokenizer

    t = plan.training
    source = pretrained_source(plan)
    if ranks.rank != 0:
        import datasets

        datasets.disable_progress_bars()  # one progress bar (rank 0's) is enough
        if not ranks.all_ok(True):
            raise InputError("rank 0 could not prepare the weights, tokenizer or data (rank 0 printed why)")
    error: InputError | None = None
    try:
        weights = resolve_pretrained(source) if source is not None else None
        tokenizer = load_tokenizer(plan.model.config, weights or _tokenizer_source(plan), choice=t.tokenizer,
                                   model_name=plan.model.name, source_name=source)  # fmt: skip
        pad_token_id = zdata.pad_token_id_for(tokenizer) if t.task == "seq-cls" else None
        eval_blocks, data_format = None, "text"
        if t.task == "seq-cls":
            rows = zdata.load_classification_dataset(t.dataset, t.text_field, num_labels=t.num_labels, seed=t.seed)
            blocks = zdata.tokenize_and_pad(rows, tokenizer, t.seq_len, pad_token_id)
        else:
            blocks, eval_blocks, data_format = zdata.load_lm_splits(t, tokenizer, t.seq_len)
    except InputError as caught:
        error = caught
    if ranks.rank == 0 and not ranks.all_ok(error is None):
        raise error
    if error is not None:
        raise error
    return RunInputs(source, weights, tokenizer, pad_token_id, blocks, eval_blocks, data_format)


def _block_order(plan: Plan, ranks: Ranks, num_blocks: int):
    """Returns the data.BlockOrder that deals this rank its micro-batches (InputError when the data is too short
    for one micro-batch per rank)."""
    from zero_planner.run import data as zdata

    return zdata.BlockOrder(num_blocks, ranks.world_size, ranks.rank, plan.training.micro_batch_size, plan.training.seed)


def _build_engine(plan: Plan, ds_config: dict[str, Any], ranks: Ranks, meter, *, weights: str | None,
                  pad_token_id: int | None, scratch_dir: Path, max_steps: int):  # fmt: skip
    """Returns (DeepSpeed engine, attention implementation, trainable parameters, LR warm-up steps): the model
    built (_build_model, phase load), then deepspeed.initialize with only the trainable parameters in the
    optimizer and the plan's LR schedule over `max_steps` (phase initialize)."""
    import deepspeed

    t = plan.training
    model, attn = _build_model(plan, ds_config, ranks, weights=weights, pad_token_id=pad_token_id,
                               scratch_dir=scratch_dir)  # fmt: skip
    trainable = [p for p in model.parameters() if p.requires_grad]
    warmup_steps = warmup_steps_for(t.warmup, max_steps)
    meter.enter("initialize")
    engine, *_ = deepspeed.initialize(model=model, model_parameters=trainable, config=ds_config,
                                      lr_scheduler=lr_scheduler_factory(t.lr_scheduler, warmup_steps, max_steps))  # fmt: skip
    del model  # the engine holds the module; no second name keeps it alive past an export that frees it
    _log_by_step(engine)
    return engine, attn, trainable, warmup_steps


MONITOR_PREFIX = "Train/Steps/"
"""The series zero-run's monitors write: Train/Steps/train_loss, learning_rate, eval_loss, tokens_per_second, ..."""


def _log_by_step(engine) -> None:
    """Puts every event the run's monitors get, DeepSpeed's own and zero-run's, on one axis, the optimizer step:
    DeepSpeed writes its events at its global sample count (Train/Samples/...), which TensorBoard's axis and the
    CSV files' `step` column then held. DeepSpeed's own lr is dropped: it is logged after its scheduler stepped
    (the next step's rate), beside zero-run's learning_rate, the rate the step trained with."""
    monitor = getattr(engine, "monitor", None)
    if monitor is None or not monitor.enabled:
        return
    write, samples_per_step = monitor.write_events, engine.train_batch_size()

    def write_by_step(events):
        write([(MONITOR_PREFIX + name.rsplit("/", 1)[-1], value, x // samples_per_step)
               for name, value, x in events if name != "Train/Samples/lr"])  # fmt: skip

    monitor.write_events = write_by_step


def _start_line(run: Run, ds_config: dict[str, Any], *, attn: str, trainable, steps_per_epoch: float,
                warmup_steps: int, start_step: int) -> str:  # fmt: skip
    """Returns the line a run starts with: model and how it was loaded, strategy, method, batch shape, data,
    tokenizer, learning rate, steps, what it keeps, where it logs."""
    plan, inputs, stage, world, max_steps = run.plan, run.inputs, run.stage, run.ranks.world_size, run.max_steps
    t = plan.training
    source = inputs.source
    loaded = f"pretrained from {source}{', partitioned while loading' if stage == 3 else ''}" if source else "random init"
    peft = t.method in ("lora", "qlora")
    micro, accum, seq_len = t.micro_batch_size, t.gradient_accumulation_steps, t.seq_len
    return (
        f"zero-run: {plan.model.name} ({loaded}, {attn}) stage {plan.strategy.name or stage} on "
        f"{world} ranks; {_method_text(plan, trainable)}; micro-batch {micro} x accum {accum} x seq {seq_len}; "
        f"data {t.dataset} ({inputs.data_format}, {len(inputs.blocks)} {'examples' if t.task == 'seq-cls' else 'blocks'}"
        f"{f', eval {len(inputs.eval_blocks)}' if inputs.eval_blocks is not None else ''}, "
        f"{steps_per_epoch:.1f} steps/epoch, "
        f"tokenizer {inputs.tokenizer.name}); lr {t.learning_rate:g} {t.lr_scheduler}, warmup {warmup_steps}; "
        f"steps {start_step}->{max_steps}; "
        f"keeps {saves.save_summary(t.save, t.save_every, t.save_total_limit, adapters=peft)}"
        f"{_monitor_text(ds_config, run.output_dir)}"
    )


@dataclass(frozen=True)
class Run:
    """What the parts of one run read once its engine is built and resumed: the engine and plan, this rank among the
    ranks, the phase meter, the console, the inputs, where it writes and how far it trains."""

    engine: Any
    plan: Plan
    ranks: Ranks
    meter: Any
    """run/meter.py's PhaseMeter: each phase's peaks."""
    console: Any
    inputs: RunInputs
    output_dir: Path
    max_steps: int
    """The optimizer step the run trains to (run_length: --max-steps, or --epochs over the data)."""
    stage: int
    """The ZeRO stage of the run's DeepSpeed JSON."""
    warm: int
    """Steps left out of tokens/s (throughput.warmup_steps)."""
    node_local: bool
    """Each node saves its own part of a checkpoint (the nodes share no output folder)."""
    resumed_from: Path | None
    """The checkpoint this run continued from, which --save-total-limit never prunes; None from the start."""

    @property
    def ckpt_dir(self) -> Path:
        return self.output_dir / ckpt.CHECKPOINTS_DIR

    @property
    def peft(self) -> bool:
        return self.plan.training.method in ("lora", "qlora")


@dataclass(frozen=True)
class Writers:
    """What a run writes besides run_report.json, and where: its checkpoints (save) and the final model's folders
    (export, export_adapter, export_merged). WRITES is the run's own; zero-run --probe's ranks
    (zero_planner/probe.py) run with NO_WRITES, which keeps nothing: every rank skips the same writes and the
    collectives inside them, so none waits on another."""

    save: Callable[..., None]
    export: Callable[..., None]
    export_adapter: Callable[..., None]
    export_merged: Callable[..., None]


@dataclass
class LoopState:
    """Where the training loop stands, in optimizer steps; read by the steps after it and, when a rank runs out of
    memory, for what it records (phase, step)."""

    step: int
    """Optimizer steps done (counted from 0 over the whole run, a resumed one included)."""
    losses: list[float]
    """This rank's loss of every optimizer step so far (restored from the checkpoint on resume)."""
    phase: str = "forward"
    """What the rank is doing: forward, backward, step, eval, save or export."""
    stopping: int = 0
    """The first SIGINT/SIGTERM any rank got (all-reduced each step); 0 while none."""
    timed_s: float = 0.0
    """Seconds of the steps that count for tokens/s (see counts_for_speed)."""
    timed_steps: int = 0
    eval_losses: list[dict[str, float]] = field(default_factory=list)
    """{"step", "loss"} of each evaluation (a resumed run's earlier ones restored from the checkpoint)."""
    resumed_from_step: int = 0
    """The checkpoint's step this run resumed from; 0 for a run from the start."""
    writers: Writers = field(default_factory=lambda: WRITES)
    """What the run writes at its saves: WRITES, or the probe's NO_WRITES (train's `writers`)."""
    step_times: list[float] = field(default_factory=list)
    """Seconds of each optimizer step of this run (checkpoints and eval excluded)."""
    alloc_retry_steps: list[tuple[int, int]] = field(default_factory=list)
    """(step, count) of each optimizer step of this run in which PyTorch's allocator released its cache to retry."""
    warned_alloc_retries: bool = False
    """Whether this run has printed report.alloc_retry_warning (once per run)."""

    @property
    def interrupted(self) -> bool:
        return bool(self.stopping)


def counts_for_speed(step: int, *, start_step: int, warm: int, max_steps: int) -> bool:
    """Returns whether optimizer step `step` (1-based) counts for tokens/s: all but the first `warm` steps of this
    run (throughput.warmup_steps: allocation and compilation), or every step of a run no longer than that."""
    return step > start_step + warm or max_steps - start_step <= warm


def eval_due(step: int, *, max_steps: int, eval_every: int, saving: bool, stopping: bool) -> bool:
    """Returns whether the run evaluates after optimizer step `step`: at the last step, every `eval_every` steps,
    or (eval_every 0) where it saves a checkpoint; never while stopping."""
    return not stopping and (step == max_steps or (step % eval_every == 0 if eval_every else saving))


def _train_loop(run: Run, stop: StopRequest, state: LoopState, order) -> None:
    """Trains from state.step to `max_steps` optimizer steps, or until a rank is asked to stop; records in `state`
    each step's loss and time, and evaluates and saves where due (_eval_and_save).

    One optimizer step is `accum` micro-steps of forward, engine.backward and engine.step (DeepSpeed steps the
    optimizer at the accumulation boundary). The next micro-batch is copied to the device while it works."""
    import torch

    engine, plan, ranks, meter, console, inputs = run.engine, run.plan, run.ranks, run.meter, run.console, run.inputs
    max_steps, warm = run.max_steps, run.warm
    t = plan.training
    accum = t.gradient_accumulation_steps
    tokens_per_step = ranks.world_size * t.micro_batch_size * accum * t.seq_len
    start_step = state.step
    progress = _progress(console, ranks.rank, total=max_steps, completed=start_step)
    last_micro_step = max_steps * accum - 1
    drawn = 0.0  # perf_counter of the progress display's last draw

    def micro_batch(k: int) -> dict[str, Any]:
        # Pinned and copied without waiting: called while the device still works through the previous
        # micro-step, the copy queues behind it instead of stalling the host until the device is idle.
        return _batch(inputs.blocks[order.micro_batch(k)], t.task, engine.device, pin=ranks.on_cuda)

    with progress:
        task = progress.add_task("train", total=max_steps, completed=start_step, info="")
        batch = micro_batch(start_step * accum) if state.step < max_steps else None
        while state.step < max_steps:
            step = state.step
            # Reseeding per step keeps any dropout identical across an interruption and resume.
            torch.manual_seed(t.seed + 1_000_003 * step + ranks.rank)
            step_lr = engine.get_lr()[0]  # the rate this step uses (the scheduler moves on in engine.step)
            retries_before = meter.alloc_retries()
            started = time.perf_counter()
            micro_losses = []
            for m in range(accum):
                k = step * accum + m
                state.phase = "forward"
                loss = engine(**batch).loss
                state.phase = "backward"
                engine.backward(loss)
                state.phase = "step"
                engine.step()
                micro_losses.append(loss.detach().float())
                # Host work while the device runs the kernels just queued: the next micro-batch.
                batch = micro_batch(k + 1) if k < last_micro_step else None
            if not progress.disable and time.perf_counter() - drawn >= PROGRESS_DRAW_S:
                progress.refresh()  # the last step's line, drawn while the device works
                drawn = time.perf_counter()
            step_loss = 0.0
            for value in torch.stack(micro_losses).tolist():  # the step's one wait for the device
                step_loss += value / accum
            if ranks.on_cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - started
            state.step = step = step + 1
            state.losses.append(step_loss)
            state.step_times.append(elapsed)
            meter.step_done()
            timed = counts_for_speed(step, start_step=start_step, warm=warm, max_steps=max_steps)
            if timed:
                state.timed_s, state.timed_steps = state.timed_s + elapsed, state.timed_steps + 1
            _note_alloc_retries(plan, meter, console, state, retries=meter.alloc_retries() - retries_before,
                                timed=timed)  # fmt: skip
            log_line = bool(t.log_every) and step % t.log_every == 0
            if log_line or not progress.disable:
                info = _step_info(state, step_loss=step_loss, step_lr=step_lr, elapsed=elapsed,
                                  tokens_per_step=tokens_per_step, max_steps=max_steps, on_cuda=ranks.on_cuda)  # fmt: skip
                progress.update(task, completed=step, info=info)
            if log_line:
                console.print(f"step {step}/{max_steps}  {info}")
            _monitor_step(engine, meter, loss=step_loss, lr=step_lr, tokens_per_second=tokens_per_step / elapsed)
            state.stopping = ranks.any(stop.signum)
            _eval_and_save(run, state)
            if state.stopping:
                break


def _note_alloc_retries(plan: Plan, meter, console, state: LoopState, *, retries: int, timed: bool) -> None:
    """Records the allocator's retries of the step just done (state.alloc_retry_steps, run_report.json) and, the
    first time they come in a step that counts for speed (warm-up steps allocate for the first time), prints why
    the run may be slower than planned (report.alloc_retry_warning)."""
    if retries <= 0:
        return
    state.alloc_retry_steps.append((state.step, retries))
    if timed and not state.warned_alloc_retries:
        state.warned_alloc_retries = True
        from zero_planner.run.report import alloc_retry_warning

        console.print(alloc_retry_warning(plan, step=state.step, retries=retries, card_bytes=meter.capacity_bytes(),
                                          peak_bytes=meter.running_peak("peak_allocated_bytes")), markup=False)  # fmt: skip


def _step_info(state: LoopState, *, step_loss: float, step_lr: float, elapsed: float, tokens_per_step: int,
               max_steps: int, on_cuda: bool) -> str:  # fmt: skip
    """Returns the progress text of the step just done: its loss and learning rate, the run's tokens/s and step time
    over the steps that count (this step's own before any does), the time left, and the peak memory so far."""
    timed_s, timed_steps = state.timed_s, state.timed_steps
    tps = tokens_per_step * timed_steps / timed_s if timed_s else tokens_per_step / elapsed
    step_s = timed_s / timed_steps if timed_steps else elapsed
    return (f"loss {step_loss:.4f}  lr {step_lr:.2e}  {tps:,.0f} tok/s  "
            f"eta {_duration((max_steps - state.step) * step_s)}  mem {_mem_text(on_cuda)}")  # fmt: skip


def _eval_and_save(run: Run, state: LoopState) -> None:
    """After optimizer step state.step: evaluates where due (eval_due; phase eval), then saves a checkpoint where
    training.save asks for one (saves.checkpoint_due, a stop included; phase save)."""
    engine, plan, ranks, meter, console, max_steps = run.engine, run.plan, run.ranks, run.meter, run.console, \
        run.max_steps  # fmt: skip
    eval_blocks, ckpt_dir = run.inputs.eval_blocks, run.ckpt_dir
    t = plan.training
    step = state.step
    saving = saves.checkpoint_due(t.save, step, max_steps, t.save_every, stopping=bool(state.stopping))
    if eval_blocks is not None and eval_due(step, max_steps=max_steps, eval_every=t.eval_every, saving=saving,
                                            stopping=bool(state.stopping)):  # fmt: skip
        state.phase = "eval"
        meter.enter("eval")
        state.eval_losses.append({"step": step, "loss": evaluate(engine, eval_blocks, ranks, t.micro_batch_size)})
        meter.enter("train")
        _monitor_write(engine, [("Train/Samples/eval_loss", state.eval_losses[-1]["loss"], engine.global_samples)])
        console.print(f"step {step}/{max_steps}  eval loss {state.eval_losses[-1]['loss']:.4f}")
    if saving:
        state.phase = "save"
        meter.enter("save")
        state.writers.save(engine, ckpt_dir, step, state.losses, ranks, ranks.world_size, plan, peft=run.peft,
                           node_local=run.node_local, resumed_from=run.resumed_from, eval_losses=state.eval_losses)
        meter.enter("train")
        console.print(f"checkpoint {ckpt_dir / ckpt.tag_for(step)}")


def export_folders(plan: Plan, output_dir: Path, *, stage: int, peft: bool) -> list[Path]:
    """Returns the folders the final export writes: final-adapter/ (and final/ where the merged model is written)
    with adapters, final/ otherwise."""
    if not peft:
        return [output_dir / "final"]
    merged = [output_dir / "final"] if saves.exports_merged_model(plan.training.method, stage) else []
    return [output_dir / "final-adapter", *merged]


def _export_missing(plan: Plan, ranks: Ranks, output_dir: Path, *, stage: int, peft: bool, console) -> bool:
    """Returns True on every rank when rank 0 finds an export folder missing or incomplete (checkpoint.export_problem),
    and says which."""
    why = None
    if ranks.rank == 0:
        for folder in export_folders(plan, output_dir, stage=stage, peft=peft):
            problem = ckpt.export_problem(folder)
            if problem is not None:
                why = f"{folder} is {problem}"
                break
    why = ranks.broadcast(why)
    if why:
        console.print(f"exporting again: {why}")
    return why is not None


def _export_final(run: Run, state: LoopState, start_step: int) -> None:
    """Writes the final model where the save policy exports one (saves.exports_model) and this run trained, or the
    last run's export is missing or cut (_export_missing: a resumed run with nothing left to train): with adapters
    the peft adapter folder (final-adapter/) and, where the base can be merged (saves.exports_merged_model), the
    merged model (final/); otherwise the consolidated model (final/). Each folder is written beside its place, read
    back, marked with the step, and renamed into place (checkpoint.finish_export). Phase export."""
    plan, ranks, output_dir, stage, peft = run.plan, run.ranks, run.output_dir, run.stage, run.peft
    if not saves.exports_model(plan.training.save, interrupted=state.interrupted):
        return
    if state.step == start_step and not _export_missing(plan, ranks, output_dir, stage=stage, peft=peft,
                                                        console=run.console):  # fmt: skip
        return
    state.phase = "export"
    run.meter.enter("export")
    writers, engine, tokenizer, step = state.writers, run.engine, run.inputs.tokenizer, state.step
    if peft:
        writers.export_adapter(engine, output_dir / "final-adapter", ranks, plan, tokenizer, step=step)
        if saves.exports_merged_model(plan.training.method, stage):
            writers.export_merged(engine, output_dir / "final", ranks, tokenizer, step=step)
    else:
        writers.export(engine, output_dir / "final", ranks, tokenizer, stage, step=step)


def _leave_on_fault(plan: Plan, output_dir: Path, ranks: Ranks, state, error: BaseException) -> None:
    """Records a fault (faults.classify: disk full, read-only folder, an export that does not read back, a lost
    peer) and leaves with faults.EXIT_FAULT, saying it on stderr unless zero-run will (faults.zero_run_reports);
    re-raises anything else (a bug keeps its traceback). Checkpoints marked complete are untouched; a save cut
    short has no marker and is never resumed."""
    need = None
    if state.phase == "save":
        need = faults.newest_checkpoint_bytes(output_dir) or _planned_checkpoint_bytes(plan)
    step = state.step
    found = faults.classify(error, phase=state.phase, step=step, output_dir=output_dir, rank=ranks.rank,
                            next_save_bytes=need)  # fmt: skip
    if found is None:
        raise error
    kind, message = found
    recorded = faults.record_fault(output_dir, rank=ranks.rank, kind=kind, message=message, phase=state.phase,
                                   step=step)  # fmt: skip
    if not faults.zero_run_reports(recorded):
        print(f"zero-run: {message}", file=sys.stderr, flush=True)
    os._exit(faults.EXIT_FAULT)


def _planned_checkpoint_bytes(plan: Plan) -> int:
    from zero_planner.run.preflight import run_disk_need

    return run_disk_need(plan).checkpoint_bytes


def _report(run: Run, state: LoopState) -> None:
    """Gathers every rank's measured peaks; rank 0 writes run_report.json and its page, prints the tables (and how
    to continue after an interruption), and closes the monitor."""
    plan, ranks, console, output_dir = run.plan, run.ranks, run.console, run.output_dir
    all_stats = ranks.gather(_rank_stats(ranks.rank, ranks.on_cuda, run.meter, state))
    if ranks.rank != 0:
        return
    report = run_report(plan, all_stats, state, run.inputs, warm=run.warm, node_local=run.node_local,
                        device=_device_name(ranks.on_cuda), versions=_versions())  # fmt: skip
    ckpt.write_json_atomic(output_dir / "run_report.json", report)
    _write_run_page(output_dir, report, console)
    from zero_planner.run.report import phase_table, report_table

    console.print(report_table(report))
    phases = phase_table(report)
    if phases is not None:
        console.print(phases)
    if state.interrupted:
        # What was kept and the exact command that goes on: zero-run's own line after this (launch._explain_exit),
        # which knows the --output-dir and overrides the ranks were not given.
        console.print(f"zero-run: stopped at step {state.step}")
    _close_monitor(run.engine)


def run_report(plan: Plan, all_stats: list[dict[str, Any]], state: LoopState, inputs: RunInputs, *, warm: int,
               node_local: bool, device: str, versions: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """Returns run_report.json's content: report.build_run_report of every rank's stats and rank 0's losses, with
    tokens/s over the steps that count (None when none did), plus the eval losses, step times, data and storage."""
    from zero_planner.run.report import build_run_report

    t = plan.training
    tokens_per_step = plan.hardware.world_size * t.micro_batch_size * t.gradient_accumulation_steps * t.seq_len
    report = build_run_report(
        plan,
        all_stats,
        state.losses,
        tokens_per_step * state.timed_steps / state.timed_s if state.timed_s else None,
        steps=state.step,
        device=device,
        status="interrupted" if state.interrupted else "ok",
        versions=versions,
    )
    report["eval_losses"] = state.eval_losses
    report["resumed_from_step"] = state.resumed_from_step
    report["step_times_s"] = state.step_times
    report["warmup_steps"] = warm  # steps before these left out of tokens_per_second
    report["data"] = {"dataset": t.dataset, "format": inputs.data_format, "blocks": len(inputs.blocks),
                      "tokenizer": inputs.tokenizer.name, "init": plan.model.init, "load_path": inputs.source}  # fmt: skip
    report["nodes"] = plan.hardware.nodes
    report["checkpoint_storage"] = "node-local" if node_local else "shared"
    return report


def _leave_out_of_memory(plan: Plan, output_dir: Path, *, rank: int, phase: str, step: int, error: BaseException) -> None:
    """Records the OOM (oom_rank{N}.json, one line on stderr) and leaves at once with EXIT_OOM.

    Peers may now wait forever in a collective; the launcher stops them. Checkpoints already marked complete
    are untouched: nothing is written to them after their marker."""
    record = record_oom(plan, output_dir, rank=rank, phase=phase, step=step, error=error)
    print(f"zero-run: {record['message']}", file=sys.stderr, flush=True)
    os._exit(EXIT_OOM)


def _monitor_text(ds_config: dict[str, Any], output_dir: Path) -> str:
    """Returns '; logs to tensorboard, csv under OUTPUT_DIR/logs' for the monitors the DeepSpeed JSON enables."""
    from zero_planner.plan.dsconfig import LOG_DIR, monitors_enabled

    names = monitors_enabled(ds_config)
    if not names:
        return ""
    where = f" under {output_dir / LOG_DIR}" if set(names) - {"wandb"} else ""
    return f"; logs to {', '.join(names)}{where}"


def _monitor_write(engine, events: list[tuple[str, float, int]]) -> None:
    """Writes (name, value, x) events through DeepSpeed's monitor (TensorBoard, CSV, W&B: --report-to), which
    writes from rank 0 only; nothing when no monitor is enabled."""
    monitor = getattr(engine, "monitor", None)
    if monitor is not None and monitor.enabled:
        monitor.write_events(events)


def _monitor_step(engine, meter, *, loss: float, lr: float, tokens_per_second: float) -> None:
    """Logs one optimizer step: loss, the learning rate it used, its tokens/s and the run's peak memory so far
    (device peak allocated on a GPU, host RSS on CPU), in GiB.

    The x value is DeepSpeed's global sample count, as its own events (Train/Samples/lr) use: _log_by_step turns
    both into the optimizer step, which W&B takes as its one increasing step per run."""
    monitor = getattr(engine, "monitor", None)
    if monitor is None or not monitor.enabled:
        return
    x = engine.global_samples
    memory = ("Train/Samples/peak_allocated_GiB", meter.running_peak("peak_allocated_bytes")) if meter.on_cuda else (
        "Train/Samples/host_rss_GiB", meter.running_peak("host_rss_peak_bytes"))  # fmt: skip
    monitor.write_events([("Train/Samples/train_loss", loss, x), ("Train/Samples/learning_rate", lr, x),
                          ("Train/Samples/tokens_per_second", tokens_per_second, x),
                          (memory[0], memory[1] / 2**30, x)])  # fmt: skip


def _close_monitor(engine) -> None:
    """Closes rank 0's TensorBoard writer and finishes its W&B run: the rank leaves through os._exit, which runs
    no atexit hook, and a W&B run not finished stays 'running' with its last events unsent."""
    monitor = getattr(engine, "monitor", None)
    if monitor is None or not monitor.enabled:
        return
    writer = getattr(getattr(monitor, "tb_monitor", None), "summary_writer", None)
    if writer is not None:
        writer.close()
    if getattr(monitor, "wandb_monitor", None) is not None:
        import wandb

        wandb.finish()


def _write_run_page(output_dir: Path, report: dict[str, Any], console) -> None:
    """Writes run_report.html beside run_report.json (report_page.py); a drawing failure is a warning, not a
    failed run: the report itself is written already."""
    from zero_planner.run.report_page import PAGE_NAME, write_page

    try:
        write_page(report, output_dir / PAGE_NAME)
    except Exception as error:  # noqa: BLE001 - the run's results are safe in run_report.json
        console.print(f"[yellow]warning:[/] could not draw {output_dir / PAGE_NAME}: {error}")
    else:
        console.print(f"report: {output_dir / 'run_report.json'} (picture: {output_dir / PAGE_NAME})")


def check_same_run(plan: Plan, ranks: Ranks) -> None:
    """Raises InputError on every rank when a rank trains another plan or reads other data than rank 0
    (fingerprint.py): one all-gather of a few digests, before the weights and data are loaded."""
    from zero_planner.run.fingerprint import first_difference, rank_record

    problem = first_difference(ranks.gather(rank_record(plan, rank=ranks.rank, local_rank=ranks.local_rank)),
                               plan.training.dataset)  # fmt: skip
    if problem:
        raise InputError(problem)


SHARED_PROBE = ".zero_run_shared_{}"


def shared_output_dir(output_dir: Path, ranks: Ranks) -> bool:
    """Returns whether every rank sees the file rank 0 writes in its `output_dir`: one folder for all (a shared
    file system, or one machine), rather than one per node."""
    import uuid

    probe = output_dir / SHARED_PROBE.format(ranks.broadcast(uuid.uuid4().hex if ranks.rank == 0 else None))
    if ranks.rank == 0:
        probe.write_text("")
    ranks.barrier()
    shared = ranks.all_ok(probe.exists())
    if ranks.rank == 0:
        probe.unlink(missing_ok=True)
    return shared


def record_oom(plan: Plan, output_dir: Path, *, rank: int, phase: str, step: int, error: BaseException) -> dict:
    """Writes OUTPUT_DIR/oom_rank{rank}.json (phase, step, what the planner would choose next); returns it."""
    from zero_planner.run.report import oom_message

    message = oom_message(plan, rank=rank, phase=phase, step=step)
    record = {"rank": rank, "phase": phase, "step": step, "message": message, "error": str(error)[:500]}
    ckpt.write_json_atomic(Path(output_dir) / f"oom_rank{rank}.json", record)
    return record


def lora_settings(plan: Plan):
    """Returns the plan's LoraInfo, defaulting it for method lora/qlora when the plan has none."""
    from zero_planner.planfile import LoraInfo

    t = plan.training
    if t.lora is not None:
        return t.lora
    return LoraInfo(quantization="nf4" if t.method == "qlora" else "none")


def _build_model(plan: Plan, ds_config: dict[str, Any], ranks: Ranks, *, weights: str | None = None,
                 pad_token_id: int | None = None, scratch_dir: Path | None = None):  # fmt: skip
    """Returns (model, attn) through modeling.build_training_model, the builder the GPU harness shares:
    from_pretrained of the local folder `weights` (partitioned while loading under ZeRO-3), random init
    otherwise; peft adapters for lora/qlora; training mode."""
    from zero_planner.run.modeling import build_training_model

    if weights is None:  # callers that did not resolve it: a local weights folder the plan names
        source = pretrained_source(plan)
        weights = source if source is not None and Path(source).is_dir() else None
    t = plan.training
    lora = lora_settings(plan) if t.method in ("lora", "qlora") else None
    return build_training_model(
        plan.model.config,
        method=t.method,
        task=t.task,
        precision=t.precision,
        ds_config=ds_config,
        device=str(ranks.device),
        local_rank=ranks.local_rank,
        attn_implementation=t.attn_implementation,
        gradient_checkpointing=t.gradient_checkpointing,
        num_labels=t.num_labels if t.task == "seq-cls" else None,
        pad_token_id=pad_token_id,
        weights_path=weights,
        lora=lora.model_dump() if lora is not None else None,
        lora_seed=t.seed,
        scratch_dir=str(scratch_dir) if scratch_dir is not None else None,
    )


def _tokenizer_source(plan: Plan) -> str | None:
    """Returns where the model's own tokenizer lives for a random-init plan (tokenizer.model_tokenizer_source,
    which zero-run also checks before launching)."""
    from zero_planner.run.tokenizer import model_tokenizer_source

    return model_tokenizer_source(plan.model)


def run_length(max_steps: int, epochs: float | None, steps_per_epoch: float) -> int:
    """Returns the run's optimizer steps: max_steps, or with `epochs` ceil(epochs * steps_per_epoch) capped
    by max_steps when that is above 0."""
    if epochs is None:
        if max_steps < 1:
            raise InputError("max_steps 0 needs --epochs N (or give --max-steps N)")
        return max_steps
    steps = max(1, math.ceil(epochs * steps_per_epoch - 1e-9))
    return min(steps, max_steps) if max_steps > 0 else steps


def warmup_steps_for(warmup: float, total_steps: int) -> int:
    """Returns warmup optimizer steps: `warmup` itself when >= 1, else ceil(warmup * total_steps), as HF
    Trainer counts a warmup ratio."""
    return int(warmup) if warmup >= 1 else math.ceil(warmup * total_steps)


SCHEDULER_NAMES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}
"""training.lr_scheduler -> transformers.get_scheduler's name: the curve lr_factor follows (the same HF Trainer
follows; tests/test_training_args.py holds the two equal)."""


def lr_factor(name: str, step: int, warmup_steps: int, total_steps: int) -> float:
    """Returns the learning rate's multiplier at optimizer step `step`: a linear warm-up from 0 over `warmup_steps`,
    then constant, linear decay to 0 at `total_steps`, or a half cosine to 0 there (num_cycles 0.5), as
    transformers/optimization.py's _get_{constant,linear,cosine}_schedule_with_warmup_lr_lambda compute it."""
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    if name == "constant":
        return 1.0
    if name == "linear":  # not 1 - progress: with no steps after the warm-up, 0 at once
        return max(0.0, float(total_steps - step) / float(max(1, total_steps - warmup_steps)))
    progress = float(step - warmup_steps) / float(max(1, total_steps - warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def lr_scheduler_factory(name: str, warmup_steps: int, total_steps: int):
    """Returns a callable optimizer -> LR scheduler for deepspeed.initialize, stepped once per optimizer step
    by engine.step() and saved in DeepSpeed checkpoints (so a resumed run continues the same curve).

    torch's LambdaLR over lr_factor rather than transformers.get_scheduler: importing transformers.optimization
    imports trainer_utils, peft and bitsandbytes, 1.1 s of every rank's start on CPU (measured 2026-12-07), for
    three formulas. The state saved is LambdaLR's either way (a function's lambda saves none), so checkpoints
    written through get_scheduler resume here."""
    if name not in SCHEDULER_NAMES:
        raise InputError(f"lr_scheduler {name!r} is not one of {', '.join(SCHEDULER_NAMES)}")

    def make(optimizer):
        from torch.optim.lr_scheduler import LambdaLR

        def factor(step: int) -> float:
            return lr_factor(name, step, warmup_steps, total_steps)

        return LambdaLR(optimizer, factor)

    return make


EVAL_MAX_BLOCKS = 512
"""Eval loss is taken over at most this many blocks (the first ones), so evaluation stays a small share of a run."""


def evaluate(engine, blocks, ranks: Ranks, micro: int) -> float:
    """Returns the mean loss over the eval blocks (each rank takes every world_size-th micro-batch; all ranks
    run the same number of forward passes, as ZeRO-3's gathers require, wrapping around the last ones).

    use_cache=False: a causal LM in eval mode otherwise keeps every layer's keys and values in a KV cache for
    generation that a loss never reads (2 x KV heads x head dim x layers x 2 bytes per token in bf16: 32 KiB
    per token on Llama 3.2 1B, measured as eval's excess over the memory model on every run without
    gradient checkpointing, 2026-11-27)."""
    import torch

    n = min(len(blocks), EVAL_MAX_BLOCKS)
    per_round = ranks.world_size * micro
    rounds = max(1, math.ceil(n / per_round))
    total = torch.zeros(2, dtype=torch.float64, device=ranks.device)
    engine.eval()
    with torch.no_grad():
        for r in range(rounds):
            start = (r * ranks.world_size + ranks.rank) * micro
            rows = blocks[[(start + j) % n for j in range(micro)]]
            loss = engine(**_batch(rows, "causal-lm", engine.device), use_cache=False).loss
            total += torch.tensor([float(loss.float().item()), 1.0], dtype=torch.float64, device=ranks.device)
    engine.train()
    ranks.dist.all_reduce(total)
    return float(total[0] / total[1])


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _method_text(plan: Plan, trainable) -> str:
    t = plan.training
    n = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in trainable)
    if t.method == "full":
        return f"full fine-tuning ({n:,} trainable)"
    lora = lora_settings(plan)
    base = "4-bit NF4 base" if t.method == "qlora" else "frozen base"
    return f"{t.method} r={lora.r} alpha={lora.alpha} on {lora.target_modules} ({n:,} trainable, {base})"


def _batch(rows: dict[str, list], task: str, device, *, pin: bool = False) -> dict[str, Any]:
    """Returns the model's keyword arguments for one micro-batch on `device`: labels=input_ids (causal-lm) or
    the attention mask and class labels (seq-cls).

    pin: build the tensors in pinned host memory and copy them without waiting (CUDA): the copies queue on
    the current stream, behind the work already there, and the host goes on at once. A pageable copy would
    wait for the device to finish everything queued before it.
    """
    import torch

    def tensor(values):
        host = torch.tensor(values, dtype=torch.long)
        return host.pin_memory().to(device, non_blocking=True) if pin else host.to(device)

    ids = tensor(rows["input_ids"])
    if task == "seq-cls":
        return {"input_ids": ids, "attention_mask": tensor(rows["attention_mask"]), "labels": tensor(rows["labels"])}
    if "labels" in rows:  # chat / prompt-response: -100 outside the answers
        return {"input_ids": ids, "labels": tensor(rows["labels"])}
    return {"input_ids": ids, "labels": ids}


def _resume(
    engine, ckpt_dir: Path, ranks: Ranks, console, world: int, *, peft: bool = False
) -> tuple[int, list[float], list[dict[str, float]]]:
    """Loads the newest checkpoint every rank can read; returns (step, losses so far, evaluations so far).

    LoRA checkpoints hold only the trainable parameters (the frozen base comes from the plan), so their
    module state is loaded non-strictly.
    """
    # The writer reads the newest checkpoint's bytes against its marker's checksums (one rank per copy of the files:
    # the others' sizes-only lists are intersected with its list below, so a corrupt one is skipped by every rank).
    usable = dict(ckpt.usable_checkpoints(ckpt_dir, warn=lambda m: console.print(f"[yellow]warning:[/] {m}"),
                                          checksums=ranks.checkpoint_writer))  # fmt: skip
    # Node-local checkpoints: a step counts only where every node has it complete, and all ranks try the same.
    everywhere = set.intersection(*(set(steps) for steps in ranks.gather(sorted(usable))))
    for step in sorted(set(usable) - everywhere, reverse=True):
        console.print(f"[yellow]warning:[/] checkpoint {usable[step]} is not complete on every node; "
                      "using an earlier one")  # fmt: skip
    for step, path in sorted(((s, usable[s]) for s in everywhere), reverse=True):
        state = ckpt.read_state(path)
        if state.get("world_size") != world:
            raise InputError(
                f"checkpoint {path} was written by {state.get('world_size')} ranks; this run has {world} "
                f"(resume with the plan it was trained with)"
            )
        try:
            load_path, _ = engine.load_checkpoint(str(ckpt_dir), tag=path.name, load_module_strict=not peft)
            ok = load_path is not None
        except Exception as error:  # a damaged file surfaces as any of torch's load errors
            print(f"zero-run: rank {ranks.rank} could not load {path}: {error}", file=sys.stderr, flush=True)
            ok = False
        if ranks.all_ok(ok):
            console.print(f"resumed from {path} (step {step})")
            reapply_schedule(engine.lr_scheduler)
            evals = [e for e in state.get("eval_losses", []) if e["step"] <= step]  # none in older markers
            return step, [float(x) for x in state.get("losses", [])][:step], evals
        console.print(f"[yellow]warning:[/] checkpoint {path} could not be loaded on every rank; trying an earlier one")
    console.print(f"[yellow]warning:[/] no complete checkpoint under {ckpt_dir}; starting from step 0")
    return 0, [], []


def reapply_schedule(scheduler) -> None:
    """Sets the optimizer's learning rate to this run's schedule at the restored step.

    The checkpoint restores the step count and the learning rate the interrupted run was at; a run resumed
    with another --max-steps (a longer run) has another curve (linear and cosine decay to its last step),
    so the rate of the next step is recomputed from this run's schedule. Same max_steps: the same value.
    """
    if scheduler is None or not hasattr(scheduler, "lr_lambdas"):
        return
    groups = scheduler.optimizer.param_groups
    for group, base, fn in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * fn(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in groups]


def _save(engine, ckpt_dir: Path, step: int, losses: list[float], ranks: Ranks, world: int, plan: Plan, *,
          peft: bool = False, node_local: bool = False, resumed_from: Path | None = None,
          eval_losses: list[dict[str, float]] = ()) -> None:  # fmt: skip
    """Saves a DeepSpeed checkpoint, then (all ranks done) the writer marks it complete and prunes old ones down to
    training.save_total_limit, never this one nor `resumed_from` (the checkpoint this run continued from): rank 0,
    or with node-local checkpoints each node's first rank, for the files of its node.

    With peft the frozen base is left out (exclude_frozen_parameters): it is rebuilt from the plan (same
    seed or the same weights folder), and an 8B base would otherwise add 16 GB to every checkpoint.
    """
    tag_dir = ckpt_dir / ckpt.tag_for(step)
    if ranks.checkpoint_writer:
        ckpt.clear_marker(tag_dir)
    ranks.barrier()
    engine.save_checkpoint(str(ckpt_dir), tag=tag_dir.name, exclude_frozen_parameters=peft)
    ranks.barrier()
    if node_local:  # every node's marker holds rank 0's losses, as a shared one does
        losses, eval_losses = ranks.broadcast(losses), ranks.broadcast(list(eval_losses))
    if ranks.checkpoint_writer:
        state = {"step": step, "losses": losses, "eval_losses": list(eval_losses), "world_size": world,
                 "seed": plan.training.seed, "time": time.time()}  # fmt: skip
        if node_local:
            state["node"] = ranks.node
        ckpt.write_marker(tag_dir, state)
        ckpt.prune(ckpt_dir, keep=plan.training.save_total_limit, protect=[tag_dir, *filter(None, [resumed_from])])
    ranks.barrier()


def _export(engine, final_dir: Path, ranks: Ranks, tokenizer, stage: int, *, step: int) -> None:
    """Writes a consolidated Hugging Face folder: model.safetensors (gathered for ZeRO-3) and config.json."""
    state = engine._zero3_consolidated_16bit_state_dict() if stage == 3 else engine.module.state_dict()
    if ranks.rank == 0:
        _write_hf_folder(engine.module, state, final_dir, tokenizer, step=step)
    ranks.barrier()


def _export_adapter(engine, adapter_dir: Path, ranks: Ranks, plan: Plan, tokenizer, *, step: int) -> None:
    """Writes the peft adapter folder (adapter_config.json, adapter_model.safetensors) from rank 0.

    Only the trainable parameters are gathered under ZeRO-3 (every rank takes part; rank 0 writes), never the
    base. base_model_name_or_path names the weights folder, or stays empty for a randomly initialised base
    (rebuild it from the plan's config and seed).
    """
    import contextlib

    import deepspeed

    module = engine.module
    trainable = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    zero3 = any(hasattr(p, "ds_id") for _, p in trainable)
    scope = deepspeed.zero.GatheredParameters([p for _, p in trainable]) if zero3 else contextlib.nullcontext()
    with scope:
        state = {name: p.detach().to("cpu").clone() for name, p in trainable} if ranks.rank == 0 else None
    if ranks.rank == 0:
        for config in module.peft_config.values():
            config.base_model_name_or_path = plan.model.load_path or (
                plan.model.weights_path if has_weights(plan.model.weights_path) else None
            )
        staging = ckpt.start_export(adapter_dir)
        module.save_pretrained(str(staging), state_dict=state)
        if hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(staging)  # so the adapter folder alone serves with its base
        verify_export(staging, tokenizer, adapter=True)
        ckpt.finish_export(staging, adapter_dir, {"step": step, "kind": "adapter", "time": time.time()})
        print(f"zero-run: adapter in {adapter_dir}", flush=True)
    ranks.barrier()


def _export_merged(engine, final_dir: Path, ranks: Ranks, tokenizer, *, step: int) -> None:
    """Writes the base with the adapters merged in (stages 0-2 only) as a plain Hugging Face folder."""
    if ranks.rank == 0:
        # merge_and_unload works in place on the engine's module: nothing trains after this point.
        merged = engine.module.merge_and_unload()
        _write_hf_folder(merged, merged.state_dict(), final_dir, tokenizer, step=step)
    ranks.barrier()


def verify_export(folder: Path, tokenizer, *, adapter: bool = False, keys: set[str] | None = None) -> None:
    """Raises faults.ExportBroken unless the export in `folder` reads back: its config loads, every safetensors
    file is whole (checkpoint.safetensors_keys: header and every byte it promises) and, for a model, holds the
    tensors written (`keys`), and the tokenizer loads."""
    from zero_planner.run.faults import ExportBroken

    try:
        if adapter:
            json.loads((folder / "adapter_config.json").read_text())
        else:
            from transformers import AutoConfig

            AutoConfig.from_pretrained(str(folder))
        found: set[str] = set()
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ValueError("no .safetensors file was written")
        for path in files:
            found.update(ckpt.safetensors_keys(path))
        if keys is not None and keys - found:
            missing = sorted(keys - found)
            raise ValueError(f"{len(missing)} tensor(s) missing, first {missing[0]}")
        if hasattr(tokenizer, "save_pretrained"):
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(str(folder))
        elif not adapter:
            json.loads((folder / "zero_run_tokenizer.json").read_text())
    except ExportBroken:
        raise
    except Exception as error:  # noqa: BLE001 - what failed to read back is the message
        raise ExportBroken(f"{folder.name}: {' '.join(str(error).split())[:300]}") from error




def _write_hf_folder(module, state: dict, final_dir: Path, tokenizer, *, step: int) -> None:
    """Writes model.safetensors, config.json, generation config and tokenizer of `module` to `final_dir`: into a
    folder beside it, read back (verify_export), then renamed into place (checkpoint.finish_export)."""
    from safetensors.torch import save_file

    target, final_dir = final_dir, ckpt.start_export(final_dir)
    seen: set[int] = set()
    shards: list[dict] = [{}]
    shard_bytes = total = 0
    for key, value in state.items():
        if module.config.tie_word_embeddings and key == "lm_head.weight":
            continue  # from_pretrained ties it back to the input embedding
        ptr = value.data_ptr()
        if value.numel() and ptr in seen:
            continue  # safetensors refuses shared storage; tied copies are restored on load
        seen.add(ptr)
        size = value.numel() * value.element_size()
        if shards[-1] and shard_bytes + size > EXPORT_SHARD_BYTES:
            shards.append({})
            shard_bytes = 0
        shards[-1][key] = value
        shard_bytes += size
        total += size
    names = ["model.safetensors"] if len(shards) == 1 else [
        f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]  # fmt: skip
    for name, shard in zip(names, shards):
        # One shard at a time in host memory: its copies plus safetensors' serialised bytes.
        tensors = {key: value.detach().to("cpu").contiguous() for key, value in shard.items()}
        save_file(tensors, str(final_dir / name), metadata={"format": "pt"})
        del tensors
        faults.kill_here_if_asked("export")  # the fault tests' kill -9 of rank 0 (the one writing) mid-export
    if len(names) > 1:
        weight_map = {key: name for name, shard in zip(names, shards) for key in shard}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (final_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    module.config.save_pretrained(str(final_dir))
    if getattr(module, "generation_config", None) is not None:
        module.generation_config.save_pretrained(str(final_dir))
    if hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(final_dir)
    else:
        (final_dir / "zero_run_tokenizer.json").write_text(
            json.dumps({"type": "byte-level", "offset": tokenizer.offset, "vocab_size": tokenizer.vocab_size,
                        "eos_token_id": tokenizer.eos_token_id}, indent=2) + "\n"  # fmt: skip
        )
    verify_export(final_dir, tokenizer, keys={key for shard in shards for key in shard})
    ckpt.finish_export(final_dir, target, {"step": step, "kind": "model", "time": time.time()})
    print(f"zero-run: final model in {target}", flush=True)


def _rank_stats(rank: int, on_cuda: bool, meter, state: LoopState) -> dict[str, Any]:
    """Returns this rank's measured peaks in bytes over the whole run, and per phase (`phases`: load,
    initialize, resume, train, eval, save, export), and the training steps in which its allocator flushed its cache;
    device figures are None on CPU (no device allocator)."""
    import socket

    measured = meter.report()
    phases = measured["phases"]

    def largest(key: str) -> int | None:
        values = [figures[key] for figures in phases.values() if key in figures]
        return max(values) if values else None

    return {
        "rank": rank,
        "peak_allocated_bytes": largest("peak_allocated_bytes") if on_cuda else None,
        "peak_reserved_bytes": largest("peak_reserved_bytes") if on_cuda else None,
        "host_rss_bytes": largest("host_rss_peak_bytes"),
        "node": int(os.environ.get("CROSS_RANK", "0")),
        "host": socket.gethostname(),
        "alloc_retry_steps": [list(pair) for pair in state.alloc_retry_steps],
        **measured,
    }


def _mem_text(on_cuda: bool) -> str:
    if on_cuda:
        import torch

        return f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    return f"rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"


def _accelerator_is_cuda() -> bool:
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().device_name() == "cuda"


def _device_name(on_cuda: bool) -> str:
    if on_cuda:
        import torch

        return torch.cuda.get_device_name()
    return "cpu"


def _versions() -> dict[str, str]:
    import deepspeed
    import torch
    import transformers

    versions = {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "transformers": transformers.__version__}
    for name in ("peft", "bitsandbytes"):  # LoRA / QLoRA runs
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = module.__version__
    return versions


def _console(rank: int):
    from rich.console import Console

    return Console(quiet=rank != 0, highlight=False, soft_wrap=True)  # log lines stay whole when piped


PROGRESS_DRAW_S = 0.5
"""The progress display is drawn at most this often (seconds), by the training loop itself."""


def _progress(console, rank: int, *, total: int, completed: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        disable=rank != 0 or not console.is_terminal,
        # No refresh thread: it took the GIL ten times a second (0.5-1.1 ms a draw, measured on CPU) while the
        # main thread launched kernels. The loop draws it between queuing a step and waiting for it.
        auto_refresh=False,
    )


def _write_nothing(*args, **kwargs) -> None:
    return None


WRITES = Writers(save=_save, export=_export, export_adapter=_export_adapter, export_merged=_export_merged)
NO_WRITES = Writers(save=_write_nothing, export=_write_nothing, export_adapter=_write_nothing,
                    export_merged=_write_nothing)

"""zero-run against a bare DeepSpeed loop and HF Trainer: same DeepSpeed JSON, model, data and hyperparameters.

    python benchmarks/zero_run_vs_trainer.py --gpus auto --out $OUT/zero_run_vs_trainer.json      # one GPU
    python benchmarks/zero_run_vs_trainer.py --gpus cpu:1 --model-config benchmarks/model_configs/llama-tiny.json \
        --seq-len 128 --micro-batch 2 --steps 6                                                     # CPU check

1. zero-plan writes the plan (random init from a committed config, byte-level tokenizer, the built-in
   synthetic corpus: no network) and its DeepSpeed JSON.
2. Three runs, each under the deepspeed launcher, each `--steps` optimizer steps from the same weights
   (modeling.build_training_model after torch.manual_seed(plan seed)) on the same blocks in the same order
   (data.load_lm_splits + data.BlockOrder, as zero-run reads them):
   (a) zero-run PLAN; (b) a bare loop: deepspeed.initialize(config=the plan's JSON), engine(...).loss,
   engine.backward, engine.step; (c) transformers.Trainer given the same JSON (`deepspeed=`), the
   TrainingArguments of zero-plan's HF hand-off (export.hf_trainer_args) and the blocks in that order.
3. Tokens/s of each: tokens per optimizer step / mean step time over steps 2..N (the first step warms up;
   checkpoint saves are outside the timed steps in all three). Loss curves compared step by step.

Writes one JSON (provenance: device, GPU count, torch/deepspeed/transformers versions, date, command) and
prints tokens/s, the ratios zero-run / bare DeepSpeed and zero-run / Trainer, and the largest relative
difference between the loss curves.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_CONFIG = ROOT / "benchmarks" / "model_configs" / "llama3.2-1b.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="auto", help="zero-plan --gpus: auto (this machine), 1xH100, cpu:1 ...")
    parser.add_argument("--model-config", default=str(DEFAULT_CONFIG), help="config.json (random init)")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--stage", default="2", help="zero-plan --stage (default 2)")
    parser.add_argument("--grad-checkpointing", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--work-dir", default=None, help="plans and runs (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="result JSON (default $OUT/zero_run_vs_trainer.json)")
    parser.add_argument("--only", default="zero-run,deepspeed,trainer", help="comma-separated subset of the runs")
    # Internal: one run inside the launcher.
    parser.add_argument("--role", choices=["deepspeed", "trainer"], help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)
    return parser


# --- inside the launcher: the same model and batches for (b) and (c) ---


def prepared(plan):
    """Returns (model, blocks in zero-run's order for this rank, tokens per optimizer step)."""
    import deepspeed
    import torch
    import torch.distributed as dist

    from zero_planner.run.data import BlockOrder, load_lm_splits
    from zero_planner.run.modeling import build_training_model
    from zero_planner.run.tokenizer import load_tokenizer

    deepspeed.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    on_cuda = torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR") != "cpu"
    if on_cuda:
        torch.cuda.set_device(local_rank)
    t = plan.training
    tokenizer = load_tokenizer(plan.model.config, choice=t.tokenizer)
    blocks, _, _ = load_lm_splits(t, tokenizer, t.seq_len)
    order = BlockOrder(len(blocks), world, rank, t.micro_batch_size, t.seed)
    accum = t.gradient_accumulation_steps
    indices = [i for k in range(plan.training.max_steps * accum) for i in order.micro_batch(k)]
    torch.manual_seed(t.seed)  # zero-run seeds the same way right before building the model
    model, _ = build_training_model(plan.model.config, method=t.method, task=t.task, precision=t.precision,
                                    ds_config=plan.deepspeed_config, device=f"cuda:{local_rank}" if on_cuda else "cpu",
                                    local_rank=local_rank, attn_implementation=t.attn_implementation,
                                    gradient_checkpointing=t.gradient_checkpointing, lora_seed=t.seed)  # fmt: skip
    tokens_per_step = world * t.micro_batch_size * accum * t.seq_len
    rows = blocks.select(indices)
    if "labels" not in rows.column_names:  # text blocks train on their ids (zero-run's train._batch); Trainer needs the column
        rows = rows.add_column("labels", rows["input_ids"])
    return model, rows, tokens_per_step, rank, on_cuda


def run_deepspeed(plan, result_path: str) -> None:
    import deepspeed
    import torch

    from zero_planner.run.train import lr_scheduler_factory, warmup_steps_for

    model, rows, tokens_per_step, rank, on_cuda = prepared(plan)
    t = plan.training
    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=plan.deepspeed_config,
        lr_scheduler=lr_scheduler_factory(t.lr_scheduler, warmup_steps_for(t.warmup, t.max_steps), t.max_steps),
    )  # fmt: skip
    micro, accum = t.micro_batch_size, t.gradient_accumulation_steps
    losses, times = [], []
    for step in range(t.max_steps):
        torch.manual_seed(t.seed + 1_000_003 * step + rank)  # as zero-run (dropout identical)
        start = time.perf_counter()
        loss_sum = 0.0
        for m in range(accum):
            k = step * accum + m
            ids = torch.tensor(rows[k * micro : (k + 1) * micro]["input_ids"], device=engine.device)
            labels = torch.tensor(rows[k * micro : (k + 1) * micro]["labels"], device=engine.device)
            loss = engine(input_ids=ids, labels=labels).loss
            engine.backward(loss)
            engine.step()
            loss_sum += float(loss.detach().float().item()) / accum
        if on_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss_sum)
    write_result(result_path, rank, losses, times, tokens_per_step)


def run_trainer(plan, result_path: str) -> None:
    import torch
    from torch.utils.data import SequentialSampler
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from zero_planner.plan.export import hf_trainer_args
    from zero_planner.run.train import SCHEDULER_NAMES, warmup_steps_for

    model, rows, tokens_per_step, rank, on_cuda = prepared(plan)
    t = plan.training
    ds_path = str(Path(result_path).with_suffix(".ds_config.json"))
    Path(ds_path).write_text(json.dumps(plan.deepspeed_config))
    kwargs = hf_trainer_args(plan, ds_path)
    kwargs.update(
        output_dir=str(Path(result_path).parent / "trainer-out"),
        max_steps=t.max_steps,
        lr_scheduler_type=SCHEDULER_NAMES[t.lr_scheduler],
        warmup_steps=warmup_steps_for(t.warmup, t.max_steps),
        save_strategy="no",
        logging_steps=1,
        report_to=[],
        dataloader_drop_last=True,
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    args = TrainingArguments(**kwargs)

    class InOrder(Trainer):
        # zero-run's order, already laid out in `rows`: no shuffling (one rank; see main for several).
        def _get_train_sampler(self, *a, **kw):
            return SequentialSampler(self.train_dataset)

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self.started = [], 0.0

        def on_step_begin(self, *a, **kw):
            self.started = time.perf_counter()

        def on_step_end(self, *a, **kw):
            if on_cuda:
                torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self.started)

    timer = Timer()
    trainer = InOrder(model=model, args=args, train_dataset=rows.with_format("torch"), callbacks=[timer])
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    write_result(result_path, rank, losses, timer.times, tokens_per_step)


def write_result(path: str, rank: int, losses: list[float], times: list[float], tokens_per_step: int) -> None:
    if rank == 0:
        timed = times[1:] or times
        Path(path).write_text(json.dumps({"losses": losses, "step_times_s": times,
                                          "tokens_per_second": tokens_per_step * len(timed) / sum(timed)}))  # fmt: skip


# --- the driver ---


def launch(plan_path: Path, role: str, result: Path, world: int, env: dict) -> int:
    from zero_planner.run.launcher import free_port

    argv = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(world), "--master_port",
            str(free_port()), str(Path(__file__).resolve()), "--role", role, "--plan", str(plan_path), "--result",
            str(result)]  # fmt: skip
    return subprocess.run(argv, env=env).returncode


def provenance(on_cuda: bool, world: int) -> dict:
    import deepspeed
    import torch
    import transformers

    return {
        "device": torch.cuda.get_device_name() if on_cuda else "cpu",
        "num_devices": world,
        "torch": torch.__version__,
        "deepspeed": deepspeed.__version__,
        "transformers": transformers.__version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }


def max_relative_difference(a: list[float], b: list[float]) -> float | None:
    """Returns max over steps of |a - b| / |b| (None when either curve is missing)."""
    if not a or not b:
        return None
    n = min(len(a), len(b))
    return max(abs(x - y) / abs(y) for x, y in zip(a[:n], b[:n]))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.role:
        from zero_planner.planfile import load_plan

        plan = load_plan(args.plan)
        (run_deepspeed if args.role == "deepspeed" else run_trainer)(plan, args.result)
        from zero_planner.run.train import _exit_cleanly

        _exit_cleanly(0)  # as zero-run leaves: no C++ static teardown of the backend's threads

    from zero_planner import cli
    from zero_planner.launch import main as zero_run
    from zero_planner.plan.memory import ALLOC_CONF
    from zero_planner.planfile import load_plan

    work = Path(args.work_dir) if args.work_dir else Path(os.environ.get("TMPDIR", "/tmp")) / f"zrvt-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    plan_path = work / "plan.json"
    plan_args = ["--model", args.model_config, "--gpus", args.gpus, "--seq-len", str(args.seq_len),
                 "--micro-batch", str(args.micro_batch), "--stage", args.stage, "--init", "random",
                 "--tokenizer", "bytes", "--lr", str(args.lr), "--max-steps", str(args.steps),
                 "--save-steps", str(args.steps), "-o", str(plan_path),
                 "--grad-checkpointing" if args.grad_checkpointing else "--no-grad-checkpointing"]  # fmt: skip
    if args.gpus.startswith("cpu"):
        plan_args += ["--cpu-mem", "8GiB"]
    status = cli.main(plan_args)
    if status != 0:
        print(f"zero-plan exited with {status}", file=sys.stderr)
        return status
    plan = load_plan(plan_path)
    world = plan.hardware.world_size
    if world != 1 and "trainer" in args.only:
        # Trainer deals batches out with its own distributed sampler; one rank keeps the order identical.
        print("the Trainer comparison feeds zero-run's order on one rank only; use one GPU", file=sys.stderr)
        return 2
    on_cuda = plan.hardware.gpu != "cpu"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if not on_cuda:
        env["DS_ACCELERATOR"] = "cpu"
    else:  # the runs (b) and (c) get what zero-run gives its ranks: an arch list DeepSpeed can parse
        import torch

        from zero_planner.run.preflight import fix_cuda_arch_list

        caps = [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
        arch, note = fix_cuda_arch_list(env.get("TORCH_CUDA_ARCH_LIST"), caps)
        if note:
            print(f"note: {note}", file=sys.stderr)
            env["TORCH_CUDA_ARCH_LIST"] = arch
            if not arch:
                del env["TORCH_CUDA_ARCH_LIST"]
    runs: dict[str, dict] = {}
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        out = work / f"{name}.json"
        started = time.perf_counter()
        if name == "zero-run":
            run_dir = work / "zero-run"
            shutil.rmtree(run_dir, ignore_errors=True)
            status = zero_run([str(plan_path), "--output-dir", str(run_dir)])
            if status == 0:
                report = json.loads((run_dir / "run_report.json").read_text())
                out.write_text(json.dumps({"losses": report["losses"], "step_times_s": report.get("step_times_s"),
                                           "tokens_per_second": report["tokens_per_second"]}))  # fmt: skip
        else:
            status = launch(plan_path, name, out, world, env)
        wall_s = time.perf_counter() - started
        runs[name] = {**json.loads(out.read_text()), "wall_s": wall_s} if status == 0 and out.exists() else {"status": status}
        print(f"== {name}: status {status}, {wall_s:.0f} s", flush=True)

    def tps(name):
        return runs.get(name, {}).get("tokens_per_second")

    def losses(name):
        return runs.get(name, {}).get("losses")

    summary = {
        "zero_run_over_deepspeed_tokens_per_second": tps("zero-run") / tps("deepspeed") if tps("zero-run") and tps("deepspeed") else None,
        "zero_run_over_trainer_tokens_per_second": tps("zero-run") / tps("trainer") if tps("zero-run") and tps("trainer") else None,
        "loss_max_rel_diff_zero_run_vs_deepspeed": max_relative_difference(losses("zero-run"), losses("deepspeed")),
        "loss_max_rel_diff_zero_run_vs_trainer": max_relative_difference(losses("zero-run"), losses("trainer")),
    }  # fmt: skip
    result = {
        "provenance": provenance(on_cuda, world),
        "setup": {"model_config": args.model_config, "gpus": args.gpus, "strategy": plan.strategy.name,
                  "micro_batch_size": plan.training.micro_batch_size, "gradient_accumulation_steps":
                  plan.training.gradient_accumulation_steps, "seq_len": plan.training.seq_len,
                  "gradient_checkpointing": plan.training.gradient_checkpointing, "precision": plan.training.precision,
                  "steps": args.steps, "lr": args.lr, "dataset": plan.training.dataset,
                  # zero-run sets memory.ALLOC_CONF unless one is exported; the other two run with the caller's.
                  # Export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to give all three the same allocator.
                  "pytorch_cuda_alloc_conf": {"zero-run": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ALLOC_CONF),
                                              "others": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")} if on_cuda else None,
                  "deepspeed_config": plan.deepspeed_config},  # fmt: skip
        "runs": runs,
        "summary": summary,
    }
    out_path = Path(args.out or Path(os.environ.get("OUT", str(work))) / "zero_run_vs_trainer.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    for name in runs:
        value = tps(name)
        print(f"{name:>9}: {value:,.0f} tokens/s" if value else f"{name:>9}: failed ({runs[name]})")
    for key, value in summary.items():
        print(f"{key}: {value:.4f}" if value is not None else f"{key}: n/a")
    print(f"wrote {out_path}")
    return 0 if all("losses" in r for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

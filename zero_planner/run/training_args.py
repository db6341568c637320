"""The data, weights and hyperparameter flags shared by zero-plan (recorded in the plan) and zero-run (overrides).

    --init pretrained|random   --dataset SPEC  --text-column COL  --data-format auto|text|chat|prompt-response
    --eval-split SPLIT|FILE|SHARE  --tokenizer bytes|PATH|HUB_ID  --lr LR  --lr-scheduler constant|linear|cosine
    --warmup STEPS|SHARE  --epochs N  --save none|final|steps  --save-steps N  --save-total-limit N
    --report-to tensorboard,csv,wandb|none  --eval-steps N  --seed N

One parser group (`add_training_arguments`) and one function that applies the given values to a plan
(`apply_training_args`), so zero-plan, zero-run and the training entry point cannot disagree on a flag's
meaning. Every flag defaults to None: "keep what the plan says". No torch import here (zero-plan's path).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from zero_planner.errors import InputError, closest
from zero_planner.planfile import Plan, TrainingInfo

INIT_CHOICES = ("pretrained", "random")
SCHEDULER_CHOICES = ("constant", "linear", "cosine")
DATA_FORMAT_CHOICES = ("auto", "text", "chat", "prompt-response")
BYTES_TOKENIZER = "bytes"
SAVE_CHOICES = ("none", "final", "steps")  # checkpoint.SAVE_POLICIES
REPORT_TO_CHOICES = ("tensorboard", "csv", "wandb", "none")
# (argparse dest, TrainingInfo field) for the flags that copy straight into plan.training.
_TRAINING_FIELDS = (
    ("dataset", "dataset"),
    ("text_column", "text_field"),
    ("data_format", "data_format"),
    ("messages_column", "messages_field"),
    ("prompt_column", "prompt_field"),
    ("response_column", "response_field"),
    ("eval_split", "eval_split"),
    ("eval_steps", "eval_every"),
    ("tokenizer", "tokenizer"),
    ("lr_scheduler", "lr_scheduler"),
    ("warmup", "warmup"),
    ("epochs", "epochs"),
    ("seed", "seed"),
)


def parsed_number(text: str, cast, valid, not_a_number: str, out_of_range: str | None = None):
    """Returns cast(text) when `valid` accepts it; otherwise argparse's error: `not_a_number` when the text does
    not parse, `out_of_range` (default the same message) when the value is refused. Every numeric option type."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(not_a_number) from None
    if not valid(value):
        raise argparse.ArgumentTypeError(out_of_range or not_a_number)
    return value


def _positive_float(text: str) -> float:
    return parsed_number(text, float, lambda v: math.isfinite(v) and v > 0, f"{text!r} is not a number",
                         f"{text!r} must be a positive number")  # fmt: skip


def _learning_rate(text: str) -> float:
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a learning rate in (0, 1), e.g. 2e-5")
    return value


def _non_negative_float(text: str) -> float:
    return parsed_number(text, float, lambda v: math.isfinite(v) and v >= 0 and (v < 1 or v == int(v)),
                         f"{text!r} is not a number of steps or a share below 1",
                         f"{text!r} is not a number of steps (integer) or a share in [0, 1)")  # fmt: skip


def positive_int(text: str) -> int:
    """argparse type of every count option of zero-plan and zero-run."""
    return parsed_number(text, int, lambda v: v > 0, f"must be a positive integer, got {text!r}")


def _non_negative_int(text: str) -> int:
    return parsed_number(text, int, lambda v: v >= 0, f"{text!r} is not an integer", f"{text!r} must be 0 or more")


def _report_to(text: str) -> list[str]:
    """argparse type of --report-to: a comma list of tensorboard, csv, wandb, or none (an empty list)."""
    names: list[str] = []
    for name in (part.strip() for part in text.split(",")):
        if name not in REPORT_TO_CHOICES:
            near = closest(name, REPORT_TO_CHOICES, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(REPORT_TO_CHOICES)}{hint}; "
                                             f"give one or a comma list (tensorboard,csv)")  # fmt: skip
        if name not in names:
            names.append(name)
    if "none" in names and len(names) > 1:
        raise argparse.ArgumentTypeError(f"{text!r}: none cannot be combined with {', '.join(n for n in names if n != 'none')}")
    return [n for n in names if n != "none"]


def add_training_arguments(parser: argparse.ArgumentParser, *, run: bool = False) -> None:
    """Adds the "data and training" group to `parser`; `run`: zero-run's wording (overrides of the plan)."""
    what = "overrides the plan's" if run else "recorded in the plan as"
    group = parser.add_argument_group("data and training" + (" (override the plan)" if run else ""))
    group.add_argument("--init", choices=INIT_CHOICES, default=None,
                       help="pretrained (default for hub ids, catalog names and folders with weights: load them) "
                            "or random (initialise from the config)")  # fmt: skip
    group.add_argument("--dataset", default=None, metavar="SPEC",
                       help="a hub dataset (name or name:config), or a local .jsonl/.json/.csv/.parquet/.txt "
                            "file, folder or glob (default: the built-in synthetic corpus)")  # fmt: skip
    group.add_argument("--text-column", default=None, metavar="COL", help=f"column of plain text ({what} text_field)")
    group.add_argument("--data-format", choices=DATA_FORMAT_CHOICES, default=None,
                       help="auto (default): chat when there is a messages column, prompt-response when there are "
                            "prompt and response columns, else text; chat and prompt-response train on the answers "
                            "only, through the tokenizer's chat template")  # fmt: skip
    group.add_argument("--messages-column", default=None, metavar="COL", help="chat data: list of {role, content} (default messages)")
    group.add_argument("--prompt-column", default=None, metavar="COL", help="instruction data: the prompt (default prompt)")
    group.add_argument("--response-column", default=None, metavar="COL", help="instruction data: the answer (default response)")
    group.add_argument("--eval-split", default=None, metavar="SPLIT|FILE|SHARE",
                       help="eval loss on a hub split (validation), a local file, or a held-out share of the rows "
                            "(0.05) or count (200)")  # fmt: skip
    group.add_argument("--eval-steps", type=positive_int, default=None, metavar="N",
                       help="optimizer steps between evaluations (default: at every checkpoint)")  # fmt: skip
    group.add_argument("--tokenizer", default=None, metavar="bytes|PATH|HUB_ID",
                       help="default: the model's own; bytes: a byte-level tokenizer (random-init models only "
                            "make sense with it); or a folder or hub id to load one from")  # fmt: skip
    group.add_argument("--lr", type=_learning_rate, default=None, metavar="LR", help="peak learning rate (default 2e-5)")
    group.add_argument("--lr-scheduler", choices=SCHEDULER_CHOICES, default=None,
                       help="after warmup: constant (default), linear or cosine decay to 0")  # fmt: skip
    group.add_argument("--warmup", type=_non_negative_float, default=None, metavar="STEPS|SHARE",
                       help="linear warmup: optimizer steps (100), or a share of the run (0.03)")  # fmt: skip
    group.add_argument("--epochs", type=_positive_float, default=None, metavar="N",
                       help="passes over the data (sets the run's length; --max-steps caps it)")  # fmt: skip
    if not run:  # zero-run has its own --max-steps (docs/design.md)
        group.add_argument("--max-steps", type=_non_negative_int, default=None, metavar="N",
                           help="optimizer steps (default 50; 0 with --epochs: no cap)")  # fmt: skip
    group.add_argument("--save", choices=SAVE_CHOICES, default=None,
                       help="what to keep: steps (default: resumable DeepSpeed checkpoints every --save-steps, at the "
                            "end and on Ctrl-C, then the final model), final (only the final 16-bit model or LoRA "
                            "adapter, also written on Ctrl-C; no --resume), none (nothing but run_report.json)")  # fmt: skip
    group.add_argument("--save-steps", type=_non_negative_int, default=None, metavar="N",
                       help="optimizer steps between checkpoints (default 25; implies --save steps; 0: --save final)")  # fmt: skip
    group.add_argument("--save-total-limit", type=positive_int, default=None, metavar="N",
                       help="complete checkpoints kept: the newest N (default 2); older ones are deleted once a new "
                            "one is complete, never the one a run resumed from")  # fmt: skip
    group.add_argument("--report-to", type=_report_to, default=None, metavar="tensorboard,csv,wandb|none",
                       help="also log loss, eval loss, learning rate, tokens/s and peak memory per step through "
                            "DeepSpeed's monitor: TensorBoard and CSV files under OUTPUT_DIR/logs, or W&B")  # fmt: skip
    group.add_argument("--seed", type=_non_negative_int, default=None, metavar="N", help="data order and init seed")


def given(args: argparse.Namespace) -> list[str]:
    """Returns the zero-run/train argument list that repeats the training flags set in `args` (not --max-steps)."""
    argv: list[str] = []
    for dest in ("init", *(d for d, _ in _TRAINING_FIELDS), "lr", "save", "save_steps", "save_total_limit", "report_to"):
        value = getattr(args, dest, None)
        if value is not None:
            argv += ["--" + dest.replace("_", "-"), _text(value)]
    return argv


def _text(value) -> str:
    if isinstance(value, list):  # --report-to
        return ",".join(value) or "none"
    return repr(value) if isinstance(value, float) else str(value)


def data_settings(args: argparse.Namespace, seq_len: int, task: str) -> TrainingInfo:
    """Returns training settings carrying only what the data flags in `args` say (dataset, columns, format, eval
    split, tokenizer), for sizing the data before a plan exists (data.held_data_bytes)."""
    t = TrainingInfo(micro_batch_size=1, seq_len=seq_len, gradient_checkpointing=False, precision="bf16", task=task)
    data_flags = ("dataset", "text_column", "data_format", "messages_column", "prompt_column", "response_column",
                  "eval_split", "tokenizer")  # fmt: skip
    for dest, name in (pair for pair in _TRAINING_FIELDS if pair[0] in data_flags):
        value = getattr(args, dest, None)
        if value is not None:
            setattr(t, name, str(Path(value).expanduser()) if dest in ("dataset", "eval_split") else value)
    return t


def apply_training_args(plan: Plan, args: argparse.Namespace, *, planning: bool) -> list[str]:
    """Writes the flags given in `args` into `plan` (training section, DeepSpeed lr, model init); returns notes.

    `planning` (zero-plan): the model's init is decided here even without --init. Otherwise (zero-run,
    train) only the flags given change the plan. --epochs without --max-steps lifts the step cap.

    Raises InputError for a value that cannot work with this plan (pretrained weights of a bare config, a
    missing local dataset).
    """
    t = plan.training
    if t.task == "seq-cls" and getattr(args, "eval_split", None) is not None:
        raise InputError(f"--eval-split {args.eval_split}: zero-run evaluates causal-lm only (held-out loss); "
                         f"a seq-cls run has no eval, so drop --eval-split")  # fmt: skip
    for dest, name in _TRAINING_FIELDS:
        value = getattr(args, dest, None)
        if value is not None:
            if dest in ("dataset", "eval_split", "tokenizer") and Path(value).expanduser().exists():
                value = str(Path(value).expanduser().resolve())  # the plan works from any directory
            setattr(t, name, value)
    if getattr(args, "max_steps", None) is not None:
        t.max_steps = args.max_steps
    if getattr(args, "epochs", None) is not None and getattr(args, "max_steps", None) is None:
        t.max_steps = 0  # --epochs alone: the epochs decide the length (not the plan's default 50 steps)
    if getattr(args, "lr", None) is not None:
        t.learning_rate = args.lr
        optimizer = plan.deepspeed_config.setdefault("optimizer", {"type": "AdamW", "params": {}})
        optimizer.setdefault("params", {})["lr"] = args.lr
    notes = apply_save_args(t, getattr(args, "save", None), getattr(args, "save_steps", None),
                            getattr(args, "save_total_limit", None))  # fmt: skip
    report_to, output_dir = getattr(args, "report_to", None), getattr(args, "output_dir", None)
    if report_to is not None or (t.report_to and output_dir):
        from zero_planner.plan.dsconfig import with_monitor

        t.report_to = list(report_to) if report_to is not None else t.report_to
        # The monitor writes under the run's output folder: zero-run --output-dir moves it there.
        plan.deepspeed_config = with_monitor(plan.deepspeed_config, t.report_to, output_dir or t.output_dir)
    if t.dataset != "synthetic":
        from zero_planner.run.data import check_columns

        check_columns(t)  # a missing local file or column is bad input now, not a failed launch
    if t.eval_split is not None:
        _check_eval_split(t.eval_split, t.dataset)
    if t.tokenizer not in (None, BYTES_TOKENIZER) and t.tokenizer.startswith((".", "/", "~")):
        if not Path(t.tokenizer).expanduser().is_dir():
            raise InputError(f"--tokenizer {t.tokenizer!r}: no such folder (or pass a hub id, or bytes)")
    if t.max_steps == 0 and t.epochs is None:
        raise InputError("--max-steps 0 means 'no cap' and needs --epochs N; give one of them")
    init = getattr(args, "init", None)
    return notes + (set_init(plan, init) if planning or init is not None else [])


def apply_save_args(t: TrainingInfo, save: str | None, save_steps: int | None, limit: int | None) -> list[str]:
    """Sets t.save, t.save_every and t.save_total_limit from --save, --save-steps and --save-total-limit; returns
    notes. --save-steps N alone implies --save steps (0: --save final); given together they must agree."""
    if save is not None and save_steps is not None:
        if save == "steps" and save_steps == 0:
            raise InputError("--save steps needs --save-steps above 0 (--save-steps 0 is --save final)")
        if save != "steps" and save_steps > 0:
            raise InputError(f"--save {save} writes no step checkpoints; --save-steps {save_steps} needs --save steps")
    notes = []
    if save_steps is not None:
        t.save_every = save_steps
        t.save = "steps" if save_steps > 0 else "final"
    if save is not None:
        t.save = save
        if save == "steps" and t.save_every == 0:
            t.save_every = TrainingInfo.model_fields["save_every"].default
            notes.append(f"--save steps: a checkpoint every {t.save_every} steps (the plan had --save-steps 0)")
    if limit is not None:
        t.save_total_limit = limit
    if t.save == "none" and (save is not None or save_steps is not None):
        notes.append("--save none: zero-run keeps no checkpoint and no final model, only run_report.json")
    return notes


def _check_eval_split(value: str, dataset: str) -> None:
    try:
        share = float(value)
    except ValueError:
        share = None
    if share is not None:
        if not (0 < share < 1 or (share >= 1 and share == int(share))):
            raise InputError(f"--eval-split {value!r}: give a share in (0, 1), a row count, a split name or a file")
        return
    if Path(value).suffix or value.startswith((".", "/", "~")):
        from zero_planner.run.data import resolve_files

        resolve_files(value)
    elif dataset == "synthetic":
        raise InputError(f"--eval-split {value!r} names a split, but the synthetic dataset has none; use a share (0.05)")


def loads_weights(spec, init: str | None) -> bool:
    """Returns whether zero-run will read pretrained weights for `spec` (the default wherever weights can exist;
    set_init decides it for the plan the same way), so the memory model counts loading as from_pretrained does."""
    source = spec.weights_path or (spec.hub_id if spec.source in ("hub", "catalog") else None)
    return (init or ("pretrained" if source is not None else "random")) == "pretrained" and source is not None


def set_init(plan: Plan, init: str | None) -> list[str]:
    """Sets model.init, load_path and load_sharded: pretrained by default wherever weights can exist (a hub
    id, a catalog name, a folder with weights), random when asked or when only a config exists. Returns notes."""
    m = plan.model
    source = m.weights_path or (m.hub_id if m.source in ("hub", "catalog") else None)
    if init is None:
        init = "pretrained" if source is not None else "random"
    if init == "pretrained":
        if source is None:
            raise InputError(
                f"--init pretrained: {m.name!r} is a config only, with no weights; pass a hub id or a folder "
                f"with weights as --model, or --init random"
            )
        m.init, m.load_path = "pretrained", source
    else:
        m.init, m.load_path = "random", None
    # QLoRA loads its 4-bit base whole on each GPU (modeling.build_qlora_base); everything else under
    # ZeRO-3 loads partitioned (zero.Init through HfDeepSpeedConfig in from_pretrained).
    m.load_sharded = m.init == "pretrained" and plan.strategy.stage == 3 and plan.training.method != "qlora"
    if m.init == "pretrained":
        how = "partitioned while loading (ZeRO-3: one copy per node)" if m.load_sharded else "whole on every rank"
        where = "the Hugging Face cache or hub" if not Path(source).exists() else "the folder"
        return [f"zero-run loads the pretrained weights of {source} from {where}, {how}"]
    why = "as asked (--init random)" if source is not None else "(a config only, no weights)"
    return [f"zero-run initialises {m.name} randomly {why}"]

"""zero-plan: argument parsing and output only; the planning is zero_planner.plan's (search.py, userconfig.py).

    zero-plan --model meta-llama/Meta-Llama-3-8B --gpus 2xT4 [-o plan.json] [--json]
    zero-plan --model gpt2 --gpus 1xT4 --ds-config my_ds.json      # will my existing config fit?
    zero-plan --model gpt2 --gpus 2xT4 --from-hf-trainer training_args.json --seq-len 1024
    zero-plan --model gpt2 --gpus 2xT4 --from-accelerate accelerate_config.yaml
    zero-plan --model M --compare 1xH100,2xA100-80GB,4xRTX4090 --tokens 2B [--price H100=2.5,...]

Exit status: 0 a plan fits (with --compare: on some cluster), 1 nothing fits (the output says what would), 2 bad
input (one line on stderr).
What people see is render.py's (bytes become GiB there); this module parses, plans and writes files. No torch,
transformers, peft or deepspeed import on the catalog path: `--validate` imports deepspeed, a model outside
the catalog torch and transformers the first time (models/trace_cache.py), `--gpus auto` torch only where
NVML cannot answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from zero_planner.errors import InputError, InputErrorParser, closest, left_by_the_reader
from zero_planner.hardware import GPU_SPEC_FORMS, parse_gpus
from zero_planner.planfile import Plan, plan_json, save_plan
from zero_planner.run.training_args import (
    add_training_arguments,
    apply_training_args,
    loads_weights,
    parsed_number,
    positive_int,
)
from zero_planner.strategies import STRATEGIES
from zero_planner.versions import drift_note

PROG = "zero-plan"
DEFAULT_SEQ_LEN = 2048
"""--seq-len when not given: 2048 tokens, or the model's maximum when that is shorter (the output says so)."""
EXIT_FITS, EXIT_NOTHING_FITS, EXIT_BAD_INPUT = 0, 1, 2
GIB = 2**30
STAGE_CHOICES = ("auto", *STRATEGIES)  # the names listed once, in strategies.py
PRECISION_CHOICES = ("auto", "bf16", "fp16", "fp32")
METHOD_CHOICES = ("full", "lora", "qlora", "auto")
EXPORT_CHOICES = ("hf-trainer", "accelerate", "axolotl", "llamafactory", "trl")
TASK_CHOICES = ("causal-lm", "seq-cls")


_Parser = InputErrorParser


def _micro_batch(text: str) -> int | None:
    if text.strip().lower() == "auto":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a positive integer or auto, got {text!r}") from None


def _choice(choices: Sequence[str]):
    def parse(text: str) -> str:
        if text in choices:
            return text
        lowered = text.strip().lower()
        if lowered in choices:
            return lowered
        near = closest(text, choices)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}{hint}")

    return parse


def _choice_option(parser: argparse.ArgumentParser, flag: str, choices: Sequence[str], *, default: str,
                   help: str | None = None) -> None:  # fmt: skip
    """Adds `flag`, one of `choices` (read as _choice reads it), shown in --help as {a,b,c}."""
    parser.add_argument(flag, type=_choice(choices), default=default, metavar="{" + ",".join(choices) + "}", help=help)


def _choices(choices: Sequence[str]):
    """argparse type of a comma list of `choices` (each checked as _choice does); with action="extend", a
    repeated flag adds to the list."""
    one = _choice(choices)

    def parse(text: str) -> list[str]:
        values = [one(part) for part in text.split(",") if part.strip()]
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} names none of {', '.join(choices)}")
        return values

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        allow_abbrev=False,  # a prefix is never read as another option: --save-step is refused, not --save-steps
        prog=PROG,
        description="Predict DeepSpeed ZeRO memory per GPU, choose the strategy and batch that fit, write the plan.",
        epilog="Exit status: 0 a plan fits, 1 nothing fits (the output says what would), 2 bad input.",
    )
    _model_and_gpus(parser)
    _search_options(parser)
    _method_options(parser)
    _given_configs(parser)
    _output_options(parser)
    add_training_arguments(parser)
    return parser


def _model_and_gpus(parser: argparse.ArgumentParser) -> None:
    """The model, and the GPUs to plan for (or the clusters to compare)."""
    parser.add_argument(
        "--model",
        default=None,
        help="Hugging Face hub id, local model folder, path to config.json, or a built-in catalog name "
        "(required unless --from-axolotl/--from-llamafactory names it; always with --from-hf-trainer/--from-accelerate)",
    )
    parser.add_argument("--gpus", default=None, help=f"the GPUs: {GPU_SPEC_FORMS} (required unless --compare)")
    parser.add_argument(
        "--compare",
        default=None,
        metavar="CLUSTERS",
        help="instead of --gpus: plan on each of these clusters (comma-separated --gpus forms, e.g. "
        "1xH100,2xA100-80GB,4xRTX4090) and rank them by the time to train --tokens, with each one's best plan",
    )
    parser.add_argument(
        "--tokens",
        type=_tokens,
        default=None,
        metavar="N",
        help="with --compare: tokens to train (2e9, 2B, 500M; default 1B): sets the time and cost columns",
    )
    parser.add_argument(
        "--price",
        default=None,
        metavar="GPU=PRICE,...",
        help="with --compare: price per GPU-hour of each GPU type (H100=2.5,A100-80GB=1.8): adds the cost",
    )


def _search_options(parser: argparse.ArgumentParser) -> None:
    """What the search tries: sequence, batch, checkpointing, precision, strategy, host memory."""
    parser.add_argument(
        "--seq-len",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"tokens per sample (default {DEFAULT_SEQ_LEN}, or the model's maximum if shorter)",
    )
    parser.add_argument(
        "--micro-batch",
        type=_micro_batch,
        default=None,
        metavar="N|auto",
        help="samples per GPU per micro-step (default auto: the largest that fits)",
    )
    parser.add_argument(
        "--global-batch",
        type=positive_int,
        default=None,
        metavar="N",
        help="samples per optimizer step over all GPUs; sets gradient accumulation (default: no accumulation)",
    )
    parser.add_argument(
        "--grad-checkpointing",
        dest="grad_ckpt",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force gradient checkpointing on or off (default: the planner tries both)",
    )
    _choice_option(parser, "--precision", PRECISION_CHOICES, default="auto",
                   help="auto: bf16 where the GPU has it, fp16 on T4/V100/P100, fp32 for cpu:N")  # fmt: skip
    _choice_option(parser, "--stage", STAGE_CHOICES, default="auto", help="ZeRO strategy (default auto: all seven)")
    parser.add_argument(
        "--cpu-mem",
        default=None,
        metavar="SIZE",
        help="host memory per node available for offload, e.g. 29GiB (default: detected or assumed)",
    )


def _method_options(parser: argparse.ArgumentParser) -> None:
    """Full fine-tuning, LoRA or QLoRA, the adapters' settings, and the task."""
    _choice_option(parser, "--method", METHOD_CHOICES, default="full",
                   help="full fine-tuning, LoRA, QLoRA (4-bit NF4 base), or auto: the first of these that fits")  # fmt: skip
    parser.add_argument("--lora-r", type=positive_int, default=16, metavar="R", help="LoRA rank (default 16)")
    parser.add_argument("--lora-alpha", type=positive_int, default=32, metavar="A", help="LoRA alpha (default 32)")
    parser.add_argument("--lora-dropout", type=_dropout, default=None, metavar="P",
                        help="LoRA dropout (default 0.05; 0 where peft adapts mixture-of-experts stacks, which refuse it)")
    parser.add_argument(
        "--lora-targets",
        default="all-linear",
        metavar="NAMES",
        help='comma-separated module names, or "all-linear" (default): every linear layer but the output head',
    )
    parser.add_argument(
        "--num-labels", type=positive_int, default=2, metavar="N", help="seq-cls: classes of the head (default 2)"
    )
    _choice_option(parser, "--task", TASK_CHOICES, default="causal-lm")


def _given_configs(parser: argparse.ArgumentParser) -> None:
    """Estimate a given config instead of choosing: a DeepSpeed JSON or another tool's file."""
    parser.add_argument(
        "--ds-config",
        default=None,
        metavar="PATH",
        help="do not choose: estimate this DeepSpeed JSON (fit reported without the safety margin)",
    )
    parser.add_argument(
        "--from-axolotl",
        default=None,
        metavar="YAML",
        help="do not choose: estimate this Axolotl config (model, batch, precision, LoRA, its deepspeed JSON)",
    )
    parser.add_argument(
        "--from-llamafactory",
        default=None,
        metavar="YAML",
        help="do not choose: estimate this LLaMA-Factory train config (as --from-axolotl)",
    )
    parser.add_argument(
        "--from-hf-trainer",
        default=None,
        metavar="JSON",
        help="do not choose: estimate these HF TrainingArguments (args.to_json_string() or the keyword arguments as "
        "JSON): batch, accumulation, precision, checkpointing, optim, its deepspeed JSON (none: plain DDP); "
        "--seq-len gives the length",
    )
    parser.add_argument(
        "--from-accelerate",
        default=None,
        metavar="YAML",
        help="do not choose: estimate this `accelerate config` file (DDP or DeepSpeed, precision, processes); "
        "--micro-batch is your DataLoader's batch_size (default: the largest that fits)",
    )
    parser.add_argument(
        "--loop-keeps-outputs",
        action="store_true",
        help="with --ds-config/--from-*: your training loop holds the model's outputs through backward and the "
        "step (outputs = model(**batch); backward(outputs.loss)), so their logits stay alive a step longer",
    )


def _output_options(parser: argparse.ArgumentParser) -> None:
    """What is printed and written: the plan file, JSON, table width, exports, probe, validation."""
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PATH",
        help="write the plan file here (and its DeepSpeed JSON beside it)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan file's JSON on stdout and nothing else")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="show every memory component per candidate (params ... peak) and the full reasons: up to 200 columns",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="after the table, each candidate's reason in full with its memory breakdown",
    )
    parser.add_argument(
        "--export",
        type=_choices(EXPORT_CHOICES),
        action="extend",
        default=None,
        metavar="KIND[,KIND...]",
        help=f"also write hand-off files beside the plan, one folder per kind ({', '.join(EXPORT_CHOICES)}; "
        "repeat the flag or give a comma list): HF TrainingArguments + DeepSpeed JSON + launch line, an "
        "Accelerate config YAML with the DeepSpeed plugin, an Axolotl or LLaMA-Factory YAML + command, or a "
        "TRL SFTTrainer script + launch line",
    )
    parser.add_argument("--probe", type=positive_int, default=None, metavar="K", help="then run the K best "
                        "candidates a few steps each on this machine (--gpus auto or cpu:N) and write PLAN.probed.json")  # fmt: skip
    parser.add_argument(
        "--validate",
        action="store_true",
        help="also check the DeepSpeed JSON with DeepSpeed's own config parser (imports deepspeed)",
    )


def _tokens(text: str) -> int:
    from zero_planner.plan.compare import parse_tokens

    try:
        return parse_tokens(text)
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("bad --tokens value ")) from None


def _dropout(text: str) -> float:
    return parsed_number(text, float, lambda v: 0 <= v < 1, f"{text!r} is not a probability in [0, 1)")


def _lora_info(args: argparse.Namespace, spec):
    """Returns the LoRA settings of the command line, as peft can run them on `spec` (options.lora_for_model)."""
    from zero_planner.plan.options import lora_for_model
    from zero_planner.planfile import LoraInfo

    targets = args.lora_targets.strip()
    names = targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()]
    if not names:
        raise InputError(f'--lora-targets {args.lora_targets!r} names no module; use "all-linear" or q_proj,v_proj')
    given = args.lora_dropout is not None
    lora = LoraInfo(r=args.lora_r, alpha=args.lora_alpha, target_modules=names,
                    **({"dropout": args.lora_dropout} if given else {}))  # fmt: skip
    return lora_for_model(spec, lora, args.method, dropout_given=f"--lora-dropout {args.lora_dropout:g}" if given else None)


def _with_lora(request, args: argparse.Namespace, spec):
    """Returns `request` with the command line's LoRA settings (_lora_info) for the search or a --ds-config estimate
    (the imported configs hold their own)."""
    return request.but(lora=_lora_info(args, spec))


def _seq_len(args: argparse.Namespace, spec, notes: list[str]) -> int:
    """Returns --seq-len, or DEFAULT_SEQ_LEN capped at the model's maximum (saying so in `notes`)."""
    if args.seq_len is not None:
        return args.seq_len
    seq_len = min(DEFAULT_SEQ_LEN, spec.max_position_embeddings)
    if seq_len < DEFAULT_SEQ_LEN:
        notes.append(f"--seq-len defaults to {DEFAULT_SEQ_LEN}, capped at the model's maximum of {seq_len} tokens")
    return seq_len


def _request(args: argparse.Namespace, spec, seq_len: int, **fields):
    """Returns the PlanRequest of the command line's model, batch, strategy and --init flags, with `fields` (the
    plan path, adapters, host figures) added: zero-plan's plan and --compare read the same flags the same way."""
    from zero_planner.plan.request import PlanRequest

    return PlanRequest(seq_len=seq_len, micro_batch=args.micro_batch, global_batch=args.global_batch,
                       grad_ckpt=args.grad_ckpt, precision=args.precision, stage=args.stage, method=args.method,
                       task=args.task, model_name=args.model, num_labels=args.num_labels,
                       pretrained=loads_weights(spec, args.init), **fields)  # fmt: skip


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def ds_config_file(plan_path: str | Path) -> Path:
    """Returns where the plan's DeepSpeed JSON is written beside the plan: plan.json -> plan.ds_config.json."""
    path = Path(plan_path)
    return path.with_name(f"{path.stem}.ds_config.json")


def run(args: argparse.Namespace) -> int:
    """Plans (or estimates --ds-config), prints the result and writes the files; returns the exit status."""
    from zero_planner.models.spec import load_model_spec
    from zero_planner.plan import search, userconfig
    from zero_planner.run import probe

    if args.compare is not None:
        return run_compare(args)
    if args.tokens is not None or args.price is not None:
        raise InputError("--tokens and --price go with --compare CLUSTERS (rank clusters by time and cost)")
    if args.gpus is None:
        raise InputError("the following argument is required: --gpus (or --compare CLUSTERS)")
    probe.check_zero_plan_args(args)
    imported = _imported(args)
    if args.model is None:
        raise InputError("the following argument is required: --model (or --from-axolotl/--from-llamafactory "
                         "with a base model in the YAML)")  # fmt: skip
    cluster = parse_gpus(args.gpus, args.cpu_mem)
    calibration, host_note = _host_calibration(args)
    ds_config = userconfig.read_ds_config(args.ds_config) if args.ds_config else None
    if imported is not None:
        ds_config, args.seq_len = imported.ds_config, imported.seq_len
    spec = load_model_spec(args.model)
    if args.loop_keeps_outputs and ds_config is None:
        raise InputError("--loop-keeps-outputs describes your own training loop: give it with --ds-config or "
                         "--from-axolotl/--from-llamafactory (zero-run's loop keeps only the loss)")  # fmt: skip
    notes = [host_note] if host_note else []
    notes += [note for note in (drift_note(),) if note]
    seq_len = _seq_len(args, spec, notes)
    (data_bytes, data_peak_bytes), data_note = _data_bytes(args, seq_len)
    if data_note:
        notes.append(data_note)
    request = _request(args, spec, seq_len, plan_path=args.output or "plan.json", calibration=calibration,
                       keeps_outputs=args.loop_keeps_outputs, data_bytes=data_bytes, data_peak_bytes=data_peak_bytes)

    if imported is not None:
        from zero_planner.plan import importers

        if imported.seq_len is None:  # TrainingArguments and Accelerate name no length, nor did --seq-len
            imported = importers.with_length(imported, seq_len)
        if imported.tool in importers.ADAPTERS_FROM_FLAGS:  # nor adapters: the script's peft config holds them
            lora = _lora_info(args, spec) if args.method in ("lora", "qlora") else None
            imported = importers.with_adapter(imported, args.method, lora)
        estimate = importers.estimate(imported, spec, cluster, request)
        result_plan, fits = estimate.plan, estimate.fits
    elif ds_config is not None:
        estimate = userconfig.estimate_config(spec, cluster, ds_config, _with_lora(request, args, spec))
        result_plan, fits = estimate.plan, estimate.fits
        estimate.plan.notes[:0] = notes
    else:
        result = search.plan(spec, cluster, _with_lora(request, args, spec))
        result.notes[:0] = notes
        if result.plan is not None:
            result.plan.notes[:0] = notes
        result_plan, fits = result.plan, result.fits

    if fits:
        from zero_planner.plan.measured import measured_note

        measured = measured_note(spec.model_type, result_plan.training.method)
        result_plan.notes.append(measured)
        if ds_config is None:
            result.notes.append(measured)  # what print_plan_result prints (a --ds-config estimate prints plan.notes)
        if imported is not None:
            _fill_training_flags(args, imported.training)
        result_plan.notes += apply_training_args(result_plan, args, planning=True)
        if args.dataset or args.eval_split:
            from zero_planner.run.data import check_local_data

            check_local_data(result_plan.training)  # a malformed file: its name and line now, not inside a rank
    if fits and args.validate:
        _validate(result_plan, given=ds_config is not None, quiet=args.json)
    written = _write(result_plan, args.output) if fits and args.output else None
    exported = _export(result_plan, args.export, args.output) if fits and args.export else []

    if args.json:
        if fits:
            print(plan_json(result_plan))
        else:
            answer = _no_plan_json(None, estimate) if ds_config is not None else _no_plan_json(result, None)
            print(json.dumps(answer, indent=2))
        return EXIT_FITS if fits else EXIT_NOTHING_FITS

    from zero_planner.plan import render

    console = render.make_console(wide=args.wide)
    why = None
    if ds_config is not None:
        render.print_config_estimate(console, estimate, cluster, imported.path if imported else args.ds_config,
                                     wide=args.wide, show_reasons=args.explain)  # fmt: skip
    else:
        render.print_plan_result(console, result, spec_name=args.model, method=args.method, wide=args.wide,
                                 show_reasons=args.explain)  # fmt: skip
        why = render.why_chosen(result.options, result.chosen) if fits else None
    if fits:
        render.print_next_steps(console, result_plan, written, args.output, why=why,
                                method_asked=None if ds_config is not None else args.method)
        for kind, path in exported:
            render.say(console, f"{kind}: wrote {path}", hang="  ")
    elif args.output:
        render.say(console, f"No plan written to {args.output}: nothing fits.")
    if fits and args.probe is not None:
        return probe.zero_plan(args, written[0])
    return EXIT_FITS if fits else EXIT_NOTHING_FITS


COMPARE_TOKENS = 10**9
"""--compare without --tokens: the time and cost of one billion tokens."""


def run_compare(args: argparse.Namespace) -> int:
    """Plans the model on every --compare cluster, prints them ranked by time to train --tokens (and cost with
    --price); returns 0 when some cluster fits, 1 when none does."""
    from zero_planner.models.spec import load_model_spec
    from zero_planner.plan import compare

    given = [flag for flag, value in (("--gpus", args.gpus), ("--ds-config", args.ds_config),
                                      ("--from-axolotl", args.from_axolotl),
                                      ("--from-llamafactory", args.from_llamafactory),
                                      ("--from-hf-trainer", args.from_hf_trainer),
                                      ("--from-accelerate", args.from_accelerate), ("-o", args.output),
                                      ("--export", args.export), ("--probe", args.probe),
                                      ("--validate", args.validate or None)) if value is not None]  # fmt: skip
    if given:
        raise InputError(f"--compare ranks clusters and writes nothing: drop {', '.join(given)} (then plan the "
                         f"cluster you pick with --gpus)")  # fmt: skip
    if args.model is None:
        raise InputError("the following argument is required: --model")
    clusters = compare.parse_clusters(args.compare, args.cpu_mem)
    prices = compare.parse_prices(args.price) if args.price is not None else {}
    tokens = args.tokens or COMPARE_TOKENS
    spec = load_model_spec(args.model)
    notes = [note for note in (drift_note(),) if note]
    seq_len = _seq_len(args, spec, notes)
    calibrations = {}
    for label, _ in clusters:
        if label.strip().lower() == "auto":
            args.gpus = label
            calibration, note = _host_calibration(args)
            args.gpus = None
            if calibration is not None:
                calibrations[label] = calibration
            notes += [note] if note else []
    request = _request(args, spec, seq_len, lora=_lora_info(args, spec))
    rows = compare.compare(spec, clusters, request, tokens=tokens, prices=prices, calibrations=calibrations)
    fits = any(row.fits for row in rows)
    if args.json:
        from zero_planner.plan.throughput import load_calibration
        from zero_planner.planfile import SCHEMA_VERSION

        cal = load_calibration()
        print(json.dumps({
            "schema_version": SCHEMA_VERSION, "model": {"name": args.model, "params": spec.num_params},
            "tokens": tokens, "seq_len": seq_len,
            "tokens_per_second_error": {"median": cal.median_error, "max": cal.max_error,
                                        "what": "out of family: architectures left out of the fit",
                                        "several_gpus": {"median": cal.several_gpus_median_error,
                                                         "max": cal.several_gpus_max_error}},
            "clusters": [compare.row_json(row) for row in rows], "notes": notes,
        }, indent=2))  # fmt: skip
        return EXIT_FITS if fits else EXIT_NOTHING_FITS
    from zero_planner.plan import render

    console = render.make_console(wide=args.wide)
    render.print_comparison(console, rows, spec_name=args.model, spec=spec, tokens=tokens, seq_len=seq_len,
                            notes=notes)  # fmt: skip
    return EXIT_FITS if fits else EXIT_NOTHING_FITS


def _host_calibration(args: argparse.Namespace):
    """Returns (step-time calibration, note) for this plan: with --gpus auto, the committed constants with this
    machine's CPU Adam rate (measured once in a child process and cached: zero_planner/plan/host_rates.py; the
    measurement is announced on stderr); otherwise (None, None): the catalog's rate, the H100 host's."""
    if args.gpus.strip().lower() != "auto":
        return None, None
    from zero_planner.plan import host_rates
    from zero_planner.plan.throughput import load_calibration

    cal = load_calibration()
    rate = host_rates.cpu_adam_rate(say=lambda text: print(f"{PROG}: {text}", file=sys.stderr, flush=True))
    if rate is None:
        return None, (f"CPU Adam rate of this machine not measured (DeepSpeed's CPU op unavailable, or "
                      f"{host_rates.MEASURE_ENV}=0): offload steps use the catalog's {cal.cpu_adam_params_per_s_per_node:.3g} "
                      f"parameters/s ({cal.reference_gpu} host)")  # fmt: skip
    note = (f"CPU Adam on this machine: {rate.cpu_adam_params_per_s:.3g} parameters/s (measured {rate.date}, "
            f"{rate.cores} cores, cached), used for offload steps; the catalog's {cal.reference_gpu} host: "
            f"{cal.cpu_adam_params_per_s_per_node:.3g}")  # fmt: skip
    return cal.with_cpu_adam(rate.cpu_adam_params_per_s), note


IMPORT_FLAGS = {"axolotl": "from_axolotl", "llamafactory": "from_llamafactory", "hf_trainer": "from_hf_trainer",
                "accelerate": "from_accelerate"}  # fmt: skip
"""importers' tool -> the argparse dest of its --from-... flag."""


def _imported(args: argparse.Namespace):
    """Returns the ImportedConfig of a --from-... flag (None without one); its base model fills --model when
    --model is not given; --seq-len, --micro-batch, --grad-checkpointing override the file."""
    given = [(tool, getattr(args, dest)) for tool, dest in IMPORT_FLAGS.items() if getattr(args, dest)]
    if not given:
        return None
    if len(given) > 1 or args.ds_config:
        raise InputError("give one of --ds-config, --from-axolotl, --from-llamafactory, --from-hf-trainer, "
                         "--from-accelerate")  # fmt: skip
    from zero_planner.plan import importers

    imported = importers.read_config(*given[0])
    args.model = args.model or imported.model
    return importers.with_overrides(imported, seq_len=args.seq_len, micro_batch=args.micro_batch,
                                    grad_ckpt=args.grad_ckpt)  # fmt: skip


def _fill_training_flags(args: argparse.Namespace, training: dict) -> None:
    """Sets the run settings an imported file carries (TrainingArguments' max_steps, learning_rate,
    save_total_limit, ...) on the flags the command line left unset, so the plan trains as the file says."""
    # The run's length and its save policy are each set by either of two flags: a file's value fills neither
    # where the command line gave one of them (--epochs 1 over the file's max_steps, --save-steps over "no").
    together = (("max_steps", "epochs"), ("save", "save_steps"))
    for dest, value in training.items():
        group = next((pair for pair in together if dest in pair), (dest,))
        if all(getattr(args, name, None) is None for name in group):
            setattr(args, dest, value)


def _validate(plan: Plan, *, given: bool, quiet: bool) -> None:
    import contextlib

    from zero_planner.plan.dsconfig import validate_ds_config

    try:
        # DeepSpeed's logger writes to stdout, which --json keeps for the plan alone.
        with contextlib.redirect_stdout(sys.stderr):
            validate_ds_config(plan.deepspeed_config)
    except ValueError as error:
        if given:
            raise InputError(f"--ds-config: {_one_line(error)}") from None
        raise RuntimeError(f"zero-plan built a DeepSpeed config that DeepSpeed rejects (a bug): {error}") from None
    if not quiet:
        print("DeepSpeed's config parser accepts the DeepSpeed JSON.")


def _write(plan: Plan, output: str) -> tuple[Path, Path]:
    """Writes the plan file and its DeepSpeed JSON beside it; returns both paths."""
    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_plan(plan, path)
        ds_path = ds_config_file(path)
        ds_path.write_text(json.dumps(plan.deepspeed_config, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise InputError(f"-o {output!r}: cannot write ({error.strerror or error})") from None
    return path, ds_path


def export_dir(output: str | None, kind: str) -> Path:
    """Returns where --export writes: beside the plan (plan.json -> plan.hf-trainer/), else ./zero-plan.KIND/."""
    if output:
        path = Path(output)
        return path.with_name(f"{path.stem}.{kind}")
    return Path(f"zero-plan.{kind}")


def _export(plan: Plan, kinds: Sequence[str], output: str | None) -> list[tuple[str, Path]]:
    """Writes the hand-off files of each of `kinds` (once each, in the order given) for `plan`; returns
    (kind, path) for every file written."""
    from zero_planner.plan import export

    written = []
    for kind in dict.fromkeys(kinds):
        target = export_dir(output, kind)
        try:
            written += [(kind, path) for path in export.WRITERS[kind](plan, target)]
        except OSError as error:
            raise InputError(f"--export {kind}: cannot write {str(target)!r} ({error.strerror or error})") from None
    return written


def _no_plan_json(result, estimate) -> dict:
    """Returns the --json answer when nothing fits: no plan, every candidate and what would fit."""
    from zero_planner.plan.assemble import candidate

    if estimate is not None:
        data = estimate.plan.model_dump(mode="json")
        return {
            "schema_version": data["schema_version"],
            "fits": False,
            "reason": estimate.option.reason,
            "gpu_headroom_bytes": estimate.gpu_headroom_bytes,
            "host_headroom_bytes": estimate.host_headroom_bytes,
            "plan": data,
        }
    from zero_planner.planfile import SCHEMA_VERSION

    return {
        "schema_version": SCHEMA_VERSION,
        "fits": False,
        "model": {"name": result.spec.name, "params": result.spec.num_params},
        "hardware": {
            "gpu": result.cluster.gpu.name,
            "nodes": result.cluster.nodes,
            "gpus_per_node": result.cluster.gpus_per_node,
            "gpu_memory_bytes": result.cluster.gpu.memory_bytes,
            "cpu_memory_bytes": result.cluster.cpu_memory_bytes,
        },
        "training": {"seq_len": result.seq_len, "precision": result.precision},
        "candidates": [candidate(o).model_dump(mode="json") for o in result.options],
        "advice": result.advice,
        "notes": result.notes,
    }


def _data_bytes(args, seq_len: int) -> tuple[tuple[int, int], str | None]:
    """Returns the host bytes each rank will hold for a local --dataset's tokens and its peak while packing them
    (data.held_data_bytes; 0 for the built-in corpus and hub datasets), and the note that says so."""
    if not args.dataset:
        return (0, 0), None
    from zero_planner.run.data import TOKENS_PER_BYTE, held_data_bytes
    from zero_planner.run.training_args import data_settings

    held, peak, tokens = held_data_bytes(data_settings(args, seq_len, args.task or "causal-lm"))
    if not held:
        return (0, 0), None
    per_byte = "one per byte, byte-level" if args.tokenizer == "bytes" else f"{TOKENS_PER_BYTE['other']:g} per byte, assumed"
    return (held, peak), (f"host: zero-run's ranks each hold the tokenized data, {held / 2**30:.2f} GiB, and "
                          f"{peak / 2**30:.2f} GiB while they pack it (about {tokens / 1e6:,.1f}M tokens from the "
                          f"files' size, {per_byte}), counted in the host figures")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs zero-plan with `argv` (default sys.argv[1:]); returns the exit status, never raises for bad input."""
    try:
        args = build_parser().parse_args(argv)
        return run(args)
    except InputError as error:
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the output's reader went away (zero-plan ... | head): no traceback for that
        return left_by_the_reader()


if __name__ == "__main__":
    sys.exit(main())

"""Hand-off files: HF Trainer's TrainingArguments and launch line, Accelerate's config YAML."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from conftest import make_plan

from zero_planner.plan import export


def test_every_export_kind_has_a_writer_and_a_flag_choice():
    # cli keeps its own tuple so that zero-plan's start-up does not import the writers; this holds the two equal.
    from zero_planner.cli import EXPORT_CHOICES

    assert EXPORT_CHOICES == tuple(export.WRITERS)


@pytest.mark.parametrize(
    "strategy, precision, checkpointing",
    [("2", "bf16", True), ("3", "fp16", False), ("2-offload", "fp32", False)],
)
def test_hf_trainer_args_match_the_plan(strategy, precision, checkpointing):
    plan = make_plan(strategy, precision=precision, micro_batch_size=2, gradient_accumulation_steps=4,
                     gradient_checkpointing=checkpointing, learning_rate=1e-4)  # fmt: skip
    args = export.hf_trainer_args(plan, "x/ds.json")
    assert args["per_device_train_batch_size"] == 2 and args["gradient_accumulation_steps"] == 4
    assert (args["bf16"], args["fp16"]) == (precision == "bf16", precision == "fp16")
    assert args["gradient_checkpointing"] is checkpointing
    assert ("gradient_checkpointing_kwargs" in args) is checkpointing
    assert args["deepspeed"] == "x/ds.json"
    assert args["learning_rate"] == 1e-4 and args["max_steps"] == plan.training.max_steps
    assert args["max_grad_norm"] == plan.deepspeed_config["gradient_clipping"]
    assert args["output_dir"] == plan.training.output_dir


@pytest.mark.parametrize("checkpointing", [False, True])
def test_training_arguments_accept_the_written_kwargs(tmp_path, checkpointing, monkeypatch):
    """transformers builds TrainingArguments from the file and its DeepSpeed integration finds no mismatch."""
    from transformers import TrainingArguments

    # One rank: HF computes train_batch_size from its own world size and checks it against the JSON.
    plan = make_plan("2", gpus_per_node=1, precision="fp32", micro_batch_size=2, gradient_accumulation_steps=3,
                     gradient_checkpointing=checkpointing, output_dir=str(tmp_path / "run"))  # fmt: skip
    paths = export.write_hf_trainer(plan, tmp_path / "hf")
    names = sorted(p.name for p in paths)
    assert names == ["ds_config.json", "launch.sh", "training_args.json"]
    kwargs = json.loads((tmp_path / "hf" / "training_args.json").read_text())
    assert json.loads((tmp_path / "hf" / "ds_config.json").read_text()) == plan.deepspeed_config
    args = TrainingArguments(**kwargs)  # a cpu:N plan's file says use_cpu itself (the launch test says why)
    assert args.use_cpu and args.per_device_train_batch_size == 2 and args.gradient_accumulation_steps == 3
    assert args.gradient_checkpointing is checkpointing and args.deepspeed == str(tmp_path / "hf" / "ds_config.json")
    # The integration's own consistency check: raises ValueError listing every mismatch.
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    hf_ds = HfTrainerDeepSpeedConfig(json.loads((tmp_path / "hf" / "ds_config.json").read_text()))
    hf_ds.trainer_config_process(args)
    assert not hf_ds.mismatches


@pytest.mark.parametrize("save", ["steps", "final"])
def test_training_arguments_carry_what_the_user_gave_zero_plan(tmp_path, save):
    """Issue 59: `--epochs 1 --save-total-limit 2 --eval-split 0.05` came out as max_steps 0 (TrainingArguments then
    trained 3 epochs), no save_total_limit and no evaluation. Built by transformers from the written file."""
    from transformers import TrainingArguments

    plan = make_plan("2", gpus_per_node=1, precision="fp32", output_dir=str(tmp_path / "run"), max_steps=0, epochs=1.5,
                     save=save, save_every=7, save_total_limit=3, eval_split="0.05", lr_scheduler="cosine",
                     warmup=0.1, report_to=["tensorboard"])  # fmt: skip
    export.write_hf_trainer(plan, tmp_path / "hf")
    args = TrainingArguments(**json.loads((tmp_path / "hf" / "training_args.json").read_text()))
    assert args.max_steps == -1 and args.num_train_epochs == 1.5
    assert args.lr_scheduler_type == "cosine" and args.warmup_steps == 0.1  # a ratio in both, below 1
    assert args.save_strategy == ("steps" if save == "steps" else "no")
    assert args.save_steps == 7 and args.save_total_limit == 3
    assert args.eval_strategy == "steps" and args.eval_steps == 7  # at each save, as zero-run without eval_every
    assert args.report_to == ["tensorboard"]
    steps = export.hf_trainer_args(make_plan("2", max_steps=40, warmup=5))
    assert (steps["max_steps"], steps["lr_scheduler_type"], steps["warmup_steps"]) == (40, "constant_with_warmup", 5)
    assert "num_train_epochs" not in steps and steps["eval_strategy"] == "no" and steps["report_to"] == "none"


@pytest.mark.parametrize("eval_split, share", [("0.05", 0.05), ("200", 200), ("validation", None)])
def test_trl_script_holds_out_the_eval_share_or_names_the_split(tmp_path, eval_split, share):
    """SFTConfig with eval_strategy "steps" and no eval_dataset stops in Trainer: train_sft.py splits a share (or
    a row count) off the training rows, as zero-run does; a split name or file is named in command.sh instead."""
    trl = pytest.importorskip("trl")

    plan = make_plan("2", gpus_per_node=1, precision="fp32", dataset="org/data", eval_split=eval_split, eval_every=4)
    export.write_trl(plan, tmp_path)
    config = trl.SFTConfig(**export.trl_config(plan, str(tmp_path / "ds_config.json")))
    assert config.use_cpu
    script = (tmp_path / "train_sft.py").read_text()
    compile(script, "train_sft.py", "exec")
    command = (tmp_path / "command.sh").read_text()
    if share is None:
        assert config.eval_strategy == "no" and "eval_dataset" not in script
        assert "not mapped: training.eval_split validation: load it as eval_dataset" in command
    else:
        assert config.eval_strategy == "steps" and config.eval_steps == 4
        assert f"train_test_split(test_size={share!r}, seed={plan.training.seed})" in script
        assert 'eval_dataset=held_out["test"]' in script and "eval_split" not in command


@pytest.mark.parametrize("spec, call", [
    ("/data/train.jsonl", "load_dataset('json', data_files='/data/train.jsonl', split=\"train\")"),
    ("/data/part-*.parquet", "load_dataset('parquet', data_files='/data/part-*.parquet', split=\"train\")"),
    ("org/data", "load_dataset('org/data', split=\"train\")"),
    ("org/data:subset", "load_dataset('org/data', 'subset', split=\"train\")"),
    ("/data/folder", "load_dataset('/data/folder', split=\"train\")"),
])  # fmt: skip
def test_trl_script_loads_the_dataset_as_zero_run_reads_it(spec, call):
    """A real launch found train_sft.py's load_dataset('/path/train.jsonl'): datasets looks for a folder of that
    name and stops (FileNotFoundError: Couldn't find any data file). Files go through their builder; name:config is
    a name and a config."""
    assert export.load_dataset_call(spec) == call


@pytest.mark.parametrize("suffix, text", [(".jsonl", '{"text": "a b"}\n{"text": "c"}\n'), (".csv", "text\na b\nc\n")])
def test_the_written_load_dataset_call_reads_local_files(tmp_path, suffix, text):
    from datasets import load_dataset  # noqa: F401 (the call below names it)

    path = tmp_path / f"train{suffix}"
    path.write_text(text)
    plan = make_plan("2", dataset=str(path))
    line = next(line for line in export.trl_script(plan).splitlines() if line.startswith("dataset = "))
    scope = {"load_dataset": load_dataset}
    exec(line, scope)
    assert scope["dataset"]["text"] == ["a b", "c"]


def test_only_cpu_plans_tell_trainer_and_accelerate_scripts_about_cpu_processes():
    """DeepSpeed on CPU processes under HF Trainer needs use_cpu, and an Accelerate script PartialState(cpu=True)
    (tests/test_export_launch_cpu.py launches both); a GPU plan carries neither."""
    cpu, gpu = make_plan("2"), make_plan("2", gpu="H100")
    assert export.hf_trainer_args(cpu)["use_cpu"] is True and "use_cpu" not in export.hf_trainer_args(gpu)
    assert export.trl_config(cpu)["use_cpu"] is True and "use_cpu" not in export.trl_config(gpu)
    assert any("PartialState(cpu=True)" in note for note in export.accelerate_notes(cpu))
    assert not any("PartialState" in note for note in export.accelerate_notes(gpu))


@pytest.mark.parametrize("strategy, gpu, says", [("3", "cpu", True), ("2", "cpu", False), ("3", "H100", False)])
def test_cpu_plans_at_zero3_set_up_deepspeeds_comm_before_the_model(tmp_path, strategy, gpu, says):
    """On CPU processes the ranks share torch's gloo group, not DeepSpeed's comm: zero.Init read a world of 1 and
    stopped at train_batch_size 4 != 2 * 1 * 1 (tests/test_export_launch_cpu.py). launch.sh and command.sh say to
    call deepspeed.init_distributed() before the model; train_sft.py calls it before SFTTrainer builds one."""
    plan = make_plan(strategy, gpu=gpu)
    for kind in ("hf-trainer", "accelerate", "trl"):
        export.WRITERS[kind](plan, tmp_path / kind)
    note = "deepspeed.init_distributed() before building the model"
    assert (note in (tmp_path / "hf-trainer" / "launch.sh").read_text()) is says
    assert (note in (tmp_path / "accelerate" / "command.sh").read_text()) is says
    script = (tmp_path / "trl" / "train_sft.py").read_text()
    assert ("deepspeed.init_distributed()\ntrainer = SFTTrainer(" in script) is says
    compile(script, "train_sft.py", "exec")


@pytest.mark.parametrize("strategy, gpu, says", [("3", "cpu", True), ("2", "cpu", True), ("2", "H100", False)])
def test_cpu_plans_say_to_leave_the_gloo_group_at_the_end(tmp_path, strategy, gpu, says):
    """A rank still in its gloo group at interpreter exit aborted after training in CI (the HF Trainer launch at
    stage 3, "terminate called without an active exception", exit 250): launch.sh says to destroy the group, command.sh
    to call Accelerate's end_training (which does), train_sft.py does it itself."""
    plan = make_plan(strategy, gpu=gpu)
    for kind in ("hf-trainer", "accelerate", "trl"):
        export.WRITERS[kind](plan, tmp_path / kind)
    assert ("end with torch.distributed.destroy_process_group()" in (
        tmp_path / "hf-trainer" / "launch.sh").read_text()) is says  # fmt: skip
    assert ("end with accelerator.end_training()" in (tmp_path / "accelerate" / "command.sh").read_text()) is says
    leaves = "trainer.train()\nimport torch.distributed as dist\nif dist.is_initialized():\n    dist.destroy_process_group"
    assert leaves in (tmp_path / "trl" / "train_sft.py").read_text()


def test_trl_export_of_a_classification_plan_says_sft_is_not_for_it(tmp_path):
    export.write_trl(make_plan("2", task="seq-cls", num_labels=3), tmp_path)
    assert "not mapped: training.task seq-cls (num_labels 3): SFTTrainer trains causal LMs" in (
        tmp_path / "command.sh").read_text()


def test_launch_line_names_the_json_and_every_argument(tmp_path):
    plan = make_plan("3", precision="bf16", micro_batch_size=4, gradient_accumulation_steps=2,
                     gradient_checkpointing=True)  # fmt: skip
    export.write_hf_trainer(plan, tmp_path)
    line = (tmp_path / "launch.sh").read_text().splitlines()[-1]
    argv = shlex.split(line)
    assert argv[:2] == ["DS_ACCELERATOR=cpu", "deepspeed"]  # a cpu plan: tests and demos
    assert argv[argv.index("--num_gpus") + 1] == "2"
    script = argv.index("your_train.py")
    assert argv[script + 1 : script + 3] == ["--deepspeed", str(tmp_path / "ds_config.json")]
    flags = dict(zip(argv[script + 3 :: 2], argv[script + 4 :: 2]))
    assert flags["--per_device_train_batch_size"] == "4" and flags["--gradient_accumulation_steps"] == "2"
    assert flags["--bf16"] == "True"
    assert json.loads(flags["--gradient_checkpointing_kwargs"]) == {"use_reentrant": False}


def test_launch_line_parses_with_hf_argument_parser(tmp_path):
    from transformers import HfArgumentParser, TrainingArguments

    plan = make_plan("2", gpus_per_node=1, precision="fp32", gradient_checkpointing=True, output_dir=str(tmp_path),
                     epochs=2.0, eval_split="0.1", eval_every=3, report_to=["tensorboard", "csv"])  # fmt: skip
    argv = export.hf_trainer_launch(plan, str(tmp_path / "ds.json"))
    export.write_hf_trainer(plan, tmp_path)  # the JSON must exist for TrainingArguments
    argv[argv.index("--deepspeed") + 1] = str(tmp_path / "ds_config.json")
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        argv[argv.index("your_train.py") + 1 :]
    )
    assert args.use_cpu  # a cpu:N plan's line says so: DeepSpeed on CPU processes needs it (test_export_launch_cpu)
    assert args.gradient_checkpointing and args.gradient_checkpointing_kwargs == {"use_reentrant": False}
    assert args.learning_rate == plan.training.learning_rate
    assert (args.max_steps, args.num_train_epochs, args.eval_strategy, args.eval_steps) == (-1, 2.0, "steps", 3)
    assert args.report_to == ["tensorboard"]  # one name on a command line; launch.sh names the rest
    assert "training_args.json has them all (tensorboard, csv)" in (tmp_path / "launch.sh").read_text()


def test_lora_plans_also_write_the_peft_config(tmp_path):
    plan = make_plan("2", method="lora", task="seq-cls", lora={"r": 8, "alpha": 16, "target_modules": ["q_proj"]})
    paths = export.write_hf_trainer(plan, tmp_path)
    assert (tmp_path / "lora_config.json") in paths
    lora = json.loads((tmp_path / "lora_config.json").read_text())
    assert lora == {"r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "target_modules": ["q_proj"],
                    "task_type": "SEQ_CLS"}  # fmt: skip
    from peft import LoraConfig

    assert LoraConfig(**lora).r == 8


@pytest.mark.parametrize("strategy, precision", [("2", "bf16"), ("3", "fp16"), ("1", "fp32")])
def test_accelerate_yaml_parses_and_names_the_json(tmp_path, strategy, precision):
    import yaml

    plan = make_plan(strategy, precision=precision, gpus_per_node=4)
    paths = export.write_accelerate(plan, tmp_path)
    assert sorted(p.name for p in paths) == ["accelerate_config.yaml", "command.sh", "ds_config.json"]
    config = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    assert config["distributed_type"] == "DEEPSPEED"
    assert config["num_processes"] == 4 and config["num_machines"] == 1
    assert "mixed_precision" not in config  # the JSON's bf16/fp16 section decides (next test)
    ds_path = config["deepspeed_config"]["deepspeed_config_file"]
    assert json.loads(open(ds_path).read()) == plan.deepspeed_config
    assert config["deepspeed_config"]["zero3_init_flag"] is (strategy == "3")


def test_accelerate_command_says_what_the_script_must_do(tmp_path):
    """The JSON's optimizer section means the script builds none (Accelerate refuses one beside it)."""
    plan = make_plan("2", precision="bf16", micro_batch_size=3, gradient_accumulation_steps=5)
    export.write_accelerate(plan, tmp_path)
    text = (tmp_path / "command.sh").read_text()
    assert "batch_size=3 per process" in text and "accumulates 5 micro-batches" in text
    assert "DummyOptim(model.parameters())" in text and "DummyScheduler" not in text
    assert "inside `with accelerator.accumulate(model):`" in text  # else DeepSpeed steps at every micro-batch
    export.write_accelerate(make_plan("2", gradient_accumulation_steps=1), tmp_path / "one")
    assert "accelerator.accumulate" not in (tmp_path / "one" / "command.sh").read_text()
    assert text.splitlines()[-1].split() == ["env", "DS_ACCELERATOR=cpu", "accelerate", "launch", "--config_file",
                                             str(tmp_path / "accelerate_config.yaml"), "your_train.py"]  # fmt: skip


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_accelerate_launch_takes_the_yaml_and_trains_in_the_jsons_precision(tmp_path, monkeypatch, precision):
    """Issue 59: `accelerate launch --config_file accelerate_config.yaml train.py` failed at Accelerator() ("When
    using `deepspeed_config_file`, the following accelerate config variables will be ignored: [...
    'mixed_precision']"). Accelerate's own steps, in order: the launch command's validation of the file, the
    environment its DeepSpeed launcher hands each rank, and the plugin that Accelerator() builds from it."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    plan = make_plan("2", precision=precision, gpus_per_node=2)
    export.write_accelerate(plan, tmp_path)
    (tmp_path / "train.py").write_text("")
    args = launch_command_parser().parse_args(["--config_file", str(tmp_path / "accelerate_config.yaml"),
                                               str(tmp_path / "train.py")])  # fmt: skip
    args, defaults, mixed_precision_from_file = _validate_launch_command(args)
    assert args.use_deepspeed and not mixed_precision_from_file
    # What accelerate's launch_command sets before its deepspeed launcher runs:
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
    _, env = prepare_deepspeed_cmd_env(args)
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    plugin = DeepSpeedPlugin(hf_ds_config=defaults.deepspeed_config["deepspeed_config_file"])  # refused before
    plugin.set_mixed_precision(env["ACCELERATE_MIXED_PRECISION"])  # as AcceleratorState does
    ds = plugin.deepspeed_config
    assert (ds["bf16"]["enabled"], ds["fp16"]["enabled"]) == (precision == "bf16", precision == "fp16")


def test_accelerate_reads_the_yaml(tmp_path):
    """Accelerate's own loader accepts the file (its dataclass rejects unknown or missing keys)."""
    from accelerate.commands.config.config_args import load_config_from_file

    plan = make_plan("2", precision="bf16", nodes=2, gpus_per_node=8)
    export.write_accelerate(plan, tmp_path)
    config = load_config_from_file(str(tmp_path / "accelerate_config.yaml"))
    assert config.distributed_type == "DEEPSPEED" and config.num_processes == 16 and config.num_machines == 2
    assert config.deepspeed_config["deepspeed_config_file"] == str(tmp_path / "ds_config.json")


def test_yaml_fallback_matches_pyyaml():
    import yaml

    config = export.accelerate_config(make_plan("3", precision="fp16", nodes=2, gpus_per_node=2), "a b/ds.json")
    assert yaml.safe_load("".join(export._yaml_lines(config, 0))) == config == yaml.safe_load(export.to_yaml(config))


def test_export_stays_light():
    from conftest import heavy_modules_after

    assert heavy_modules_after("import zero_planner.plan.export") == []


def test_accelerate_yaml_names_the_json_absolutely(tmp_path, monkeypatch):
    """Written from a relative folder, the YAML still finds the JSON when launched from elsewhere."""
    import yaml

    monkeypatch.chdir(tmp_path)
    export.write_accelerate(make_plan("2", precision="bf16"), "out")
    ds_path = yaml.safe_load((tmp_path / "out" / "accelerate_config.yaml").read_text())["deepspeed_config"]["deepspeed_config_file"]
    assert Path(ds_path).is_absolute() and Path(ds_path) == tmp_path / "out" / "ds_config.json"


@pytest.mark.parametrize("gpu, expected", [("H100", ["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]), ("cpu", [])])
def test_hand_off_commands_set_the_allocator_the_plan_assumes(gpu, expected):
    """The memory plan assumes expandable segments (zero-run sets them): every hand-off launch line does too."""
    plan = make_plan("2", gpu=gpu)
    lines = [export.axolotl_command(plan, "a.yml")[0], export.llamafactory_command(plan, "l.yaml")[0],
             export.hf_trainer_launch(plan), export.trl_launch(plan), export.accelerate_launch(plan, "a.yaml")]  # fmt: skip
    for argv in lines:
        assert [a for a in argv if a.startswith("PYTORCH_CUDA_ALLOC_CONF=")] == expected


FAKE_TOOL = """#!/bin/sh
# Stands in for axolotl, llamafactory-cli, deepspeed and accelerate: every file a hand-off command names must exist.
for arg in "$@"; do
    case "$arg" in
        your_train.py) ;;  # the user's own script, named relative to where they run it
        *.yml|*.yaml|*.json|*.py) [ -f "$arg" ] || { echo "missing: $arg (from $PWD)"; exit 3; } ;;
    esac
done
echo "ran $(basename "$0")"
"""


@pytest.mark.parametrize("kind, script", [("axolotl", "command.sh"), ("llamafactory", "command.sh"),
                                          ("trl", "command.sh"), ("hf-trainer", "launch.sh"),
                                          ("accelerate", "command.sh")])  # fmt: skip
def test_hand_off_commands_run_from_any_directory(tmp_path, monkeypatch, kind, script):
    """Written into a relative folder, each command finds its files when run from another directory."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("axolotl", "llamafactory-cli", "deepspeed", "accelerate"):
        (bin_dir / name).write_text(FAKE_TOOL)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "planned-here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "planned-here")
    export.WRITERS[kind](make_plan("2", precision="bf16"), "out")
    command = tmp_path / "planned-here" / "out" / script
    done = subprocess.run(["sh", str(command)], cwd=tmp_path / "elsewhere", capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ran ")

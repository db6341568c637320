"""Axolotl, LLaMA-Factory and TRL: exports parsed by the library that reads them, key names checked against the
tools' own schemas (catalog/tool_keys.json, built from their sources), and the round trip export -> --from-...
reproducing the plan's estimate to the byte."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from conftest import heavy_modules_after, make_plan

from zero_planner.cli import main
from zero_planner.plan import export, importers

CATALOG = importers.tool_catalog()
LLAMA8B = ["--model", "meta-llama/Meta-Llama-3-8B"]
TOOLS = {"axolotl": "axolotl.yml", "llamafactory": "llamafactory.yaml"}


def test_key_lists_name_their_source():
    for tool in ("axolotl", "llamafactory"):
        entry = CATALOG[tool]
        assert entry["source"].startswith("github.com/") and len(entry["commit"]) == 40
        assert len(entry["keys"]) > 200 and entry["presets"]
    # Spot checks against the documented schemas (Axolotl docs/config reference, LLaMA-Factory examples/).
    assert {"base_model", "micro_batch_size", "lora_target_linear", "deepspeed"} <= set(CATALOG["axolotl"]["keys"])
    assert {"model_name_or_path", "cutoff_len", "lora_rank", "disable_gradient_checkpointing",
            "per_device_train_batch_size"} <= set(CATALOG["llamafactory"]["keys"])  # fmt: skip
    assert "micro_batch_size" not in CATALOG["llamafactory"]["keys"]


PLANS = [
    pytest.param(dict(strategy="3", precision="bf16", gradient_checkpointing=True), id="full-3-bf16-ckpt"),
    pytest.param(dict(strategy="2-offload", precision="fp16", gradient_checkpointing=False), id="full-2off-fp16"),
    pytest.param(dict(strategy="0", precision="fp32", gradient_checkpointing=True, method="lora",
                      lora={"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}),
                 id="lora-0-fp32-targets"),  # fmt: skip
    pytest.param(dict(strategy="2", precision="bf16", gradient_checkpointing=True, method="qlora",
                      lora={"r": 64, "quantization": "nf4"}), id="qlora-2"),  # fmt: skip
]


def _plan(case: dict):
    case = dict(case)
    return make_plan(case.pop("strategy"), micro_batch_size=2, gradient_accumulation_steps=3, seq_len=256, **case)


@pytest.mark.parametrize("case", PLANS)
@pytest.mark.parametrize("tool", TOOLS)
def test_exported_yaml_uses_only_the_tools_keys(tmp_path, tool, case):
    plan = _plan(case)
    paths = export.WRITERS[tool](plan, tmp_path)
    assert sorted(p.name for p in paths) == sorted(["ds_config.json", TOOLS[tool], "command.sh"])
    config = yaml.safe_load((tmp_path / TOOLS[tool]).read_text())
    unknown = set(config) - set(CATALOG[tool]["keys"])
    assert not unknown, f"keys {tool} does not know: {unknown}"
    if tool == "axolotl":
        for entry in config["datasets"]:
            assert set(entry) <= set(CATALOG["axolotl"]["dataset_keys"])
    assert json.loads((tmp_path / "ds_config.json").read_text()) == plan.deepspeed_config
    assert config["deepspeed"] == str((tmp_path / "ds_config.json").resolve())


@pytest.mark.parametrize("case", PLANS)
def test_axolotl_values_match_the_plan(tmp_path, case):
    plan = _plan(case)
    config, unmapped = export.axolotl_config(plan, "ds.json")
    t = plan.training
    assert (config["micro_batch_size"], config["gradient_accumulation_steps"], config["sequence_len"]) == (2, 3, 256)
    assert config["gradient_checkpointing"] is t.gradient_checkpointing
    assert (config["bf16"], config["fp16"]) == (t.precision == "bf16", t.precision == "fp16")
    assert config["learning_rate"] == plan.deepspeed_config["optimizer"]["params"]["lr"]
    if t.method == "full":
        assert "adapter" not in config and "lora_r" not in config
    else:
        assert config["adapter"] == t.method and config["lora_r"] == t.lora.r
        assert config.get("load_in_4bit", False) is (t.method == "qlora")
    assert any("dataset" in line for line in unmapped)  # the synthetic dataset has no counterpart: said so


@pytest.mark.parametrize("case", PLANS)
def test_llamafactory_values_match_the_plan(case):
    plan = _plan(case)
    config, _ = export.llamafactory_config(plan, "ds.json")
    t = plan.training
    assert (config["per_device_train_batch_size"], config["gradient_accumulation_steps"]) == (2, 3)
    assert config["cutoff_len"] == 256
    assert config["disable_gradient_checkpointing"] is (not t.gradient_checkpointing)
    assert config["finetuning_type"] == ("full" if t.method == "full" else "lora")
    assert config.get("quantization_bit") == (4 if t.method == "qlora" else None)
    if t.method != "full":
        assert config["lora_rank"] == t.lora.r and config["lora_alpha"] == t.lora.alpha


def test_commands(tmp_path):
    plan = make_plan("3", precision="bf16", gpus_per_node=4)
    export.write_axolotl(plan, tmp_path / "a")
    line = (tmp_path / "a" / "command.sh").read_text().splitlines()[-1]
    assert shlex.split(line) == ["axolotl", "train", str(tmp_path / "a" / "axolotl.yml"), "--launcher", "torchrun",
                                 "--", "--nproc_per_node", "4"]  # fmt: skip
    export.write_llamafactory(plan, tmp_path / "l")
    line = (tmp_path / "l" / "command.sh").read_text().splitlines()[-1]
    assert shlex.split(line) == ["env", "FORCE_TORCHRUN=1", "NPROC_PER_NODE=4", "llamafactory-cli", "train",
                                 str(tmp_path / "l" / "llamafactory.yaml")]  # fmt: skip


def test_axolotl_names_the_attention_by_its_current_key(tmp_path, capsys, monkeypatch):
    """The export writes attn_implementation (Axolotl warns that sdp_attention is deprecated); --from-axolotl
    reads a YAML with either key to the same estimate, with no "not modelled" note for SDPA."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main([*ROUND_TRIPS[-1].values[0], "-o", str(tmp_path / "plan.json"), "--export", "axolotl"]) == 0
    current = tmp_path / "plan.axolotl" / "axolotl.yml"
    config = yaml.safe_load(current.read_text())
    assert config["attn_implementation"] == "sdpa" and "sdp_attention" not in config
    assert "attn_implementation" in CATALOG["axolotl"]["keys"]
    legacy = tmp_path / "legacy.yml"
    legacy.write_text(yaml.safe_dump({**{k: v for k, v in config.items() if k != "attn_implementation"},
                                      "sdp_attention": True}))  # fmt: skip
    answers = []
    for path in (current, legacy):
        capsys.readouterr()
        assert main(["--from-axolotl", str(path), "--gpus", "cpu:2", "--cpu-mem", "8GiB", "--model",
                     "benchmarks/model_configs/llama-tiny.json", "--json"]) == 0  # fmt: skip
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[0]["estimate"] == answers[1]["estimate"]
    for answer in answers:
        assert not [note for note in answer["notes"] if "SDPA" in note]


@pytest.mark.parametrize("case", PLANS)
def test_trl_config_is_accepted_by_sftconfig_and_agrees_with_the_json(tmp_path, case):
    """TRL's SFTConfig takes the keywords, and HF's DeepSpeed integration finds no mismatch with the JSON."""
    trl = pytest.importorskip("trl")
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    case = {**case, "gpus_per_node": 1}  # HF checks train_batch_size against its own world size (1 here)
    if case["precision"] != "fp32":
        case["precision"] = "fp32"  # CPU TrainingArguments refuse fp16/bf16 AMP without a GPU
    plan = _plan(case)
    export.write_trl(plan, tmp_path)
    kwargs = export.trl_config(plan, str(tmp_path / "ds_config.json"))
    config = trl.SFTConfig(**kwargs)  # make_plan's cpu:N plan: the export says use_cpu
    assert config.max_length == 256 and config.per_device_train_batch_size == 2
    hf_ds = HfTrainerDeepSpeedConfig(plan.deepspeed_config)
    hf_ds.trainer_config_process(config)
    assert not hf_ds.mismatches
    compile((tmp_path / "train_sft.py").read_text(), "train_sft.py", "exec")
    argv = shlex.split((tmp_path / "command.sh").read_text().splitlines()[-1])
    assert argv[-1] == str(tmp_path / "train_sft.py") and "deepspeed" in argv


# --- the round trip: export, then --from-... reproduces the estimate -------------------------------------------

ROUND_TRIPS = [
    pytest.param([*LLAMA8B, "--gpus", "8xA100-80GB", "--global-batch", "48"], id="llama8b-full-8xA100"),
    pytest.param([*LLAMA8B, "--gpus", "2xT4", "--cpu-mem", "29GiB", "--method", "qlora", "--lora-r", "8",
                  "--lora-dropout", "0"], id="llama8b-qlora-r8-2xT4"),  # fmt: skip
    pytest.param(["--model", "Qwen/Qwen2.5-0.5B", "--gpus", "1xA100-80GB", "--seq-len", "1024", "--method", "lora",
                  "--lora-r", "64", "--lora-dropout", "0.1", "--stage", "3", "--grad-checkpointing"],
                 id="qwen-lora-r64-stage3"),  # fmt: skip
    pytest.param(["--model", "gpt2", "--gpus", "2xT4", "--seq-len", "512", "--stage", "2-offload", "--cpu-mem",
                  "64GiB"], id="gpt2-2offload-fp16"),  # fmt: skip
    pytest.param(["--model", "benchmarks/model_configs/llama-tiny.json", "--gpus", "cpu:2", "--cpu-mem", "8GiB",
                  "--seq-len", "128", "--micro-batch", "4", "--global-batch", "16"], id="demo-cpu2"),  # fmt: skip
]


@pytest.mark.parametrize("argv", ROUND_TRIPS)
@pytest.mark.parametrize("tool", TOOLS)
def test_round_trip_reproduces_the_estimate(tmp_path, capsys, monkeypatch, tool, argv):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    plan_path = tmp_path / "plan.json"
    assert main([*argv, "-o", str(plan_path), "--export", tool]) == 0
    planned = json.loads(plan_path.read_text())
    capsys.readouterr()
    gpus = argv[argv.index("--gpus") + 1]
    extra = ["--cpu-mem", argv[argv.index("--cpu-mem") + 1]] if "--cpu-mem" in argv else []
    yaml_path = tmp_path / f"plan.{tool}" / TOOLS[tool]
    model = [] if "--model" not in argv or not argv[argv.index("--model") + 1].endswith(".json") else \
        ["--model", argv[argv.index("--model") + 1]]  # fmt: skip
    rc = main([f"--from-{tool}", str(yaml_path), "--gpus", gpus, *extra, *model, "--json"])
    assert rc == 0
    imported = json.loads(capsys.readouterr().out)
    assert imported["estimate"]["per_gpu"]["peak_allocated"] == planned["estimate"]["per_gpu"]["peak_allocated"]
    assert imported["estimate"]["per_gpu"]["total"] == planned["estimate"]["per_gpu"]["total"]
    assert imported["estimate"] == planned["estimate"]
    assert imported["strategy"] == planned["strategy"]
    for key in ("micro_batch_size", "gradient_accumulation_steps", "seq_len", "gradient_checkpointing", "precision",
                "method", "lora"):
        assert imported["training"][key] == planned["training"][key], key
    assert imported["model"]["trainable_params"] == planned["model"]["trainable_params"]


def test_round_trip_lora_rank_is_not_the_default(tmp_path, capsys):
    """The rank read from the YAML changes the estimate (it is not LoraInfo()'s default)."""
    answers = []
    for r in ("8", "128"):
        plan_path = tmp_path / f"r{r}" / "plan.json"
        assert main(["--model", "Qwen/Qwen2.5-0.5B", "--gpus", "1xA100-80GB", "--seq-len", "512", "--method", "lora",
                     "--lora-r", r, "--stage", "2", "--micro-batch", "4", "-o", str(plan_path), "--export", "axolotl"]) == 0  # fmt: skip
        capsys.readouterr()
        yaml_path = plan_path.with_name("plan.axolotl") / "axolotl.yml"
        assert main(["--from-axolotl", str(yaml_path), "--gpus", "1xA100-80GB", "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["estimate"]["per_gpu"]["peak_allocated"])
    assert answers[0] < answers[1]


# --- reading the tools' own configs -----------------------------------------------------------------------------


def _write(tmp_path, name: str, data: dict):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_axolotl_preset_name_without_the_file_uses_the_shipped_preset(tmp_path, capsys):
    """deepspeed_configs/zero3_bf16.json is absent here: the preset's content is estimated, the same figures as
    that content given as a file."""
    yml = _write(tmp_path, "a.yml", {"base_model": "meta-llama/Meta-Llama-3-8B", "sequence_len": 4096,
                                     "micro_batch_size": 2, "gradient_accumulation_steps": 4,
                                     "gradient_checkpointing": True, "bf16": "auto",
                                     "deepspeed": "deepspeed_configs/zero3_bf16.json"})  # fmt: skip
    assert main(["--from-axolotl", str(yml), "--gpus", "4xH100", "--json"]) == 0
    from_preset = json.loads(capsys.readouterr().out)
    assert from_preset["strategy"]["stage"] == 3 and from_preset["training"]["precision"] == "bf16"
    assert any("preset zero3_bf16.json" in n for n in from_preset["notes"])
    preset = tmp_path / "deepspeed_configs" / "zero3_bf16.json"
    preset.parent.mkdir()
    preset.write_text(json.dumps(CATALOG["axolotl"]["presets"]["zero3_bf16.json"]))
    assert main([*LLAMA8B, "--gpus", "4xH100", "--ds-config", str(preset), "--seq-len", "4096", "--micro-batch",
                 "2", "--grad-checkpointing", "--json"]) == 0  # fmt: skip
    from_file = json.loads(capsys.readouterr().out)
    assert from_preset["estimate"] == from_file["estimate"]


def test_llamafactory_defaults_and_relative_json(tmp_path, capsys, monkeypatch):
    """LLaMA-Factory's defaults: LoRA rank 8, checkpointing on, 8 per device, cutoff 2048; the JSON path is
    resolved against the YAML's folder, not the working directory."""
    (tmp_path / "cfg" / "ds").mkdir(parents=True)
    (tmp_path / "cfg" / "ds" / "z2.json").write_text(json.dumps(CATALOG["llamafactory"]["presets"]["ds_z2_config.json"]))
    yml = _write(tmp_path / "cfg", "train.yaml", {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "stage": "sft",
                                                  "do_train": True, "deepspeed": "ds/z2.json", "bf16": True,
                                                  "dataset": "alpaca_en_demo", "template": "qwen"})  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(["--from-llamafactory", str(yml), "--gpus", "2xA100-80GB", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    t = plan["training"]
    assert (t["method"], t["lora"]["r"], t["lora"]["alpha"], t["lora"]["dropout"]) == ("lora", 8, 16, 0.0)
    assert (t["micro_batch_size"], t["seq_len"], t["gradient_checkpointing"]) == (8, 2048, True)
    assert plan["deepspeed_config"]["train_batch_size"] == 16 and plan["strategy"]["stage"] == 2


def test_human_output_reports_headroom(tmp_path, capsys):
    yml = _write(tmp_path, "a.yml", {"base_model": "gpt2", "sequence_len": 512, "micro_batch_size": 4,
                                     "fp16": True, "bf16": False, "deepspeed": "deepspeed_configs/zero2.json"})  # fmt: skip
    rc = main(["--from-axolotl", str(yml), "--gpus", "2xT4", "--cpu-mem", "32GiB"])
    out = capsys.readouterr().out
    assert rc == 0 and "headroom" in out and "Axolotl config" in out


@pytest.mark.parametrize(
    "tool, data, message",
    [
        ("axolotl", {"base_model": "gpt2", "micro_batchsize": 2}, "unknown Axolotl key 'micro_batchsize' (did you mean micro_batch_size"),
        ("axolotl", {"base_model": "gpt2", "adapter": "lorax", "deepspeed": "deepspeed_configs/zero2.json"}, "adapter 'lorax' is not one of none, lora, qlora"),
        ("axolotl", {"base_model": "gpt2", "micro_batch_size": 0, "deepspeed": "deepspeed_configs/zero2.json"}, "micro_batch_size must be a positive integer"),
        ("axolotl", {"base_model": "gpt2"}, "deepspeed is not set"),
        ("axolotl", {"base_model": "gpt2", "deepspeed": "nope/zero9.json"}, "not one of Axolotl's presets: zero1.json"),
        ("axolotl", {"base_model": "gpt2", "adapter": "lora", "deepspeed": "deepspeed_configs/zero2.json"}, "lora_r is not set"),
        ("axolotl", {"base_model": "gpt2", "bf16": "yes", "deepspeed": "deepspeed_configs/zero2.json"}, "bf16 'yes' is not one of true, false, auto, full"),
        ("axolotl", {"base_model": "gpt2", "fsdp": ["full_shard"], "deepspeed": "deepspeed_configs/zero2.json"}, "not FSDP"),
        ("axolotl", {"base_model": "gpt2", "micro_batch_size": 2, "fp16": True, "bf16": False, "deepspeed": {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}}, "train_micro_batch_size_per_gpu 4 but the YAML gives 2"),
        ("llamafactory", {"model_name_or_path": "gpt2", "stage": "dpo", "deepspeed": "examples/deepspeed/ds_z3_config.json"}, "stage 'dpo' is not one of sft, pt"),
        ("llamafactory", {"model_name_or_path": "gpt2", "finetuning_type": "freeze", "deepspeed": "examples/deepspeed/ds_z3_config.json"}, "finetuning_type 'freeze' is not one of full, lora"),
        ("llamafactory", {"model_name_or_path": "gpt2", "quantization_bit": 8, "deepspeed": "examples/deepspeed/ds_z3_config.json"}, "quantization_bit 8 is not one of none, 4"),
        ("llamafactory", {"model_name_or_path": "gpt2", "cutoff_length": 1024}, "unknown LLaMA-Factory key 'cutoff_length' (did you mean cutoff_len"),
        ("llamafactory", {"model_name_or_path": "gpt2", "cutoff_len": 512, "fp16": True, "deepspeed": {"fp16": {"enabled": False}, "bf16": {"enabled": True}}}, "bf16.enabled true but the YAML trains in fp16"),
    ],
)  # fmt: skip
def test_bad_config_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, tool, data, message):
    monkeypatch.chdir(tmp_path)  # no deepspeed_configs/ here: preset names resolve to the shipped presets
    path = _write(tmp_path, "c.yaml", data)
    rc = main([f"--from-{tool}", str(path), "--gpus", "2xT4"])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zero-plan: error: ")
    assert message in lines[0], lines[0]


@pytest.mark.parametrize("text, message", [("a: [1", "not valid YAML"), ("- a\n- b\n", "YAML mapping of keys")])
def test_unreadable_yaml(tmp_path, capsys, text, message):
    path = tmp_path / "c.yml"
    path.write_text(text)
    assert main(["--from-axolotl", str(path), "--gpus", "2xT4"]) == 2
    assert message in capsys.readouterr().err
    assert main(["--from-axolotl", str(tmp_path / "missing.yml"), "--gpus", "2xT4"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_one_source_at_a_time(tmp_path, capsys):
    path = _write(tmp_path, "c.yml", {"base_model": "gpt2"})
    assert main(["--from-axolotl", str(path), "--from-llamafactory", str(path), "--gpus", "2xT4"]) == 2
    assert "give one of --ds-config, --from-axolotl, --from-llamafactory" in capsys.readouterr().err


def test_importers_stay_light():
    assert heavy_modules_after("import zero_planner.plan.importers, zero_planner.plan.export") == []


# Real configs, as the projects ship them (comments trimmed): LLaMA-Factory examples/train_lora/
# qwen3_lora_sft_ds3.yaml and Axolotl examples/alst/llama3-8b-deepspeed-alst.yaml (commits in tool_keys.json).
LF_QWEN3_LORA_DS3 = """
model_name_or_path: Qwen/Qwen3-4B-Instruct-2507
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all
deepspeed: examples/deepspeed/ds_z3_config.json
dataset: identity,alpaca_en_demo
template: qwen3_nothink
cutoff_len: 2048
max_samples: 1000
preprocessing_num_workers: 16
dataloader_num_workers: 4
output_dir: saves/qwen3-4b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none
per_device_train_batch_size: 1
gradient_accumulation_steps: 2
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
resume_from_checkpoint: null
"""
AXOLOTL_ALST = """
base_model: meta-llama/Llama-3.1-8B
datasets:
  - path: togethercomputer/Long-Data-Collections
    type: completion
    field: text
    data_files:
      - pretrain/rp_sub.jsonl.zst
dataset_prepared_path: last_run_prepared
val_set_size: 0.0
output_dir: ./outputs/out
sequence_len: 500_000
min_sample_len: 200_000
sample_packing: true
tiled_mlp: true
context_parallel_size: 8
plugins:
  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin
gradient_accumulation_steps: 1
micro_batch_size: 1
num_epochs: 1
optimizer: adamw_torch_8bit
lr_scheduler: cosine
learning_rate: 2e-5
bf16: auto
tf32: true
gradient_checkpointing: true
activation_offloading: legacy
resume_from_checkpoint:
logging_steps: 1
attn_implementation: flash_attention_2
warmup_steps: 100
saves_per_epoch: 1
evals_per_epoch: 2
weight_decay: 0.0
special_tokens:
  pad_token: <|end_of_text|>
deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json
"""


def test_a_shipped_llamafactory_example_is_estimated(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(LF_QWEN3_LORA_DS3)
    rc = main(["--from-llamafactory", "c.yaml", "--gpus", "4xA100-80GB", "--model", "Qwen/Qwen2.5-3B", "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["strategy"]["stage"] == 3 and plan["training"]["lora"]["r"] == 8
    assert plan["deepspeed_config"]["train_batch_size"] == 1 * 2 * 4
    assert any("preset ds_z3_config.json" in n for n in plan["notes"])


def test_a_shipped_axolotl_example_says_what_is_not_modelled(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # 500k tokens exceed the catalog Llama-3-8B's 8192 positions (an exit-2 error): the notes are the point here.
    (tmp_path / "c.yaml").write_text(AXOLOTL_ALST.replace("sequence_len: 500_000", "sequence_len: 8192"))
    rc = main(["--from-axolotl", "c.yaml", "--gpus", "8xH100", "--model", "meta-llama/Meta-Llama-3-8B", "--json"])
    assert rc in (0, 1)
    answer = json.loads(capsys.readouterr().out)
    notes = " ".join((answer.get("plan") or answer)["notes"])
    # its preset offloads the optimizer with zero_force_ds_cpu_optimizer false: torchao's 8-bit AdamW steps on the
    # host, so the host figure is the upper bound
    for key in ("context_parallel_size: 8", "tiled_mlp", "activation_offloading",
                "optim adamw_torch_8bit (torchao's 8-bit AdamW", "an upper bound by up to"):
        assert key in notes


def test_flags_override_the_yaml_and_say_so(tmp_path, capsys):
    yml = _write(tmp_path, "a.yml", {"base_model": "gpt2", "sequence_len": 512, "micro_batch_size": 2,
                                     "fp16": True, "bf16": False, "deepspeed": "deepspeed_configs/zero2.json"})  # fmt: skip
    assert main(["--from-axolotl", str(yml), "--gpus", "2xT4", "--cpu-mem", "32GiB", "--json"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(["--from-axolotl", str(yml), "--gpus", "2xT4", "--cpu-mem", "32GiB", "--micro-batch", "4",
                 "--seq-len", "384", "--json"]) == 0  # fmt: skip
    changed = json.loads(capsys.readouterr().out)
    assert (changed["training"]["micro_batch_size"], changed["training"]["seq_len"]) == (4, 384)
    assert changed["deepspeed_config"]["train_micro_batch_size_per_gpu"] == 4
    assert "--micro-batch 4 overrides the YAML's 2" in changed["notes"]
    assert changed["estimate"] != base["estimate"]


def test_sequence_longer_than_the_model_names_the_yaml_key(tmp_path, capsys):
    yml = _write(tmp_path, "a.yml", {"base_model": "gpt2", "sequence_len": 4096,
                                     "deepspeed": "deepspeed_configs/zero2.json"})  # fmt: skip
    assert main(["--from-axolotl", str(yml), "--gpus", "2xT4"]) == 2
    err = capsys.readouterr().err
    assert "sequence_len 4096 is above" in err and "1024" in err


# --- HF Trainer and Accelerate (issue 59) -------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
GPT2_T4 = ["--model", "gpt2", "--gpus", "2xT4", "--cpu-mem", "32GiB", "--seq-len", "512"]


def _json_answer(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    rc = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def _ds_file(tmp_path, name: str, config: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def test_hf_keys_are_the_installed_transformers():
    """hf_keys.json is what scripts/hf_keys.py reads from the installed transformers: a transformers upgrade that
    adds or drops a TrainingArguments field or an optimizer fails here (rebuild with scripts/hf_keys.py)."""
    import dataclasses

    pytest.importorskip("transformers")
    from transformers.training_args import OptimizerNames, TrainingArguments

    hf = importers.hf_catalog()["hf_trainer"]
    assert hf["keys"] == sorted(f.name for f in dataclasses.fields(TrainingArguments) if f.init)
    assert hf["optimizers"] == sorted(o.value for o in OptimizerNames)
    assert not set(hf["legacy"]["keys"]) & set(hf["keys"])
    # Every optimizer TrainingArguments takes is sorted into modelled, smaller (an upper bound) or refused.
    classified = {*importers.ADAMW_OPTIMIZERS, *importers.SMALLER_OPTIMIZERS, *importers.LARGER_OPTIMIZERS}
    assert set(hf["optimizers"]) | set(hf["legacy"]["optimizers"]) <= classified


def test_accelerate_keys_are_the_installed_accelerate():
    import dataclasses
    import re

    pytest.importorskip("accelerate")
    from accelerate.commands.config import cluster
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DistributedType

    acc = importers.hf_catalog()["accelerate"]
    assert acc["keys"] == sorted(f.name for f in dataclasses.fields(ClusterConfig))
    written = set(re.findall(r'deepspeed_config\["(\w+)"\]', Path(cluster.__file__).read_text()))
    assert acc["deepspeed_keys"] == sorted(written)
    assert acc["distributed_types"] == sorted(t.value for t in DistributedType)
    assert set(importers.ACCELERATE_TYPES) <= set(acc["distributed_types"])


def test_the_seeds_training_arguments(tmp_path, capsys):
    """docs/examples/hf_trainer_args.json, the seeds users' arguments (8 per device, 16 accumulated, fp16,
    adamw_8bit, two checkpoints kept, no DeepSpeed): plain DDP, estimated as the same stage-0 JSON given with
    --ds-config; the 8-bit optimizer is named as not modelled with the upper bound it puts on the estimate."""
    plan = _json_answer(capsys, [*GPT2_T4, "--from-hf-trainer", str(EXAMPLES / "hf_trainer_args.json")])
    t = plan["training"]
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"], t["precision"]) == (8, 16, "fp16")
    assert t["gradient_checkpointing"] is False and t["save_total_limit"] == 2 and t["seq_len"] == 512
    assert plan["strategy"]["stage"] == 0 and plan["strategy"]["offload_optimizer"] == "none"
    ds = _ds_file(tmp_path, "ddp.json", {"zero_optimization": {"stage": 0}, "fp16": {"enabled": True},
                                         "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 16})  # fmt: skip
    same = _json_answer(capsys, [*GPT2_T4, "--ds-config", ds])
    assert plan["estimate"] == same["estimate"] and plan["strategy"] == same["strategy"]
    notes = " | ".join(plan["notes"])
    assert "optim adamw_8bit (bitsandbytes' 8-bit AdamW" in notes and "an upper bound by up to 0.7 GiB per GPU" in notes
    assert 'device_map="auto") is not data parallelism' in notes and "plain DistributedDataParallel" in notes
    capsys.readouterr()
    assert main([*GPT2_T4, "--from-hf-trainer", str(EXAMPLES / "hf_trainer_args.json")]) == 0
    human = capsys.readouterr().out
    assert "naive model parallelism" in " ".join(human.split()) and "headroom" in human


def test_lora_comes_from_the_flags(tmp_path, capsys):
    """TrainingArguments hold no adapter (the script's peft config does): --method lora and --lora-* give it, the
    same estimate as those flags with the equivalent --ds-config; --method auto is refused."""
    lora = ["--method", "lora", "--lora-r", "8", "--lora-dropout", "0", "--lora-targets", "c_attn"]
    plan = _json_answer(capsys, [*GPT2_T4, *lora, "--from-hf-trainer", str(EXAMPLES / "hf_trainer_args.json")])
    assert plan["training"]["method"] == "lora" and plan["training"]["lora"]["r"] == 8
    assert any(n.startswith("--method lora: the TrainingArguments JSON holds no adapter") for n in plan["notes"])
    ds = _ds_file(tmp_path, "ddp.json", {"zero_optimization": {"stage": 0}, "fp16": {"enabled": True},
                                         "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 16})  # fmt: skip
    same = _json_answer(capsys, [*GPT2_T4, *lora, "--ds-config", ds])
    assert plan["estimate"] == same["estimate"] and plan["model"] == same["model"]
    capsys.readouterr()
    assert main([*GPT2_T4, "--method", "auto", "--from-hf-trainer", str(EXAMPLES / "hf_trainer_args.json")]) == 2
    assert "--method auto chooses a method; with --from-hf-trainer give full, lora or qlora" in capsys.readouterr().err


def test_to_json_string_output_and_its_run_settings(tmp_path, capsys):
    """What TrainingArguments.to_json_string() writes (every field) is read as it stands; its length, learning
    rate and save limit go into the plan (the command line's flags win)."""
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2,
                                          gradient_accumulation_steps=4, max_steps=7, learning_rate=1e-4,
                                          save_total_limit=3, save_steps=5, gradient_checkpointing=True, use_cpu=True)  # fmt: skip
    path = tmp_path / "args.json"
    path.write_text(args.to_json_string())
    tiny = ["--model", "benchmarks/model_configs/llama-tiny.json", "--gpus", "cpu:2", "--cpu-mem", "8GiB"]
    plan = _json_answer(capsys, [*tiny, "--seq-len", "128", "--from-hf-trainer", str(path)])
    t = plan["training"]
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"], t["gradient_checkpointing"]) == (2, 4, True)
    assert (t["max_steps"], t["learning_rate"], t["save_total_limit"], t["save_every"]) == (7, 1e-4, 3, 5)
    assert plan["deepspeed_config"]["optimizer"]["params"]["lr"] == 1e-4
    assert not [n for n in plan["notes"] if n.startswith("optim ")]  # adamw_torch_fused: AdamW, modelled
    flags = _json_answer(capsys, [*tiny, "--from-hf-trainer", str(path), "--max-steps", "3", "--lr", "3e-5"])
    assert (flags["training"]["max_steps"], flags["training"]["learning_rate"]) == (3, 3e-5)
    assert any("has no sequence length: estimated at 1024 tokens (zero-plan's default" in n for n in flags["notes"])


def test_hf_trainer_with_a_deepspeed_json_is_that_json(tmp_path, capsys):
    """TrainingArguments naming a ZeRO-2 JSON of HF "auto" values: the estimate of that JSON filled as HF Trainer
    fills it, the same as the filled JSON given with --ds-config."""
    ds = _ds_file(tmp_path, "z2.json", {"zero_optimization": {"stage": 2, "overlap_comm": True},
                                        "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
                                        "gradient_accumulation_steps": "auto", "optimizer": {"type": "AdamW",
                                        "params": {"lr": "auto"}}})  # fmt: skip
    args = _ds_file(tmp_path, "args.json", {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                                            "bf16": True, "deepspeed": "z2.json", "optim": "adamw_8bit"})  # fmt: skip
    gpus = ["--model", "Qwen/Qwen2.5-0.5B", "--gpus", "2xA100-80GB", "--seq-len", "1024"]
    plan = _json_answer(capsys, [*gpus, "--from-hf-trainer", args])
    filled = _ds_file(tmp_path, "filled.json", {"zero_optimization": {"stage": 2, "overlap_comm": True},
                                                "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 4,
                                                "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW",
                                                "params": {"lr": 2e-5}}})  # fmt: skip
    same = _json_answer(capsys, [*gpus, "--ds-config", filled])
    assert plan["estimate"] == same["estimate"] and plan["strategy"]["stage"] == 2
    notes = " | ".join(plan["notes"])
    assert "optim adamw_8bit is not used: the DeepSpeed JSON's optimizer section (AdamW) is" in notes
    assert "device_map" not in notes  # DeepSpeed, not DDP


@pytest.mark.parametrize("optim", ["adamw_8bit", "ademamix"])
def test_an_offloaded_optimizer_is_deepspeeds_cpu_adam(tmp_path, capsys, optim):
    """With the optimizer offloaded and no optimizer section, Accelerate (under HF Trainer) swaps the trainer's
    optimizer for DeepSpeedCPUAdam: what the estimate counts, so neither an upper-bound note nor a refusal."""
    ds = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": "auto"}}
    args = _ds_file(tmp_path, "args.json", {"per_device_train_batch_size": 2, "bf16": True, "optim": optim,
                                            "deepspeed": ds})  # fmt: skip
    gpus = ["--model", "Qwen/Qwen2.5-0.5B", "--gpus", "2xA100-80GB", "--cpu-mem", "64GiB", "--seq-len", "512"]
    plan = _json_answer(capsys, [*gpus, "--from-hf-trainer", args])
    notes = " | ".join(plan["notes"])
    assert f"optim {optim} is not used: with the optimizer offloaded, Accelerate hands DeepSpeed its CPU Adam" in notes
    assert "upper bound" not in notes and plan["strategy"]["name"] == "2-offload"
    kept = _ds_file(tmp_path, "kept.json", {"per_device_train_batch_size": 2, "bf16": True, "optim": "adamw_8bit",
                                            "deepspeed": {**ds, "zero_force_ds_cpu_optimizer": False}})  # fmt: skip
    kept_notes = " | ".join(_json_answer(capsys, [*gpus, "--from-hf-trainer", kept])["notes"])
    assert "optim adamw_8bit (bitsandbytes' 8-bit AdamW" in kept_notes and "of host memory per node" in kept_notes


def test_accelerate_ddp_on_two_gpus(capsys, tmp_path):
    """docs/examples/accelerate_ddp_2gpu.yaml (MULTI_GPU, fp16, two processes): ZeRO stage 0 at --micro-batch,
    the same as that stage-0 JSON with --ds-config; without --micro-batch, the largest that fits under the margin,
    which --micro-batch then reproduces."""
    config = str(EXAMPLES / "accelerate_ddp_2gpu.yaml")
    plan = _json_answer(capsys, [*GPT2_T4, "--from-accelerate", config, "--micro-batch", "4"])
    ds = _ds_file(tmp_path, "ddp.json", {"zero_optimization": {"stage": 0}, "fp16": {"enabled": True},
                                         "train_micro_batch_size_per_gpu": 4})  # fmt: skip
    same = _json_answer(capsys, [*GPT2_T4, "--ds-config", ds])
    assert plan["estimate"] == same["estimate"] and plan["strategy"] == same["strategy"]
    assert plan["training"]["precision"] == "fp16" and plan["hardware"]["gpus_per_node"] == 2
    assert any('device_map="auto") is not data parallelism' in n for n in plan["notes"])
    chosen = _json_answer(capsys, [*GPT2_T4, "--from-accelerate", config])
    micro = chosen["training"]["micro_batch_size"]
    assert any(f"estimated at {micro}, the largest that fits under the planner's safety margin" in n
               for n in chosen["notes"])  # fmt: skip
    from zero_planner.plan.fit import gpu_limit_bytes

    limit = gpu_limit_bytes(chosen["hardware"]["gpu_memory_bytes"])
    assert chosen["estimate"]["per_gpu"]["total"] <= limit
    given = _json_answer(capsys, [*GPT2_T4, "--from-accelerate", config, "--micro-batch", str(micro)])
    assert given["estimate"] == chosen["estimate"]
    above = _json_answer(capsys, [*GPT2_T4, "--from-accelerate", config, "--micro-batch", str(micro + 1)])
    assert above["estimate"]["per_gpu"]["total"] > limit
    capsys.readouterr()
    too_big = ["--model", "meta-llama/Meta-Llama-3-8B", "--gpus", "2xT4", "--seq-len", "512"]
    assert main([*too_big, "--from-accelerate", config, "--json"]) == 1  # nothing fits: says where to look
    answer = json.loads(capsys.readouterr().out)
    assert answer["fits"] is False and answer["plan"]["training"]["micro_batch_size"] == 1
    assert any("zero-plan without --from-accelerate weighs the ZeRO stages" in n for n in answer["plan"]["notes"])


def test_accelerate_deepspeed_zero2_offload(capsys, tmp_path):
    """docs/examples/accelerate_zero2_offload.yaml (DEEPSPEED, zero_stage 2, optimizer on the CPU, bf16,
    accumulation 4, clipping 1.0): the JSON Accelerate's plugin builds, estimated as that JSON with --ds-config."""
    gpus = ["--model", "Qwen/Qwen2.5-0.5B", "--gpus", "2xA100-80GB", "--cpu-mem", "64GiB", "--seq-len", "1024"]
    config = str(EXAMPLES / "accelerate_zero2_offload.yaml")
    plan = _json_answer(capsys, [*gpus, "--from-accelerate", config, "--micro-batch", "2"])
    assert plan["strategy"]["name"] == "2-offload" and plan["training"]["gradient_accumulation_steps"] == 4
    ds = _ds_file(tmp_path, "z2off.json", {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                           "offload_param": {"device": "none"}}, "bf16": {"enabled": True},
                                           "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
                                           "train_micro_batch_size_per_gpu": 2})  # fmt: skip
    same = _json_answer(capsys, [*gpus, "--ds-config", ds])
    assert plan["estimate"] == same["estimate"] and plan["strategy"] == same["strategy"]
    assert not any("device_map" in n for n in plan["notes"])


@pytest.mark.parametrize("argv", [ROUND_TRIPS[3], ROUND_TRIPS[4]])
@pytest.mark.parametrize("kind, flag", [("hf-trainer", "--from-hf-trainer"), ("accelerate", "--from-accelerate")])
def test_exports_read_back_to_the_same_estimate(tmp_path, capsys, argv, kind, flag):
    """--export hf-trainer's training_args.json and --export accelerate's config, read back, give the plan's
    estimate to the byte (the sequence length is the command line's: neither file has one)."""
    plan_path = tmp_path / "plan.json"
    assert main([*argv, "-o", str(plan_path), "--export", kind]) == 0
    planned = json.loads(plan_path.read_text())
    file = tmp_path / f"plan.{kind}" / ("training_args.json" if kind == "hf-trainer" else "accelerate_config.yaml")
    keep = [a for i, a in enumerate(argv) if a in ("--model", "--gpus", "--cpu-mem", "--seq-len")
            or i and argv[i - 1] in ("--model", "--gpus", "--cpu-mem", "--seq-len")]  # fmt: skip
    back = _json_answer(capsys, [*keep, flag, str(file)])
    assert back["estimate"] == planned["estimate"] and back["strategy"] == planned["strategy"]
    for key in ("micro_batch_size", "gradient_accumulation_steps", "seq_len", "precision", "gradient_checkpointing"):
        assert back["training"][key] == planned["training"][key], key


HF_BAD = [
    ({"per_device_train_batchsize": 8}, "unknown HF TrainingArguments key 'per_device_train_batchsize' (did you mean per_device_train_batch_size"),
    ({"optim": "adamw_9bit"}, "optim 'adamw_9bit' is not a TrainingArguments optimizer (did you mean adamw_8bit"),
    ({"optim": "ademamix"}, "AdEMAMix keeps three fp32 states (12 B per parameter), more than the AdamW"),
    ({"fsdp": "full_shard"}, "fsdp 'full_shard' is set: FSDP is not planned yet"),
    ({"fp16": True, "bf16": True}, "bf16 and fp16 are both true; set one"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size must be a positive integer, got 0"),
    ({"fp16": "yes"}, "fp16 'yes' is not one of true, false"),
    ({"bf16": True}, "args.json': bf16: T4 has no bf16; use fp16"),
    ({"deepspeed": "missing.json"}, "deepspeed 'missing.json': no such file"),
    ({"per_device_train_batch_size": 2, "fp16": True, "deepspeed": {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}},
     "train_micro_batch_size_per_gpu 4 but the TrainingArguments JSON gives 2 (per_device_train_batch_size, 2 GPUs); HF Trainer refuses"),
]  # fmt: skip
ACCELERATE_BAD = [
    ({"distributed_type": "FSDP", "num_processes": 2}, "distributed_type FSDP: FSDP is not planned yet"),
    ({"distributed_type": "MULTI_GPUS", "num_processes": 2}, "distributed_type 'MULTI_GPUS' is not one of DEEPSPEED, FSDP"),
    ({"distributed_type": "XLA", "num_processes": 2}, "distributed_type XLA is not estimated; zero-plan estimates NO, MULTI_GPU"),
    ({"distributed_type": "MULTI_GPU", "num_processes": 4}, "num_processes 4 on num_machines 1, but --gpus gives 2 processes on 1 machine (1 x 2)"),
    ({"distributed_type": "NO"}, "num_processes 1 on num_machines 1, but --gpus gives 2 processes"),
    ({"distributed_type": "MULTI_GPU", "num_processes": 2, "mixed_precision": "fp8"}, "mixed_precision 'fp8' is not one of no, fp16, bf16 (fp8 is not estimated)"),
    ({"distributed_type": "MULTI_GPU", "num_process": 2}, "unknown Accelerate key 'num_process' (did you mean num_processes"),
    ({"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": {"zero_stag": 2}}, "unknown Accelerate key 'deepspeed_config.zero_stag' (did you mean zero_stage"),
    ({"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": {"zero_stage": 5}}, "zero_stage 5 is not one of 0, 1, 2, 3"),
    ({"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": {"zero_stage": 2, "offload_param_device": "cpu"}}, "offload_param_device cpu needs zero_stage 3, got 2"),
    ({"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": {"deepspeed_config_file": "ds.json", "zero_stage": 2}},
     "deepspeed_config_file is set with zero_stage: Accelerate refuses them beside the file"),
    ({"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": {"deepspeed_config_file": "nope.json"}}, "deepspeed_config.deepspeed_config_file 'nope.json': no such file"),
]  # fmt: skip


@pytest.mark.parametrize("tool, data, message", [*(("hf_trainer", d, m) for d, m in HF_BAD),
                                                 *(("accelerate", d, m) for d, m in ACCELERATE_BAD)])  # fmt: skip
def test_bad_hf_and_accelerate_configs_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch, tool, data, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / ("args.json" if tool == "hf_trainer" else "accelerate.yaml")
    path.write_text(json.dumps(data) if tool == "hf_trainer" else yaml.safe_dump(data))
    flag = importers.FLAGS[tool]
    rc = main(["--model", "gpt2", "--gpus", "2xT4", "--seq-len", "256", flag, str(path)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zero-plan: error: ")
    assert message in lines[0], lines[0]


def test_unreadable_training_arguments_and_one_source(tmp_path, capsys):
    path = tmp_path / "args.json"
    path.write_text("{per_device_train_batch_size: 8}")
    assert main(["--model", "gpt2", "--gpus", "2xT4", "--from-hf-trainer", str(path)]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    path.write_text("[1, 2]")
    assert main(["--model", "gpt2", "--gpus", "2xT4", "--from-hf-trainer", str(path)]) == 2
    assert "is not TrainingArguments as JSON" in capsys.readouterr().err
    assert main(["--model", "gpt2", "--gpus", "2xT4", "--from-hf-trainer", str(path), "--from-accelerate",
                 str(path)]) == 2  # fmt: skip
    assert "give one of --ds-config, --from-axolotl, --from-llamafactory, --from-hf-trainer, --from-accelerate" in \
        capsys.readouterr().err  # fmt: skip
    assert main(["--gpus", "2xT4", "--from-hf-trainer", str(EXAMPLES / "hf_trainer_args.json")]) == 2
    assert "the following argument is required: --model" in capsys.readouterr().err


@pytest.mark.parametrize("tool, key", [("axolotl", "optimizer"), ("llamafactory", "optim")])
def test_the_yaml_tools_read_their_optimizer_as_trainingarguments_optim(tmp_path, capsys, tool, key):
    # Axolotl and LLaMA-Factory train through HF Trainer with its optimizer names: an 8-bit AdamW is an upper bound
    # by a stated amount on the GPU, is replaced by CPU Adam when the JSON offloads the optimizer, and one that keeps
    # more than AdamW is refused (the note said "8-bit or paged optimizers take less" whatever the JSON did).
    base = {"axolotl": {"base_model": "gpt2", "sequence_len": 512, "micro_batch_size": 2, "fp16": True},
            "llamafactory": {"model_name_or_path": "gpt2", "stage": "sft", "do_train": True, "finetuning_type": "full",
                             "cutoff_len": 512, "per_device_train_batch_size": 2, "fp16": True}}[tool]  # fmt: skip
    flag = {"axolotl": "--from-axolotl", "llamafactory": "--from-llamafactory"}[tool]

    def notes(optimizer, ds):
        path = _write(tmp_path, "c.yaml", {**base, key: optimizer, "deepspeed": str(ds)})
        rc = main([flag, str(path), "--gpus", "2xT4", "--cpu-mem", "64GiB", "--json"])
        out = json.loads(capsys.readouterr().out)
        return rc, " ".join((out.get("plan") or out)["notes"])

    stage2 = tmp_path / "z2.json"
    stage2.write_text(json.dumps({"zero_optimization": {"stage": 2}, "fp16": {"enabled": "auto"},
                                  "train_micro_batch_size_per_gpu": "auto"}))  # fmt: skip
    offload = tmp_path / "z2o.json"
    offload.write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                                   "fp16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}))  # fmt: skip
    rc, text = notes("adamw_bnb_8bit", stage2)
    assert rc == 0 and "optim adamw_bnb_8bit (" in text and "an upper bound by up to" in text
    rc, text = notes("adamw_bnb_8bit", offload)
    assert rc == 0 and f"{key} adamw_bnb_8bit is not used: with the optimizer offloaded" in text
    rc, text = notes("adamw_torch", stage2)
    assert rc == 0 and "adamw_torch" not in text
    assert main([flag, str(_write(tmp_path, "c.yaml", {**base, key: "ademamix", "deepspeed": str(stage2)})),
                 "--gpus", "2xT4"]) == 2  # fmt: skip
    assert "'ademamix'" in capsys.readouterr().err

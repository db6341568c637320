"""Every hand-off export launched for real by its own tool on two CPU processes (DS_ACCELERATOR=cpu, gloo), issue 59.

tests/test_export.py checks that each tool parses and validates the files; here each trains a few steps from them:
- Accelerate: `accelerate launch --config_file accelerate_config.yaml your_train.py`, the script written the usual
  way (a tiny causal LM from a config, a DataLoader, `accelerator.prepare`, a loop) and as command.sh's comments say;
- HF Trainer: launch.sh's `deepspeed` line, the script reading TrainingArguments from it with HfArgumentParser;
- TRL: train_sft.py as written, on a local model folder (weights and a BPE tokenizer saved here) and local JSONL.

Each command is run as the file has it, from the folder the user would run it in, except the rendezvous port (a free
one, so that launches on other pytest workers cannot collide with DeepSpeed's default 29500).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LLAMA_TINY, ROOT

from zero_planner.cli import main as zero_plan
from zero_planner.run.launcher import free_port

TINY_CONFIG = ROOT / "benchmarks" / "model_configs" / "llama-tiny.json"
PLAN_CPU = ["--gpus", "cpu:2", "--cpu-mem", "8GiB", "--seq-len", "64", "--micro-batch", "2"]

BLOCKS = """
def blocks(n, seq_len=64):
    # n blocks of seq_len byte ids from the built-in corpus (the repository's own data, no download)
    from zero_planner.run.data import synthetic_texts
    from zero_planner.run.tokenizer import ByteTokenizer

    ids = [i for row in ByteTokenizer(512).encode_batch(synthetic_texts(60, seed=3)) for i in row]
    return [ids[k : k + seq_len] for k in range(0, n * seq_len, seq_len)]


def tiny_model():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = json.loads(Path(__file__).with_name("tiny_config.json").read_text())
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config),
                                            attn_implementation="sdpa")
"""

ACCELERATE_SCRIPT = '''"""A user's Accelerate script, as command.sh's comments ask (ZP_OPTIMIZER=torch: its own AdamW
instead; ZP_AS_NOTED=0: without PartialState(cpu=True) and accelerator.accumulate)."""
import contextlib
import json, os
from pathlib import Path

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import DummyOptim
from torch.utils.data import DataLoader
''' + BLOCKS + '''

def main():
    as_noted = os.environ.get("ZP_AS_NOTED", "1") == "1"
    if as_noted:
        PartialState(cpu=True)  # command.sh: CPU processes
        if os.environ.get("ZP_ZERO3") == "1":
            import deepspeed

            deepspeed.init_distributed()  # command.sh: CPU processes at ZeRO-3
    accelerator = Accelerator()
    model = tiny_model()
    loader = DataLoader(torch.tensor(blocks(32)), batch_size=int(os.environ["ZP_BATCH"]))
    if os.environ.get("ZP_OPTIMIZER") == "torch":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        optimizer = DummyOptim(model.parameters())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for batch in loader:
        with accelerator.accumulate(model) if as_noted else contextlib.nullcontext():  # command.sh: accumulation
            loss = model(input_ids=batch, labels=batch).loss
            accelerator.backward(loss)  # DeepSpeed's backward, and its step where Accelerate syncs gradients
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    import torch.distributed as dist

    result = {"num_processes": accelerator.num_processes, "process_index": accelerator.process_index,
              "distributed_type": str(accelerator.distributed_type), "engine": type(model).__name__,
              "world_size": dist.get_world_size(), "stage": model.zero_optimization_stage(),
              "optimizer_steps": model.global_steps, "lr": model.get_lr()[0], "batches": len(losses),
              "losses": losses}
    Path(os.environ["ZP_RESULT"] + f".rank{dist.get_rank()}.json").write_text(json.dumps(result))
    accelerator.end_training()  # command.sh: CPU processes leave the gloo group at the end (many scripts do anyway)


if __name__ == "__main__":
    main()
'''

HF_TRAINER_SCRIPT = '''"""A user's HF Trainer script, as launch.sh asks: TrainingArguments from its flags."""
import json, os
from pathlib import Path

from datasets import Dataset
import torch.distributed
from transformers import HfArgumentParser, Trainer, TrainingArguments
''' + BLOCKS + '''

(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
import deepspeed

deepspeed.init_distributed()  # launch.sh: CPU processes at ZeRO-3, before the model (zero.Init counts the ranks)
rows = blocks(48)
data = Dataset.from_dict({"input_ids": rows, "labels": rows}).train_test_split(test_size=8, seed=0)
trainer = Trainer(model=tiny_model(), args=args, train_dataset=data["train"], eval_dataset=data["test"])
trainer.train()
engine = trainer.model_wrapped
if args.process_index == 0:
    Path(os.environ["ZP_RESULT"]).write_text(json.dumps({
        "world_size": args.world_size, "stage": engine.zero_optimization_stage(),
        "train_batch_size": engine.train_batch_size(), "global_step": trainer.state.global_step,
        "log_history": trainer.state.log_history}))
torch.distributed.destroy_process_group()  # launch.sh: CPU processes, leave the gloo group at the end
'''


def launch_env(tmp_path: Path) -> dict[str, str]:
    """Returns the environment of a user's shell: this interpreter's tools first on PATH, the repository importable
    (the scripts build their data with it), everything offline and one thread a rank (two cores)."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
            "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def command_line(path: Path) -> str:
    """Returns the last line of a written command file (the launch), on a free rendezvous port."""
    line = path.read_text().splitlines()[-1]
    port = str(free_port())
    if line.startswith("DS_ACCELERATOR=cpu deepspeed "):
        assert "--master_port 29500" in line, line
        return line.replace("--master_port 29500", f"--master_port {port}")
    assert line.startswith("env DS_ACCELERATOR=cpu accelerate launch "), line
    return line.replace("accelerate launch ", f"accelerate launch --main_process_port {port} ", 1)


def run_line(line: str, cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(["sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    done.log = done.stdout[-4000:] + done.stderr[-6000:]  # what an assertion shows
    return done


def plan(tmp_path: Path, *args: str, export: str) -> Path:
    plan_path = tmp_path / "plan.json"
    assert zero_plan([*args, "-o", str(plan_path), "--export", export]) == 0
    return plan_path


def user_folder(tmp_path: Path, script: str) -> Path:
    """Returns the folder the user runs the command from: their your_train.py and the tiny model's config."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "your_train.py").write_text(script)
    (work / "tiny_config.json").write_text(json.dumps(LLAMA_TINY))
    return work


def save_tiny_pretrained(folder: Path) -> None:
    """Writes a tiny Llama (random, seeded) with a byte-level BPE tokenizer, as save_pretrained lays a model out."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from benchmarks.hub_cache import build_tokenizer

    config = dict(LLAMA_TINY)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config)).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)


class TestAccelerate:
    """Accelerate's launcher and a script written as command.sh says (a class: its own unit of work for xdist)."""

    @pytest.mark.slow
    def test_accelerate_launch_trains_with_the_script_command_sh_describes(self, tmp_path):
        """`accelerate launch --config_file accelerate_config.yaml your_train.py` at stage 2 with accumulation 2.

        The usual script with its own torch AdamW is refused beside the JSON's optimizer section (the JSON keeps it:
        the plan's AdamW, and ZeRO-Offload trains only with DeepSpeed's CPU Adam), so command.sh's DummyOptim is what
        runs. Without the two other lines command.sh asks for, it trains but not as planned: Accelerate 1.16 sets
        DeepSpeed's accumulation boundary from its own sync_gradients, which only accelerator.accumulate() manages
        (utils/deepspeed.py, DeepSpeedEngineWrapper.backward), so the optimizer steps at every micro-batch; and on CPU
        processes each rank counts num_processes 1 and reads every batch unless PartialState(cpu=True) comes first."""
        plan_path = plan(tmp_path, "--model", str(TINY_CONFIG), *PLAN_CPU, "--global-batch", "8", "--stage", "2",
                         "--lr", "3e-4", "--tokenizer", "bytes", export="accelerate")  # fmt: skip
        export = tmp_path / "plan.accelerate"
        command = (export / "command.sh").read_text()
        assert "batch_size=2 per process" in command and "accumulates 2 micro-batches" in command
        assert "DummyOptim(model.parameters())" in command and "PartialState(cpu=True)" in command
        assert "with accelerator.accumulate(model):" in command and "end with accelerator.end_training()" in command
        work = user_folder(tmp_path, ACCELERATE_SCRIPT)
        env = {**launch_env(tmp_path), "ZP_BATCH": "2", "ZP_RESULT": str(tmp_path / "result")}

        refused = run_line(command_line(export / "command.sh"), work, {**env, "ZP_OPTIMIZER": "torch"})
        assert refused.returncode != 0
        assert "You cannot specify an optimizer in the config file and in the code at the same time" in refused.log

        usual = run_line(command_line(export / "command.sh"), work, {**env, "ZP_AS_NOTED": "0"})
        assert usual.returncode == 0, usual.log
        ranks = [json.loads((tmp_path / f"result.rank{r}.json").read_text()) for r in (0, 1)]
        assert [(r["num_processes"], r["process_index"], r["world_size"]) for r in ranks] == [(1, 0, 2), (1, 0, 2)]
        assert ranks[0]["batches"] == 16 and ranks[0]["losses"] == ranks[1]["losses"]  # the same batches on both
        assert ranks[0]["optimizer_steps"] == 16  # a step at every micro-batch: the JSON's accumulation is lost

        done = run_line(command_line(export / "command.sh"), work, env)
        assert done.returncode == 0, done.log
        ranks = [json.loads((tmp_path / f"result.rank{r}.json").read_text()) for r in (0, 1)]
        ds = json.loads((export / "ds_config.json").read_text())
        for rank, r in enumerate(ranks):
            assert (r["num_processes"], r["process_index"], r["world_size"]) == (2, rank, 2)
            assert r["distributed_type"] == "DistributedType.DEEPSPEED" and r["engine"] == "DeepSpeedEngine"
            assert r["stage"] == json.loads(plan_path.read_text())["strategy"]["stage"] == 2
            assert r["batches"] == 8 and r["optimizer_steps"] == 4  # 8 micro-batches, 2 per optimizer step
            assert r["lr"] == ds["optimizer"]["params"]["lr"] == 3e-4  # the JSON's optimizer, not DummyOptim's default
            assert all(math.isfinite(loss) for loss in r["losses"])
        assert ranks[0]["losses"] != ranks[1]["losses"]  # each rank its own share of the data

    @pytest.mark.slow
    def test_accelerate_launch_at_zero3_builds_the_model_under_zero_init_on_cpu_processes(self, tmp_path):
        """Stage 3 (zero3_init_flag: the model is built partitioned): on CPU processes DeepSpeed's comm must be set up
        before the model, or zero.Init reads a world of 1 and stops at DeepSpeed's train_batch_size assertion (found
        by this launch; command.sh says so for cpu:N plans at stage 3)."""
        plan(tmp_path, "--model", str(TINY_CONFIG), *PLAN_CPU, "--stage", "3", "--tokenizer", "bytes",
             export="accelerate")  # fmt: skip
        export = tmp_path / "plan.accelerate"
        assert "deepspeed.init_distributed() before building the model" in (export / "command.sh").read_text()
        work = user_folder(tmp_path, ACCELERATE_SCRIPT)
        env = {**launch_env(tmp_path), "ZP_BATCH": "2", "ZP_RESULT": str(tmp_path / "result"), "ZP_ZERO3": "1"}
        done = run_line(command_line(export / "command.sh"), work, env)
        assert done.returncode == 0, done.log
        for rank in (0, 1):
            r = json.loads((tmp_path / f"result.rank{rank}.json").read_text())
            assert (r["num_processes"], r["process_index"], r["world_size"], r["stage"]) == (2, rank, 2, 3)
            assert r["batches"] == r["optimizer_steps"] == 8 and all(math.isfinite(loss) for loss in r["losses"])


class TestTrainer:
    """HF Trainer's launch.sh and TRL's train_sft.py, both through the deepspeed launcher."""

    @pytest.mark.slow
    def test_hf_trainer_launch_sh_trains_the_planned_steps_and_keeps_the_users_settings(self, tmp_path):
        """launch.sh at stage 3: the steps asked for, two ranks in one DeepSpeed group, eval every 2 steps, a checkpoint
        every step of which save_total_limit (2) are kept, each with the whole model gathered (stage 3 saves 16-bit).
        Found by this launch: without use_cpu (a cpu:N plan's file has it now) each rank counted a world of 1 and
        Trainer refused the JSON's train_batch_size 4 (hf 2); and the model, built after TrainingArguments under
        zero.Init, needs DeepSpeed's comm set up first on CPU processes, as launch.sh says."""
        plan_path = plan(tmp_path, "--model", str(TINY_CONFIG), *PLAN_CPU, "--stage", "3", "--tokenizer", "bytes",
                         "--max-steps", "4", "--save-steps", "1", "--save-total-limit", "2", "--eval-split", "0.2",
                         "--eval-steps", "2", export="hf-trainer")  # fmt: skip
        export = tmp_path / "plan.hf-trainer"
        launch = (export / "launch.sh").read_text()
        assert "deepspeed.init_distributed() before building the model" in launch
        assert "end with torch.distributed.destroy_process_group()" in launch  # what CI's one abort at exit lacked
        # launch.sh's flags are training_args.json's values: what trains here trains from the JSON too
        from transformers import HfArgumentParser, TrainingArguments

        argv = shlex.split((export / "launch.sh").read_text().splitlines()[-1])
        script_flags = argv[argv.index("your_train.py") + 1 :]
        (flags,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(script_flags)
        assert flags.to_dict() == TrainingArguments(**json.loads((export / "training_args.json").read_text())).to_dict()
        work = user_folder(tmp_path, HF_TRAINER_SCRIPT)
        result = tmp_path / "result.json"
        done = run_line(command_line(export / "launch.sh"), work, {**launch_env(tmp_path), "ZP_RESULT": str(result)})
        assert done.returncode == 0, done.log
        r = json.loads(result.read_text())
        written = json.loads(plan_path.read_text())
        assert r["world_size"] == 2 and r["train_batch_size"] == written["deepspeed_config"]["train_batch_size"] == 4
        assert r["stage"] == written["strategy"]["stage"] == 3
        assert r["global_step"] == written["training"]["max_steps"] == 4
        assert [log["step"] for log in r["log_history"] if "eval_loss" in log] == [2, 4]
        assert all(math.isfinite(log["eval_loss"]) for log in r["log_history"] if "eval_loss" in log)
        assert math.isfinite(r["log_history"][-1]["train_loss"])
        out = work / written["training"]["output_dir"]  # relative: where launch.sh was run
        assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
        from safetensors import safe_open

        with safe_open(str(out / "checkpoint-4" / "model.safetensors"), "pt") as weights:
            shapes = {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}
        assert shapes["model.embed_tokens.weight"] == (LLAMA_TINY["vocab_size"], LLAMA_TINY["hidden_size"])

    @pytest.mark.slow
    def test_trl_train_sft_py_trains_one_epoch_on_local_files_as_written(self, tmp_path):
        """command.sh runs train_sft.py unchanged: a local model folder and JSONL, --epochs 1 (30 rows less 6 held out
        for eval, 2 x 2 a step: 6 steps), eval at each save (every 2 steps), save_total_limit 1. Stage 3 over both
        ranks, the model built by SFTTrainer under zero.Init (the script sets up DeepSpeed's comm first on CPU
        processes): each rank's partition is in the checkpoint."""
        from benchmarks.hub_cache import documents

        model = tmp_path / "tiny-llama"
        save_tiny_pretrained(model)
        data = tmp_path / "train.jsonl"
        data.write_text("".join(json.dumps({"body": d}) + "\n" for d in documents(30, seed=3)))
        plan_path = plan(tmp_path, "--model", str(model), *PLAN_CPU, "--stage", "3", "--dataset", str(data),
                         "--text-column", "body", "--epochs", "1", "--save-steps", "2", "--save-total-limit", "1",
                         "--eval-split", "6", export="trl")  # fmt: skip
        export = tmp_path / "plan.trl"
        work = tmp_path / "work"
        work.mkdir()
        done = run_line(command_line(export / "command.sh"), work, launch_env(tmp_path))
        assert done.returncode == 0, done.log
        written = json.loads(plan_path.read_text())
        out = work / written["training"]["output_dir"]
        assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-6"]
        state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
        assert (state["global_step"], state["max_steps"], state["epoch"]) == (6, 6, 1.0)
        evals = [log for log in state["log_history"] if "eval_loss" in log]
        assert [log["step"] for log in evals] == [2, 4, 6] and all(math.isfinite(log["eval_loss"]) for log in evals)
        import torch

        partitions = sorted((out / "checkpoint-6" / "global_step6").glob("*optim_states.pt"))
        names = [re.sub(r"\d+_mp", "N_mp", p.name) for p in partitions]
        assert names == ["zero_pp_rank_N_mp_rank_00_optim_states.pt"] * 2  # one partition a rank
        saved = torch.load(partitions[0], map_location="cpu", weights_only=False)
        assert saved["optimizer_state_dict"]["zero_stage"] == written["strategy"]["stage"] == 3
        assert saved["ds_config"]["train_micro_batch_size_per_gpu"] == 2

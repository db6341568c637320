"""Model construction under the real deepspeed launcher on CPU (two ranks, gloo)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_zero3_random_init_matches_the_models_own_init(tmp_path):
    """A tied embedding used as LM head must start near ln(vocab), not at torch's default N(0, 1) scale."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.cases import case, expand_case

    config = expand_case(case("llama-tiny", "3", mb=1, seq=64, gpus=2))
    config["model_config"] = dict(config["model_config"], tie_word_embeddings=True, hidden_size=256, vocab_size=4096)
    (tmp_path / "case.json").write_text(json.dumps(config))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", "29631",
           str(ROOT / "benchmarks" / "gpu_step.py"), "--case", str(tmp_path / "case.json"), "--out-dir", str(tmp_path)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    record = json.loads((tmp_path / "rank0.json").read_text())
    assert record["status"] == "ok", record.get("error")
    assert record["losses"][0] < 1.5 * math.log(4096)  # measured 8.34; without the fix 253
    marks = {m["tag"]: m for m in record["host_marks"]}  # host memory after each phase
    assert list(marks) == ["model", "initialize", "forward", "backward", "step", "steps"]
    assert 0 < marks["model"]["VmRSS"] <= marks["steps"]["VmHWM"]
    assert abs(marks["steps"]["VmHWM"] / record["host_rss_peak_bytes"] - 1) < 0.01  # two readings of one peak


@pytest.mark.slow
@pytest.mark.parametrize("stage, gc", [("2", True), ("3", False)])
def test_qlora_base_trains_under_zero_on_two_cpu_ranks(tmp_path, stage, gc):
    """The QLoRA stack of zero-run and the GPU harness (NF4 base from bitsandbytes, peft adapters, DeepSpeed
    ZeRO-2 with prepare_model_for_kbit_training, or ZeRO-3 partitioning the bf16 quant storage) on two CPU
    ranks: bitsandbytes >= 0.50 runs 4-bit on the CPU, so the code path is tested here, not only on a GPU."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.cases import case, expand_case

    config = expand_case(case("llama-tiny", stage, mb=1, seq=64, gpus=2, method="qlora", gc=gc))
    (tmp_path / "case.json").write_text(json.dumps(config))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(29640 + int(stage)),
           str(ROOT / "benchmarks" / "gpu_step.py"), "--case", str(tmp_path / "case.json"), "--out-dir", str(tmp_path)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for record in ranks:
        assert record["status"] == "ok", record.get("error")
        assert all(math.isfinite(loss) for loss in record["losses"])
    from zero_planner.models.spec import spec_from_config
    from zero_planner.plan.memory import Workload, trainable_params

    spec = spec_from_config(config["model_config"], "llama-tiny")
    workload = Workload(micro_batch_size=1, seq_len=64, gradient_checkpointing=gc, precision="bf16", method="qlora")
    assert ranks[0]["trainable_params"] == trainable_params(spec, workload)  # only the adapters train
    assert ranks[0]["losses"] != ranks[1]["losses"]  # each rank saw its own batch


@pytest.mark.parametrize("method", ["full", "lora"])
def test_the_harness_measures_the_model_zero_run_trains(method):
    """benchmarks/gpu_step.case_model and zero-run's builder are one function: same seed, same model."""
    from types import SimpleNamespace

    import torch

    sys.path.insert(0, str(ROOT))
    from conftest import make_plan

    from benchmarks.gpu_step import case_model
    from zero_planner.planfile import LoraInfo
    from zero_planner.run.train import _build_model

    lora = LoraInfo(r=4, alpha=8, dropout=0.0)
    plan = make_plan("2", method=method, seed=0, lora=lora.model_dump() if method == "lora" else None)
    torch.manual_seed(0)
    ours, _ = _build_model(plan, plan.deepspeed_config, SimpleNamespace(device=torch.device("cpu"), local_rank=0))
    case = {"model_config": plan.model.config, "precision": "fp32", "gradient_checkpointing": False, "method": method,
            "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}  # fmt: skip
    torch.manual_seed(0)
    theirs, _ = case_model(case, plan.deepspeed_config, "cpu", 0)
    a, b = ours.state_dict(), theirs.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert ours.training and theirs.training
    assert sum(p.requires_grad for p in ours.parameters()) == sum(p.requires_grad for p in theirs.parameters())


def test_kbit_preparation_keeps_the_training_dtype_and_deepspeed_would_cast_back_exactly():
    """zero-run prepares a QLoRA base as peft's prepare_model_for_kbit_training does, less its fp32 upcast of the
    weights it keeps in 16 bits. The upcast is lossless and deepspeed.initialize casts every parameter back to
    the training dtype, so skipping it changes no weight the run trains with, only the load phase's memory."""
    import torch
    from peft import prepare_model_for_kbit_training
    from transformers import AutoConfig, AutoModelForCausalLM

    from zero_planner.run.modeling import prepare_for_kbit_training

    config = AutoConfig.for_model(**json.loads((ROOT / "benchmarks/model_configs/llama-tiny.json").read_text()))
    torch.manual_seed(0)
    ours = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    peft_way = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    peft_way.load_state_dict(ours.state_dict())
    prepare_for_kbit_training(ours, gradient_checkpointing=True, zero_stage=0)
    peft_way = prepare_model_for_kbit_training(peft_way, use_gradient_checkpointing=True,
                                               gradient_checkpointing_kwargs={"use_reentrant": False})

    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in ours.parameters())
    assert {p.dtype for p in peft_way.parameters()} == {torch.float32}  # what the upcast did
    for (name, mine), (_, theirs) in zip(ours.named_parameters(), peft_way.named_parameters(), strict=True):
        assert torch.equal(mine, theirs.to(torch.bfloat16)), name  # DeepSpeed's cast back gives the same weights
    assert ours.is_gradient_checkpointing
    embeddings = ours.get_input_embeddings()(torch.tensor([[1, 2, 3]]))
    assert embeddings.requires_grad  # the non-reentrant checkpoint's input, as peft's hook makes it


def test_eval_builds_no_kv_cache():
    """zero-run's eval computes a loss only: a causal LM in eval mode would otherwise keep every layer's keys and
    values in a cache for generation (memory the model does not count, measured on GPU as eval's excess on every
    run without checkpointing). The same forward without use_cache=False does build one, so this can fail."""
    import socket

    import torch
    import torch.distributed as dist
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM

    from zero_planner.run.train import Ranks, evaluate

    config = AutoConfig.for_model(**json.loads((ROOT / "benchmarks/model_configs/llama-tiny.json").read_text()))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    caches = []
    model.register_forward_hook(lambda module, args, output: caches.append(output.past_key_values))
    blocks = Dataset.from_dict({"input_ids": [[(7 * i + j) % config.vocab_size for j in range(32)] for i in range(3)]})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        ranks = Ranks.__new__(Ranks)  # one rank's facts, without deepspeed.init_distributed
        ranks.dist, ranks.rank, ranks.world_size, ranks.device = dist, 0, 1, torch.device("cpu")
        loss = evaluate(model, blocks, ranks, micro=2)
    finally:
        dist.destroy_process_group()
    assert math.isfinite(loss) and model.training  # evaluated, then back to training mode
    assert caches and all(cache is None for cache in caches)
    model.eval()
    with torch.no_grad():
        model(input_ids=torch.tensor(blocks[[0]]["input_ids"]), labels=torch.tensor(blocks[[0]]["input_ids"]))
    assert caches[-1] is not None  # what the eval forward did before use_cache=False


def test_the_harness_runs_the_attention_the_plans_run():
    # Gemma 2's plans run eager (SDPA has no soft-cap): the harness too, whatever the GPU machine's transformers
    # accepts; elsewhere it leaves the choice to the builder (SDPA where accepted)
    sys.path.insert(0, str(ROOT))
    from benchmarks.gpu_step import planned_attention

    configs = ROOT / "benchmarks" / "model_configs"
    assert planned_attention(json.loads((configs / "gemma2-2b.json").read_text()), "gemma2-2b") == "eager"
    assert planned_attention(json.loads((configs / "llama3.2-1b.json").read_text()), "llama3.2-1b") is None

"""LoRA and sequence classification through zero-run on CPU: two ranks under the real `deepspeed` launcher.

The base model is llama-tiny initialised randomly from the plan's seed, so a test rebuilds the exact initial
model with `train._build_model` and compares: only the adapters may have changed, and the exported adapter,
loaded back with peft onto a fresh base, must be the model that was trained (the merged export).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import make_plan

from zero_planner.launch import main
from zero_planner.planfile import Plan, load_plan, save_plan

STEPS = 12
LORA = {"r": 8, "alpha": 16, "dropout": 0.05}


def write_plan(path: Path, strategy: str, **kw) -> Path:
    kw.setdefault("max_steps", STEPS)
    kw.setdefault("save_every", STEPS // 2)
    save_plan(make_plan(strategy, **kw), path)
    return path


def report_of(output_dir: Path) -> dict:
    return json.loads((output_dir / "run_report.json").read_text())


def initial_model(plan: Plan, *, method: str | None = None, pad_token_id: int | None = None):
    """Returns the model exactly as zero-run builds it before training (same seed, same code path)."""
    import torch

    from zero_planner.run.train import _build_model

    if method is not None:
        plan = plan.model_copy(deep=True)
        plan.training.method = method
    torch.manual_seed(plan.training.seed)
    model, _ = _build_model(plan, plan.deepspeed_config, SimpleNamespace(device=torch.device("cpu"), local_rank=0),
                            pad_token_id=pad_token_id)  # fmt: skip
    return model.eval()


def lm_batch(vocab_size: int, eos_token_id: int, seq_len: int = 64, n: int = 8):
    """Returns held-out synthetic blocks (another seed than training's) as a LongTensor [n, seq_len]."""
    import torch

    from zero_planner.run.data import pack_ids, synthetic_texts
    from zero_planner.run.tokenizer import ByteTokenizer

    tok = ByteTokenizer(vocab_size, eos_token_id=eos_token_id)
    return torch.tensor(pack_ids(tok.encode_batch(synthetic_texts(40, seed=99)), seq_len, tok.eos_token_id)[:n])


def lm_loss(model, ids) -> float:
    import torch

    with torch.no_grad():
        return float(model(input_ids=ids, labels=ids).loss)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """LoRA, ZeRO-2, gradient checkpointing, trained straight through STEPS steps: (plan path, output dir)."""
    root = tmp_path_factory.mktemp("lora")
    plan = write_plan(root / "plan.json", "2", method="lora", lora=LORA, learning_rate=1e-2,
                      gradient_checkpointing=True, output_dir=str(root / "run"))  # fmt: skip
    assert main([str(plan)]) == 0
    return plan, root / "run"


@pytest.mark.slow
def test_lora_loss_falls_and_exports(lora_run):
    _, out = lora_run
    report = report_of(out)
    assert report["status"] == "ok" and report["steps"] == STEPS
    losses = report["losses"]
    # A random base caps what adapters can learn (its final norm and LM head stay frozen): ~6.2 -> ~5.6.
    assert sum(losses[-4:]) / 4 < losses[0] - 0.4
    assert (out / "final-adapter" / "adapter_config.json").exists()
    assert (out / "final-adapter" / "adapter_model.safetensors").exists()
    assert (out / "final" / "model.safetensors").exists()  # merged: stage 2 makes it free
    # Checkpoints hold the adapters and their optimizer state only, not the frozen base.
    model_states = next((out / "checkpoints" / f"step{STEPS}").glob("mp_rank_00_model_states.pt"))
    assert model_states.stat().st_size < 4 * 100_000  # llama-tiny's base alone is 4 * 429k bytes


@pytest.mark.slow
def test_lora_changes_only_the_adapters(lora_run):
    """The trained model (merged export) is exactly the initial base plus the exported adapter's update."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    plan_path, out = lora_run
    plan = load_plan(plan_path)
    base0 = {k: v.clone() for k, v in initial_model(plan, method="full").state_dict().items()}
    adapter = load_file(str(out / "final-adapter" / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    init_adapter = {k: v for k, v in initial_model(plan).state_dict().items() if "lora_" in k}
    assert len(init_adapter) == len(adapter)
    for key, value in init_adapter.items():
        trained = adapter[key.replace(".default", "")]
        assert not torch.equal(trained, value), f"{key} did not train"

    merged = AutoModelForCausalLM.from_pretrained(str(out / "final")).state_dict()
    expected = PeftModel.from_pretrained(initial_model(plan, method="full"), str(out / "final-adapter"))
    expected = expected.merge_and_unload().state_dict()
    assert merged.keys() == base0.keys() == expected.keys()
    changed = []
    for key in base0:
        torch.testing.assert_close(merged[key], expected[key], rtol=0, atol=1e-6)
        if not torch.equal(merged[key], base0[key]):
            changed.append(key)
    # Exactly the LoRA-targeted linear weights moved (by B @ A); embeddings, norms and the LM head did not.
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert sorted(changed) == sorted(k for k in base0 if k.split(".")[-2] in targets)


@pytest.mark.slow
def test_exported_adapter_loads_back(lora_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    plan_path, out = lora_run
    plan = load_plan(plan_path)
    cfg = plan.model.config
    ids = lm_batch(cfg["vocab_size"], cfg["eos_token_id"])
    loaded = PeftModel.from_pretrained(initial_model(plan, method="full"), str(out / "final-adapter")).eval()
    trained = AutoModelForCausalLM.from_pretrained(str(out / "final")).eval()
    adapter_loss = lm_loss(loaded, ids)
    assert adapter_loss == pytest.approx(lm_loss(trained, ids), abs=1e-4)
    assert adapter_loss < lm_loss(initial_model(plan, method="full"), ids) - 0.3
    # Held-out text of the training distribution: close to where training ended.
    assert adapter_loss == pytest.approx(sum(report_of(out)["losses"][-4:]) / 4, abs=0.3)


@pytest.mark.slow
def test_lora_resume_replays_the_same_losses(lora_run, tmp_path):
    """The straight run's folder as a run stopped after its mid-run checkpoint left it (the newer checkpoint and the
    exports gone): resumed, it trains the second half over again with the same losses."""
    import shutil

    plan, straight = lora_run
    out = tmp_path / "resumed"
    shutil.copytree(straight, out, symlinks=True)
    for gone in (out / "checkpoints" / f"step{STEPS}", out / "final", out / "final-adapter"):
        shutil.rmtree(gone)
    assert main([str(plan), "--output-dir", str(out), "--resume"]) == 0
    report = report_of(out)
    assert report["steps"] == STEPS and (out / "final-adapter" / "adapter_model.safetensors").exists()
    assert report["losses"] == pytest.approx(report_of(straight)["losses"], abs=1e-5)


def cls_batch(plan: Plan, n: int = 64):
    """Returns (input_ids, attention_mask, labels) of held-out synthetic classification examples."""
    import torch

    from zero_planner.run.data import pad_ids, synthetic_classification
    from zero_planner.run.tokenizer import ByteTokenizer

    cfg, t = plan.model.config, plan.training
    tok = ByteTokenizer(cfg["vocab_size"], eos_token_id=cfg["eos_token_id"])
    texts, labels = synthetic_classification(t.num_labels, n, seed=99)
    rows = [pad_ids(ids, t.seq_len, tok.eos_token_id) for ids in tok.encode_batch(texts)]
    return (torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows]), torch.tensor(labels))


def cls_loss(model, batch) -> float:
    import torch

    ids, mask, labels = batch
    with torch.no_grad():
        return float(model(input_ids=ids, attention_mask=mask, labels=labels).loss)


class TestSeqCls:
    """Sequence classification, its own unit of work for pytest-xdist (--dist loadscope): these three launches
    share nothing with the LoRA run above (lora_run), so the other worker can take them (tests/conftest.py)."""

    @pytest.mark.slow
    @pytest.mark.parametrize("strategy, method", [("2", "lora"), ("3", "lora"), ("2", "full")])
    def test_seq_cls_learns(self, tmp_path, strategy, method):
        """Three topics. ZeRO-3 + LoRA also covers peft's copy of the classification head (modules_to_save)."""
        from peft import PeftModel
        from safetensors.torch import load_file
        from transformers import AutoModelForSequenceClassification

        from zero_planner.run.data import pad_token_id_for
        from zero_planner.run.tokenizer import ByteTokenizer

        plan_path = write_plan(tmp_path / "plan.json", strategy, method=method, lora=LORA, task="seq-cls", num_labels=3,
                               micro_batch_size=8, max_steps=20, save_every=10, output_dir=str(tmp_path / "run"),
                               learning_rate=5e-3 if method == "lora" else 3e-3)  # fmt: skip
        assert main([str(plan_path)]) == 0
        out = tmp_path / "run"
        losses = report_of(out)["losses"]
        chance = math.log(3)
        assert losses[0] == pytest.approx(chance, abs=0.3)
        assert sum(losses[-5:]) / 5 < chance - 0.4

        plan = load_plan(plan_path)
        cfg = plan.model.config
        pad = pad_token_id_for(ByteTokenizer(cfg["vocab_size"], cfg["eos_token_id"]))
        assert pad == cfg["eos_token_id"]  # the byte tokenizer never emits eos, so it pads
        if method == "full":
            model = AutoModelForSequenceClassification.from_pretrained(str(out / "final")).eval()
            assert model.config.num_labels == 3 and model.config.pad_token_id == pad
        else:
            adapter = load_file(str(out / "final-adapter" / "adapter_model.safetensors"))
            assert "base_model.model.score.weight" in adapter  # the trained head travels with the adapter
            # A stage-2 base: ZeRO-3's random init draws in another order, so only its shapes can be rebuilt here.
            base_plan = plan.model_copy(deep=True)
            base_plan.deepspeed_config["zero_optimization"] = {"stage": 2}
            base = initial_model(base_plan, method="full", pad_token_id=pad)
            model = PeftModel.from_pretrained(base, str(out / "final-adapter")).eval()
            assert (out / "final").exists() is (strategy == "2")  # merged only where it is free
            if strategy == "3":
                return
        assert cls_loss(model, cls_batch(plan)) < chance - 0.4  # held-out examples: it learned the topics


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_pretrained_base_is_built_in_training_mode(tmp_path, method):
    """from_pretrained returns eval mode; training in it would turn dropout and gradient checkpointing off."""
    import torch

    from zero_planner.run.modeling import build_model

    plan = make_plan("2", method=method, gradient_checkpointing=True)
    base, _ = build_model(plan.model.config, precision="fp32", device="cpu")
    base.save_pretrained(tmp_path / "base")
    plan.model.init = "pretrained"
    plan.model.weights_path = str(tmp_path / "base")
    from zero_planner.run.train import _build_model

    model, _ = _build_model(plan, plan.deepspeed_config, SimpleNamespace(device=torch.device("cpu"), local_rank=0))
    assert all(m.training for m in model.modules())
    assert model.base_model.model.model.gradient_checkpointing if method == "lora" else model.model.gradient_checkpointing

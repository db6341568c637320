"""zero-run fine-tunes a pretrained model by its hub id, offline, on local data (two CPU ranks, gloo).

The "hub" is a Hugging Face cache built here (HF_HUB_CACHE in a tmp dir: models--org--name/snapshots/<rev>/
with refs/main) holding a tiny Llama trained a few steps in the test and a BPE tokenizer built with the
`tokenizers` library (with a chat template). Planning and training refer to it only as `testorg/tiny-llama`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LLAMA_TINY, ROOT

from benchmarks.hub_cache import CHAT_TEMPLATE, build_tokenizer, documents, snapshot_folder
from zero_planner.launch import main as zero_run

HUB_ID = "testorg/tiny-llama"
SEQ_LEN = 64
STEPS = 4


def build_pretrained(folder: Path, tokenizer) -> None:
    """Writes a tiny Llama trained 30 steps on the test corpus (so its loss is far from a random init's)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = dict(LLAMA_TINY)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
    ids = tokenizer(" ".join(documents(200, seed=2)), add_special_tokens=False)["input_ids"]
    blocks = torch.tensor([ids[i : i + SEQ_LEN] for i in range(0, len(ids) - SEQ_LEN, SEQ_LEN)][:64])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(30):
        batch = blocks[(step * 8) % len(blocks) :][:8]
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """Returns (tmp root, snapshot folder, environment) with HF_HUB_CACHE holding testorg/tiny-llama offline."""
    root = tmp_path_factory.mktemp("hub")
    cache = root / "hf" / "hub"
    snapshot = snapshot_folder(cache, HUB_ID)
    build_pretrained(snapshot, build_tokenizer())
    env = {"HF_HOME": str(root / "hf"), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(root / "datasets")}  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the launcher's ranks inherit zero-run's environment
    # zero-run itself checks the cache before launching, in this process, where huggingface_hub read its
    # settings at import: point those at the test cache too.
    import huggingface_hub.constants as hub_constants

    saved_constants = {k: getattr(hub_constants, k) for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE")}
    hub_constants.HF_HUB_CACHE, hub_constants.HF_HUB_OFFLINE = str(cache), True
    yield root, snapshot, env
    for key, value in saved_constants.items():
        setattr(hub_constants, key, value)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def zero_plan(hub_env: dict, *args: str) -> subprocess.CompletedProcess:
    """Runs zero-plan in a fresh process (huggingface_hub reads HF_HUB_CACHE at import)."""
    env = {**os.environ, **hub_env, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "zero_planner", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT)  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def report_of(output_dir: Path) -> dict:
    return json.loads((output_dir / "run_report.json").read_text())


def first_batch_loss(plan_path: Path, snapshot: Path) -> float:
    """Returns the saved model's loss on rank 0's first micro-batch, built as zero-run builds its data."""
    import torch
    from transformers import AutoModelForCausalLM

    from zero_planner.planfile import load_plan
    from zero_planner.run.data import BlockOrder, load_lm_splits
    from zero_planner.run.tokenizer import HFTokenizer
    from zero_planner.run.train import _batch

    plan = load_plan(plan_path)
    t = plan.training
    blocks, _, _ = load_lm_splits(t, HFTokenizer(str(snapshot), LLAMA_TINY["vocab_size"]), t.seq_len)
    order = BlockOrder(len(blocks), plan.hardware.world_size, 0, t.micro_batch_size, t.seed)
    batch = _batch(blocks[order.micro_batch(0)], t.task, "cpu")  # labels as zero-run gives them (text: the ids)
    model = AutoModelForCausalLM.from_pretrained(snapshot)
    with torch.no_grad():
        return float(model(**batch).loss)


@pytest.fixture(scope="module")
def text_run(hub):
    """Plans testorg/tiny-llama at stage 3 on local JSONL text with a held-out eval share, trains STEPS."""
    root, snapshot, env = hub
    data = write_jsonl(root / "train.jsonl", [{"body": d, "id": i} for i, d in enumerate(documents(120, seed=3))])
    plan = root / "plan.json"
    done = zero_plan(env, "--model", HUB_ID, "--gpus", "cpu:2", "--cpu-mem", "8GiB", "--seq-len", str(SEQ_LEN),
                     "--micro-batch", "2", "--stage", "3", "--no-grad-checkpointing", "--dataset", str(data),
                     "--text-column", "body", "--eval-split", "0.1", "--lr", "1e-3", "--lr-scheduler", "linear",
                     "--warmup", "2", "--max-steps", str(STEPS), "--save-steps", "2", "-o", str(plan))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert zero_run([str(plan), "--output-dir", str(root / "run")]) == 0
    return plan, root / "run", snapshot, data


@pytest.mark.slow
def test_plan_records_pretrained_weights_data_and_hyperparameters(text_run):
    plan = json.loads(text_run[0].read_text())
    assert plan["model"]["init"] == "pretrained" and plan["model"]["load_path"] == HUB_ID
    assert plan["model"]["load_sharded"] is True  # stage 3: partitioned while loading
    t = plan["training"]
    assert (t["dataset"], t["text_field"], t["eval_split"], t["lr_scheduler"], t["warmup"], t["max_steps"],
            t["save_every"]) == (str(text_run[3]), "body", "0.1", "linear", 2, STEPS, 2)  # fmt: skip
    assert t["learning_rate"] == plan["deepspeed_config"]["optimizer"]["params"]["lr"] == 1e-3


@pytest.mark.slow
def test_starts_from_exactly_the_hub_weights(text_run):
    plan, out, snapshot, _ = text_run
    report = report_of(out)
    expected = first_batch_loss(plan, snapshot)
    assert report["losses"][0] == pytest.approx(expected, abs=1e-4)
    # A random init would start near ln(vocab) = 6.24; the saved model had learned the corpus.
    assert expected < 5.5
    assert report["data"]["format"] == "text" and report["data"]["tokenizer"] == HUB_ID
    assert [e["step"] for e in report["eval_losses"]] == [2, 4] and all(e["loss"] > 0 for e in report["eval_losses"])
    from transformers import AutoTokenizer

    assert (out / "final" / "tokenizer.json").exists()  # the model's own tokenizer travels with the export
    assert AutoTokenizer.from_pretrained(out / "final").chat_template == CHAT_TEMPLATE


@pytest.mark.slow
def test_resume_continues_with_the_same_losses(text_run, tmp_path):
    """The straight run's folder as a run stopped after step 2's checkpoint left it (step 4's and the export gone):
    resumed under ZeRO-3 with the linear schedule and the eval share, it trains steps 3-4 with the same losses."""
    import shutil

    plan, straight, _, _ = text_run
    out = tmp_path / "resumed"
    shutil.copytree(straight, out, symlinks=True)
    for gone in (out / "checkpoints" / f"step{STEPS}", out / "final"):
        shutil.rmtree(gone)
    assert zero_run([str(plan), "--output-dir", str(out), "--resume"]) == 0
    report = report_of(out)
    assert report["steps"] == STEPS and (out / "final" / "model.safetensors").exists()
    assert report["losses"] == pytest.approx(report_of(straight)["losses"], abs=1e-5)
    # Every evaluation, step 2's from before the resume included (the checkpoint keeps them), as the straight run's
    assert [e["step"] for e in report["eval_losses"]] == [e["step"] for e in report_of(straight)["eval_losses"]]
    assert [e["loss"] for e in report["eval_losses"]] == pytest.approx(
        [e["loss"] for e in report_of(straight)["eval_losses"]], abs=1e-5)  # fmt: skip
    assert report["resumed_from_step"] == 2 and report_of(straight)["resumed_from_step"] == 0
    page = (out / "run_report.html").read_text()
    assert 'class="mark" data-series="resumed (step 2)"' in page and "resumed from step 2" in page


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text-column", "nope"], "has no column 'nope' for text data"),  # refused before launching
        (["--dataset", "nobody/no-such-dataset-zp"], "could not be loaded from the hub or its cache"),  # by rank 0
    ],
)
def test_a_failed_run_leaves_checkpoints_and_data_intact(text_run, capfd, argv, message):
    plan, out, _, data = text_run
    before = (tree_digest(out / "checkpoints"), data.read_bytes())
    capfd.readouterr()
    assert zero_run([str(plan), "--output-dir", str(out), "--resume", "--max-steps", "6", *argv]) == 2
    captured = capfd.readouterr()
    assert message in captured.err and "Traceback" not in captured.err + captured.out
    assert (tree_digest(out / "checkpoints"), data.read_bytes()) == before


@pytest.mark.slow
def test_chat_data_trains_on_the_answers_only(hub):
    root, snapshot, env = hub
    rows = [
        {"messages": [{"role": "user", "content": f"what is {a} + {b}?"},
                      {"role": "assistant", "content": f"{a} + {b} = {a + b}. the quick fox sees the dog."}]}
        for a in range(12) for b in range(6)
    ]  # fmt: skip
    data = write_jsonl(root / "chat.jsonl", rows)
    plan = root / "plan-chat.json"
    done = zero_plan(env, "--model", HUB_ID, "--gpus", "cpu:2", "--cpu-mem", "8GiB", "--seq-len", str(SEQ_LEN),
                     "--micro-batch", "2", "--stage", "2", "--dataset", str(data), "--max-steps", "2", "-o",
                     str(plan))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert zero_run([str(plan), "--output-dir", str(root / "run-chat")]) == 0
    report = report_of(root / "run-chat")
    assert report["data"]["format"] == "chat"
    # Equal to the saved model's loss with the prompts masked out: the run masked exactly the same tokens.
    assert report["losses"][0] == pytest.approx(first_batch_loss(plan, snapshot), abs=1e-4)


def test_missing_weights_offline_name_the_fix(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from zero_planner.errors import InputError
    from zero_planner.run.modeling import resolve_pretrained

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(InputError) as error:
        resolve_pretrained("nobody/not-cached-zp")
    message = str(error.value)
    assert "huggingface-cli download nobody/not-cached-zp" in message and "--init random" in message
    assert "\n" not in message


def test_a_bare_config_has_no_tokenizer_unless_asked():
    from zero_planner.errors import InputError
    from zero_planner.run.tokenizer import ByteTokenizer, load_tokenizer

    with pytest.raises(InputError, match="--tokenizer bytes"):
        load_tokenizer(LLAMA_TINY, None, model_name="llama-tiny.json")
    assert isinstance(load_tokenizer(LLAMA_TINY, None, choice="bytes"), ByteTokenizer)

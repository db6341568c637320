"""zero-run end to end on CPU: two ranks under the real `deepspeed` launcher (DS_ACCELERATOR=cpu, gloo).

The fast tests cover checkpoint bookkeeping and the report; the slow ones train llama-tiny for real.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import GIB, make_candidate, make_plan

from zero_planner.errors import InputError
from zero_planner.launch import main
from zero_planner.plan import saves
from zero_planner.planfile import save_plan
from zero_planner.run import checkpoint as ckpt
from zero_planner.run import train
from zero_planner.run.report import build_run_report, error_pct, next_choice, report_table

STEPS = 12

# --- checkpoint bookkeeping (no deepspeed) ---


def fake_checkpoint(root: Path, step: int, *, complete: bool = True) -> Path:
    tag = root / ckpt.tag_for(step)
    tag.mkdir(parents=True)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"x" * 100)
    (tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b"y" * 50)
    if complete:
        ckpt.write_marker(tag, {"step": step, "losses": [1.0] * step, "world_size": 2})
    return tag


def test_incomplete_and_corrupt_checkpoints_are_skipped(tmp_path):
    fake_checkpoint(tmp_path, 3)
    corrupt = fake_checkpoint(tmp_path, 6)
    (corrupt / "zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b"y" * 10)  # truncated after the save
    fake_checkpoint(tmp_path, 9, complete=False)
    warnings = []
    usable = ckpt.usable_checkpoints(tmp_path, warn=warnings.append)
    assert [step for step, _ in usable] == [3]
    assert "step9 is incomplete" in warnings[0] and "step6 is corrupt (zero_pp_rank_1" in warnings[1]
    assert ckpt.read_state(usable[0][1]) == {"step": 3, "losses": [1.0] * 3, "world_size": 2}


def test_same_size_corruption_is_found_by_the_checksum_only_when_asked(tmp_path):
    fake_checkpoint(tmp_path, 3)
    damaged = fake_checkpoint(tmp_path, 6)
    (damaged / "mp_rank_00_model_states.pt").write_bytes(b"z" * 100)  # the same size, other bytes
    assert [s for s, _ in ckpt.usable_checkpoints(tmp_path)] == [6, 3]  # sizes only: listing, pruning
    warnings = []
    assert [s for s, _ in ckpt.usable_checkpoints(tmp_path, warn=warnings.append, checksums=True)] == [3]
    assert "step6 is corrupt (mp_rank_00_model_states.pt does not have the content" in warnings[0]


def test_markers_written_before_checksums_are_checked_by_size(tmp_path):
    tag = fake_checkpoint(tmp_path, 2)
    marker = json.loads((tag / ckpt.MARKER).read_text())
    marker["manifest"] = {name: entry["bytes"] for name, entry in marker["manifest"].items()}
    (tag / ckpt.MARKER).write_text(json.dumps(marker))
    assert ckpt.problem(tag) is None
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"x" * 99)
    assert "has 99 bytes, 100 were written" in ckpt.problem(tag)


def test_an_export_is_whole_or_absent(tmp_path):
    from safetensors.torch import save_file
    import torch

    final = tmp_path / "final"
    assert ckpt.export_problem(final) == "missing"
    staging = ckpt.start_export(final)
    save_file({"w": torch.zeros(64, 64)}, str(staging / "model.safetensors"))
    assert ckpt.safetensors_keys(staging / "model.safetensors") == ["w"]
    assert ckpt.export_problem(final) == "missing"  # not in place until finished
    ckpt.finish_export(staging, final, {"step": 4})
    assert ckpt.export_problem(final) is None and not staging.exists()
    data = (final / "model.safetensors").read_bytes()
    (final / "model.safetensors").write_bytes(data[:-100])
    assert "model.safetensors has" in ckpt.export_problem(final)
    with pytest.raises(ValueError, match="cut short"):
        ckpt.safetensors_keys(final / "model.safetensors")
    (final / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="no safetensors header"):
        ckpt.safetensors_keys(final / "model.safetensors")


def test_prune_keeps_the_newest_complete_ones(tmp_path):
    for step in (2, 4, 6):
        fake_checkpoint(tmp_path, step)
    fake_checkpoint(tmp_path, 1, complete=False)
    fake_checkpoint(tmp_path, 8, complete=False)  # newer than all complete ones: maybe a save in progress
    removed = ckpt.prune(tmp_path, keep=2)
    assert sorted(p.name for p in removed) == ["step1", "step2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step4", "step6", "step8"]


def test_checkpoint_bytes():
    # 1e9 params in bf16: 2 B weights + 12 B optimizer (fp32 master + Adam m + v) per parameter.
    assert saves.checkpoint_bytes(10**9, 10**9, "bf16") == 14 * 10**9
    assert saves.checkpoint_bytes(10**9, 10**6, "fp32") == 4 * 10**9 + 12 * 10**6
    # LoRA/QLoRA checkpoints leave the frozen base out (exclude_frozen_parameters)
    assert saves.checkpoint_bytes(10**9, 10**6, "bf16", frozen_excluded=True) == 14 * 10**6
    full = saves.run_disk_bytes(10**9, 10**9, "bf16")
    assert full == (saves.KEEP_CHECKPOINTS + 1) * 14 * 10**9 + 2 * 10**9
    qlora = saves.run_disk_bytes(10**9, 10**6, "bf16", adapters=True)
    assert qlora == (saves.KEEP_CHECKPOINTS + 1) * 14 * 10**6 + 2 * 10**6
    assert saves.run_disk_bytes(10**9, 10**6, "bf16", adapters=True, merged_export=True) == qlora + 2 * 10**9


# --- report and OOM advice ---


def test_next_choice_prefers_the_fastest_fitting_lower_peak_candidate():
    plan = make_plan("2", peak_bytes=10 * GIB, candidates=[
        make_candidate("2", micro_batch_size=4, checkpointing=False, fits=True, peak_bytes=10 * GIB,
                       tokens_per_second=900, chosen=True),
        make_candidate("2", micro_batch_size=2, checkpointing=False, fits=True, peak_bytes=8 * GIB,
                       tokens_per_second=800),
        make_candidate("3", micro_batch_size=4, checkpointing=True, fits=True, peak_bytes=6 * GIB,
                       tokens_per_second=500),
        make_candidate("2", micro_batch_size=1, checkpointing=False, fits=False, peak_bytes=7 * GIB,
                       tokens_per_second=950),
    ])  # fmt: skip
    advice = next_choice(plan)
    assert advice.startswith("stage 2, micro-batch 2, without gradient checkpointing (predicted peak 8.00 GiB)")
    assert "--stage 2 --micro-batch 2 --no-grad-checkpointing" in advice


@pytest.mark.parametrize(
    "plan_kw, expected",
    [
        ({"micro_batch_size": 4}, "micro-batch 2 instead of 4"),
        ({"micro_batch_size": 1}, "gradient checkpointing"),
        ({"micro_batch_size": 1, "gradient_checkpointing": True}, "stage 2-offload"),
        ({"micro_batch_size": 1, "gradient_checkpointing": True, "strategy": "3-offload-all"}, "more GPUs"),
    ],
)
def test_next_choice_without_candidates(plan_kw, expected):
    strategy = plan_kw.pop("strategy", "2")
    plan = make_plan(strategy, **plan_kw)
    if "gradient_checkpointing" in plan_kw:
        plan.training.gradient_checkpointing = True
    assert next_choice(plan).startswith(expected)


@pytest.mark.parametrize("phase", ["initialize", "load", "export"])
def test_an_oom_outside_the_steps_names_a_stage_not_a_smaller_micro_batch(phase):
    # issue 58: Phi-3-mini's 2-offload plan ran out in initialize on an emulated T4 and was told "micro-batch 2
    # instead of 4", which does not touch that phase
    plan = make_plan("2-offload", micro_batch_size=4)
    advice = next_choice(plan, phase)
    assert advice.startswith(f"stage 3 ({phase} holds the model's states") and "micro-batch" not in advice.split(":")[0]
    assert next_choice(plan, "backward").startswith("micro-batch 2 instead of 4")


def test_an_oom_in_initialize_picks_the_candidate_lower_in_initialize():
    plan = make_plan("2", gpu="H100", micro_batch_size=4, peak_bytes=10 * GIB, candidates=[
        make_candidate("2", micro_batch_size=2, checkpointing=False, fits=True, peak_bytes=8 * GIB, tokens_per_second=900),
        make_candidate("3", micro_batch_size=4, checkpointing=True, fits=True, peak_bytes=9 * GIB, tokens_per_second=500),
    ])  # fmt: skip
    plan.estimate.per_gpu.phases = {"initialize": 6 * GIB, "train": 10 * GIB}
    plan.candidates[0].estimate.per_gpu.phases = {"initialize": 6 * GIB, "train": 8 * GIB}  # the same states: no lower
    plan.candidates[1].estimate.per_gpu.phases = {"initialize": 3 * GIB, "train": 9 * GIB}
    plan.candidates[0].tokens_per_second, plan.candidates[1].tokens_per_second = 900.0, 500.0  # (a GPU plan's)
    assert next_choice(plan, "initialize").startswith("stage 3, micro-batch 4, with gradient checkpointing (predicted "
                                                      "peak in initialize 3.00 GiB)")
    assert next_choice(plan).startswith("stage 2, micro-batch 2")  # in a step: the fastest with a lower peak


def test_run_report_rows_and_table():
    plan = make_plan("2", peak_bytes=2 * GIB)
    ranks = [{"rank": 1, "peak_allocated_bytes": 2 * GIB, "host_rss_bytes": 5},
             {"rank": 0, "peak_allocated_bytes": GIB, "peak_reserved_bytes": GIB, "host_rss_bytes": 5}]  # fmt: skip
    report = build_run_report(plan, ranks, [3.0, 2.0], 1000.0, steps=2, device="cpu")
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["ranks"][0]["predicted_peak_allocated_bytes"] == 2 * GIB
    assert report["ranks"][0]["error_pct"] == pytest.approx(100.0) and report["ranks"][1]["error_pct"] == 0
    assert error_pct(None, 5) is None
    assert report_table(report).row_count == 2


def test_oom_is_recorded_and_explained_by_zero_run(tmp_path, plan_file, capsys):
    from zero_planner import launch
    from zero_planner.run.train import record_oom

    plan = make_plan("2", micro_batch_size=8, peak_bytes=12 * GIB, total_bytes=14 * GIB)
    record = record_oom(plan, tmp_path, rank=1, phase="backward", step=3, error=MemoryError("CUDA out of memory"))
    assert json.loads((tmp_path / "oom_rank1.json").read_text()) == record
    assert record["message"].startswith("rank 1 ran out of GPU memory in backward at step 3 (plan predicted a peak "
                                        "of 12.00 GiB, total 14.00 GiB). Next choice: micro-batch 4 instead of 8")  # fmt: skip
    args = launch.build_parser().parse_args([str(plan_file())])
    assert launch._explain_exit(3, 0, str(tmp_path), args) == 3
    assert "in backward at step 3" in capsys.readouterr().err


# --- seq-cls data and method checks (no deepspeed launch) ---


def test_synthetic_classification_is_deterministic_and_uses_every_class():
    from zero_planner.run.data import synthetic_classification

    texts, labels = synthetic_classification(4, 400, seed=5)
    assert (texts, labels) == synthetic_classification(4, 400, seed=5)
    assert sorted(set(labels)) == [0, 1, 2, 3] and min(labels.count(k) for k in range(4)) > 60
    many_texts, many_labels = synthetic_classification(9, 900, seed=5)  # beyond the named topics
    assert sorted(set(many_labels)) == list(range(9))


def test_classification_files_with_int_or_named_labels(tmp_path):
    from zero_planner.run.data import load_classification_dataset

    (tmp_path / "d.csv").write_text("body,label\ngreat film,pos\nawful film,neg\nfine film,pos\n")
    ds = load_classification_dataset(str(tmp_path / "d.csv"), "body", num_labels=2)
    assert list(ds["text"]) == ["great film", "awful film", "fine film"]
    assert list(ds["label"]) == [1, 0, 1]  # names numbered in sorted order: neg 0, pos 1
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": f"t{i}", "label": i % 3}) + "\n" for i in range(6)))
    assert list(load_classification_dataset(str(tmp_path / "d.jsonl"), num_labels=3)["label"]) == [0, 1, 2, 0, 1, 2]
    with pytest.raises(InputError, match=r"has label 2; labels must be integers in \[0, 2\)"):
        load_classification_dataset(str(tmp_path / "d.jsonl"), num_labels=2)
    with pytest.raises(InputError, match="3 label names"):
        (tmp_path / "e.csv").write_text("text,label\na,x\nb,y\nc,z\n")
        load_classification_dataset(str(tmp_path / "e.csv"), num_labels=2)
    (tmp_path / "f.jsonl").write_text(json.dumps({"text": "no label"}) + "\n")
    with pytest.raises(InputError, match="no column 'label' for seq-cls"):
        load_classification_dataset(str(tmp_path / "f.jsonl"), num_labels=2)


def test_classification_rows_are_padded_with_a_mask():
    import datasets

    from zero_planner.run.data import pad_ids, pad_token_id_for, tokenize_and_pad
    from zero_planner.run.tokenizer import ByteTokenizer

    assert pad_ids([5, 6, 7], 5, 0) == ([5, 6, 7, 0, 0], [1, 1, 1, 0, 0])
    assert pad_ids([5, 6, 7], 2, 0) == ([5, 6], [1, 1])
    tok = ByteTokenizer(512, eos_token_id=2)
    assert pad_token_id_for(tok) == 2
    rows = tokenize_and_pad(datasets.Dataset.from_dict({"text": ["ab", "", "x" * 40], "label": [1, 0, 2]}), tok, 8, 2)
    assert rows["labels"] == [1, 2]  # the empty text has no last token to classify: dropped
    assert rows["input_ids"][0] == [tok.offset + 97, tok.offset + 98] + [2] * 6
    assert rows["attention_mask"] == [[1, 1] + [0] * 6, [1] * 8]


def test_qlora_on_cpu_is_refused_in_one_line(plan_file, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert train.main(["--plan", str(plan_file(method="qlora"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zero-run: error: QLoRA needs a CUDA GPU with bitsandbytes") and err.count("\n") == 1


# --- the steps of train(), one at a time (no deepspeed) ---


@dataclass
class OneRank:
    """One rank's view of a process group that is not there: all_ok answers as if every other rank said `others_ok`."""

    rank: int = 0
    world_size: int = 2
    local_rank: int = 0
    others_ok: bool = True
    checkpoint_writer: bool = True

    def all_ok(self, ok: bool) -> bool:
        return ok and self.others_ok


def test_load_inputs_reads_the_plans_tokenizer_and_data():
    plan = make_plan("2", seq_len=64)
    inputs = train._load_inputs(plan, OneRank())
    assert (inputs.source, inputs.weights, inputs.pad_token_id, inputs.eval_blocks) == (None, None, None, None)
    assert inputs.data_format == "text" and inputs.tokenizer.name == "byte-level"  # llama-tiny names no tokenizer
    assert len(inputs.blocks) > 1000 and {len(row) for row in inputs.blocks["input_ids"][:50]} == {64}
    rank0, rank1 = (train._block_order(plan, OneRank(rank=r), len(inputs.blocks)) for r in (0, 1))
    assert len(rank0.micro_batch(0)) == 4 and set(rank0.micro_batch(0)).isdisjoint(rank1.micro_batch(0))


def test_load_inputs_bad_data_stops_every_rank_with_one_error(tmp_path):
    plan = make_plan("2", dataset=str(tmp_path / "missing.jsonl"))
    with pytest.raises(InputError, match="missing.jsonl"):
        train._load_inputs(plan, OneRank(rank=0))  # rank 0 says what is wrong
    with pytest.raises(InputError, match="rank 0 could not prepare the weights, tokenizer or data"):
        train._load_inputs(plan, OneRank(rank=1, others_ok=False))  # the others read nothing and leave


def test_run_ds_config_points_the_monitor_into_the_output_folder(tmp_path):
    plan = make_plan("2", report_to=["csv"])
    out = tmp_path / "run"
    ds_config, node_local = train._run_ds_config(plan, out, OneRank())
    assert out.is_dir() and not node_local and "checkpoint" not in ds_config
    assert ds_config["csv_monitor"]["enabled"] and ds_config["csv_monitor"]["output_path"] == str(out.absolute() / "logs")
    assert {k: v for k, v in ds_config.items() if k != "csv_monitor"} == plan.deepspeed_config  # nothing else changes


@pytest.mark.parametrize("step,start_step,warm,max_steps,counts", [
    (1, 0, 2, 10, False), (2, 0, 2, 10, False), (3, 0, 2, 10, True),  # the first `warm` steps are left out
    (6, 4, 2, 10, False), (7, 4, 2, 10, True),  # counted from where a resumed run starts
    (1, 0, 2, 2, True), (2, 0, 2, 2, True),  # a run no longer than the warm-up counts every step
])  # fmt: skip
def test_counts_for_speed(step, start_step, warm, max_steps, counts):
    assert train.counts_for_speed(step, start_step=start_step, warm=warm, max_steps=max_steps) is counts


@pytest.mark.parametrize("step,eval_every,saving,stopping,due", [
    (10, 0, False, False, True),  # the last step
    (4, 0, True, False, True), (4, 0, False, False, False),  # eval_every 0: with each checkpoint
    (6, 3, False, False, True), (4, 3, True, False, False),  # every eval_every steps, checkpoints aside
    (10, 0, True, True, False),  # stopping: the checkpoint only
])  # fmt: skip
def test_eval_due(step, eval_every, saving, stopping, due):
    assert train.eval_due(step, max_steps=10, eval_every=eval_every, saving=saving, stopping=stopping) is due


def test_step_info_is_the_runs_speed_after_the_warmup():
    state = train.LoopState(step=4, losses=[3.0] * 4, timed_s=2.0, timed_steps=2)
    info = train._step_info(state, step_loss=2.5, step_lr=1e-3, elapsed=0.5, tokens_per_step=4096, max_steps=10,
                            on_cuda=False)  # fmt: skip
    # 4096 tokens x 2 timed steps / 2.0 s; 6 steps left at 1.0 s a step.
    assert info.startswith("loss 2.5000  lr 1.00e-03  4,096 tok/s  eta 0:06  mem rss ")
    early = train._step_info(train.LoopState(step=1, losses=[3.0]), step_loss=3.0, step_lr=0.0, elapsed=0.25,
                             tokens_per_step=4096, max_steps=10, on_cuda=False)  # fmt: skip
    assert "16,384 tok/s  eta 0:02" in early  # before any step counts: this step's own speed


def test_run_report_adds_the_loop_and_the_data_to_the_report():
    plan = make_plan("2", micro_batch_size=4, seq_len=64)  # 2 ranks x 4 x 64 = 512 tokens a step
    state = train.LoopState(step=3, losses=[3.0, 2.0, 1.5], stopping=15, timed_s=0.5, timed_steps=1,
                            eval_losses=[{"step": 2, "loss": 2.2}], step_times=[0.9, 0.6, 0.5])  # fmt: skip
    inputs = train.RunInputs(source=None, weights=None, tokenizer=SimpleNamespace(name="byte-level"),
                             pad_token_id=None, blocks=[0] * 100, eval_blocks=None, data_format="text")  # fmt: skip
    ranks = [{"rank": r, "peak_allocated_bytes": None, "host_rss_bytes": GIB} for r in (1, 0)]
    report = train.run_report(plan, ranks, state, inputs, warm=1, node_local=False, device="cpu", versions={})
    assert report["status"] == "interrupted" and report["losses"] == [3.0, 2.0, 1.5]
    assert report["tokens_per_second"] == 1024.0  # 512 tokens x 1 timed step / 0.5 s
    assert report["eval_losses"] == state.eval_losses and report["step_times_s"] == [0.9, 0.6, 0.5]
    assert report["warmup_steps"] == 1 and report["nodes"] == 1 and report["checkpoint_storage"] == "shared"
    assert report["data"] == {"dataset": "synthetic", "format": "text", "blocks": 100, "tokenizer": "byte-level",
                              "init": plan.model.init, "load_path": None}  # fmt: skip
    untimed = train.run_report(plan, ranks, train.LoopState(step=1, losses=[3.0]), inputs, warm=1, node_local=True,
                               device="cpu", versions={})  # fmt: skip
    assert untimed["tokens_per_second"] is None and untimed["status"] == "ok"
    assert untimed["checkpoint_storage"] == "node-local"


# --- real runs (slow) ---


def write_plan(directory: Path, strategy: str, **kw) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    kw.setdefault("max_steps", STEPS)
    kw.setdefault("save_every", 4)
    path = directory / f"plan-{strategy}.json"
    save_plan(make_plan(strategy, output_dir=str(directory / f"run-{strategy}"), **kw), path)
    return path


def report_of(output_dir: Path) -> dict:
    return json.loads((output_dir / "run_report.json").read_text())


def captured_main(argv: list[str]) -> tuple[int, str]:
    """Runs zero-run's main with this process's stdout and stderr (file descriptors 1 and 2, which the launcher and
    both ranks inherit) sent to a file: returns (exit status, everything written). A module fixture has no capfd."""
    import sys
    import tempfile

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            rc = main(argv)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        sink.seek(0)
        return rc, sink.read().decode(errors="replace")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Trains a strategy straight through STEPS steps (a checkpoint every 4, the final export) the first time a test
    asks for it: returns (plan path, output dir, everything the launcher and both ranks printed)."""
    runs = {}

    def run(strategy: str):
        if strategy not in runs:
            root = tmp_path_factory.mktemp(f"straight-{strategy}")
            plan = write_plan(root, strategy)
            rc, text = captured_main([str(plan)])
            assert rc == 0, text[-3000:]
            runs[strategy] = plan, root / f"run-{strategy}", text
        return runs[strategy]

    return run


@pytest.fixture(scope="module")
def straight_run(trained):
    """Stage 2 trained straight through STEPS steps: (plan path, output dir)."""
    return trained("2")[:2]


def final_model_loss(final_dir: Path) -> float:
    """Returns the exported model's loss on synthetic blocks (it must have learned what training saw)."""
    import torch
    from transformers import AutoModelForCausalLM

    from zero_planner.run.data import pack_ids, synthetic_texts
    from zero_planner.run.tokenizer import ByteTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(str(final_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tok = ByteTokenizer(model.config.vocab_size, eos_token_id=model.config.eos_token_id)
    ids = torch.tensor(pack_ids(tok.encode_batch(synthetic_texts(40, seed=99)), 64, tok.eos_token_id)[:8])
    with torch.no_grad():
        return float(model(input_ids=ids, labels=ids).loss)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["2", "3", "2-offload"])
def test_trains_two_ranks(strategy, trained):
    output_dir = trained(strategy)[1]
    report = report_of(output_dir)
    assert report["status"] == "ok" and report["steps"] == STEPS
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for row in report["ranks"]:
        assert row["host_rss_bytes"] > 0
        assert row["peak_allocated_bytes"] is None  # no device allocator on CPU
        assert row["alloc_retry_steps"] == []  # nor its retries: every rank reports its own, none here
        assert row["predicted_peak_allocated_bytes"] == GIB
    losses = report["losses"]
    assert len(losses) == STEPS and losses[-1] < losses[0] - 1.5
    # tokens/s leaves out the warm-up steps: the first, and under ZeRO-3 (one micro-step per step) the second,
    # in which DeepSpeed records its parameter trace.
    tokens_per_step = (report["world_size"] * report["micro_batch_size"] * report["gradient_accumulation_steps"]
                       * report["seq_len"])  # fmt: skip
    timed = report["step_times_s"][2 if strategy == "3" else 1:]
    assert report["tokens_per_second"] == pytest.approx(tokens_per_step * len(timed) / sum(timed))
    assert final_model_loss(output_dir / "final") < losses[0] - 1.5
    assert ckpt.problem(output_dir / "checkpoints" / ckpt.tag_for(STEPS)) is None


@pytest.mark.slow
def test_stage3_fine_tunes_an_exported_model(straight_run, tmp_path):
    """from_pretrained under ZeRO-3 (partitioned while loading): training starts where the export left off."""
    _, straight_dir = straight_run
    plan = make_plan("3", output_dir=str(tmp_path / "ft"), max_steps=2, save_every=2)
    plan.model.init = "pretrained"
    plan.model.weights_path = str(straight_dir / "final")
    save_plan(plan, tmp_path / "plan.json")
    assert main([str(tmp_path / "plan.json")]) == 0
    first_loss = report_of(tmp_path / "ft")["losses"][0]
    assert first_loss < report_of(straight_dir)["losses"][0] - 1.5


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["2", "3"])  # DeepSpeed's all-gather (1-3) and reduce-scatter (3)
def test_a_normal_run_prints_no_library_warning(strategy, trained):
    """Issue 25: a normal CPU zero-run (checkpoints mid-run and at the end, the final export) prints no library
    warning: not torch's deprecation of the collectives DeepSpeed calls, not bitsandbytes' CPU-kernel line, not
    the runner's missing-hostfile WARNING, not DeepSpeed's own 'Setting accelerator to CPU'. Everything zero-run,
    the launcher and both ranks wrote is read here: the output of the run test_trains_two_ranks checks."""
    import re

    text = trained(strategy)[2]
    noisy = [line for line in text.splitlines()
             if re.search(r"warn|deprecat|Failed to load|\[INFO\]", line, re.IGNORECASE)]  # fmt: skip
    assert noisy == []
    assert "checkpoint" in text and "final model" in text  # the run did save and export


def test_training_warning_filters_are_narrow():
    """quiet_training_run drops exactly the listed warnings: the same categories with other messages still show."""
    import logging
    import warnings

    from zero_planner.quiet import BNB_CPU_KERNEL_LOGGER, quiet_training_run

    logger = logging.getLogger(BNB_CPU_KERNEL_LOGGER)
    filters = list(logger.filters)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_training_run()
            warnings.warn("barrier(): using the device under current context. You can specify `device_id` in "
                          "`init_process_group` to mute this warning.", UserWarning)  # fmt: skip
            warnings.warn("`torch.distributed.all_gather_into_tensor` is deprecated. Please use "
                          "`torch.distributed.all_gather_single` instead.", FutureWarning)  # fmt: skip
            warnings.warn("`torch.distributed.reduce_scatter_tensor` is deprecated.", FutureWarning)
            warnings.warn("something else the user should see", UserWarning)
            warnings.warn("`gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning)
        assert [str(w.message) for w in caught] == ["something else the user should see",
                                                     "`gradient_checkpointing` is deprecated and will be removed in v6."]
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logger.addHandler(handler)
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s.", "No module named 'kernels'")
        logger.warning("Some other bitsandbytes warning")
        logger.removeHandler(handler)
        assert [r.getMessage() for r in records] == ["Some other bitsandbytes warning"]
    finally:
        logger.filters[:] = filters


def test_a_rank_probes_the_cpu_once_however_many_ops_deepspeed_loads(monkeypatch):
    """train.remember_cpu_info: py-cpuinfo probes the CPU in a subprocess on every get_cpu_info() call, and
    DeepSpeed's op builders call it twice per op; on a rank the first answer serves every later call, unchanged."""
    import cpuinfo

    probes = []

    def probe():
        probes.append(1)
        return {"arch": "X86_64", "flags": ["avx2"], "probe": len(probes)}

    monkeypatch.setattr(cpuinfo, "get_cpu_info", probe)
    train.remember_cpu_info()
    train.remember_cpu_info()  # a second call keeps the one cache
    from cpuinfo import get_cpu_info  # as OpBuilder.cpu_arch and simd_width import it, at each call

    answers = [get_cpu_info() for _ in range(4)]
    assert probes == [1] and answers == [{"arch": "X86_64", "flags": ["avx2"], "probe": 1}] * 4

"""Data, weights and hyperparameter flags: what zero-plan records, how zero-run's trainer reads them (no launch)."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, make_plan

from zero_planner.cli import main as zero_plan
from zero_planner.errors import InputError
from zero_planner.run.data import IGNORE_INDEX, check_columns, detect_format, encode_prompt_response, pack_labeled_arrays
from zero_planner.run.tokenizer import ByteTokenizer

TINY = str(ROOT / "benchmarks" / "model_configs" / "llama-tiny.json")


def planned(capsys, *args: str) -> dict:
    assert zero_plan(["--gpus", "1xH100", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "model, extra, init, load_path, sharded",
    [
        ("meta-llama/Llama-3.2-1B", ["--stage", "3"], "pretrained", "meta-llama/Llama-3.2-1B", True),
        ("llama3.2-1b", ["--stage", "2"], "pretrained", "meta-llama/Llama-3.2-1B", False),  # catalog name
        ("meta-llama/Llama-3.2-1B", ["--stage", "3", "--init", "random"], "random", None, False),
        (TINY, ["--stage", "3"], "random", None, False),  # a bare config.json
    ],
)
def test_zero_plan_records_how_zero_run_loads(capsys, model, extra, init, load_path, sharded):
    plan = planned(capsys, "--model", model, *extra)
    m = plan["model"]
    assert (m["init"], m["load_path"], m["load_sharded"]) == (init, load_path, sharded)
    assert any(("pretrained weights of" if init == "pretrained" else "randomly") in n for n in plan["notes"])


def test_zero_plan_records_data_and_hyperparameters(capsys, tmp_path):
    data = tmp_path / "chat.jsonl"
    # Four rows: zero-plan reads the file through, and a held-out share of one row would leave none to train on.
    data.write_text((json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n") * 4)
    plan = planned(capsys, "--model", "llama3.2-1b", "--dataset", str(data), "--eval-split", "0.05", "--lr", "3e-5",
                   "--lr-scheduler", "cosine", "--warmup", "0.03", "--epochs", "2", "--save-steps", "100",
                   "--seed", "7", "--tokenizer", "bytes")  # fmt: skip
    t = plan["training"]
    assert (t["dataset"], t["eval_split"], t["lr_scheduler"], t["warmup"], t["epochs"], t["save_every"], t["seed"],
            t["tokenizer"]) == (str(data), "0.05", "cosine", 0.03, 2.0, 100, 7, "bytes")  # fmt: skip
    assert t["max_steps"] == 0  # --epochs alone: the epochs decide the length
    assert t["learning_rate"] == plan["deepspeed_config"]["optimizer"]["params"]["lr"] == 3e-5


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lr", "0"], "argument --lr: '0' must be a positive number"),
        (["--lr", "abc"], "argument --lr: 'abc' is not a number"),
        (["--dataset", "nowhere/data.jsonl"], "dataset file 'nowhere/data.jsonl' does not exist"),
        (["--max-steps", "0"], "--max-steps 0 means 'no cap' and needs --epochs N"),
        (["--init", "pretrained", "--model", TINY], "is a config only, with no weights"),
        (["--lr-scheduler", "step"], "invalid choice: 'step'"),
        (["--tokenizer", "./no-such-tokenizer"], "no such folder"),
    ],
)
def test_bad_training_flags_exit_2_in_one_line(capsys, args, message):
    argv = ["--gpus", "1xH100", *args] + ([] if "--model" in args else ["--model", "llama3.2-1b"])
    assert zero_plan(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_unknown_column_of_a_local_dataset_is_refused_before_launch(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("question,answer\nhi,hello\n")
    t = make_plan(dataset=str(data), text_field="body").training
    with pytest.raises(InputError, match=r"no column 'body' for text data; columns: \['question', 'answer'\]"):
        check_columns(t)
    t.prompt_field, t.response_field = "question", "answer"
    check_columns(t)  # prompt-response, detected from the columns


@pytest.mark.parametrize(
    "columns, expected",
    [(["messages", "id"], "chat"), (["prompt", "response"], "prompt-response"), (["prompt", "text"], "text")],
)
def test_data_format_is_detected_from_the_columns(columns, expected):
    assert detect_format(columns, make_plan().training) == expected


def test_prompt_response_without_a_chat_template_trains_on_the_response_and_eos():
    tok = ByteTokenizer(512, eos_token_id=2)
    ids, labels = encode_prompt_response(tok, "Q?", "A.")
    assert ids == tok.encode("Q?") + tok.encode("A.") + [2]
    assert labels == [IGNORE_INDEX] * 2 + tok.encode("A.") + [2]


def test_pack_labeled_drops_blocks_with_nothing_to_learn():
    prompt_only = ([5] * 4, [IGNORE_INDEX] * 4)
    answered = ([6, 7, 8, 9], [IGNORE_INDEX, IGNORE_INDEX, 8, 9])
    ids, labels = (blocks.tolist() for blocks in pack_labeled_arrays([prompt_only, answered, prompt_only], seq_len=4))
    assert ids == [[6, 7, 8, 9]] and labels == [[IGNORE_INDEX, IGNORE_INDEX, 8, 9]]
    # A block whose only label is on its first position learns nothing (labels shift by one).
    assert tuple(b.tolist() for b in pack_labeled_arrays([([1, 2], [1, IGNORE_INDEX])], seq_len=2)) == ([], [])


@pytest.mark.parametrize(
    "max_steps, epochs, per_epoch, expected",
    [(50, None, 10.0, 50), (0, 2.0, 10.5, 21), (15, 2.0, 10.5, 15), (0, 0.01, 10.0, 1)],
)
def test_run_length(max_steps, epochs, per_epoch, expected):
    from zero_planner.run.train import run_length

    assert run_length(max_steps, epochs, per_epoch) == expected


@pytest.mark.parametrize(
    "name, warmup, expected",
    [
        ("linear", 2, [0.0, 0.5, 1.0, 0.5]),
        ("constant", 0.25, [0.0, 1.0, 1.0, 1.0]),  # a share: ceil(0.25 * 4) = 1 step
        ("cosine", 0, [1.0, 0.8535534, 0.5, 0.1464466]),
    ],
)
def test_lr_schedules(name, warmup, expected):
    import torch

    from zero_planner.run.train import lr_scheduler_factory, warmup_steps_for

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = lr_scheduler_factory(name, warmup_steps_for(warmup, 4), 4)(optimizer)
    seen = []
    for _ in range(4):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("name", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("warmup_steps, total_steps", [(0, 7), (3, 10), (5, 5)])
def test_lr_schedules_are_transformers_own_curves(name, warmup_steps, total_steps):
    """The curves HF Trainer follows with the same settings (transformers.get_scheduler), step by step and past the
    end, and a scheduler state saved by either resumes in the other."""
    import torch
    from transformers import get_scheduler

    from zero_planner.run.train import SCHEDULER_NAMES, lr_scheduler_factory

    ours_opt, theirs_opt = (torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0) for _ in range(2))
    ours = lr_scheduler_factory(name, warmup_steps, total_steps)(ours_opt)
    theirs = get_scheduler(SCHEDULER_NAMES[name], theirs_opt, num_warmup_steps=warmup_steps,
                           num_training_steps=total_steps)  # fmt: skip
    for _ in range(total_steps + 2):
        assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), abs=1e-12)
        ours_opt.step(), theirs_opt.step()
        ours.step(), theirs.step()
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())
    assert ours.last_epoch == theirs.last_epoch == total_steps + 2


def test_a_longer_resumed_run_follows_its_own_schedule():
    import torch

    from zero_planner.run.train import lr_scheduler_factory, reapply_schedule

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    short = lr_scheduler_factory("linear", 0, 2)(optimizer)
    for _ in range(2):
        optimizer.step()
        short.step()
    assert optimizer.param_groups[0]["lr"] == 0.0  # the 2-step run ended its decay
    longer = lr_scheduler_factory("linear", 0, 4)(optimizer)
    longer.load_state_dict(short.state_dict())  # what a DeepSpeed checkpoint restores
    reapply_schedule(longer)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5)  # step 2 of 4


@pytest.mark.parametrize("extra, max_steps", [([], 0), (["--max-steps", "30"], 30)])
def test_zero_run_epochs_override_lifts_the_plans_step_cap_unless_given(extra, max_steps):
    from zero_planner.run.train import build_parser
    from zero_planner.run.training_args import apply_training_args

    plan = make_plan(max_steps=50)
    args = build_parser().parse_args(["--plan", "p.json", "--epochs", "2", *extra])
    apply_training_args(plan, args, planning=False)
    assert (plan.training.epochs, plan.training.max_steps) == (2.0, max_steps)

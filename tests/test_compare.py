"""zero-plan --compare: clusters ranked by the time to train N tokens (and cost), through main([...])."""

from __future__ import annotations

import json

import pytest

from zero_planner.cli import main
from zero_planner.errors import InputError
from zero_planner.plan.compare import parse_clusters, parse_prices, parse_tokens
from zero_planner.plan.throughput import load_calibration

LLAMA = ["--model", "meta-llama/Meta-Llama-3-8B"]
CLUSTERS = "1xH100,8xH100,2xA100-80GB,4xRTX4090,8xA100-80GB"


@pytest.fixture
def narrow(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")


def _json(capsys, argv) -> tuple[int, dict]:
    rc = main([*argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_ranks_clusters_by_time_to_train_the_tokens(capsys):
    rc, answer = _json(capsys, [*LLAMA, "--compare", CLUSTERS, "--tokens", "2B"])
    assert rc == 0 and answer["tokens"] == 2 * 10**9
    rows = answer["clusters"]
    timed = [r for r in rows if r["hours"] is not None]
    assert [r["hours"] for r in timed] == sorted(r["hours"] for r in timed)
    assert rows[-1]["cluster"] == "4xRTX4090" and not rows[-1]["fits"] and rows[-1]["advice"]
    for row in timed:
        assert row["hours"] == pytest.approx(2e9 / row["tokens_per_second"] / 3600)
        world = row["nodes"] * row["gpus_per_node"]
        assert row["gpu_hours"] == pytest.approx(row["hours"] * world)
        assert row["cost"] is None  # no --price
    assert answer["tokens_per_second_error"]["median"] == load_calibration().median_error
    several = answer["tokens_per_second_error"]["several_gpus"]
    assert (several["median"], several["max"]) == load_calibration().stated_error(2)


def test_the_caption_says_what_the_times_rest_on(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")
    assert main([*LLAMA, "--compare", "1xH100,2xA100-80GB"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert load_calibration().scope_text() in text
    assert "not calibrated" not in text


def test_each_row_is_the_clusters_own_best_plan(capsys):
    _, compared = _json(capsys, [*LLAMA, "--compare", "8xH100", "--tokens", "1e9"])
    _, planned = _json(capsys, [*LLAMA, "--gpus", "8xH100"])
    chosen = next(c for c in planned["candidates"] if c["chosen"])
    row = compared["clusters"][0]
    assert row["tokens_per_second"] == pytest.approx(chosen["tokens_per_second"])
    assert row["plan"]["stage"] == planned["strategy"]["name"]
    assert row["plan"]["micro_batch_size"] == planned["training"]["micro_batch_size"]


@pytest.mark.parametrize("init", [[], ["--init", "random"]])
def test_a_row_reads_the_weights_as_the_plan_does(init, capsys):
    # QLoRA on a tied model: built from its config, the LM head is allocated before tying and the host peak is
    # higher than when from_pretrained reads the weights; --compare once ignored --init and always built from config.
    qlora = ["--model", "Qwen/Qwen2.5-0.5B", "--method", "qlora", *init]
    _, compared = _json(capsys, [*qlora, "--compare", "1xT4"])
    _, planned = _json(capsys, [*qlora, "--gpus", "1xT4"])
    assert compared["clusters"][0]["plan"]["cpu_total_bytes"] == planned["estimate"]["cpu"]["total"]
    assert compared["clusters"][0]["plan"]["gpu_total_bytes"] == planned["estimate"]["per_gpu"]["total"]


def test_prices_add_the_cost_and_the_cheapest(narrow, capsys):
    rc = main([*LLAMA, "--compare", CLUSTERS, "--tokens", "2B", "--price", "H100=2.5,A100-80GB=$1.8,RTX4090=0.4"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "cheapest:" in text and "fastest:" in text and "$/GPU-h" in text
    assert f"±{load_calibration().median_error:.0%}" in text
    assert f"on several GPUs ±{load_calibration().stated_error(2)[0]:.0%}" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 100
    _, answer = _json(capsys, [*LLAMA, "--compare", "8xH100", "--price", "H100=2.5"])
    row = answer["clusters"][0]
    assert row["cost"] == pytest.approx(row["gpu_hours"] * 2.5)


def test_nothing_fits_anywhere_exits_1(capsys):
    rc = main(["--model", "meta-llama/Llama-2-70b-hf", "--compare", "1xT4,2xRTX4090", "--tokens", "1B"])
    assert rc == 1
    assert "nothing fits" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        ([*LLAMA, "--compare", "1xH100,,2xT4"], "separated by commas"),
        ([*LLAMA, "--compare", "1xH1OO"], "H100"),
        ([*LLAMA, "--compare", "1xH100", "--tokens", "lots"], "2e9, 2B, 500M"),
        ([*LLAMA, "--compare", "1xH100", "--price", "H100=cheap"], "positive number"),
        ([*LLAMA, "--compare", "1xH100", "--price", "H100"], "GPU=PRICE"),
        ([*LLAMA, "--compare", "1xH100", "--price", "B300=4"], "known types"),
        ([*LLAMA, "--compare", "1xH100", "--price", "A100-80GB=2"], "no cluster in --compare uses"),
        ([*LLAMA, "--compare", "1xH100", "--gpus", "1xH100"], "drop --gpus"),
        ([*LLAMA, "--compare", "1xH100", "-o", "plan.json"], "drop -o"),
        ([*LLAMA, "--gpus", "1xH100", "--tokens", "2B"], "go with --compare"),
        ([*LLAMA], "--gpus (or --compare"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("text, count", [("2B", 2 * 10**9), ("2e9", 2 * 10**9), ("500M", 5 * 10**8),
                                         ("1.5T", 15 * 10**11), ("1_000", 1000), ("100k", 10**5)])
def test_token_counts(text, count):
    assert parse_tokens(text) == count


def test_cluster_and_price_lists():
    assert [label for label, _ in parse_clusters("1xH100, 2x8xA100-80GB")] == ["1xH100", "2x8xA100-80GB"]
    assert parse_prices("h100=2.5,A100-80GB=1.8") == {"H100-SXM": 2.5, "A100-80GB": 1.8}
    with pytest.raises(InputError, match="priced twice"):
        parse_prices("H100=2,h100-sxm=3")


def test_rows_of_different_methods_say_which(narrow, capsys):
    # Llama 3 8B under --method auto: eight H100s fine-tune it fully, one A100 only with LoRA, two T4s only with
    # QLoRA. Ranked on time alone they read as one training done sooner or later; the table names each row's
    # method, the note says they differ, and the line to plan the fastest passes its method.
    rc, answer = _json(capsys, [*LLAMA, "--compare", "8xH100,1xA100-80GB,2xT4",
                                "--method", "auto"])
    assert rc == 0
    methods = {r["cluster"]: r["plan"]["method"] for r in answer["clusters"]}
    assert methods["8xH100"] == "full" and {methods["1xA100-80GB"], methods["2xT4"]} <= {"lora", "qlora"}
    assert main([*LLAMA, "--compare", "1xA100-80GB,2xT4", "--method", "auto"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("#"))
    assert "method" in header
    text = " ".join(out.split())
    assert "the rows train different methods" in text or methods["1xA100-80GB"] == methods["2xT4"]
    assert f"--gpus 1xA100-80GB --method {methods['1xA100-80GB']} -o plan.json" in text
    assert main(["--model", "gpt2", "--compare", "1xT4,1xH100"]) == 0  # one method: no column, no note
    out = capsys.readouterr().out
    assert "method" not in next(line for line in out.splitlines() if line.startswith("#"))
    assert "train different methods" not in out

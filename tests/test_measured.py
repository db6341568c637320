"""plan/measured.py: the plan says whether its family and method were measured, from catalog/measured.json, which
must equal what the committed GPU runs give (benchmarks/measured_set.py --write after a suite lands)."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

from zero_planner.cli import main
from zero_planner.plan.measured import MEASURED_FILE, measured_note, measured_runs

sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_committed_table_is_what_the_committed_runs_give():
    from measured_set import measured_set

    committed = json.loads((ROOT / "zero_planner" / MEASURED_FILE).read_text())
    assert committed == measured_set(), "benchmarks/results changed: run python benchmarks/measured_set.py --write"


def test_measured_and_never_measured_families_are_told_apart():
    runs = measured_runs()
    assert runs["llama"]["full"] > 100 and "lora" not in runs.get("olmo2", {})
    assert measured_note("llama", "full").startswith(f"memory: llama with full fine-tuning measured in "
                                                     f"{runs['llama']['full']} GPU runs")  # fmt: skip
    never = measured_note("olmo2", "lora")
    assert never.startswith("memory: olmo2 with LoRA never measured on a GPU (olmo2 measured with full fine-tuning")
    assert "llama" in never.split("derived on the families that were (")[1]  # where LoRA was measured
    assert "never measured at all" in measured_note("bloom", "full")


def test_the_plan_says_it(capsys):
    assert main(["--model", str(ROOT / "benchmarks/model_configs/olmo2-1b.json"), "--gpus", "1xH100",
                 "--method", "lora", "--json"]) == 0  # fmt: skip
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert sum(n.startswith("memory: olmo2 with LoRA never measured on a GPU") for n in notes) == 1
    assert main(["--model", "gpt2", "--gpus", "1xH100"]) == 0
    assert "memory: gpt2 with full fine-tuning measured in" in " ".join(capsys.readouterr().out.split())

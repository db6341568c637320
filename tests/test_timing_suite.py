"""The issue-26 timing suites: every fitting candidate of a setting, alone on the GPU, settled steps (no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.timing_suite import STEPS, SUITES, SUITES_DIR, suite_cases


@pytest.mark.parametrize("name", ["i26-moe-small-h100", "i26-mistral7b-h200"])  # the traced Qwen2-MoE takes seconds
def test_committed_suites_are_what_the_generator_writes(name):
    committed = [json.loads(line) for line in (SUITES_DIR / f"{name}.jsonl").read_text().splitlines()]
    assert committed == suite_cases(name)


def test_every_case_times_settled_steps_alone_on_its_gpu():
    for name in SUITES:
        for case in (json.loads(line) for line in (SUITES_DIR / f"{name}.jsonl").read_text().splitlines()):
            assert case["steps"] == STEPS and "memory_limit_bytes" not in case
            assert case["planned"]["role"] in ("pick", "ladder")


def test_a_sweep_holds_every_fitting_candidate():
    cases = [json.loads(line) for line in Path(SUITES_DIR / "i26-moe-small-h100.jsonl").read_text().splitlines()]
    assert {(c["strategy"], c["gradient_checkpointing"]) for c in cases} == {
        (s, gc) for s in ("0", "1", "2", "2-offload", "3", "3-offload", "3-offload-all") for gc in (False, True)}
    assert sum(c["planned"]["chosen"] for c in cases) == 1

"""The reduction stream's pool (memory.reduction_stream_bytes) against the committed pools runs (two H200s,
benchmarks/stream_pools.py): the pool DeepSpeed's ZeRO-2 leaves beside the compute stream's, and what it costs
where both do not fit."""

from __future__ import annotations

import pytest

from benchmarks.memory_regression import run_capacity
from benchmarks.stream_pools import (
    committed_rows,
    pool_cases,
    predicted,
    retries_per_step,
    side_pools_bytes,
)
from zero_planner.plan.memory import GiB

ROWS = [row for row in committed_rows() if row["status"] == "ok"]


def test_every_committed_case_ran_and_recorded_its_pools():
    assert len(ROWS) == len(committed_rows()) == 24
    assert all("pools" in p for row in ROWS for p in row["ranks"][0]["phases"])


@pytest.mark.parametrize("row", [r for r in ROWS if r["case"]["strategy"] in ("1", "2")], ids=lambda r: r["id"])
def test_the_side_pool_is_the_predicted_partition(row):
    # ZeRO-2 with overlap_comm: one more stream, holding the 16-bit partition; ZeRO-1 and overlap_comm off: none
    pool, _ = predicted(row)
    overlap = row["case"]["deepspeed_config"]["zero_optimization"].get("overlap_comm")
    assert (pool > 0) == (row["case"]["strategy"] == "2" and bool(overlap))
    assert abs(side_pools_bytes(row) - pool) < 0.05 * GiB


@pytest.mark.parametrize("row", [r for r in ROWS if r["case"]["strategy"] in ("1", "2")], ids=lambda r: r["id"])
def test_a_total_over_the_card_is_a_run_that_retries_every_step(row):
    # over: the allocator freed its cache and retried at least twice a step (forward, then backward); under: at most
    # once (the compute stream's own fragmentation, not modelled: ZeRO-2 without overlap_comm at 10 x 2,048 capped)
    _, total = predicted(row)
    if total > run_capacity(row):
        assert retries_per_step(row) >= 2
    else:
        assert retries_per_step(row) <= 1


def test_the_planners_new_pick_ran_without_retries_where_the_old_retried():
    by_id = {row["id"].split("|cap")[0]: row for row in ROWS if not row["case"].get("variant")}
    old, new = by_id["qwen2.5-7b|2|bf16|mb19|s2048|gc|g2|ga1"], by_id["qwen2.5-7b|2|bf16|mb17|s2048|gc|g2|ga1"]
    assert retries_per_step(old) >= 2 and retries_per_step(new) == 0
    tokens = {key: row["case"]["micro_batch_size"] / sorted(row["ranks"][0]["step_times_s"][1:])[2]
              for key, row in (("old", old), ("new", new))}  # fmt: skip
    assert tokens["new"] > 1.1 * tokens["old"]


def test_the_suites_are_what_the_script_writes():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "benchmarks" / "suites"
    for name in ("pools-1gpu", "pools-2gpu", "pools-open-1gpu", "pools-open-2gpu", "pools-picks-1gpu", "pools-picks-2gpu",
                 "pools-zero3-2gpu"):
        written = [json.loads(line) for line in (root / f"{name}.jsonl").read_text().splitlines()]
        assert [c["id"] for c in written] == [c["id"] for c in pool_cases(name)]
        assert all(c["stream_pools"] and c["steps"] == 5 for c in written)

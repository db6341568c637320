"""What every rank of a run must agree on (zero_planner/run/fingerprint.py): plan and data digests, and the one line
naming the rank that differs. The collective check itself runs in tests/test_multinode_cpu.py."""

from __future__ import annotations

import os

from conftest import heavy_modules_after, make_plan

from zero_planner.run.fingerprint import data_digest, first_difference, plan_digest, rank_record


def test_plan_digest_ignores_the_output_dir_only():
    base = plan_digest(make_plan(output_dir="/node0/run"))
    assert plan_digest(make_plan(output_dir="/scratch/node1")) == base  # each node may write to its own disk
    assert plan_digest(make_plan(output_dir="/node0/run", learning_rate=1e-4)) != base
    assert plan_digest(make_plan(output_dir="/node0/run", max_steps=21)) != base


def test_data_digest_reads_names_sizes_and_both_ends(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_bytes(b"a" * 200_000)
    first = data_digest(str(data))
    os.utime(data, (1, 1))  # copied without its times: the same data
    assert data_digest(str(data)) == first
    data.write_bytes(b"a" * 199_999 + b"b")  # the last byte changed
    assert data_digest(str(data)) != first
    data.write_bytes(b"a" * 100_000 + b"b" + b"a" * 99_999)  # the middle of a large file is not read
    assert data_digest(str(data)) == first
    assert data_digest("synthetic") == "name:synthetic" and data_digest("org/corpus:en") == "name:org/corpus:en"


def record(rank, node, plan="p", data=None, error=None):
    return {"rank": rank, "node": node, "host": f"host{node}", "plan": plan, "data": data, "error": error}


def test_first_difference_names_the_rank_node_and_host():
    same = [record(0, 0, data="d"), record(1, 0), record(2, 1, data="d"), record(3, 1)]
    assert first_difference(same, "corpus") is None
    other_plan = [record(3, 1, plan="q"), *same[:3]]
    assert first_difference(other_plan, "corpus") == (
        "rank 3 (node 1, host host1) trains another plan than rank 0 (node 0, host host0) (digest q vs p): give "
        "every node the same plan file and the same zero-run options (only --output-dir may differ)")
    other_data = [*same[:2], record(2, 1, data="e"), same[3]]
    assert first_difference(other_data, "corpus").startswith(
        "rank 2 (node 1, host host1) reads other data than rank 0 (node 0, host host0) for dataset 'corpus'")
    missing = [*same[:2], record(2, 1, error="dataset file '/d.jsonl' does not exist"), same[3]]
    assert first_difference(missing, "/d.jsonl") == "rank 2 (node 1, host host1): dataset file '/d.jsonl' does not exist"


def test_rank_record_reports_a_missing_dataset_instead_of_raising(monkeypatch):
    monkeypatch.setenv("CROSS_RANK", "1")
    plan = make_plan(dataset="/no/such/corpus.jsonl")
    mine = rank_record(plan, rank=2, local_rank=0)
    assert mine["node"] == 1 and mine["data"] is None and "does not exist" in mine["error"]
    assert rank_record(plan, rank=3, local_rank=1)["error"] is None  # one rank per node reads the data


def test_import_is_light():
    assert heavy_modules_after("import zero_planner.run.fingerprint") == []

"""Two nodes on localhost: two real per-node launches of zero-run (--node-rank 0 and 1, one CPU rank each, gloo),
started together as a cluster's scheduler would start them, each node writing to its own output folder as on
machines that share no disk. Trains llama-tiny, saves, resumes; checks what each node wrote, the run report
from rank 0, and that no process, port or shared-memory file is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, make_plan

from zero_planner.planfile import save_plan
from zero_planner.run import checkpoint as ckpt
from zero_planner.run.launcher import free_port
from zero_planner.run.preflight import check_rendezvous

STEPS, SAVE_EVERY = 4, 2
NODE_TIMEOUT_S = 300


def launch_nodes(plan: Path, root: Path, tag: str, *extra: str, node1_extra: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """Starts `zero-run PLAN --node-rank N --master-addr 127.0.0.1` for N = 0, 1 at once; returns each node's
    (exit status, output). Node N writes to root/nodeN."""
    import psutil

    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    logs = [root / f"{tag}-node{n}.log" for n in (0, 1)]
    procs = []
    for n, log in enumerate(logs):
        argv = [sys.executable, "-m", "zero_planner.launch", str(plan), "--node-rank", str(n), "--master-addr",
                "127.0.0.1", "--master-port", str(port), "--output-dir", str(root / f"node{n}"), *extra,
                *(node1_extra if n == 1 else ())]  # fmt: skip
        with log.open("w") as out:
            procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root))
    try:
        codes = [p.wait(timeout=NODE_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:  # only after a timeout: end what this test started, launcher and ranks included
            if p.poll() is None:
                for child in psutil.Process(p.pid).children(recursive=True):
                    child.kill()
                p.kill()
                p.wait()
    assert_nothing_left(plan, port)
    return [(code, log.read_text()) for code, log in zip(codes, logs)]


def assert_nothing_left(plan: Path, port: int) -> None:
    import psutil

    alive = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(plan) in " ".join(proc.info["cmdline"] or []):
                alive.append(proc.pid)
        except psutil.Error:
            pass
    assert alive == [], f"processes of this run still alive: {alive}"
    assert check_rendezvous(0, "127.0.0.1", port) is None  # the rendezvous port is free again
    assert not list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"))


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """Trains STEPS steps on two nodes: (plan path, root folder, outputs, files of each node)."""
    root = tmp_path_factory.mktemp("two-nodes")
    plan = root / "plan.json"
    save_plan(make_plan("2", gpu="cpu", nodes=2, gpus_per_node=1, max_steps=STEPS, save_every=SAVE_EVERY,
                        log_every=1, output_dir=str(root / "unused")), plan)  # fmt: skip
    outputs = launch_nodes(plan, root, "train")
    return plan, root, outputs, [files(root / f"node{n}") for n in (0, 1)]


@pytest.mark.slow
def test_two_nodes_train_and_each_node_saves_its_part(two_nodes):
    plan, root, outputs, (node0, node1) = two_nodes
    assert [code for code, _ in outputs] == [0, 0], outputs
    for step in (SAVE_EVERY, STEPS):
        tag = ckpt.tag_for(step)
        # DeepSpeed's node-local layout: each node's first rank saves the module states beside its own ranks'
        # optimizer partitions; each node marks its part complete.
        assert {f"checkpoints/{tag}/mp_rank_00_model_states.pt", f"checkpoints/{tag}/zero_pp_rank_0_mp_rank_00_optim_states.pt",
                f"checkpoints/{tag}/{ckpt.MARKER}"} <= set(node0)  # fmt: skip
        assert [f for f in node1 if f.startswith(f"checkpoints/{tag}/")] == [
            f"checkpoints/{tag}/mp_rank_00_model_states.pt", f"checkpoints/{tag}/zero_pp_rank_1_mp_rank_00_optim_states.pt",
            f"checkpoints/{tag}/{ckpt.MARKER}"]  # fmt: skip
        assert ckpt.read_state(root / "node1" / "checkpoints" / tag)["node"] == 1
    assert not any("zero_pp_rank_1" in f for f in node0)
    # Rank 0 (node 0) alone writes the report and the final model.
    assert "run_report.json" in node0 and "final/model.safetensors" in node0
    assert not any(f == "run_report.json" or f.startswith("final/") for f in node1)
    report = json.loads((root / "node0" / "run_report.json").read_text())
    assert report["status"] == "ok" and report["steps"] == STEPS and report["world_size"] == 2
    assert [(r["rank"], r["node"]) for r in report["ranks"]] == [(0, 0), (1, 1)]
    assert report["nodes"] == 2 and report["checkpoint_storage"] == "node-local"
    losses = report["losses"]
    assert len(losses) == STEPS and losses[-1] < losses[0]
    node1_marker = ckpt.read_state(root / "node1" / "checkpoints" / ckpt.tag_for(STEPS))
    assert node1_marker["losses"] == pytest.approx(losses)  # rank 0's losses on every node


@pytest.mark.slow
def test_two_nodes_resume_where_they_stopped(two_nodes):
    plan, root, outputs, _ = two_nodes
    first = json.loads((root / "node0" / "run_report.json").read_text())["losses"]
    resumed = launch_nodes(plan, root, "resume", "--resume", "--max-steps", str(STEPS + SAVE_EVERY))
    assert [code for code, _ in resumed] == [0, 0], resumed
    assert f"resumed from {root / 'node0' / 'checkpoints' / ckpt.tag_for(STEPS)} (step {STEPS})" in resumed[0][1]
    losses = json.loads((root / "node0" / "run_report.json").read_text())["losses"]
    assert len(losses) == STEPS + SAVE_EVERY
    assert losses[:STEPS] == pytest.approx(first, abs=1e-6)
    assert max(losses[STEPS:]) < first[0]  # training went on from the restored state, not from scratch
    for n in (0, 1):  # each node pruned its own part: the newest two complete checkpoints stay
        kept = sorted(p.name for p in (root / f"node{n}" / "checkpoints").iterdir() if p.is_dir())
        assert kept == [ckpt.tag_for(STEPS), ckpt.tag_for(STEPS + SAVE_EVERY)]


@pytest.mark.slow
def test_a_node_with_another_plan_is_named_before_training(two_nodes, tmp_path):
    plan, *_ = two_nodes
    outputs = launch_nodes(plan, tmp_path, "mismatch", node1_extra=("--lr", "1e-4"))
    assert [code for code, _ in outputs] == [2, 2], outputs
    for _, out in outputs:  # each node's output says it once
        lines = [line for line in out.splitlines() if line.startswith("zero-run: error:")]
        assert len(lines) == 1 and "rank 1 (node 1, host " in lines[0] and "trains another plan than rank 0" in lines[0]
    assert not (tmp_path / "node0" / "checkpoints").exists()  # stopped before loading anything

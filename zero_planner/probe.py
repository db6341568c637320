"""What every rank of a --probe candidate runs: `python -m zero_planner.probe --plan PLAN ...`, which is
zero_planner.train with nothing written but run_report.json (run/train.py NO_WRITES: no checkpoints, no final
model). The probe itself, which starts these ranks, is run/probe.py.

An entry point: zero-run --probe --dry-run prints this module's path (run/probe.py RANK_MODULE), so it stays here.
"""

from __future__ import annotations

from zero_planner.run import train


def rank_main() -> None:
    """Runs zero_planner.train on this rank with its checkpoint and final-model writers off (train.NO_WRITES)."""
    train._exit_cleanly(train.main(writers=train.NO_WRITES))


if __name__ == "__main__":
    rank_main()

"""What every rank of a --probe candidate runs: `python -m zero_planner.probe --plan PLAN ...`, which is
zero_planner.train with its checkpoint and final-model writers replaced by no-ops (a probe keeps nothing but
run_report.json). The probe itself, which starts these ranks, is run/probe.py.

An entry point: zero-run --probe --dry-run prints this module's path (run/probe.py RANK_MODULE), so it stays here.
"""

from __future__ import annotations

import sys

from zero_planner.run import train

SKIPPED_WRITES = ("_save", "_export", "_export_adapter", "_export_merged")
"""run/train.py's checkpoint and final-model writers, replaced by no-ops on probe ranks (every rank skips the
same collectives, so none waits on another)."""


def rank_main() -> None:
    """Runs zero_planner.train on this rank with checkpoint and final-model writes skipped (a probe keeps
    nothing but run_report.json)."""

    def skipped(*args, **kwargs) -> None:
        return None

    for name in SKIPPED_WRITES:
        if not hasattr(train, name):  # renamed in train.py: a probe would still work, but write checkpoints
            print(f"zero-run --probe: zero_planner.train has no {name}; it will be written", file=sys.stderr)
            continue
        setattr(train, name, skipped)
    train._exit_cleanly(train.main())


if __name__ == "__main__":
    rank_main()

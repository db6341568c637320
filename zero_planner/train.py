"""What the `deepspeed` launcher runs on every rank of a zero-run: `python -m zero_planner.train --plan PLAN.json
[--output-dir DIR] [--max-steps N] [--resume]`. The training itself is run/train.py.

An entry point: every plan file records this module's path in launch.command (plan/command.py TRAIN_MODULE), so
it stays here for plans already written.
"""

from __future__ import annotations

from zero_planner.run import train

if __name__ == "__main__":
    train._exit_cleanly(train.main())

"""benchmarks/host_probe.py runs end to end: on DeepSpeed's CPU accelerator here (its figures describe a GPU's host
only on a GPU machine; docs/speed.md quotes those), each engine's micro-step is timed and the three rates come
out of the differences the docstring names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT


def test_the_probe_times_four_engines_and_derives_three_rates(tmp_path):
    env = dict(os.environ, DS_ACCELERATOR="cpu", MASTER_PORT="29611")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_probe.py"), "--json", "--any-device"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    times = json.loads(out.stdout.strip().splitlines()[-1])
    steps = times["micro_step_s"]
    assert set(steps) == {"1:4", "1:24", "2:24", "3:24"} and all(s > 0 for s in steps.values())
    assert times["host_seconds_per_layer"] == (steps["1:24"] - steps["1:4"]) / 20
    assert steps["1:24"] > steps["1:4"]  # twenty more layers cost the host time on any machine
    assert times["gpu"] == "cpu"

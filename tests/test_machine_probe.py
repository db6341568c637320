"""benchmarks/machine_probe.py runs here (no GPU: the host figures only) and as a sampler; the figures behind
docs/speed.md's "Five H200 machines" came from it on the GPU machines."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

PROBE = str(ROOT / "benchmarks" / "machine_probe.py")


def test_the_probe_times_the_host_and_leaves_out_what_needs_a_gpu():
    out = subprocess.run([sys.executable, PROBE, "--repeats", "2", "--label", "here"], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    figures = json.loads(out.stdout)
    assert figures["label"] == "here"
    for name in ("python_loop_s", "cpu_dispatch_us"):
        timing = figures[name]
        assert 0 < timing["min"] <= timing["median"] <= timing["max"]
    assert "matmul_tflops" not in figures and "cuda_launch_us" not in figures  # no CUDA here
    assert figures["cpu_cores"] >= 1 and len(figures["load_average"]) == 3


def test_the_sampler_writes_one_timed_line_per_sample_until_its_time_is_up():
    out = subprocess.run([sys.executable, PROBE, "--sample-every", "0.1", "--for", "1"], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    samples = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(samples) >= 2
    times = [s["unix"] for s in samples]
    assert times == sorted(times) and times[-1] - times[0] < 1.5
    assert all(s["python_loop_s"] > 0 and s["cpu_dispatch_us"] > 0 for s in samples)

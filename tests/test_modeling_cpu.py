"""Model construction under the real deepspeed launcher on CPU (two ranks, gloo)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_zero3_random_init_matches_the_models_own_init(tmp_path):
    """A tied embedding used as LM head must start near ln(vocab), not at torch's default N(0, 1) scale."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.cases import case, expand_case

    config = expand_case(case("llama-tiny", "3", mb=1, seq=64, gpus=2))
    config["model_config"] = dict(config["model_config"], tie_word_embeddings=True, hidden_size=256, vocab_size=4096)
    (tmp_path / "case.json").write_text(json.dumps(config))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", "29631",
           str(ROOT / "benchmarks" / "gpu_step.py"), "--case", str(tmp_path / "case.json"), "--out-dir", str(tmp_path)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    record = json.loads((tmp_path / "rank0.json").read_text())
    assert record["status"] == "ok", record.get("error")
    assert record["losses"][0] < 1.5 * math.log(4096)  # measured 8.34; without the fix 253

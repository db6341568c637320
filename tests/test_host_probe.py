"""benchmarks/host_probe.py runs end to end: on DeepSpeed's CPU accelerator here (its figures describe a GPU's host
only on a GPU machine; docs/speed.md quotes those), each engine's micro-step is timed and the three rates come
out of the differences the docstring names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.harness
def test_the_probe_times_four_engines_and_derives_three_rates(tmp_path):
    env = dict(os.environ, DS_ACCELERATOR="cpu", MASTER_PORT="29611")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_probe.py"), "--json", "--any-device"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    times = json.loads(out.stdout.strip().splitlines()[-1])
    steps = times["micro_step_s"]
    assert set(steps) == {"1:4", "1:24", "2:24", "3:24"} and all(s > 0 for s in steps.values())
    assert times["host_seconds_per_layer"] == (steps["1:24"] - steps["1:4"]) / 20
    # (no comparison of the timings themselves: a busy machine reorders them; benchmarks, not tests, judge times)
    assert times["gpu"] == "cpu"


def test_a_layout_keeps_its_structure_and_every_width_is_tiny():
    sys.path.insert(0, str(ROOT))
    from benchmarks.cases import model_config
    from benchmarks.host_probe import layout_config

    gemma = layout_config("gemma2-2b", 4)
    full = model_config("gemma2-2b")
    assert gemma["model_type"] == "gemma2" and gemma["num_hidden_layers"] == 4
    assert gemma["attn_logit_softcapping"] == full["attn_logit_softcapping"]  # the soft-cap's kernels stay
    assert gemma["num_attention_heads"] // gemma["num_key_value_heads"] == 2  # 8 of 4 heads: the GQA ratio kept
    assert gemma["hidden_size"] == 8 * gemma["num_attention_heads"] and gemma["vocab_size"] == 256
    gpt2 = layout_config("gpt2-medium", 24)
    assert gpt2["n_layer"] == 24 and gpt2["n_embd"] <= 64 and gpt2["model_type"] == "gpt2"
    qwen = layout_config("qwen2-moe-a2.7b-4l", 4)
    assert qwen["num_experts"] == model_config("qwen2-moe-a2.7b-4l")["num_experts"] and qwen["moe_intermediate_size"] == 16


@pytest.mark.harness
def test_layouts_report_host_time_and_launched_ops_per_layer(tmp_path):
    env = dict(os.environ, DS_ACCELERATOR="cpu", MASTER_PORT="29613")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_probe.py"), "--any-device", "--layouts",
                          "llama3.2-1b", "gemma2-2b:eager"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r["layout"]: r for r in map(json.loads, out.stdout.strip().splitlines()[-2:])}
    llama, gemma = rows["llama3.2-1b"], rows["gemma2-2b"]
    assert (llama["attn"], gemma["attn"]) == ("sdpa", "eager")
    for row in rows.values():
        assert row["host_seconds_per_layer"] == (row["deep"]["seconds"] - row["shallow"]["seconds"]) / 20
        assert row["forward_ops_per_layer"] == (row["deep"]["forward_ops"] - row["shallow"]["forward_ops"]) / 20
    # a layer's launches do not depend on the machine: Gemma 2's four norms, soft-cap and eager scores launch more
    # than Llama's layer with SDPA's one kernel each way
    assert gemma["forward_ops_per_layer"] > llama["forward_ops_per_layer"] + 20
    assert gemma["backward_ops_per_layer"] > llama["backward_ops_per_layer"] + 20
    assert all(float(r["forward_ops_per_layer"]).is_integer() for r in rows.values())

"""The FSDP2 measurement suite (issue 61): each FSDP2 case is its ZeRO twin's workload under fully_shard (no GPU)."""

from __future__ import annotations

import json

from benchmarks.fsdp2_suite import SETTINGS, TWINS, suite
from benchmarks.fsdp2_engine import FSDP2_PRECISIONS

SHARED = ("model", "model_config", "precision", "micro_batch_size", "seq_len", "gradient_checkpointing", "num_gpus",
          "gradient_accumulation_steps", "alloc_conf", "deepspeed_config")  # fmt: skip


def test_each_fsdp2_case_runs_its_zero_twins_workload(tmp_path):
    cases = suite(SETTINGS[:1], gpu="H100", host=120 * 2**30)
    zero = {c["id"]: c for c in cases if "engine" not in c}
    twins = [c for c in cases if c.get("engine") == "fsdp2"]
    assert twins and len(twins) == len(zero)
    for c in twins:
        of = zero[c["twin_of"]]
        assert {k: c[k] for k in SHARED} == {k: of[k] for k in SHARED}  # same shapes, same AdamW settings
        assert c["fsdp_reshard_after_forward"] is TWINS[of["strategy"]][1]
        assert "planned" not in c and c["precision"] in FSDP2_PRECISIONS  # the ZeRO plan is not the twin's
        p = c["predicted"]  # written before any FSDP2 case ran, to be held to its measurement
        assert p["train_peak_bytes"] == max(p["backward_start_bytes"], p["optimizer_step_bytes"])
        assert p["backward_start_bytes"] > p["activations_bytes"] + p["gathered_bytes"] > 0
        assert c["id"] != of["id"] and c["id"].split("|")[1] == TWINS[of["strategy"]][0]
    # each twin follows its ZeRO case, ZeRO-3's pairs first (what a call cut at its limit brings back)
    assert [c.get("twin_of") for c in cases[1::2]] == [c["id"] for c in cases[::2]]
    strategies = [c["strategy"] for c in cases[::2]]
    assert strategies == sorted(strategies, key=lambda s: s != "3")
    # keeping every gathered layer to backward (ZeRO-2's twin) holds more than resharding (ZeRO-3's), same workload
    by_shape = {}
    for c in twins:
        by_shape.setdefault(c["id"].split("|", 2)[2], {})[c["fsdp_reshard_after_forward"]] = c["predicted"]
    pairs = [both for both in by_shape.values() if len(both) == 2]
    assert pairs and all(both[False]["train_peak_bytes"] > both[True]["train_peak_bytes"] for both in pairs)
    json.dumps(cases)  # a suite file is JSON lines

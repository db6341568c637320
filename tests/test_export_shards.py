"""The final model folder is written shard by shard (host memory holds one shard, not the model) and loads
back with from_pretrained to the same weights, as one file or as an indexed set of shards."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import LLAMA_TINY
from transformers import AutoConfig, AutoModelForCausalLM

from zero_planner.run import checkpoint as ckpt
from zero_planner.run import train
from zero_planner.run.tokenizer import ByteTokenizer


def tiny_model():
    config = dict(LLAMA_TINY)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config))


@pytest.mark.parametrize("shard_bytes, files", [(2**30, 1), (200_000, None)])
def test_export_loads_back_to_the_same_weights(tmp_path, monkeypatch, shard_bytes, files):
    monkeypatch.setattr(train, "EXPORT_SHARD_BYTES", shard_bytes)
    model = tiny_model()
    root, tmp_path = tmp_path, tmp_path / "final"
    train._write_hf_folder(model, model.state_dict(), tmp_path, ByteTokenizer(LLAMA_TINY["vocab_size"]), step=7)
    # Written beside its place and renamed in: nothing else is left next to it, and it is marked complete.
    assert sorted(p.name for p in root.iterdir()) == ["final"]
    assert ckpt.export_problem(tmp_path) is None and json.loads((tmp_path / ckpt.EXPORT_MARKER).read_text())["step"] == 7
    written = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    if files == 1:
        assert written == ["model.safetensors"] and not (tmp_path / "model.safetensors.index.json").exists()
    else:
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert len(written) > 1 and sorted(set(index["weight_map"].values())) == written
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name

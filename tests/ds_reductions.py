"""Counts the gradient buckets a real DeepSpeed ZeRO-2 engine reduces in one backward (tests/test_throughput.py).

    DS_ACCELERATOR=cpu python tests/ds_reductions.py CONFIG_JSON BUCKET_ELEMENTS   -> prints "REDUCTIONS N"

One process, world size 1 over gloo, overlap_comm and contiguous_gradients on as our stage-2 JSON writes them.
"""

import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
os.environ.setdefault("MASTER_PORT", str(29000 + os.getpid() % 1000))

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

config, bucket = json.loads(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
      "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                            "reduce_bucket_size": bucket, "allgather_bucket_size": bucket}}  # fmt: skip
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
calls = []
reduce_ipg_grads = DeepSpeedZeroOptimizer.reduce_ipg_grads


def counted(self, *args, **kwargs):
    calls.append(1)
    return reduce_ipg_grads(self, *args, **kwargs)


DeepSpeedZeroOptimizer.reduce_ipg_grads = counted
ids = torch.randint(0, config["vocab_size"], (1, 16))
engine.backward(engine(input_ids=ids, labels=ids).loss)
print("REDUCTIONS", len(calls))
torch.distributed.destroy_process_group()  # a rank still in its gloo group at exit can abort (CPU_EXIT_NOTE)

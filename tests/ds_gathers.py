"""Counts the parameters a real DeepSpeed ZeRO-3 engine fetches in one micro-step, and how many of them it gathers
across ranks (tests/test_throughput.py).

    DS_ACCELERATOR=cpu RANK=r WORLD_SIZE=n MASTER_PORT=p python tests/ds_gathers.py CONFIG_JSON [REUSE [GC [PREFETCH]]]
        -> rank 0 prints "FETCHED N NOGATHER M"

REUSE: stage3_max_reuse_distance in elements (ours, 1e9, unless given or -1); GC 1: gradient checkpointing on;
PREFETCH: stage3_prefetch_bucket_size in elements (ours, 0.9 x hidden^2, unless given).

One process per rank over gloo, our stage-3 JSON (zero_planner.plan.dsconfig.build_ds_config). The counts are
of the third micro-step, once the coordinator has traced the module order and prefetches. FETCHED: partitioned
parameters the coordinator brought up (PartitionedParameterCoordinator.__all_gather_params_); NOGATHER: those
handed over without a gather (partition_parameters._no_gather_coalesced, DeepSpeed's path where the partition
spans one rank).
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29000 + os.getpid() % 1000))

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime.zero import partition_parameters  # noqa: E402
from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator  # noqa: E402
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from zero_planner.plan.dsconfig import build_ds_config  # noqa: E402
from zero_planner.strategies import STRATEGIES  # noqa: E402

config = json.loads(sys.argv[1])
world = int(os.environ["WORLD_SIZE"])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
if len(sys.argv) > 3 and sys.argv[3] == "1":
    model.gradient_checkpointing_enable()
ds = build_ds_config(STRATEGIES["3"], micro_batch_size=1, gradient_accumulation_steps=1, world_size=world,
                     precision="fp32", hidden_size=config["hidden_size"])  # fmt: skip
if len(sys.argv) > 2 and int(sys.argv[2]) >= 0:
    ds["zero_optimization"]["stage3_max_reuse_distance"] = int(sys.argv[2])
if len(sys.argv) > 4:
    ds["zero_optimization"]["stage3_prefetch_bucket_size"] = int(sys.argv[4])
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)

counts = {"fetched": 0, "nogather": 0}
gather = PartitionedParameterCoordinator._PartitionedParameterCoordinator__all_gather_params_
no_gather = partition_parameters._no_gather_coalesced


def counted_gather(self, params, forward, quantize=False):
    counts["fetched"] += sum(p.ds_status == ZeroParamStatus.NOT_AVAILABLE for p in params)
    return gather(self, params, forward, quantize)


def counted_no_gather(params):
    params = list(params)
    counts["nogather"] += len(params)
    return no_gather(params)


PartitionedParameterCoordinator._PartitionedParameterCoordinator__all_gather_params_ = counted_gather
partition_parameters._no_gather_coalesced = counted_no_gather
ids = torch.randint(0, config["vocab_size"], (1, 16))
for step in range(3):
    if step == 2:
        counts.update(fetched=0, nogather=0)
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
if int(os.environ["RANK"]) == 0:
    print("FETCHED", counts["fetched"], "NOGATHER", counts["nogather"], flush=True)
torch.distributed.destroy_process_group()  # a rank still in its gloo group at exit can abort (CPU_EXIT_NOTE)

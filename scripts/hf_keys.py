"""Rebuilds zero_planner/catalog/hf_keys.json: the keys `zero-plan --from-hf-trainer` and `--from-accelerate`
accept, from the installed transformers and accelerate (the versions tests/test_importers.py compares against).

    python scripts/hf_keys.py [OLDER_TRANSFORMERS_WHEEL]

hf_trainer: the init fields of transformers.TrainingArguments (what `args.to_json_string()` writes) and the
values of its `optim` (OptimizerNames); with a wheel of an older transformers (`pip download --no-deps
transformers==4.57.1`), the fields and optimizers that version had and the installed one dropped (`legacy`), so
a JSON written under 4.x is still read. accelerate: the top-level keys of an `accelerate config` file
(ClusterConfig's fields: accelerate refuses any other, config_args.py from_yaml_file), the keys `accelerate
config` writes under deepspeed_config (commands/config/cluster.py), and the distributed types and precisions.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tool_keys import init_fields  # noqa: E402  (the same reading of TrainingArguments' fields)

OUT = Path(__file__).resolve().parents[1] / "zero_planner" / "catalog" / "hf_keys.json"


def installed_hf_trainer() -> dict:
    import transformers
    from transformers.training_args import OptimizerNames, TrainingArguments

    return {
        "source": f"transformers {transformers.__version__} TrainingArguments (dataclasses.fields, init only)",
        "version": transformers.__version__,
        "keys": sorted(f.name for f in dataclasses.fields(TrainingArguments) if f.init),
        "optimizers": sorted(o.value for o in OptimizerNames),
    }


def wheel_hf_trainer(wheel: str) -> dict:
    """Returns the version, TrainingArguments fields and OptimizerNames values of a transformers wheel's source."""
    with zipfile.ZipFile(wheel) as z:
        tree = ast.parse(z.read("transformers/training_args.py").decode())
        utils = ast.parse(z.read("transformers/trainer_utils.py").decode())
    keys, optimizers = set(), set()
    for node in [*tree.body, *utils.body]:
        if isinstance(node, ast.ClassDef) and node.name == "TrainingArguments":
            keys.update(init_fields(node))
        if isinstance(node, ast.ClassDef) and node.name == "OptimizerNames":
            for s in node.body:
                if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant):
                    optimizers.add(s.value.value)
    return {"version": Path(wheel).name.split("-")[1], "keys": keys, "optimizers": optimizers}


def installed_accelerate() -> dict:
    import accelerate
    from accelerate.commands.config import cluster
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DistributedType

    text = Path(cluster.__file__).read_text(encoding="utf-8")
    return {
        "source": f"accelerate {accelerate.__version__} ClusterConfig fields; deepspeed_config keys written by "
        "commands/config/cluster.py",
        "version": accelerate.__version__,
        "keys": sorted(f.name for f in dataclasses.fields(ClusterConfig)),
        "deepspeed_keys": sorted(set(re.findall(r'deepspeed_config\["(\w+)"\]', text))),
        "distributed_types": sorted(t.value for t in DistributedType),
    }


def main(argv: list[str]) -> int:
    hf = installed_hf_trainer()
    if argv:
        old = wheel_hf_trainer(argv[0])
        hf["legacy"] = {"version": old["version"], "keys": sorted(old["keys"] - set(hf["keys"])),
                        "optimizers": sorted(old["optimizers"] - set(hf["optimizers"]))}  # fmt: skip
    data = {"hf_trainer": hf, "accelerate": installed_accelerate()}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}: {len(hf['keys'])} TrainingArguments keys, {len(data['accelerate']['keys'])} Accelerate keys")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""ds_configs/: the reference DeepSpeed JSON of every strategy, built by the planner's own function.

    python -m zero_planner.plan.reference_configs --write-ds-configs [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from zero_planner.plan.dsconfig import build_ds_config
from zero_planner.strategies import STRATEGIES, Strategy

REFERENCE_HIDDEN_SIZE = 4096
"""ds_configs/ reference files are built for hidden size 4096 (Llama-2/3 7-8B, Mistral 7B): micro-batch 1,
accumulation 1, one GPU."""
DS_CONFIGS_DIR = Path(__file__).resolve().parents[2] / "ds_configs"


def reference_name(strategy: Strategy, precision: str) -> str:
    """Returns the reference file name: what it does, e.g. zero3_bf16_offload_all.json."""
    suffix = ""
    if strategy.offload_param != "none":
        suffix = "_offload_all"
    elif strategy.offload_optimizer != "none":
        suffix = "_offload_optimizer"
    return f"zero{strategy.stage}_{precision}{suffix}.json"


def reference_ds_configs() -> dict[str, dict[str, Any]]:
    """Returns {file name: config} for every strategy in bf16 and fp16, at hidden size REFERENCE_HIDDEN_SIZE,
    micro-batch 1, accumulation 1, one GPU: the files in ds_configs/."""
    configs = {}
    for precision in ("bf16", "fp16"):
        for strategy in STRATEGIES.values():
            configs[reference_name(strategy, precision)] = build_ds_config(
                strategy,
                micro_batch_size=1,
                gradient_accumulation_steps=1,
                world_size=1,
                precision=precision,
                hidden_size=REFERENCE_HIDDEN_SIZE,
            )
    return configs


def reference_text(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2) + "\n"


def write_ds_configs(directory: Path = DS_CONFIGS_DIR, *, check: bool = False) -> list[str]:
    """Writes (or with `check`, compares) ds_configs/; returns the names of files that differed."""
    directory.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, config in reference_ds_configs().items():
        path = directory / name
        text = reference_text(config)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
            if not check:
                path.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zero_planner.plan.reference_configs", description="Regenerate ds_configs/.",
                                     allow_abbrev=False)
    parser.add_argument("--write-ds-configs", action="store_true", help="write the reference DeepSpeed JSONs")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when a file differs")
    parser.add_argument("--dir", type=Path, default=DS_CONFIGS_DIR)
    args = parser.parse_args(argv)
    if not (args.write_ds_configs or args.check):
        parser.error("nothing to do: give --write-ds-configs or --check")
    stale = write_ds_configs(args.dir, check=args.check)
    verb = "differ" if args.check else "written"
    print(
        f"{len(stale)} of {len(reference_ds_configs())} files {verb} in {args.dir}"
        + (f": {', '.join(stale)}" if stale else "")
    )
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

"""Which model families and methods the memory model was measured on: the GPU runs memory_regression holds it to.

    python benchmarks/measured_set.py [--write]

Counts the cases of benchmarks/results/*.jsonl that memory_regression.py compares (runs that finished, and
out-of-memory runs of their own), by config model_type and method (full, lora, qlora), and prints the table.
--write stores it as zero_planner/catalog/measured.json, which zero-plan reads to say whether the plan's family
and method were measured (plan/measured.py). tests/test_measured.py holds the committed file equal to the results,
so a suite that lands without --write fails CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_regression import load_cases  # noqa: E402

CATALOG = ROOT / "zero_planner" / "catalog" / "measured.json"


def measured_set() -> dict:
    """Returns {"memory": {model_type: {method: runs}}} over memory_regression's cases, sorted by name."""
    counts = Counter((row["case"]["model_config"]["model_type"], row["case"].get("method", "full"))
                     for row in load_cases())  # fmt: skip
    table: dict[str, dict[str, int]] = {}
    for (model_type, method), runs in sorted(counts.items()):
        table.setdefault(model_type, {})[method] = runs
    return {"source": "benchmarks/results/*.jsonl (the cases benchmarks/memory_regression.py compares); "
                      "written by benchmarks/measured_set.py --write",
            "memory": table}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {CATALOG.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    found = measured_set()
    for model_type, methods in found["memory"].items():
        print(f"{model_type:12s} " + ", ".join(f"{m} {n}" for m, n in methods.items()))
    if args.write:
        CATALOG.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        print(f"wrote {CATALOG.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Regenerates the "params" table of every catalog/models/*.json by counting on the meta device.

    python -m zero_planner.models.build_catalog            # rewrite every file
    python -m zero_planner.models.build_catalog --check    # exit 1 if any table is stale

The config in each file is the model's published config.json and is never changed here; only "params" is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zero_planner.models.count import param_table

CATALOG_DIR = Path(__file__).resolve().parent.parent / "catalog" / "models"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m zero_planner.models.build_catalog", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("names", nargs="*", help="catalog slugs to rebuild (default: all)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when a table differs")
    return parser


def run(args: argparse.Namespace) -> int:
    paths = sorted(CATALOG_DIR.glob("*.json"))
    if args.names:
        paths = [p for p in paths if p.stem in set(args.names)]
    stale = []
    for path in paths:
        entry = json.loads(path.read_text(encoding="utf-8"))
        table = param_table(entry["config"], name=path.stem)
        published = entry.get("published_params")
        delta = "" if published is None else f"  published {published:,} ({table['num_params'] - published:+,})"
        print(f"{path.stem:24s} {table['num_params']:>17,}{delta}")
        if entry.get("params") != table:
            stale.append(path.stem)
            if not args.check:
                entry["params"] = table
                path.write_text(json.dumps(entry, indent=1) + "\n", encoding="utf-8")
    if args.check and stale:
        print(f"stale params tables: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

"""Writes zero_planner/catalog/deepspeed_defaults.json: the values the installed DeepSpeed takes for the
memory-relevant zero_optimization keys a JSON leaves out, read from DeepSpeed's own config model
(deepspeed/runtime/zero/config.py DeepSpeedZeroConfig and offload_config.py), per stage (overlap_comm's default
depends on it), with the DeepSpeed version. tests/test_dsdefaults.py checks the file against the installed
DeepSpeed, so a DeepSpeed upgrade that changes a default fails until this is rerun.

    python scripts/deepspeed_defaults.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zero_planner.plan.dsdefaults import CATALOG, read_installed_defaults  # noqa: E402


def main() -> int:
    defaults = read_installed_defaults()
    CATALOG.write_text(json.dumps(defaults, indent=2) + "\n")
    print(f"DeepSpeed {defaults['deepspeed']}: {len(defaults['zero_optimization']['3'])} keys -> {CATALOG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

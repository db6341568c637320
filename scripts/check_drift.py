"""Reports which of the packages constraints.txt pins have newer releases on the package index; changes nothing.

    python scripts/check_drift.py      # exit 0 always: drift is news, not a failure (CI prints it after the gates)

To move a pin: install the newer release in a venv, run `python -m pytest -q` and `python benchmarks/memory_regression.py`
(the traced tables in zero_planner/catalog/models depend on transformers), then edit constraints.txt.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CONSTRAINTS = Path(__file__).resolve().parents[1] / "constraints.txt"
WATCHED = ("torch", "transformers", "deepspeed", "peft", "accelerate", "trl", "datasets", "pydantic", "bitsandbytes")
"""The packages whose behaviour the planner models or the hand-off tests run."""


def pins(text: str) -> dict[str, str]:
    """Returns {package name (lower case): pinned version} of a constraints file's `name==version` lines."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", line.strip())
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def newest(package: str) -> str | None:
    """Returns the newest release pip's index lists for `package` (None when it cannot be asked)."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(rf"^{re.escape(package)} \(([^)]+)\)", out, flags=re.MULTILINE | re.IGNORECASE)
    return match.group(1) if match else None


def main() -> int:
    pinned = pins(CONSTRAINTS.read_text())
    behind = []
    for package in WATCHED:
        have = pinned.get(package)
        latest = newest(package)
        if have and latest and latest != have:
            behind.append(f"{package} {have} (newest {latest})")
    print("drift: " + ("; ".join(behind) if behind else "none: every watched pin is the newest release")
          + " [constraints.txt; report only]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

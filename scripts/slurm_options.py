"""Rebuilds zero_planner/catalog/slurm_options.json: the long options sbatch and srun document, each with the
argument form its man page gives, and the environment variables they document setting, so that `zero-run
--slurm` can refuse an option SLURM does not have and tests/test_slurm.py can check the script it writes.

    python scripts/slurm_options.py SLURM_GIT_DIR

Reads doc/man/man1/sbatch.1 and srun.1 at HEAD of a clone of github.com/SchedMD/slurm (a bare clone is enough):
every option entry (a `.TP` line followed by `\\fB\\-\\-name\\fR=<arg>`) and every variable of the OUTPUT
ENVIRONMENT VARIABLES section.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "zero_planner" / "catalog" / "slurm_options.json"


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def _plain(line: str) -> str:
    return re.sub(r"\\f[BIRP]", "", line).replace("\\-", "-")


def options(man: str) -> dict[str, str]:
    """Returns {--long-option: its documented argument form ('' for a flag)} of one man page."""
    lines = man.splitlines()
    found: dict[str, str] = {}
    for i, line in enumerate(lines[:-1]):
        if line.strip() == ".TP" and lines[i + 1].startswith("\\fB\\-"):
            for match in re.finditer(r"(--[a-z0-9-]+)(\[?=.*?)?(?=, -|$)", _plain(lines[i + 1])):
                found.setdefault(match.group(1), (match.group(2) or "").strip())
    return dict(sorted(found.items()))


def output_variables(man: str) -> list[str]:
    """Returns the variables of the man page's OUTPUT ENVIRONMENT VARIABLES section."""
    section = man.split('.SH "OUTPUT ENVIRONMENT VARIABLES"', 1)[1].split("\n.SH ", 1)[0]
    return sorted(set(re.findall(r"^\\fB(SLURM_[A-Z0-9_]+)", section, re.M)))


def main(repo: str) -> None:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    version = _git(repo, "describe", "--tags").strip()
    record = {"source": "github.com/SchedMD/slurm", "commit": commit, "describe": version}
    for command in ("sbatch", "srun"):
        man = _git(repo, "show", f"HEAD:doc/man/man1/{command}.1")
        record[command] = {"file": f"doc/man/man1/{command}.1", "options": options(man),
                           "output_environment": output_variables(man)}  # fmt: skip
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{c} {len(record[c]['options'])} options" for c in ("sbatch", "srun")))


if __name__ == "__main__":
    main(sys.argv[1])

"""What the ranks of a run must agree on before they train together: the plan and the data, as digests.

Every rank of a run reads its own copy of the plan file and of the dataset; across nodes nothing guarantees
they are the same files. The training entry point gathers `rank_record` from every rank at its start, before
any heavy work, and `first_difference` names the first rank (node, host) that differs from rank 0. No torch.

- plan: SHA-256 of the plan as the rank trains it (the file with zero-run's overrides applied), less
  training.output_dir, which may name each node's own disk.
- data (one rank per node reads it): for local files, each file's name, size and the SHA-256 of its first and
  last 64 KiB, so a large corpus is not read whole on every node; a change of the same size in the middle of a
  file goes unseen. The synthetic set is generated from the seed (in the plan); a hub dataset is named only
  (each node reads the hub or its own cache).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from zero_planner.errors import InputError
from zero_planner.planfile import Plan

EDGE_BYTES = 64 * 1024
"""Bytes hashed at each end of a data file."""
DIGEST_CHARS = 16


def plan_digest(plan: Plan) -> str:
    """Returns the digest of the plan as trained, training.output_dir left out."""
    data = plan.model_dump(mode="json")
    data.get("training", {}).pop("output_dir", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:DIGEST_CHARS]


def data_digest(dataset: str) -> str:
    """Returns the digest of a dataset spec's local files (name, size, first and last 64 KiB of each), or the
    spec itself for the synthetic set and hub names."""
    from zero_planner.run.data import resolve_files

    files = None if dataset == "synthetic" else resolve_files(dataset)
    if files is None:
        return f"name:{dataset}"
    digest = hashlib.sha256()
    for name in sorted(files):
        path = Path(name)
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode())
        with path.open("rb") as f:
            digest.update(f.read(EDGE_BYTES))
            if size > EDGE_BYTES:
                f.seek(max(EDGE_BYTES, size - EDGE_BYTES))
                digest.update(f.read(EDGE_BYTES))
    return digest.hexdigest()[:DIGEST_CHARS]


def rank_record(plan: Plan, *, rank: int, local_rank: int) -> dict[str, Any]:
    """Returns what this rank reports: rank, node (DeepSpeed's CROSS_RANK), host, plan digest, and the data
    digest on each node's first rank (None elsewhere; the error instead when its files cannot be read)."""
    data, error = None, None
    if local_rank == 0:
        try:
            data = data_digest(plan.training.dataset)
        except (InputError, OSError) as caught:  # reported through the gather: every rank leaves together
            error = str(caught)
    return {"rank": rank, "node": int(os.environ.get("CROSS_RANK", "0")), "host": socket.gethostname(),
            "plan": plan_digest(plan), "data": data, "error": error}  # fmt: skip


def first_difference(records: list[dict[str, Any]], dataset: str) -> str | None:
    """Returns one line naming the first rank whose plan or data differs from rank 0's, or None when all agree."""
    ordered = sorted(records, key=lambda r: r["rank"])
    ref = ordered[0]

    def where(r: dict[str, Any]) -> str:
        return f"rank {r['rank']} (node {r['node']}, host {r['host']})"

    for r in ordered:
        if r.get("error"):
            return f"{where(r)}: {r['error']}"
    for r in ordered[1:]:
        if r["plan"] != ref["plan"]:
            return (f"{where(r)} trains another plan than {where(ref)} (digest {r['plan']} vs {ref['plan']}): "
                    "give every node the same plan file and the same zero-run options (only --output-dir may differ)")
    for r in ordered[1:]:
        if r["data"] is not None and ref["data"] is not None and r["data"] != ref["data"]:
            return (f"{where(r)} reads other data than {where(ref)} for dataset {dataset!r} (digest {r['data']} vs "
                    f"{ref['data']}): copy the same files to every node")  # fmt: skip
    return None

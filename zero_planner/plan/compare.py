"""`zero-plan --compare`: which cluster trains N tokens soonest, and cheapest: each cluster's best plan, ranked.

    parse_clusters("1xH100,2xA100-80GB", cpu_mem) -> [(text, Cluster)]
    parse_tokens("2B") -> 2_000_000_000
    parse_prices("H100=2.5,A100-80GB=1.8") -> {"H100-SXM": 2.5, "A100-80GB": 1.8}   ($ per GPU-hour)
    compare(spec, clusters, PlanRequest(seq_len=...), tokens=N, prices={...}) -> [ClusterRow], ranked

Each cluster is planned as `zero-plan --gpus` would (search.plan, the same options); its chosen plan's
tokens/s gives the time to train N tokens, and, with a price per GPU-hour for its GPU type, the cost. Ranked by
time (then cost); clusters where nothing fits come last. Pure planning code: no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zero_planner.errors import InputError
from zero_planner.hardware import Cluster, find_gpu, parse_gpus
from zero_planner.plan.options import PlanResult
from zero_planner.plan.request import PlanRequest
from zero_planner.plan.search import plan
from zero_planner.plan.throughput import Calibration

_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_COUNT_RE = re.compile(r"^\s*(\d[\d_,]*(?:\.\d+)?(?:e[+-]?\d+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)


def parse_tokens(text: str) -> int:
    """Returns the token count of `--tokens` (2000000000, 2e9, 2B, 500M, 1.5T). Raises InputError."""
    match = _COUNT_RE.match(str(text))
    if match is None:
        raise InputError(f"bad --tokens value {text!r}: use a count such as 2000000000, 2e9, 2B, 500M or 1.5T")
    value = float(match.group(1).replace("_", "").replace(",", "")) * _SUFFIXES[match.group(2).lower()]
    if value < 1:
        raise InputError(f"bad --tokens value {text!r}: at least one token")
    return int(round(value))


def parse_clusters(text: str, cpu_mem: str | int | None = None) -> list[tuple[str, Cluster]]:
    """Returns each `--compare` entry (comma-separated `--gpus` forms) with its Cluster. Raises InputError
    naming the bad entry and the forms (or the GPU types) it may take."""
    items = [item.strip() for item in str(text).split(",")]
    if not any(items) or any(not item for item in items):
        raise InputError(f"bad --compare value {text!r}: give clusters separated by commas, e.g. "
                         f"1xH100,2xA100-80GB,4xRTX4090")  # fmt: skip
    clusters = []
    for item in items:
        try:
            clusters.append((item, parse_gpus(item, cpu_mem)))
        except InputError as error:
            raise InputError(f"--compare: {error}") from None
    return clusters


def parse_prices(text: str) -> dict[str, float]:
    """Returns `--price` as {catalog GPU name: price per GPU-hour}: `H100=2.5,A100-80GB=1.8` (a leading $ is
    allowed). Raises InputError naming the bad entry."""
    prices: dict[str, float] = {}
    for item in (part.strip() for part in str(text).split(",")):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InputError(f"bad --price entry {item!r}: use GPU=PRICE per GPU-hour, e.g. H100=2.5,A100-80GB=1.8")
        try:
            gpu = find_gpu(name.strip())
        except InputError as error:
            raise InputError(f"bad --price entry {item!r}: {error}") from None
        try:
            price = float(value.strip().lstrip("$"))
        except ValueError:
            price = float("nan")
        if not price > 0 or price == float("inf"):
            raise InputError(f"bad --price entry {item!r}: the price per GPU-hour must be a positive number")
        if gpu.name in prices:
            raise InputError(f"bad --price value {text!r}: {gpu.name} is priced twice")
        prices[gpu.name] = price
    return prices


@dataclass(frozen=True)
class ClusterRow:
    """One cluster of the comparison: its best plan (or why nothing fits), and what N tokens take on it."""

    label: str
    """The cluster as the user wrote it (`2xA100-80GB`)."""
    cluster: Cluster
    result: PlanResult
    tokens: int
    """Tokens to train."""
    price_per_gpu_hour: float | None
    """The user's price for this GPU type; None when not given."""

    @property
    def fits(self) -> bool:
        return self.result.chosen is not None

    @property
    def tokens_per_second(self) -> float | None:
        """The chosen plan's whole-cluster tokens/s; None when nothing fits or the model does not describe the
        devices (CPU processes)."""
        chosen = self.result.chosen
        if chosen is None or chosen.step is None or not chosen.step.modelled:
            return None
        return chosen.tokens_per_second

    @property
    def hours(self) -> float | None:
        """Hours to train `tokens` at the chosen plan's tokens/s."""
        rate = self.tokens_per_second
        return self.tokens / rate / 3600 if rate else None

    @property
    def gpu_hours(self) -> float | None:
        return self.hours * self.cluster.world_size if self.hours is not None else None

    @property
    def cost(self) -> float | None:
        """GPU-hours x the price per GPU-hour; None without a price or a time."""
        if self.gpu_hours is None or self.price_per_gpu_hour is None:
            return None
        return self.gpu_hours * self.price_per_gpu_hour


def _rank_key(row: ClusterRow) -> tuple:
    # Timed rows by time, then cost; fitting rows without a time (CPU processes) next; nothing fits last.
    if row.hours is not None:
        return (0, row.hours, row.cost if row.cost is not None else float("inf"))
    return (1 if row.fits else 2, 0.0, 0.0)


def compare(spec, clusters: list[tuple[str, Cluster]], request: PlanRequest, *, tokens: int,
            prices: dict[str, float] | None = None,
            calibrations: dict[str, Calibration] | None = None) -> list[ClusterRow]:  # fmt: skip
    """Returns every cluster's row, ranked by time to train `tokens` (then cost), each planned by search.plan for
    `request`; `calibrations` the step-time constants of a cluster by its label (this machine's for `auto`), in
    place of the request's. A price naming a GPU type no cluster uses is an error (a typo would silently drop the
    cost). Raises InputError."""
    prices = prices or {}
    used = {cluster.gpu.name for _, cluster in clusters}
    unused = sorted(set(prices) - used)
    if unused:
        raise InputError(f"--price names {', '.join(unused)}, which no cluster in --compare uses "
                         f"(they use {', '.join(sorted(used))})")  # fmt: skip
    rows = []
    for label, cluster in clusters:
        result = plan(spec, cluster, request.but(calibration=(calibrations or {}).get(label)))
        rows.append(ClusterRow(label, cluster, result, tokens, prices.get(cluster.gpu.name)))
    return sorted(rows, key=_rank_key)


def row_json(row: ClusterRow) -> dict[str, Any]:
    """Returns one row as the --compare --json answer lists it (bytes as integers, hours as floats)."""
    chosen = row.result.chosen
    best = None
    if chosen is not None:
        best = {"stage": chosen.strategy.name, "gradient_checkpointing": chosen.gradient_checkpointing,
                "micro_batch_size": chosen.micro_batch_size,
                "gradient_accumulation_steps": chosen.gradient_accumulation_steps,
                "gpu_total_bytes": chosen.memory.total_bytes, "cpu_total_bytes": chosen.memory.cpu_total_bytes,
                "precision": row.result.precision,
                "method": row.result.plan.training.method if row.result.plan is not None else None}  # fmt: skip
    return {"cluster": row.label, "gpu": row.cluster.gpu.name, "nodes": row.cluster.nodes,
            "gpus_per_node": row.cluster.gpus_per_node, "fits": row.fits, "plan": best,
            "tokens_per_second": row.tokens_per_second, "hours": row.hours, "gpu_hours": row.gpu_hours,
            "price_per_gpu_hour": row.price_per_gpu_hour, "cost": row.cost,
            "advice": [] if row.fits else row.result.advice}  # fmt: skip

"""The built-in model catalog: catalog/models/*.json, one file per model with its config and parameter table
(written by models/build_catalog.py), read without torch or transformers.

    catalog_entries()     -> {slug: entry}, every file, sorted by slug
    catalog_index()       -> {lower-cased name, hub id, alias or `org/name`'s name part: slug}
    list_catalog()        -> the slugs
    catalog_entry(name)   -> the entry a name resolves to, or None
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


def catalog_dir():
    return resources.files("zero_planner").joinpath("catalog/models")


@lru_cache(maxsize=1)
def catalog_entries() -> dict[str, dict[str, Any]]:
    """Returns the catalog entries keyed by slug (file name without .json), sorted."""
    entries = {}
    for item in sorted(catalog_dir().iterdir(), key=lambda p: p.name):
        if item.name.endswith(".json"):
            entries[item.name[: -len(".json")]] = json.loads(item.read_text(encoding="utf-8"))
    return entries


@lru_cache(maxsize=1)
def catalog_index() -> dict[str, str]:
    """Returns lower-cased name -> slug for slugs, hub ids, aliases and the name part of every `org/name`."""
    index: dict[str, str] = {}
    for slug, entry in catalog_entries().items():
        names = [slug, entry["hub_id"], *entry.get("aliases", [])]
        for name in names:
            index.setdefault(name.lower(), slug)
        for name in names:
            index.setdefault(name.rsplit("/", 1)[-1].lower(), slug)
    return index


def list_catalog() -> list[str]:
    """Returns the catalog's model names (slugs), sorted."""
    return list(catalog_entries())


def catalog_entry(name: str) -> dict[str, Any] | None:
    """Returns the raw catalog entry (hub_id, aliases, published_params, config, params) for a name, or None."""
    slug = catalog_index().get(name.strip().lower())
    return None if slug is None else catalog_entries()[slug]

"""Model specs: architecture and exact parameter counts from the catalog, a folder, a config.json or the hub."""

from zero_planner.models.catalog import catalog_entry, list_catalog
from zero_planner.models.spec import ModelSpec, load_model_spec

__all__ = ["ModelSpec", "catalog_entry", "list_catalog", "load_model_spec"]

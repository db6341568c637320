"""Counts and activation traces of models outside the catalog, kept on disk so that a config is counted once.

    cached_table(config, name) -> param_table(config), its "activations" a TracedActivations

Catalog models carry their tables in the package, and so, in effect, does a config of a catalog architecture
of a type models/analytic.py covers (llama, mistral, qwen2, qwen3, phi3, mixtral, qwen3_moe, olmoe, olmo2, gpt_neox,
gemma2, gpt2: counted from the config, the catalog's traced activations; no cache, no torch). Other configs of those
types are counted the same way (no meta-device build); all but gemma2 get the 16-bit SDPA entry in closed form, and
all but gemma2, phi3 and gpt2 the 16-bit LoRA entry too (analytic.lora_16bit_activations), so that a bf16
or fp16 plan of them, full or LoRA, imports neither torch nor peft.
Anything else (a config.json, a folder, a hub id) is built on the meta device, which costs seconds: importing
torch and transformers, then one build per traced run. Here the
counts are stored the first time, and each activation entry (one dtype and attention implementation: four runs;
one dtype of the LoRA table: ten runs, and peft) is traced the first time the memory model reads it, then
stored too. A plan traces only what it reads (bf16 with SDPA: four runs, no peft), and the next plan of the
same config imports neither torch nor transformers. The values are those of models/activations.py's traced_coefficients
(same functions; test_trace_cache checks the two agree).

Where: $ZERO_PLANNER_CACHE_DIR, else $XDG_CACHE_HOME/zero-planner, else ~/.cache/zero-planner; one JSON file per
config, named by a hash of the config, the torch, transformers and peft versions, and the source of the
counting code (models/count.py, models/hf.py, models/analytic.py, models/activations.py), so that an upgrade or a change to the tracer
counts again. A cache that cannot be read or written is ignored: the plan is the same, only slower.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from zero_planner.models.activations import (
    attention_coefficients,
    closed_form_coefficients,
    lora_dtype_coefficients,
    runs_on_meta,
)
from zero_planner.models.analytic import (
    analytic_table,
    catalog_activations,
    lora_16bit_activations,
    sdpa_16bit_activations,
)
from zero_planner.models.count import count_params, with_activations
from zero_planner.quiet import quiet_libraries

CACHE_DIR_ENV = "ZERO_PLANNER_CACHE_DIR"
CODE_FILES = ("models/count.py", "models/hf.py", "models/analytic.py", "models/activations.py")
"""The package's files whose source is part of the cache key: what counts parameters and traces activations."""
KEYED_DISTRIBUTIONS = ("torch", "transformers", "peft")
WIDTHS = {"16bit": "bfloat16", "fp32": "float32"}
"""Table key -> the dtype traced for it (fp16 keeps the same bytes as bf16)."""
ATTENTIONS = ("sdpa", "eager")


def cache_dir() -> Path:
    """Returns the folder holding the cached tables (not created here)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "zero-planner"


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "none"


def cache_key(config: dict[str, Any]) -> str:
    """Returns the hex key of `config`'s cache file: config, library versions and counting code hashed together."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for distribution in KEYED_DISTRIBUTIONS:
        digest.update(f"\0{distribution}={_version(distribution)}".encode())
    package = Path(__file__).resolve().parent.parent
    for name in CODE_FILES:
        digest.update(b"\0" + (package / name).read_bytes())
    return digest.hexdigest()[:32]


class _Store:
    """One cache file, read once: {"table": counts, "activations": what has been traced, "fp32_runs": bool}."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        self.data: dict[str, Any] = data if isinstance(data, dict) else {}

    def save(self) -> None:
        """Writes the file atomically (another zero-plan may read it meanwhile); gives up quietly on OSError."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.path.parent, suffix=".tmp", delete=False,
                                             encoding="utf-8") as tmp:  # fmt: skip
                json.dump(self.data, tmp)
            os.replace(tmp.name, self.path)
        except OSError:
            pass


def cached_table(config: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """Returns param_table(config, name) with lazily traced activations, counting only on a cache miss.

    Raises InputError (from the count) when transformers cannot build the model; failures are not cached."""
    counted = analytic_table(config)  # the types models/analytic.py covers: counted from the config
    if counted is not None:
        borrowed = catalog_activations(config)  # the same architecture is in the catalog, traced
        if borrowed is not None:
            return with_activations(counted, borrowed)
    store = _Store(cache_dir() / "models" / f"{cache_key(config)}.json")
    table = store.data.get("table")
    if not isinstance(table, dict):
        table = counted or count_params(config, name)
        store.data = {"table": table}
        store.save()
    acts = store.data.setdefault("activations", {"method": "traced"})
    closed = sdpa_16bit_activations(config) if counted is not None else None  # llama-style types only
    if closed is not None and acts.get("method") == "traced" and "sdpa" not in acts.get("16bit", {}):
        # The entry a 16-bit plan reads, from the closed form that equals the trace (models/analytic.py): such a
        # plan imports no torch; the other entries are traced when read.
        acts.setdefault("16bit", {})["sdpa"] = closed
        store.save()
    lora = lora_16bit_activations(config) if closed is not None else None  # analytic.LORA_CLOSED_FORM's types
    if lora is not None and acts.get("method") == "traced" and "lora_why" not in acts \
            and "16bit" not in acts.get("lora", {}):
        # The LoRA entry a 16-bit LoRA plan reads, from the closed form that equals the trace: no torch, no peft.
        acts.setdefault("lora", {})["16bit"] = lora
        store.save()
    return with_activations(table, TracedActivations(config, table["architecture"], store))


def _why(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"


class TracedActivations(Mapping):
    """The activation table of models/activations.py (`{method, 16bit, fp32, fp32_derived?, lora | lora_why}`,
    or the closed form with `why`), each entry traced when first read and kept in the cache.

    As in activation_coefficients: a model the meta device cannot run (mixture-of-experts routing) gets the
    closed form for the whole table; fp32 figures are the 16-bit ones doubled where fp32 does not run; a LoRA
    table that cannot be traced is absent, with lora_why. Iterating traces every entry."""

    def __init__(self, config: dict[str, Any], arch: dict[str, Any], store: _Store) -> None:
        self._config, self._arch, self._store = config, arch, store

    def _acts(self) -> dict[str, Any]:
        return self._store.data.setdefault("activations", {"method": "traced"})

    def _closed_form(self) -> bool:
        return self._acts().get("method") == "closed-form"

    def __bool__(self) -> bool:  # without it, `spec.activations or ...` would call __len__ and trace everything
        return True

    def __getitem__(self, key: str) -> Any:
        if self._closed_form():
            return self._acts()[key]
        if key in WIDTHS:
            return _ByAttention(self, key)
        if key == "fp32_derived":
            if self._fp32_derived():
                return True
            raise KeyError(key)
        if key == "lora":
            if "lora_why" in self._acts():
                raise KeyError(key)
            return _LoraByWidth(self)  # traced per width when read: a bf16 plan needs no fp32 LoRA table
        if key == "lora_why":
            self.lora_coefficients("16bit")
        elif key in ("method", "why"):
            self.coefficients("16bit", "sdpa")  # "traced" only once a trace has run: it may fall back
            if self._closed_form():
                return self._acts()[key]
        return self._acts()[key]

    def __contains__(self, key: object) -> bool:
        if key == "lora" and not self._closed_form():
            return self.lora_coefficients("16bit") is not None  # whether peft's adapters trace on this model
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.materialise())

    def __len__(self) -> int:
        return len(self.materialise())

    def materialise(self) -> dict[str, Any]:
        """Returns the whole table as activation_coefficients would, tracing whatever is still missing."""
        for key in WIDTHS:
            for attn in ATTENTIONS:
                self.coefficients(key, attn)
        for key in WIDTHS:
            self.lora_coefficients(key)
        acts = self._acts()
        if acts.get("method") == "closed-form":
            return dict(acts)
        order = ["method", "16bit", "fp32", "fp32_derived", "lora", "lora_why"]
        out = {k: acts[k] for k in order if k in acts}
        out["16bit"], out["fp32"] = ({a: acts[k][a] for a in ATTENTIONS} for k in WIDTHS)
        if "lora_why" in out:  # as traced_coefficients: one width that cannot be traced drops the LoRA table
            out.pop("lora", None)
        else:
            out["lora"] = {k: acts["lora"][k] for k in WIDTHS}
        return out

    def coefficients(self, key: str, attn: str) -> dict[str, float]:
        """Returns table[key][attn] ({layer, layer_per_seq, rest}), tracing it on first use."""
        acts = self._acts()
        if acts.get("method") == "closed-form" or attn in acts.get(key, {}):
            return acts[key][attn]
        try:
            if key == "fp32" and self._fp32_derived():
                # transformers' grouped expert matmul takes 16-bit inputs only: twice the 16-bit bytes.
                entry = {k: v * 2 for k, v in self.coefficients("16bit", attn).items()}
            else:
                with quiet_libraries():
                    entry = attention_coefficients(self._config, WIDTHS[key], attn)
        except Exception as error:  # data-dependent shapes (MoE routing) are not supported on meta
            table = closed_form_coefficients(self._arch)
            table["why"] = _why(error)
            self._store.data["activations"] = table
            self._store.save()
            return table[key][attn]
        acts = self._acts()
        if acts.get("method") == "closed-form":  # the 16-bit trace behind a derived entry failed
            return acts[key][attn]
        acts.setdefault(key, {})[attn] = entry
        self._store.save()
        return entry

    def _fp32_derived(self) -> bool:
        if "fp32_runs" not in self._store.data:
            with quiet_libraries():
                self._store.data["fp32_runs"] = runs_on_meta(self._config, "float32")
            self._store.save()
        derived = not self._store.data["fp32_runs"]
        if derived:
            self._acts()["fp32_derived"] = True
        return derived

    def lora_coefficients(self, key: str) -> dict[str, float] | None:
        """Returns table["lora"][key] (peft all-linear adapters on a frozen base), tracing it on first use;
        None where the adapters cannot be traced (lora_why says why) or the table is the closed form."""
        acts = self._acts()
        if acts.get("method") == "closed-form" or "lora_why" in acts:
            return None
        if key in acts.get("lora", {}):
            return acts["lora"][key]
        scores_per_seq = self.coefficients(key, "sdpa")["layer_per_seq"]  # traced already where memory.py asks
        if self._acts().get("method") == "closed-form":  # that trace failed here: no adapter table either
            return None
        try:
            with quiet_libraries():  # imports peft (and with it bitsandbytes, where installed)
                entry = lora_dtype_coefficients(self._config, WIDTHS[key], scores_per_seq)
        except Exception as error:  # the adapter trace is optional: memory.py falls back to the closed form
            acts["lora_why"] = _why(error)
            entry = None
        else:
            acts.setdefault("lora", {})[key] = entry
        self._store.save()
        return entry


class _LoraByWidth(Mapping):
    """table["lora"]: {"16bit" | "fp32": LoRA coefficients}, each traced on first use; a width that cannot be
    traced reads as missing (memory.py then takes the closed form)."""

    def __init__(self, owner: TracedActivations) -> None:
        self._owner = owner

    def __getitem__(self, key: str) -> dict[str, float]:
        entry = self._owner.lora_coefficients(key) if key in WIDTHS else None
        if entry is None:
            raise KeyError(key)
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(WIDTHS)

    def __len__(self) -> int:
        return len(WIDTHS)


class _ByAttention(Mapping):
    """table["16bit"] or table["fp32"]: {attention implementation: coefficients}, traced per key on first use."""

    def __init__(self, owner: TracedActivations, key: str) -> None:
        self._owner, self._key = owner, key

    def __getitem__(self, attn: str) -> dict[str, float]:
        if attn not in ATTENTIONS:
            raise KeyError(attn)
        return self._owner.coefficients(self._key, attn)

    def __iter__(self) -> Iterator[str]:
        return iter(ATTENTIONS)

    def __len__(self) -> int:
        return len(ATTENTIONS)

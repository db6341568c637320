"""Training data for zero-run: load text, tokenize, pack into seq_len blocks, and hand each rank its share.

Sources (`training.dataset` in the plan):
- `synthetic`: built in, generated deterministically from the seed; patterned sentences, counting and small
  sums that a tiny model visibly learns within a few dozen steps. No network, no files.
- local files: a .json/.jsonl/.parquet/.txt file, a glob, or a folder of such files (`text_field` names the
  column; .txt files give one example per line in column `text`).
- a hub dataset name (`name` or `name:config`), through `datasets.load_dataset`; offline it must be cached.

The order is a pure function of (seed, position): optimizer step s on rank r always reads the same blocks,
which is what lets `--resume` replay the exact data stream by restoring only the step counter.
"""

from __future__ import annotations

import glob as globlib
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from zero_planner.errors import InputError

# The synthetic corpus has a fixed size so that the data order never depends on max_steps (a run cut at N/2
# and resumed to N reads what a straight run to N reads). ~4096 docs * ~250 bytes ≈ 1 MB of text.
SYNTHETIC_NUM_DOCS = 4096

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text"}

_ADJ = ["red", "small", "quick", "lazy", "green", "old", "bright", "quiet"]
_NOUN = ["fox", "dog", "cat", "bird", "tree", "river", "house", "star"]
_VERB = ["sees", "jumps over", "follows", "finds", "likes", "watches"]


def synthetic_texts(num_docs: int = SYNTHETIC_NUM_DOCS, seed: int = 1234) -> list[str]:
    """Returns `num_docs` documents of patterned text, identical for the same seed on every machine."""
    rng = random.Random(seed)
    docs = []
    for _ in range(num_docs):
        lines = []
        for _ in range(rng.randint(4, 8)):
            kind = rng.randrange(3)
            if kind == 0:
                a, b = rng.randint(0, 20), rng.randint(0, 20)
                lines.append(f"{a} + {b} = {a + b}.")
            elif kind == 1:
                start = rng.randint(0, 30)
                lines.append("count: " + " ".join(str(start + i) for i in range(6)) + ".")
            else:
                a1, n1, v, a2, n2 = (rng.choice(x) for x in (_ADJ, _NOUN, _VERB, _ADJ, _NOUN))
                lines.append(f"the {a1} {n1} {v} the {a2} {n2}.")
        docs.append(" ".join(lines))
    return docs


def resolve_files(spec: str) -> list[str] | None:
    """Returns the local data files `spec` names (file, folder or glob), or None when it is not local."""
    if any(ch in spec for ch in "*?["):
        files = sorted(globlib.glob(spec))
        if not files:
            raise InputError(f"dataset glob {spec!r} matches no files")
        return files
    path = Path(spec).expanduser()
    if path.is_file():
        return [str(path)]
    if path.is_dir():
        files = sorted(str(p) for p in path.rglob("*") if p.suffix in FILE_BUILDERS)
        if not files:
            raise InputError(f"dataset folder {spec!r} has no {'/'.join(FILE_BUILDERS)} files")
        return files
    if spec.startswith((".", "/", "~")) or Path(spec).suffix in FILE_BUILDERS:
        raise InputError(f"dataset file {spec!r} does not exist")
    return None


def load_text_dataset(spec: str, text_field: str = "text", *, seed: int = 1234):
    """Returns a `datasets.Dataset` with one column `text`, from the synthetic corpus, local files or the hub."""
    import datasets

    if spec == "synthetic":
        return datasets.Dataset.from_dict({"text": synthetic_texts(SYNTHETIC_NUM_DOCS, seed)})
    files = resolve_files(spec)
    if files is not None:
        suffixes = {Path(f).suffix for f in files}
        unknown = suffixes - set(FILE_BUILDERS)
        if unknown:
            raise InputError(f"dataset files of type {sorted(unknown)} are not supported; use {sorted(FILE_BUILDERS)}")
        builders = {FILE_BUILDERS[s] for s in suffixes}
        if len(builders) > 1:
            raise InputError(f"dataset {spec!r} mixes file types {sorted(suffixes)}; use one type")
        builder = builders.pop()
        try:
            ds = datasets.load_dataset(builder, data_files=files, split="train")
        except Exception as error:  # datasets raises many types for malformed files
            raise InputError(f"dataset {spec!r} could not be read as {builder}: {error}") from None
        field = "text" if builder == "text" else text_field
    else:
        name, _, config = spec.partition(":")
        try:
            ds = datasets.load_dataset(name, config or None, split="train")
        except Exception as error:
            raise InputError(
                f"dataset {spec!r} could not be loaded from the hub or its cache "
                f"(offline? not a dataset name?): {type(error).__name__}: {str(error).splitlines()[0][:200]}"
            ) from None
        field = text_field
    if field not in ds.column_names:
        raise InputError(f"dataset {spec!r} has no column {field!r}; columns: {ds.column_names} (set text_field)")
    ds = ds.select_columns([field])
    return ds.rename_column(field, "text") if field != "text" else ds


def pack_ids(docs: list[list[int]], seq_len: int, eos_token_id: int) -> list[list[int]]:
    """Returns seq_len blocks cut from the documents joined end to end, each followed by eos; the tail is dropped."""
    stream: list[int] = []
    for ids in docs:
        stream.extend(ids)
        stream.append(eos_token_id)
    usable = len(stream) // seq_len * seq_len
    return [stream[i : i + seq_len] for i in range(0, usable, seq_len)]


def tokenize_and_pack(ds, tokenizer, seq_len: int, *, batch_size: int = 1000):
    """Returns a `datasets.Dataset` of `input_ids` blocks of exactly `seq_len` tokens."""

    def pack(batch):
        return {"input_ids": pack_ids(tokenizer.encode_batch(batch["text"]), seq_len, tokenizer.eos_token_id)}

    return ds.map(pack, batched=True, batch_size=batch_size, remove_columns=ds.column_names, desc="pack")


@dataclass(frozen=True)
class BlockOrder:
    """Which blocks rank `rank` reads at micro-step k: a seeded permutation per epoch, dealt out round-robin.

    Global position p = (k * world_size + rank) * micro_batch_size + j, j < micro_batch_size; epoch
    p // num_blocks reads permutation(seed + epoch). No two ranks read the same block within an epoch.
    """

    num_blocks: int
    world_size: int
    rank: int
    micro_batch_size: int
    seed: int

    def __post_init__(self):
        if self.num_blocks < self.world_size * self.micro_batch_size:
            raise InputError(
                f"the dataset packs into {self.num_blocks} blocks, fewer than one micro-batch per rank "
                f"(world_size({self.world_size}) * micro_batch({self.micro_batch_size})); use more data or a "
                f"shorter seq_len"
            )

    def micro_batch(self, k: int) -> list[int]:
        """Returns the block indices of micro-step k (0-based, counted over the whole run) on this rank."""
        start = (k * self.world_size + self.rank) * self.micro_batch_size
        return [self.block_at(p) for p in range(start, start + self.micro_batch_size)]

    def block_at(self, position: int) -> int:
        epoch, i = divmod(position, self.num_blocks)
        return int(_permutation(self.num_blocks, self.seed + epoch)[i])


@lru_cache(maxsize=4)
def _permutation(n: int, seed: int):
    import numpy as np

    return np.random.default_rng(seed).permutation(n)

"""Training data for zero-run: load text, tokenize, pack into seq_len blocks, and hand each rank its share.

Sources (`training.dataset` in the plan):
- `synthetic`: built in, generated deterministically from the seed; patterned sentences, counting and small
  sums that a tiny model visibly learns within a few dozen steps. No network, no files. For `seq-cls`, short
  texts whose topic (one of `num_labels`) is the label.
- local files: a .json/.jsonl/.csv/.parquet/.txt file, a glob, or a folder of such files (`text_field` names
  the column; .txt files give one example per line in column `text`; `seq-cls` also needs a `label` column).
- a hub dataset name (`name` or `name:config`), through `datasets.load_dataset`; offline it must be cached.

Causal LM data is packed into seq_len blocks (`tokenize_and_pack`); classification examples stay one per row,
truncated and right-padded to seq_len with an attention mask (`tokenize_and_pad`).

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

FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
LABEL_FIELD = "label"

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
    ds, field = _load_raw(spec, text_field)
    ds = ds.select_columns([field])
    return ds.rename_column(field, "text") if field != "text" else ds


def _load_raw(spec: str, text_field: str):
    """Returns (dataset with all its columns, name of its text column) from local files or the hub."""
    import datasets

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
    return ds, field


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


# --- sequence classification ---

# One topic per class: the synthetic text's words come mostly from its class's topic, so the label is
# visible in the bytes themselves and a tiny randomly initialised model separates the classes in a few dozen
# steps. Classes beyond the named topics get made-up words, still distinct per class.
_TOPICS = [
    ["goal", "match", "team", "score", "coach", "league", "player", "stadium"],
    ["rain", "cloud", "storm", "sunny", "wind", "snow", "forecast", "thunder"],
    ["bread", "soup", "cheese", "apple", "pasta", "salad", "butter", "honey"],
    ["guitar", "melody", "drum", "singer", "piano", "chorus", "rhythm", "violin"],
    ["engine", "wheel", "brake", "truck", "garage", "diesel", "tyre", "clutch"],
    ["planet", "orbit", "comet", "galaxy", "rocket", "nebula", "moon", "quasar"],
]
_FILLER = ["the", "a", "of", "and", "is", "was", "with", "very", "today", "again"]
SYNTHETIC_NUM_EXAMPLES = 4096


def _topic_words(label: int) -> list[str]:
    if label < len(_TOPICS):
        return _TOPICS[label]
    rng = random.Random(label)
    letters = "bcdfghjklmnpqrstvwxz"
    return ["".join(rng.choice(letters) + rng.choice("aeiou") for _ in range(3)) + str(label) for _ in range(8)]


def synthetic_classification(num_labels: int, num_examples: int = SYNTHETIC_NUM_EXAMPLES, seed: int = 1234):
    """Returns (texts, labels): short texts whose topic is the label (0 <= label < num_labels), deterministic."""
    if num_labels < 2:
        raise InputError(f"num_labels {num_labels} must be at least 2 for sequence classification")
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(num_examples):
        label = rng.randrange(num_labels)
        words = _topic_words(label)
        n = rng.randint(5, 10)
        # About two topic words for every filler word.
        texts.append(" ".join(rng.choice(words) if rng.random() < 0.7 else rng.choice(_FILLER) for _ in range(n)))
        labels.append(label)
    return texts, labels


def load_classification_dataset(spec: str, text_field: str = "text", *, num_labels: int, seed: int = 1234):
    """Returns a `datasets.Dataset` with columns `text` and `label` (int in [0, num_labels)).

    Labels may be integers or strings; strings are numbered in sorted order (and must be at most num_labels).
    """
    import datasets

    if spec == "synthetic":
        texts, labels = synthetic_classification(num_labels, seed=seed)
        return datasets.Dataset.from_dict({"text": texts, LABEL_FIELD: labels})
    ds, field = _load_raw(spec, text_field)
    if LABEL_FIELD not in ds.column_names:
        raise InputError(f"dataset {spec!r} has no column {LABEL_FIELD!r} for seq-cls; columns: {ds.column_names}")
    ds = ds.select_columns([field, LABEL_FIELD])
    if field != "text":
        ds = ds.rename_column(field, "text")
    values = list(ds[LABEL_FIELD])
    if all(isinstance(v, str) for v in values):
        names = sorted(set(values))
        if len(names) > num_labels:
            raise InputError(
                f"dataset {spec!r} has {len(names)} label names {names[:10]} but the plan has num_labels({num_labels})"
            )
        index = {name: i for i, name in enumerate(names)}
        return ds.remove_columns(LABEL_FIELD).add_column(LABEL_FIELD, [index[v] for v in values])
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < num_labels]
    if bad:
        raise InputError(
            f"dataset {spec!r} has label {bad[0]!r}; labels must be integers in [0, {num_labels}) "
            f"(num_labels({num_labels})) or class names"
        )
    return ds


def pad_ids(ids: list[int], seq_len: int, pad_token_id: int) -> tuple[list[int], list[int]]:
    """Returns (input_ids, attention_mask): `ids` truncated to seq_len and right-padded with pad_token_id."""
    ids = ids[:seq_len]
    pad = seq_len - len(ids)
    return ids + [pad_token_id] * pad, [1] * len(ids) + [0] * pad


def tokenize_and_pad(ds, tokenizer, seq_len: int, pad_token_id: int, *, batch_size: int = 1000):
    """Returns a `datasets.Dataset` of `input_ids`, `attention_mask` (seq_len each) and `labels`, one per row.

    Empty texts are dropped: a sequence with no token has no last token for the classification head.
    """

    def encode(batch):
        out = {"input_ids": [], "attention_mask": [], "labels": []}
        for ids, label in zip(tokenizer.encode_batch(batch["text"]), batch[LABEL_FIELD]):
            if not ids:
                continue
            padded, mask = pad_ids(ids, seq_len, pad_token_id)
            out["input_ids"].append(padded)
            out["attention_mask"].append(mask)
            out["labels"].append(int(label))
        return out

    return ds.map(encode, batched=True, batch_size=batch_size, remove_columns=ds.column_names, desc="pad")


def pad_token_id_for(tokenizer) -> int:
    """Returns the id to pad classification inputs with: the tokenizer's pad token, else its eos token.

    Sequence-classification heads pool the last token that is not padding, so this id must never occur in
    the text itself: eos is not added to classification texts, and the byte tokenizer never emits it.
    """
    inner = getattr(tokenizer, "_tok", None)
    pad = getattr(inner, "pad_token_id", None) if inner is not None else getattr(tokenizer, "pad_token_id", None)
    return int(pad) if pad is not None else int(tokenizer.eos_token_id)


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

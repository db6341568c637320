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
from zero_planner.planfile import FILE_BUILDERS

# The synthetic corpus has a fixed size so that the data order never depends on max_steps (a run cut at N/2
# and resumed to N reads what a straight run to N reads). ~4096 docs * ~250 bytes ≈ 1 MB of text.
SYNTHETIC_NUM_DOCS = 4096

HELD_BYTES_PER_TOKEN = {"text": 1.3, "labeled": 17.0}
"""Host bytes (anonymous resident memory) each rank holds per token of its packed data for the rest of the run
(benchmarks/data_rss.py, 2026-11-28, 75 MB of JSONL, byte and large-vocabulary ids alike): text blocks live in the
datasets cache (memory-mapped), 1.3; chat and prompt/response blocks as two int32 columns in memory, 16.3 (17.0 at
15 MB). Two H200s ran both through zero-run (Llama 3.2 1B): +0.08 and +1.07 GiB per rank in train."""
PEAK_BYTES_PER_TOKEN = {"text": 7.2, "labeled": 51.3}
"""Host bytes per token at the peak of tokenizing and packing (the same runs: text 4.4-7.2, prompt/response
50.4-51.3)."""
TOKENS_PER_BYTE = {"bytes": 1.0, "other": 0.25}
"""Tokens per byte of a data file, to size its tokens before tokenizing: the byte-level tokenizer makes one per
byte of text (the file's keys, quotes and separators make it an upper bound: 13.7M tokens packed from a 15.1 MB
JSONL of prompt/response rows); for a model's tokenizer the English BPE rule of thumb of about 4 bytes a token (assumed,
not measured here)."""
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


def builder_for(spec: str, files: list[str]) -> str:
    """Returns the `datasets` builder that reads the local `files` of `spec` (json, csv, parquet, text); InputError
    for a type it cannot read or a mix of types."""
    suffixes = {Path(f).suffix for f in files}
    unknown = suffixes - set(FILE_BUILDERS)
    if unknown:
        raise InputError(f"dataset files of type {sorted(unknown)} are not supported; use {sorted(FILE_BUILDERS)}")
    builders = {FILE_BUILDERS[s] for s in suffixes}
    if len(builders) > 1:
        raise InputError(f"dataset {spec!r} mixes file types {sorted(suffixes)}; use one type")
    return builders.pop()


def _load_raw(spec: str, text_field: str | None, split: str = "train"):
    """Returns (dataset with all its columns, name of its text column) from local files or the hub.

    `text_field` None: no text column is required (chat and prompt-response data)."""
    import datasets

    files = resolve_files(spec)
    if files is not None:
        builder = builder_for(spec, files)
        try:
            ds = datasets.load_dataset(builder, data_files=files, split="train")
        except Exception as error:  # datasets raises many types for malformed files
            raise InputError(f"dataset {spec!r} could not be read as {builder}: {error}") from None
        field = "text" if builder == "text" and text_field is not None else text_field
    else:
        name, _, config = spec.partition(":")
        try:
            ds = datasets.load_dataset(name, config or None, split=split)
        except Exception as error:
            raise InputError(
                f"dataset {spec!r} could not be loaded from the hub or its cache "
                f"(offline? not a dataset name?): {type(error).__name__}: {str(error).splitlines()[0][:200]}"
            ) from None
        field = text_field
    if field is not None and field not in ds.column_names:
        raise InputError(
            f"dataset {spec!r} has no column {field!r}; columns: {ds.column_names} (pass --text-column, or chat / "
            f"prompt-response data with --data-format)"
        )
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


def held_data_bytes(t) -> tuple[int, int, int]:
    """Returns (host bytes each rank holds for its data, its peak while packing it, the tokens they are estimated
    from) of training settings `t` (TrainingInfo): local files' sizes (and a local eval file's) x TOKENS_PER_BYTE x
    HELD_BYTES_PER_TOKEN and PEAK_BYTES_PER_TOKEN of the data's format; (0, 0, 0) for the built-in corpus
    (PROCESS_RSS_BYTES holds it), for hub datasets (not sized before they are downloaded) and for sequence
    classification (padded rows, not measured)."""
    files = resolve_files(t.dataset) if t.dataset != "synthetic" and t.task == "causal-lm" else None
    if not files:
        return 0, 0, 0
    if t.eval_split is not None and not _is_number(t.eval_split):
        files = files + (resolve_files(t.eval_split) or [])
    size = sum(Path(path).stat().st_size for path in files)
    tokens = int(size * TOKENS_PER_BYTE["bytes" if t.tokenizer == "bytes" else "other"])
    kind = "text" if detect_format(peek_columns(files) or ["text"], t) == "text" else "labeled"
    return int(tokens * HELD_BYTES_PER_TOKEN[kind]), int(tokens * PEAK_BYTES_PER_TOKEN[kind]), tokens


def peek_columns(files: list[str]) -> list[str] | None:
    """Returns the column names of the first local data file, read cheaply (first line of JSONL, CSV header,
    Parquet schema; `text` for .txt), or None when that cannot be told without loading it."""
    import csv
    import json

    path = Path(files[0])
    try:
        if path.suffix == ".txt":
            return ["text"]
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                return next(csv.reader(f), [])
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        with path.open(encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
        record = json.loads(first)  # JSONL; a .json array or object is left to datasets
        return list(record) if isinstance(record, dict) else None
    except (OSError, UnicodeDecodeError, ValueError, ImportError):
        return None


def check_columns(t) -> None:
    """Raises InputError when the local dataset of training settings `t` lacks the columns its format needs
    (checked before any rank starts; the ranks check hub datasets once loaded)."""
    if t.dataset == "synthetic" or t.task != "causal-lm":
        return
    files = resolve_files(t.dataset)
    columns = peek_columns(files) if files else None
    if columns is None:
        return
    fmt = detect_format(columns, t)
    needed = {"text": [t.text_field], "chat": [t.messages_field], "prompt-response": [t.prompt_field, t.response_field]}[fmt]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise InputError(
            f"dataset {t.dataset!r} has no column {missing[0]!r} for {fmt} data; columns: {columns} (pass "
            f"--text-column, --messages-column or --prompt-column/--response-column)"
        )


# --- local data files, read through before any rank starts ---

EXCERPT_CHARS = 60
"""Characters of a bad line quoted in the error."""


def check_local_data(t) -> None:
    """Raises InputError (one line: the option, the file, the line or what is wrong, an excerpt) when a local
    dataset or eval file of training settings `t` (TrainingInfo) would fail inside the ranks: every line of JSON
    Lines parsed (a .json array whole), CSV rows against the header, Parquet's footer and null counts, text
    decoded as UTF-8; in every row, the columns the data format needs, of the type it needs (seq-cls: the text
    and a valid label); a held-out eval share that leaves training rows. Reads each file once, in this process
    (zero-plan --dataset, zero-run before it launches); hub datasets are the ranks' to load."""
    if t.dataset != "synthetic":
        files = resolve_files(t.dataset)
        if files is not None:
            builder_for(t.dataset, files)
            rows = sum(_check_file(path, t, "--dataset") for path in files)
            _check_held_out(t, rows)
    if t.eval_split is not None and not _is_number(t.eval_split):
        files = resolve_files(t.eval_split)
        if files is not None:
            builder_for(t.eval_split, files)
            for path in files:
                _check_file(path, t, "--eval-split")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_held_out(t, rows: int) -> None:
    """The test of _eval_rows, on the row count: a share or count must leave training rows."""
    if t.eval_split is None or not _is_number(t.eval_split):
        return
    share = float(t.eval_split)
    if rows < 2 or (share if share >= 1 else round(share * rows)) >= rows:
        raise InputError(f"--eval-split {t.eval_split} holds out all {rows} rows of {t.dataset!r}; give a smaller "
                         f"share")  # fmt: skip


def _check_file(path: str, t, option: str) -> int:
    """Returns the rows of one local data file after checking them (InputError otherwise)."""
    where = f"{option} file {path!r}"
    suffix = Path(path).suffix
    if suffix == ".txt":
        return _check_text(path, where)
    if suffix == ".parquet":
        return _check_parquet(path, t, where)
    checker = _RowChecker(t, where, csv=suffix == ".csv")
    rows = _csv_rows(path, where) if suffix == ".csv" else _json_rows(path, where)
    for line, row in rows:
        checker(line, row)
    checker.finish()
    if not checker.rows:
        raise InputError(f"{where} holds no rows")
    return checker.rows


def _excerpt(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "...")


def _json_rows(path: str, where: str):
    """Yields (line number, row) of a JSON Lines file, or of a .json array or column object (line None).

    Each line must be a JSON object, as the `json` builder reads it (a leading UTF-8 byte-order mark is allowed)."""
    import json

    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf").lstrip()
    whole = None
    if head.startswith(b"[") or (head.startswith(b"{") and not _first_line_is_json(path)):
        # One JSON value over the file: an array of rows, or an object of columns (pretty-printed).
        try:
            whole = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        except UnicodeDecodeError as error:
            raise InputError(f"{where} is not UTF-8 text (byte {error.start})") from None
        except json.JSONDecodeError as error:
            if head.startswith(b"["):
                if error.pos >= len(error.doc.rstrip()):
                    raise InputError(f"{where} ends before its JSON is complete (line {error.lineno}: {error.msg}); "
                                     f"truncated?") from None  # fmt: skip
                bad = error.doc.splitlines()[error.lineno - 1]
                raise InputError(f"{where} line {error.lineno}: not valid JSON ({error.msg}, column {error.colno}): "
                                 f"{_excerpt(bad)}") from None  # fmt: skip
            # Not one object either: read it as JSON Lines below, which names the first bad line.
    if isinstance(whole, list):
        for row in whole:
            yield None, ({"text": row} if isinstance(row, str) else row)
        return
    if isinstance(whole, dict):
        if not (whole and all(isinstance(v, list) for v in whole.values())):
            raise InputError(f"{where}: one JSON object that is not columns of equal-length lists (for rows, write "
                             f"one object per line)")  # fmt: skip
        lengths = {len(v) for v in whole.values()}
        if len(lengths) > 1:
            raise InputError(f"{where}: its columns have different lengths {sorted(lengths)}")
        for i in range(lengths.pop()):
            yield None, {k: v[i] for k, v in whole.items()}
        return
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise InputError(f"{where} line {number}: not UTF-8 text (byte {error.start} of the line)") from None
            if not line.strip():
                continue
            line = line.rstrip("\r\n")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(f"{where} line {number}: not valid JSON ({error.msg}, column {error.colno}): "
                                 f"{_excerpt(line)}") from None  # fmt: skip
            if not isinstance(row, dict):
                raise InputError(f"{where} line {number}: a JSON {type(row).__name__}, not an object of columns: "
                                 f"{_excerpt(line)}")  # fmt: skip
            yield number, row


def _first_line_is_json(path: str) -> bool:
    import json

    with open(path, "rb") as f:
        first = next((line for line in f if line.strip()), b"")
    try:
        json.loads(first.decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _csv_rows(path: str, where: str):
    """Yields (line number, row dict) of a CSV file; InputError for a row with more fields than the header."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if not header:
                raise InputError(f"{where} has no header row")
            for row in reader:
                if not row:
                    continue
                if len(row) > len(header):
                    raise InputError(f"{where} line {reader.line_num}: {len(row)} fields, the header has "
                                     f"{len(header)}: {_excerpt(','.join(row))}")  # fmt: skip
                # pandas (the csv builder) reads an empty or missing field as NaN: no value.
                yield reader.line_num, {k: (v if v != "" else None) for k, v in zip(header, row)}
        except UnicodeDecodeError as error:
            raise InputError(f"{where} near line {reader.line_num + 1}: not UTF-8 text (byte {error.start})") from None
        except csv.Error as error:
            raise InputError(f"{where} line {reader.line_num}: {error}") from None


def _check_text(path: str, where: str) -> int:
    rows = 0
    with open(path, "rb") as f:
        for rows, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8-sig" if rows == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise InputError(f"{where} line {rows}: not UTF-8 text (byte {error.start} of the line)") from None
    if not rows:
        raise InputError(f"{where} is empty")
    return rows


def _check_parquet(path: str, t, where: str) -> int:
    """Returns the rows of a Parquet file from its footer: the columns the format needs present, of a usable
    type, and without nulls (row-group statistics); the values themselves are left to the ranks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError and others for a damaged file
        raise InputError(f"{where} is not a readable Parquet file ({' '.join(str(error).split())[:200]})") from None
    schema = pf.schema_arrow
    needed = needed_columns(schema.names, t)
    for name in needed:
        if name not in schema.names:
            raise InputError(f"{where} has no column {name!r}; columns: {schema.names}")
        kind = schema.field(name).type
        want = {"text": pa.types.is_string(kind) or pa.types.is_large_string(kind),
                "list": pa.types.is_list(kind) or pa.types.is_large_list(kind),
                "label": pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)}
        expected = _column_kind(name, t)
        if not want[expected]:
            raise InputError(f"{where}: column {name!r} is {kind}, not {_KIND_WORDS[expected]}")
        index = schema.names.index(name)
        meta = pf.metadata
        nulls = sum(meta.row_group(g).column(index).statistics.null_count for g in range(meta.num_row_groups)
                    if meta.row_group(g).column(index).statistics is not None)  # fmt: skip
        if nulls:
            raise InputError(f"{where}: column {name!r} has {nulls} empty (null) values")
    if not pf.metadata.num_rows:
        raise InputError(f"{where} holds no rows")
    return pf.metadata.num_rows


def needed_columns(columns: list[str], t) -> list[str]:
    """Returns the columns training settings `t` read from data with `columns`: the text (and, for seq-cls, the
    label), the messages of chat data, or the prompt and response."""
    if t.task == "seq-cls":
        return [t.text_field, LABEL_FIELD]
    fmt = detect_format(columns, t)
    return {"text": [t.text_field], "chat": [t.messages_field],
            "prompt-response": [t.prompt_field, t.response_field]}[fmt]  # fmt: skip


def _column_kind(name: str, t) -> str:
    if t.task == "seq-cls" and name == LABEL_FIELD:
        return "label"
    return "list" if t.task == "causal-lm" and name == t.messages_field else "text"


_KIND_WORDS = {"text": "a string", "list": "a list of {role, content} messages", "label": "an integer or a class name"}


class _RowChecker:
    """Checks rows one at a time against the columns the data format needs (decided from the first row)."""

    def __init__(self, t, where: str, *, csv: bool = False):
        self.t, self.where, self.csv = t, where, csv
        self.needed: list[str] | None = None
        self.rows = 0
        self.labels: dict = {}
        """Each label value -> where it first occurs."""

    def __call__(self, line: int | None, row: dict) -> None:
        at = f"{self.where} line {line}" if line is not None else f"{self.where} row {self.rows + 1}"
        if not isinstance(row, dict):
            raise InputError(f"{at}: a {type(row).__name__}, not an object of columns")
        if self.needed is None:
            self.needed = needed_columns(list(row), self.t)
        self.rows += 1
        for name in self.needed:
            value = row.get(name)
            if value is None:
                raise InputError(f"{at}: no value for column {name!r} (columns: {list(row)})")
            kind = _column_kind(name, self.t)
            if kind == "text" and not isinstance(value, str):
                raise InputError(f"{at}: column {name!r} is a {type(value).__name__}, not a string: "
                                 f"{_excerpt(str(value))}")  # fmt: skip
            if kind == "list" and not (isinstance(value, list) and value and all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)):  # fmt: skip
                raise InputError(f"{at}: column {name!r} is not a list of {{role, content}} messages: "
                                 f"{_excerpt(str(value))}")  # fmt: skip
            if kind == "label":
                self._label(at, value)

    def _label(self, at: str, value) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise InputError(f"{at}: label {value!r} is neither an integer nor a class name")
        if value not in self.labels:
            self.labels[value] = at
            if len(self.labels) > 10_000:
                raise InputError(f"{at}: more than 10,000 distinct labels; labels are class indices or names")

    def finish(self) -> None:
        """Checks the labels as load_classification_dataset will read them: all class names (at most
        num_labels of them), or all integers in [0, num_labels); a CSV column of digits is read as integers."""
        if not self.labels:
            return
        n, values = self.t.num_labels, list(self.labels)
        if self.csv and all(v.lstrip("-").isdigit() for v in values):
            values = [int(v) for v in values]
            self.labels = dict(zip(values, self.labels.values()))
        if all(isinstance(v, str) for v in values):
            if len(values) > n:
                raise InputError(f"{self.where} has {len(values)} label names {sorted(values)[:10]} but the plan "
                                 f"has num_labels({n}) (plan with --num-labels {len(values)})")  # fmt: skip
            return
        if not all(isinstance(v, int) for v in values):
            raise InputError(f"{self.where} mixes integer labels and class names; use one kind")
        bad = next((v for v in values if not 0 <= v < n), None)
        if bad is not None:
            raise InputError(f"{self.labels[bad]}: label {bad}; labels must be integers in [0, {n}) "
                             f"(num_labels({n})) or class names")  # fmt: skip


# --- causal-lm training data: plain text, chat, prompt-response; train and eval splits ---

IGNORE_INDEX = -100  # labels the loss skips (transformers' cross-entropy ignore_index)


def detect_format(columns: list[str], t) -> str:
    """Returns the data format of a dataset with `columns` under training settings `t` (TrainingInfo):
    t.data_format unless "auto", then chat (a messages column), prompt-response (both columns), else text."""
    if t.data_format != "auto":
        return t.data_format
    if t.messages_field in columns:
        return "chat"
    if t.prompt_field in columns and t.response_field in columns:
        return "prompt-response"
    return "text"


def load_lm_splits(t, tokenizer, seq_len: int):
    """Returns (train blocks, eval blocks or None, data format): `datasets.Dataset`s of `input_ids` and
    `labels`, each row exactly seq_len tokens, from training settings `t` (TrainingInfo).

    Text is packed with eos between documents and trained on every token. Chat and prompt-response rows
    go through the tokenizer's chat template and are packed too, with the labels of everything but the
    answers set to IGNORE_INDEX; a block with no answer token is dropped (its loss would be 0/0).
    """
    import datasets

    from zero_planner.run.meter import release_freed_memory

    if t.dataset == "synthetic":
        train = datasets.Dataset.from_dict({"text": synthetic_texts(SYNTHETIC_NUM_DOCS, t.seed)})
    else:
        train, _ = _load_raw(t.dataset, None)
    evaluation = _eval_rows(t, train)
    if isinstance(evaluation, tuple):
        train, evaluation = evaluation
    fmt = detect_format(train.column_names, t)
    blocks = [_encode(ds, fmt, t, tokenizer, seq_len) if ds is not None else None for ds in (train, evaluation)]
    if len(blocks[0]) == 0:
        raise InputError(f"dataset {t.dataset!r} gives no block of seq_len({seq_len}) tokens with an answer to train on")
    release_freed_memory()
    return blocks[0], blocks[1], fmt


def _eval_rows(t, train):
    """Returns None (no eval), the eval rows, or (train rows, eval rows) when eval is a held-out share."""
    if t.eval_split is None:
        return None
    try:
        share = float(t.eval_split)
    except ValueError:
        share = None
    if share is not None:
        size = share if share < 1 else int(share)
        if (size if share >= 1 else round(share * len(train))) >= len(train) or len(train) < 2:
            raise InputError(f"--eval-split {t.eval_split} holds out all {len(train)} rows of {t.dataset!r}")
        parts = train.train_test_split(test_size=size, seed=t.seed, shuffle=True)
        return parts["train"], parts["test"]
    if resolve_files(t.eval_split) is not None:
        return _load_raw(t.eval_split, None)[0]
    if t.dataset == "synthetic":
        raise InputError(f"--eval-split {t.eval_split!r} names a split; the synthetic dataset has none (use 0.05)")
    if resolve_files(t.dataset) is not None:
        raise InputError(
            f"--eval-split {t.eval_split!r} names a split, but {t.dataset!r} is local (one split); "
            f"give a file or a share (0.05)"
        )
    return _load_raw(t.dataset, None, split=t.eval_split)[0]


def _encode(ds, fmt: str, t, tokenizer, seq_len: int):
    import datasets

    if fmt == "text":
        field = t.text_field
        if field not in ds.column_names:
            raise InputError(
                f"dataset {t.dataset!r} has no column {t.text_field!r}; columns: {ds.column_names} (pass "
                f"--text-column, or chat / prompt-response data with --data-format)"
            )
        texts = ds.select_columns([field]).rename_column(field, "text") if field != "text" else ds.select_columns(["text"])
        # labels are the ids (train._batch): no column for them, which would read the whole ids column into this
        # process's memory (21 bytes a token held, 75 MB of JSONL at 2,048: +1.5 GiB per rank)
        return tokenize_and_pack(texts, tokenizer, seq_len)
    needed = [t.messages_field] if fmt == "chat" else [t.prompt_field, t.response_field]
    missing = [c for c in needed if c not in ds.column_names]
    if missing:
        raise InputError(f"dataset {t.dataset!r} has no column {missing[0]!r} for {fmt} data; columns: {ds.column_names}")
    if fmt == "chat" and not getattr(tokenizer, "chat_template", None):
        raise InputError(f"chat data needs a tokenizer with a chat template; {tokenizer.name} has none (--tokenizer)")

    def encoded():
        for row in ds.select_columns(needed):
            if fmt == "chat":
                yield encode_conversation(tokenizer, row[t.messages_field])
            else:
                yield encode_prompt_response(tokenizer, row[t.prompt_field], row[t.response_field])

    ids, labels = pack_labeled_arrays(encoded(), seq_len)
    return datasets.Dataset.from_dict({"input_ids": _arrow_blocks(ids), "labels": _arrow_blocks(labels)})


def _arrow_blocks(blocks):
    """Returns a (blocks, seq_len) int32 array as an arrow list column over the same buffer: `from_dict` given the
    numpy array itself held twice as much (16.2 bytes a token against 8.1, two int32 columns, 2026-11-28)."""
    import numpy as np
    import pyarrow as pa

    count, seq_len = blocks.shape
    offsets = pa.array(np.arange(0, (count + 1) * seq_len, seq_len, dtype=np.int64))
    return pa.LargeListArray.from_arrays(offsets, pa.array(blocks.reshape(-1)))


def encode_conversation(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Returns (ids, labels) of one conversation through the chat template; labels are the ids on the
    assistant turns (what the template adds after the generation prompt, end-of-turn tokens included) and
    IGNORE_INDEX elsewhere."""
    ids = tokenizer.chat_ids(messages)
    labels = [IGNORE_INDEX] * len(ids)
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = tokenizer.chat_ids(messages[:i], add_generation_prompt=True) if i else []
        through = tokenizer.chat_ids(messages[: i + 1])
        # Templates that re-render earlier turns differently break exact prefixes: start where they diverge.
        start = next((k for k, (a, b) in enumerate(zip(before, through)) if a != b), min(len(before), len(through)))
        for k in range(start, min(len(through), len(ids))):
            labels[k] = ids[k]
    return ids, labels


def encode_prompt_response(tokenizer, prompt: str, response: str) -> tuple[list[int], list[int]]:
    """Returns (ids, labels) of one instruction example: through the chat template as a user and an assistant
    turn when the tokenizer has one, else prompt ids, then response ids and eos; loss on the response only."""
    if getattr(tokenizer, "chat_template", None):
        return encode_conversation(tokenizer, [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}])
    p, r = tokenizer.encode_batch([prompt, response])
    r = [*r, tokenizer.eos_token_id]
    return p + r, [IGNORE_INDEX] * len(p) + r


def pack_labeled_arrays(examples, seq_len: int):
    """Returns (ids blocks, labels blocks) of seq_len cut from the examples, an iterable of (ids, labels), joined end
    to end, as two (blocks, seq_len) int32 numpy arrays; the tail and blocks with no trainable label after their
    first position (the model shifts labels by one) are dropped.

    Each example becomes two int32 arrays as it comes, so the process never holds the dataset as Python lists:
    those took 52-56 bytes a token after loading and 96-133 at the peak (75 MB of prompt/response JSONL at 2,048
    tokens, byte-level and 6-digit ids: +3.3 GiB held and +6.2 GiB at the peak per rank, 2026-11-28). The blocks
    themselves are 8 bytes a token (int32 ids and labels); a rank holds 16-17 after loading (HELD_BYTES_PER_TOKEN)."""
    import numpy as np

    ids_parts, label_parts = [], []
    for ids, labels in examples:
        ids_parts.append(np.asarray(ids, dtype=np.int32))
        label_parts.append(np.asarray(labels, dtype=np.int32))
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int32)
    del ids_parts
    labels = np.concatenate(label_parts) if label_parts else np.zeros(0, dtype=np.int32)
    del label_parts
    count = len(ids) // seq_len
    ids = ids[: count * seq_len].reshape(count, seq_len)
    labels = labels[: count * seq_len].reshape(count, seq_len)
    keep = (labels[:, 1:] != IGNORE_INDEX).any(axis=1)  # a block of one token has nothing after its first
    return ids[keep], labels[keep]


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

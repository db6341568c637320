"""zero-run's data: synthetic corpus, packing, deterministic sharding, local files, byte tokenizer."""

from __future__ import annotations

import json

import pytest

from zero_planner.errors import InputError
from zero_planner.planfile import TrainingInfo
from zero_planner.run.data import (
    IGNORE_INDEX,
    BlockOrder,
    load_lm_splits,
    load_text_dataset,
    pack_ids,
    pack_labeled_arrays,
    synthetic_texts,
    tokenize_and_pack,
)
from zero_planner.run.tokenizer import ByteTokenizer, load_tokenizer


def test_synthetic_is_deterministic():
    assert synthetic_texts(50, seed=1) == synthetic_texts(50, seed=1)
    assert synthetic_texts(50, seed=1) != synthetic_texts(50, seed=2)
    # The corpus does not depend on how many documents are asked for: a prefix stays a prefix.
    assert synthetic_texts(80, seed=1)[:50] == synthetic_texts(50, seed=1)


def test_pack_ids_joins_with_eos_and_drops_tail():
    assert pack_ids([[1, 2, 3], [4, 5], [6]], seq_len=3, eos_token_id=0) == [[1, 2, 3], [0, 4, 5], [0, 6, 0]]
    assert pack_ids([[1, 2, 3, 4]], seq_len=4, eos_token_id=9) == [[1, 2, 3, 4]]  # the lone eos is dropped


def test_tokenize_and_pack_gives_full_blocks():
    tok = ByteTokenizer(vocab_size=512, eos_token_id=2)
    blocks = tokenize_and_pack(load_text_dataset("synthetic", seed=3), tok, seq_len=32, batch_size=100)
    lengths = set(len(b) for b in blocks["input_ids"])
    assert lengths == {32}
    assert len(blocks) > 1000
    assert all(0 <= i < 512 for i in blocks[0]["input_ids"])


@pytest.mark.parametrize("world, micro", [(1, 1), (2, 4), (4, 3)])
def test_block_order_shards_are_disjoint_and_cover_an_epoch(world, micro):
    n = 60
    orders = [BlockOrder(n, world, r, micro, seed=7) for r in range(world)]
    steps = n // (world * micro)
    seen = [i for k in range(steps) for o in orders for i in o.micro_batch(k)]
    assert len(seen) == len(set(seen)) == steps * world * micro
    # The same (seed, position) always reads the same blocks.
    assert orders[0].micro_batch(5) == BlockOrder(n, world, 0, micro, seed=7).micro_batch(5)
    assert orders[0].micro_batch(0) != BlockOrder(n, world, 0, micro, seed=8).micro_batch(0) or micro == 1


def test_block_order_reshuffles_each_epoch():
    o = BlockOrder(10, 1, 0, 10, seed=0)
    first, second = o.micro_batch(0), o.micro_batch(1)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second


def test_block_order_needs_one_micro_batch_per_rank():
    with pytest.raises(InputError, match="fewer than one micro-batch per rank"):
        BlockOrder(5, 2, 0, 4, seed=0)


def test_local_jsonl_with_text_field(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"body": f"doc {i}", "id": i}) + "\n" for i in range(5)))
    ds = load_text_dataset(str(path), "body")
    assert ds.column_names == ["text"] and ds[3]["text"] == "doc 3"
    with pytest.raises(InputError, match=r"no column 'text'; columns: \['body', 'id'\]"):
        load_text_dataset(str(path), "text")


def test_local_txt_folder_and_glob(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    (tmp_path / "b.txt").write_text("three\n")
    assert sorted(load_text_dataset(str(tmp_path))["text"]) == ["one", "three", "two"]
    assert load_text_dataset(str(tmp_path / "b*.txt"))["text"] == ["three"]


def test_missing_local_file_is_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_text_dataset(str(tmp_path / "nope.jsonl"))


def test_unknown_hub_dataset_offline_is_input_error(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    # Both libraries read the *_OFFLINE variables at import time, so the switches are patched directly.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(InputError, match="could not be loaded from the hub or its cache"):
        load_text_dataset("nobody/no-such-dataset-zp")


def test_byte_tokenizer_fits_the_vocab():
    small = ByteTokenizer(vocab_size=100, eos_token_id=2)
    ids = small.encode("héllo wörld")
    assert all(3 <= i < 100 for i in ids)
    full = ByteTokenizer(vocab_size=512)
    assert full.decode(full.encode("héllo")) == "héllo"
    tok = load_tokenizer({"vocab_size": 512, "eos_token_id": [2, 5]}, choice="bytes")
    assert tok.name == "byte-level" and tok.eos_token_id == 2


# --- local data files are read through before any rank starts (issue 25) ---

def _settings(dataset, **kw):
    from conftest import make_plan

    plan = make_plan("2")
    for key, value in {"dataset": dataset, **kw}.items():
        setattr(plan.training, key, value)
    return plan.training


GOOD_JSONL = '{"text": "one"}\n{"text": "two"}\n\n{"text": "three"}\n'
CHAT = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})


@pytest.mark.parametrize("name, content, settings, message", [
    # JSON Lines: the first bad line, by number, with an excerpt (the ranks said only "could not be read as json:
    # Unexpected character found when decoding 'null'").
    ("d.jsonl", '{"text": "a"}\n{"text": "b"}\n{"text": nul}\n{"text": "d"}\n', {},
     "--dataset file '{path}' line 3: not valid JSON (Expecting value, column 10): '{\"text\": nul}'"),
    ("d.jsonl", '{"text": "a"}\n["b"]\n', {}, "line 2: a JSON list, not an object of columns"),
    ("d.jsonl", '{"text": "a"}\n{"body": "b"}\n', {}, "line 2: no value for column 'text'"),
    ("d.jsonl", '{"text": "a"}\n{"text": 7}\n', {}, "line 2: column 'text' is a int, not a string: '7'"),
    ("d.jsonl", '{"text": "' + "x" * 200 + '"\n{"text": "y"}\n', {}, "line 1: not valid JSON (Expecting ',' "
     "delimiter, column 212): '{\"text\": \"" + "x" * 50 + "...'"),
    ("d.jsonl", CHAT + '\n{"messages": "hello"}\n', {}, "line 2: column 'messages' is not a list of {role, content}"),
    ("d.jsonl", '{"prompt": "p", "response": "r"}\n{"prompt": "p"}\n', {}, "line 2: no value for column 'response'"),
    ("d.jsonl", "\n\n", {}, "holds no rows"),
    ("d.json", '[{"text": "a"},\n {"text": "b",}\n]', {}, "line 2: not valid JSON (Expecting property name"),
    ("d.json", '{\n "text": ["a", "b"],\n "label": [1]\n}', {}, "its columns have different lengths [1, 2]"),
    # one object on one line is one row, as datasets reads it
    ("d.json", '{"text": ["a", "b"]}', {}, "line 1: column 'text' is a list, not a string"),
    # CSV: a row with more fields than the header; an empty field (pandas reads it as no value)
    ("d.csv", 'text,label\na,1\n"b, c",0,extra\n', {}, "line 3: 3 fields, the header has 2"),
    ("d.csv", "text,label\na,1\n,0\n", {}, "line 3: no value for column 'text'"),
    ("d.txt", b"fine\n\xff\xfe broken\n", {}, "line 2: not UTF-8 text"),
    ("d.parquet", b"PAR1 not really parquet", {}, "is not a readable Parquet file"),
    # seq-cls labels, as load_classification_dataset reads them
    ("d.jsonl", '{"text": "a", "label": 0}\n{"text": "b", "label": 5}\n', {"task": "seq-cls"},
     "line 2: label 5; labels must be integers in [0, 2)"),
    ("d.csv", "text,label\na,0\nb,1\nc,2\n", {"task": "seq-cls"}, "line 4: label 2"),
    ("d.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n{"text": "c", "label": "z"}\n',
     {"task": "seq-cls"}, "has 3 label names ['x', 'y', 'z'] but the plan has num_labels(2)"),
    ("d.jsonl", '{"text": "a", "label": 0}\n{"text": "b", "label": "y"}\n', {"task": "seq-cls"},
     "mixes integer labels and class names"),
    # a held-out share that leaves nothing to train on, counted from the file
    ("d.jsonl", GOOD_JSONL, {"eval_split": "3"}, "--eval-split 3 holds out all 3 rows"),
])  # fmt: skip
def test_bad_local_data_is_named_by_file_and_line(tmp_path, name, content, settings, message):
    from zero_planner.run.data import check_local_data

    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(InputError) as caught:
        check_local_data(_settings(str(path), **settings))
    text = str(caught.value)
    assert message.replace("{path}", str(path)) in text
    assert "\n" not in text and len(text) < 300


@pytest.mark.parametrize("name, content, settings", [
    ("d.jsonl", GOOD_JSONL, {"eval_split": "0.3"}),
    ("d.jsonl", "\ufeff" + CHAT + "\n" + CHAT + "\n", {}),  # a byte-order mark, chat rows
    ("d.json", '[{"text": "a"}, {"text": "b"}]', {}),
    ("d.json", '{\n  "text": ["a", "b"]\n}\n', {}),
    ("d.json", '["plain", "strings"]', {}),
    ("d.csv", 'text,label\na,1\n"b, with comma",0\n', {"task": "seq-cls"}),
    ("d.csv", "text,label\na,pos\nb,neg\n", {"task": "seq-cls"}),
    ("d.txt", "one\n\ntwo\n", {}),
])  # fmt: skip
def test_good_local_data_passes(tmp_path, name, content, settings):
    from zero_planner.run.data import check_local_data

    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    check_local_data(_settings(str(path), **settings))


def test_parquet_footer_is_checked(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from zero_planner.run.data import check_local_data

    pq.write_table(pa.table({"text": ["a", None, "c"]}), tmp_path / "nulls.parquet")
    with pytest.raises(InputError, match="column 'text' has 1 empty"):
        check_local_data(_settings(str(tmp_path / "nulls.parquet")))
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    with pytest.raises(InputError, match="column 'text' is int64, not a string"):
        check_local_data(_settings(str(tmp_path / "ints.parquet")))
    pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "good.parquet")
    check_local_data(_settings(str(tmp_path / "good.parquet")))


def test_every_file_of_a_folder_and_the_eval_file_are_read(tmp_path):
    from zero_planner.run.data import check_local_data

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text(GOOD_JSONL)
    (tmp_path / "data" / "b.jsonl").write_text('{"text": "x"}\n{"text": ]\n')
    with pytest.raises(InputError, match=r"b\.jsonl' line 2"):
        check_local_data(_settings(str(tmp_path / "data")))
    (tmp_path / "eval.jsonl").write_text("not json\n")
    with pytest.raises(InputError, match=r"--eval-split file '.*eval\.jsonl' line 1"):
        check_local_data(_settings(str(tmp_path / "data" / "a.jsonl"), eval_split=str(tmp_path / "eval.jsonl")))


def _reference_pack_labeled(examples, seq_len):
    """The packing rule as Python lists (zero-run's before it packed with numpy): examples joined end to end, cut
    into seq_len blocks, the tail and the blocks with no label after their first position dropped."""
    ids, labels = [], []
    for i, l in examples:
        ids.extend(i)
        labels.extend(l)
    out_ids, out_labels = [], []
    for start in range(0, len(ids) // seq_len * seq_len, seq_len):
        block = labels[start : start + seq_len]
        if any(x != IGNORE_INDEX for x in block[1:]):
            out_ids.append(ids[start : start + seq_len])
            out_labels.append(block)
    return out_ids, out_labels


def test_packing_with_numpy_keeps_the_blocks_of_the_list_rule():
    import random

    rng = random.Random(7)
    for _ in range(200):
        examples = []
        for _ in range(rng.randint(0, 12)):
            ids = [rng.randint(0, 300_000) for _ in range(rng.randint(1, 15))]
            cut = rng.randint(0, len(ids)) if rng.random() > 0.3 else len(ids)  # some examples answer nothing
            examples.append((ids, [IGNORE_INDEX] * cut + ids[cut:]))
        for seq_len in (1, 2, 3, 4, 7):
            ids, labels = pack_labeled_arrays(iter(examples), seq_len)
            assert (ids.tolist(), labels.tolist()) == _reference_pack_labeled(examples, seq_len)
            assert ids.dtype == labels.dtype == "int32" and ids.shape == labels.shape


def test_prompt_response_blocks_are_int32_arrow_columns(tmp_path):
    # held as one int32 buffer per column (8 bytes a token), read back as the lists train._batch turns into tensors
    path = tmp_path / "instructions.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"question {i} " * 20, "response": f"answer {i} " * 30}) + "\n"
                            for i in range(40)))  # fmt: skip
    t = TrainingInfo(micro_batch_size=1, seq_len=64, gradient_checkpointing=False, precision="bf16", dataset=str(path))
    blocks, _, fmt = load_lm_splits(t, ByteTokenizer(512), t.seq_len)
    assert fmt == "prompt-response" and len(blocks) > 10
    assert str(blocks.features["input_ids"].feature.dtype) == str(blocks.features["labels"].feature.dtype) == "int32"
    row = blocks[3]
    assert len(row["input_ids"]) == len(row["labels"]) == 64 and any(x != IGNORE_INDEX for x in row["labels"][1:])


def test_text_blocks_train_on_their_own_ids(tmp_path):
    # no labels column for text (reading input_ids whole to copy it held 26-32 bytes a token): the batch's labels are
    # its ids (train._batch)
    from zero_planner.run.train import _batch

    path = tmp_path / "text.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i} " * 50}) + "\n" for i in range(20)))
    t = TrainingInfo(micro_batch_size=1, seq_len=32, gradient_checkpointing=False, precision="bf16", dataset=str(path))
    blocks, _, fmt = load_lm_splits(t, ByteTokenizer(512), t.seq_len)
    assert fmt == "text" and blocks.column_names == ["input_ids"]
    batch = _batch(blocks[[0, 1]], "causal-lm", "cpu")
    assert batch["labels"] is batch["input_ids"] and batch["input_ids"].shape == (2, 32)


def test_the_data_each_rank_holds_is_sized_from_the_files(tmp_path):
    # a local file: its bytes x tokens per byte (one for the byte-level tokenizer, 0.25 assumed for a model's) x the
    # bytes a rank holds, and takes at the peak, per token of its format (benchmarks/data_rss.py); the built-in
    # corpus, hub names and sequence classification: 0
    from zero_planner.run.data import HELD_BYTES_PER_TOKEN, PEAK_BYTES_PER_TOKEN, held_data_bytes

    text, pairs = tmp_path / "text.jsonl", tmp_path / "pairs.jsonl"
    text.write_text(json.dumps({"text": "a b c " * 1000}) + "\n")
    pairs.write_text(json.dumps({"prompt": "q " * 500, "response": "a " * 500}) + "\n")
    settings = dict(micro_batch_size=1, seq_len=64, gradient_checkpointing=False, precision="bf16")
    held, peak, tokens = held_data_bytes(TrainingInfo(**settings, dataset=str(text), tokenizer="bytes"))
    assert tokens == text.stat().st_size
    assert (held, peak) == (int(tokens * HELD_BYTES_PER_TOKEN["text"]), int(tokens * PEAK_BYTES_PER_TOKEN["text"]))
    held, peak, tokens = held_data_bytes(TrainingInfo(**settings, dataset=str(pairs), tokenizer="bytes"))
    assert tokens == pairs.stat().st_size
    assert (held, peak) == (int(tokens * HELD_BYTES_PER_TOKEN["labeled"]), int(tokens * PEAK_BYTES_PER_TOKEN["labeled"]))
    assert held_data_bytes(TrainingInfo(**settings, dataset=str(pairs)))[2] == int(pairs.stat().st_size * 0.25)
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(pairs.read_text())
    with_eval = TrainingInfo(**settings, dataset=str(pairs), eval_split=str(eval_file), tokenizer="bytes")
    assert held_data_bytes(with_eval)[2] == 2 * pairs.stat().st_size
    assert held_data_bytes(TrainingInfo(**settings)) == (0, 0, 0)  # synthetic
    assert held_data_bytes(TrainingInfo(**settings, dataset="tatsu-lab/alpaca")) == (0, 0, 0)
    assert held_data_bytes(TrainingInfo(**settings, dataset=str(pairs), task="seq-cls")) == (0, 0, 0)


def test_zero_plan_counts_a_local_dataset_in_the_host_figures(tmp_path, capsys):
    from zero_planner.cli import main
    from zero_planner.plan.memory import RSS_AT_DATA_BYTES

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": "q " * 300, "response": "a " * 900}) + "\n" for _ in range(2000)))
    base = ["--model", "meta-llama/Llama-3.2-1B", "--gpus", "1xH100", "--micro-batch", "2", "--stage", "1",
            "--seq-len", "1024", "--json", "--tokenizer", "bytes"]  # fmt: skip
    plans = []
    for extra in ([], ["--dataset", str(pairs)]):
        capsys.readouterr()
        assert main(base + extra) == 0
        plans.append(json.loads(capsys.readouterr().out))
    before, after = plans[0]["estimate"]["cpu"]["phases"], plans[1]["estimate"]["cpu"]["phases"]
    assert {p: after[p] - v for p, v in before.items()} == dict.fromkeys(before, int(pairs.stat().st_size * 17.0))
    # packing, before the model: the process then and 51.3 bytes a token; the plan records both (zero-run re-sizes)
    assert "load" not in before and after["load"] == RSS_AT_DATA_BYTES + int(pairs.stat().st_size * 51.3)
    cpu = plans[1]["estimate"]["cpu"]
    assert (cpu["data_bytes"], cpu["data_peak_bytes"]) == (int(pairs.stat().st_size * 17.0), int(pairs.stat().st_size * 51.3))
    assert (plans[0]["estimate"]["cpu"]["data_bytes"], plans[0]["estimate"]["cpu"]["data_peak_bytes"]) == (0, 0)
    assert any("hold the tokenized data" in note for note in plans[1]["notes"])

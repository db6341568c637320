"""Host memory of zero-run's data preparation: what one rank holds, and its peak, per token of a user's JSONL.

    python benchmarks/data_rss.py [--rows 4000] [--seq-len 2048] [--check]     (~20 s for 4,000 rows)

Writes a JSONL of `--rows` rows (100-1,400 words each) as text rows and as prompt/response rows, then, each in a
fresh process that has imported what zero-run imports (torch, transformers, datasets), runs
`data.load_lm_splits` as zero-run does and reads the process's resident memory before and after, and its peak
(ru_maxrss): bytes per token held for the rest of the run (anonymous resident memory, RssAnon: file pages of
the datasets cache the kernel can drop are left out) and at the peak, with the byte-level tokenizer and
with ids as a large-vocabulary tokenizer gives them (each an int object of its own where byte ids are cached).
--check exits 1 beyond HELD_LIMIT / PEAK_LIMIT bytes per token.

Measured 2026-11-28 (this machine: 2 cores, Python 3.11, datasets 5.2.0; 4,000 rows are 15 MB, 13.7M tokens of
prompt/response and 14.9M of text at 2,048; 20,000 rows 75 MB, 68.4M and 74.8M), byte ids / large ids, bytes a token:
  before this change (blocks built as Python lists, text's labels column read whole; resident memory, file pages
  included), 4,000 rows: prompt/response held 53.5 / 55.9 and peaked at 98.3 / 132.7 (75 MB held +3.3 GiB per rank
  and peaked +6.2); text held 26.3 / 31.5, peak 27.3 / 33.0;
  after, anonymous memory held: 4,000 rows prompt/response 17.0 / 17.0, peak 51.3 / 51.3; text 5.3 / 5.9 (about 0.07
  GiB whatever the size), peak 15.5 / 33.0; 20,000 rows prompt/response 16.3 / 16.3, peak 50.5 /
  50.4; text 1.3 / 1.3, peak 4.4 / 7.2 (data.HELD_BYTES_PER_TOKEN, PEAK_BYTES_PER_TOKEN).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELD_LIMIT = {"text": 8.0, "prompt-response": 20.0}
"""Bytes per token a rank may hold after loading (4,000 rows: measured 5.3-5.9 and 17.0, 2026-11-28)."""
PEAK_LIMIT = 64.0
"""Bytes per token at the peak of loading (measured 15.5-51.3)."""
WORDS = ("the model trains on two GPUs and the planner says which stage fits before the launch so the run does not "
         "stop with an out of memory error after an hour of loading weights and data").split()  # fmt: skip

CHILD = r"""
import json, os, resource, sys
import datasets, torch, transformers  # zero-run's process imports these before its data
from zero_planner.planfile import TrainingInfo
from zero_planner.run import data as zdata
from zero_planner.run.tokenizer import ByteTokenizer

path, seq_len, big = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "big"
datasets.disable_progress_bars()
byte = tokenizer = ByteTokenizer(256000)
if big:  # a large vocabulary's ids: above 256, so each is an int object of its own
    class LargeIds:
        name, eos_token_id, vocab_size, chat_template = "large-ids", 2, 256000, None
        def encode_batch(self, texts):
            return [[x * 397 + i % 3 for i, x in enumerate(ids)] for ids in byte.encode_batch(texts)]
    tokenizer = LargeIds()
t = TrainingInfo(micro_batch_size=1, seq_len=seq_len, gradient_checkpointing=False, precision="bf16", dataset=path)
def anon():  # anonymous resident memory: what the process holds, less file pages the kernel can drop
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("RssAnon:"))
before, peak_before = anon(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
blocks, _, fmt = zdata.load_lm_splits(t, tokenizer, seq_len)
tokens = len(blocks) * seq_len
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"format": fmt, "tokens": tokens, "held_bytes": anon() - before,
                  "peak_bytes": peak - max(before, peak_before)}))
"""


def write_rows(folder: Path, rows: int) -> dict[str, Path]:
    """Writes the same conversations as prompt/response rows and as text rows; returns {format: path}."""
    rng = random.Random(0)
    pairs = [tuple(" ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 700))) for _ in range(2)) for _ in range(rows)]
    paths = {"prompt-response": folder / "instructions.jsonl", "text": folder / "text.jsonl"}
    with paths["prompt-response"].open("w") as f:
        f.writelines(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in pairs)
    with paths["text"].open("w") as f:
        f.writelines(json.dumps({"text": f"{p} {r}"}) + "\n" for p, r in pairs)
    return paths


def measure(path: Path, seq_len: int, ids: str, cache: Path) -> dict:
    """Runs CHILD in a fresh process (its own datasets cache, so nothing is read back from an earlier run)."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache / ids / path.stem), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(seq_len), ids], env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--check", action="store_true", help=f"exit 1 beyond {HELD_LIMIT} held / {PEAK_LIMIT} peak bytes a token")
    args = parser.parse_args(argv)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_rows(Path(tmp), args.rows)
        print(f"zero-run's data per rank ({args.rows:,} rows, {paths['text'].stat().st_size / 1e6:.0f} MB of text, seq {args.seq_len}):")
        for fmt, path in paths.items():
            for ids in ("bytes", "big"):
                r = measure(path, args.seq_len, ids, Path(tmp) / "cache")
                held, peak = r["held_bytes"] / r["tokens"], r["peak_bytes"] / r["tokens"]
                print(f"  {fmt:16s} {'large ids' if ids == 'big' else 'byte ids':9s} {r['tokens'] / 1e6:6.1f}M tokens: "
                      f"held {held:5.1f} B/token (+{r['held_bytes'] / 2**30:.2f} GiB), peak {peak:5.1f} B/token")
                if held > HELD_LIMIT[fmt] or peak > PEAK_LIMIT:
                    failures.append(f"{fmt} {ids}: held {held:.1f}, peak {peak:.1f} bytes a token")
    for failure in failures:
        print(f"data_rss: {failure} (limits {HELD_LIMIT}, {PEAK_LIMIT})", file=sys.stderr)
    return 1 if failures and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

"""Tokenizers for zero-run: the model's own where a weights folder has one, else a built-in byte-level one.

The byte-level tokenizer exists for models initialised randomly from a config: they have no vocabulary to
respect, so every UTF-8 byte gets its own id, shifted past the model's special ids and folded into its
vocabulary when that is smaller than 256 + the offset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

# Files whose presence means a folder carries its own tokenizer (Hugging Face layout).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class Tokenizer(Protocol):
    name: str
    eos_token_id: int

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Returns token ids per text, no special tokens added."""
        ...


class ByteTokenizer:
    """Byte-level tokenizer: id = byte + offset, folded into [offset, vocab_size) when the vocab is small."""

    name = "byte-level"

    def __init__(self, vocab_size: int, eos_token_id: int | None = None, offset: int = 3):
        if vocab_size <= offset:
            raise ValueError(f"vocab_size({vocab_size}) must exceed the byte offset({offset})")
        self.vocab_size = vocab_size
        self.offset = offset
        # Ids below `offset` are left to the model's special tokens (pad/bos/eos in most configs).
        self.eos_token_id = eos_token_id if eos_token_id is not None and 0 <= eos_token_id < vocab_size else 0
        self._span = min(256, vocab_size - offset)

    def encode(self, text: str) -> list[int]:
        return [self.offset + b % self._span for b in text.encode("utf-8")]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: list[int]) -> str:
        """Returns the text for ids (exact only when the whole byte range fits in the vocab)."""
        data = bytes((i - self.offset) % 256 for i in ids if i >= self.offset)
        return data.decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face tokenizer loaded from a local folder (no network)."""

    def __init__(self, path: str, vocab_size: int):
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.name = str(path)
        self.vocab_size = vocab_size
        eos = self._tok.eos_token_id
        self.eos_token_id = eos if eos is not None else 0

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        ids = self._tok(texts, add_special_tokens=False)["input_ids"]
        # A tokenizer larger than the model's embedding would index out of range: fold, as a guard.
        return [[i % self.vocab_size for i in row] for row in ids]

    def save_pretrained(self, path: str | Path) -> None:
        self._tok.save_pretrained(str(path))


def has_tokenizer(folder: str | Path | None) -> bool:
    """Returns True when `folder` is a directory holding Hugging Face tokenizer files."""
    if folder is None:
        return False
    folder = Path(folder)
    return folder.is_dir() and any((folder / name).exists() for name in TOKENIZER_FILES)


def load_tokenizer(config: dict[str, Any], weights_path: str | None = None) -> ByteTokenizer | HFTokenizer:
    """Returns the model's own tokenizer when `weights_path` has one, else the byte-level tokenizer."""
    vocab_size = int(config.get("vocab_size") or config.get("text_config", {}).get("vocab_size") or 256 + 3)
    if has_tokenizer(weights_path):
        return HFTokenizer(str(weights_path), vocab_size)
    eos = config.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return ByteTokenizer(vocab_size, eos_token_id=eos)

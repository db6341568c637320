"""Tokenizers for zero-run: the model's own (its folder or hub id), another named one, or byte-level when asked.

The byte-level tokenizer (`--tokenizer bytes`) exists for models initialised randomly from a config: they
have no vocabulary to respect, so every UTF-8 byte gets its own id, shifted past the model's special ids and
folded into its vocabulary when that is smaller than 256 + the offset. It is never chosen silently: a
pretrained model trained on bytes would be trained on the wrong vocabulary.
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

    def __init__(self, path: str, vocab_size: int, name: str | None = None):
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.name = name or str(path)
        self.vocab_size = vocab_size
        eos = self._tok.eos_token_id
        self.eos_token_id = eos if eos is not None else 0
        self.pad_token_id = self._tok.pad_token_id
        self.chat_template = getattr(self._tok, "chat_template", None)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        ids = self._tok(texts, add_special_tokens=False)["input_ids"]
        return [self._checked(row) for row in ids]

    def chat_ids(self, messages: list[dict], *, add_generation_prompt: bool = False) -> list[int]:
        """Returns the token ids of `messages` rendered by the tokenizer's chat template."""
        ids = self._tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt,
                                            return_dict=False)  # fmt: skip
        return self._checked(list(ids))

    def _checked(self, row: list[int]) -> list[int]:
        # An id past the model's embedding would index out of range on the GPU (an opaque device assert).
        if row and max(row) >= self.vocab_size:
            from zero_planner.errors import InputError

            raise InputError(
                f"tokenizer {self.name} produced id {max(row)}, beyond the model's vocab_size({self.vocab_size}); "
                f"use the model's own tokenizer"
            )
        return row

    def save_pretrained(self, path: str | Path) -> None:
        self._tok.save_pretrained(str(path))


# What a tokenizer needs from a hub repository (and nothing else: no weights).
TOKENIZER_PATTERNS = ["tokenizer*", "special_tokens_map.json", "vocab.*", "merges.txt", "*.tiktoken",
                      "chat_template.*", "config.json"]  # fmt: skip


def has_tokenizer(folder: str | Path | None) -> bool:
    """Returns True when `folder` is a directory holding Hugging Face tokenizer files."""
    if folder is None:
        return False
    folder = Path(folder)
    return folder.is_dir() and any((folder / name).exists() for name in TOKENIZER_FILES)


def model_tokenizer_source(model) -> str | None:
    """Returns where the model's own tokenizer lives (plan.model, ModelInfo): its weights folder, its hub id
    (catalog and hub models), its folder, or None (a bare config.json)."""
    if model.weights_path:
        return model.weights_path
    if model.source in ("hub", "catalog") and model.hub_id:
        return model.hub_id
    if model.source == "folder":
        return model.name if Path(model.name).is_dir() else None
    return None


TOKENIZER_FIX = "pass --tokenizer bytes|PATH|HUB_ID (bytes: byte-level, for a randomly initialised model)"


def check_tokenizer(plan) -> str | None:
    """Raises InputError when the ranks could not get a tokenizer for `plan`, as zero_planner.train looks for it
    (load_tokenizer): a model that is a config only, with no --tokenizer; a local folder without tokenizer files.
    Returns the local tokenizer folder when there is one (None: bytes, or a hub id the ranks resolve). Reads
    files only: no transformers import."""
    from zero_planner.errors import InputError

    t, m = plan.training, plan.model
    if t.tokenizer == "bytes":
        return None
    pretrained = (m.load_path or m.weights_path) if m.init == "pretrained" else None
    where = t.tokenizer or pretrained or model_tokenizer_source(m)
    if where is None:
        raise InputError(f"{m.name} comes with no tokenizer (a config only): {TOKENIZER_FIX}")
    folder = Path(where).expanduser()
    if folder.is_dir():
        if not has_tokenizer(folder):
            option = "--tokenizer " if t.tokenizer else ""
            raise InputError(f"{option}{where} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): {TOKENIZER_FIX}")
        return str(folder)
    if where.startswith((".", "/", "~")):
        raise InputError(f"--tokenizer {where!r}: no such folder; {TOKENIZER_FIX}")
    return None


def has_chat_template(folder: str | Path) -> bool:
    """Returns True when the tokenizer in `folder` carries a chat template (tokenizer_config.json's
    chat_template, or a chat_template.jinja/.json file beside it)."""
    import json

    folder = Path(folder)
    if any((folder / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        return True
    try:
        return bool(json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return False


def load_tokenizer(
    config: dict[str, Any],
    source: str | None = None,
    *,
    choice: str | None = None,
    model_name: str = "the model",
    source_name: str | None = None,
) -> ByteTokenizer | HFTokenizer:
    """Returns the tokenizer zero-run trains with.

    `choice` (training.tokenizer): "bytes" for the byte-level tokenizer, a folder or hub id, or None for the
    model's own, read from `source` (its folder or hub id). A model without one is an InputError naming the
    fix; the byte-level tokenizer is never a silent fallback. `source_name`: how to name `source` (the hub
    id a cache folder was resolved from).
    """
    from zero_planner.errors import InputError

    vocab_size = int(config.get("vocab_size") or config.get("text_config", {}).get("vocab_size") or 256 + 3)
    if choice == "bytes":
        eos = config.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        return ByteTokenizer(vocab_size, eos_token_id=eos)
    where = choice or source
    fix = "pass --tokenizer PATH|HUB_ID, or --tokenizer bytes (byte-level; for a randomly initialised model)"
    if where is None:
        raise InputError(f"{model_name} comes with no tokenizer (a config only): {fix}")
    folder = _tokenizer_folder(where)
    if not has_tokenizer(folder):
        raise InputError(f"{where} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): {fix}")
    return HFTokenizer(folder, vocab_size, name=choice or source_name or where)


def _tokenizer_folder(where: str) -> str | None:
    """Returns a local folder for a folder or hub id (the Hugging Face cache; HF_HUB_OFFLINE honoured)."""
    import os

    from zero_planner.errors import InputError

    if Path(where).expanduser().is_dir():
        return str(Path(where).expanduser())
    if where.startswith((".", "/", "~")):
        raise InputError(f"--tokenizer {where!r}: no such folder")
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    try:
        return snapshot_download(where, allow_patterns=TOKENIZER_PATTERNS, local_files_only=offline)
    except Exception as error:
        why = "not in the Hugging Face cache (HF_HUB_OFFLINE is set)" if offline else f"not available ({type(error).__name__})"
        raise InputError(
            f"the tokenizer of {where!r} is {why}: run `huggingface-cli download {where}` where there is network, "
            f"or pass --tokenizer PATH"
        ) from None

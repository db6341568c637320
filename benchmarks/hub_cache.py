"""A Hugging Face hub cache built locally, so zero-plan and zero-run load "pretrained" weights by hub id offline.

    python benchmarks/hub_cache.py --hub-id meta-llama/Llama-3.2-1B --model-config benchmarks/model_configs/llama3.2-1b.json \
        --cache /tmp/hf/hub [--chat-data /tmp/chat.jsonl --conversations 6000]

Writes `models--ORG--NAME/snapshots/REV/` with refs/main, as `huggingface_hub` lays a download out: the model's
weights (random, seeded, saved in the config's dtype or bf16 as safetensors, as published checkpoints are) and a
byte-level BPE tokenizer built with the `tokenizers` library, with a chat template. With HF_HUB_CACHE pointing
at the cache and HF_HUB_OFFLINE=1, `zero-plan --model ORG/NAME` and `zero-run` load them as they would a real
download. Optionally writes chat data (JSONL, a "messages" column) from the built-in synthetic corpus.

Used by tests/test_pretrained_cpu.py (a tiny Llama, on CPU) and benchmarks/finetune_gpu.sh (Llama-3.2-1B on a
lent GPU: the model is random, since no weights can be downloaded, but it is read as a checkpoint is).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REVISION = "0123456789abcdef0123456789abcdef01234567"
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def documents(n: int, seed: int) -> list[str]:
    from zero_planner.run.data import synthetic_texts

    return synthetic_texts(n, seed=seed)


def build_tokenizer(vocab_size: int = 400):
    """Returns a PreTrainedTokenizerFast: byte-level BPE of `vocab_size` ids (<pad>, <s>, </s>, <unk> first),
    trained on the built-in synthetic corpus, with CHAT_TEMPLATE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(documents(300, seed=1), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    return fast


def snapshot_folder(cache: Path, hub_id: str) -> Path:
    """Creates and returns `cache/models--ORG--NAME/snapshots/REVISION`, with refs/main naming REVISION."""
    repo = Path(cache) / ("models--" + hub_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def save_random_checkpoint(snapshot: Path, config: dict, seed: int = 0) -> None:
    """Saves a seeded random model of `config` (safetensors, in the config's torch_dtype, bf16 if none)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(config)
    dtype = getattr(torch, str(config.pop("torch_dtype", None) or config.pop("dtype", None) or "bfloat16"))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
    model.to(dtype).save_pretrained(snapshot)


def write_chat_data(path: Path, conversations: int, seed: int = 3) -> None:
    """Writes `conversations` chat rows ({"messages": [user, assistant]}) cut from the synthetic corpus."""
    rng = random.Random(seed)
    texts = documents(2 * conversations, seed=seed)
    with open(path, "w") as f:
        for i in range(conversations):
            question, answer = texts[2 * i], texts[2 * i + 1]
            question = question[: rng.randint(40, 300)]
            f.write(json.dumps({"messages": [{"role": "user", "content": question},
                                             {"role": "assistant", "content": answer}]}) + "\n")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--hub-id", required=True)
    parser.add_argument("--model-config", required=True, help="config.json of the model to save")
    parser.add_argument("--cache", required=True, help="the HF_HUB_CACHE folder to write into")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chat-data", default=None, help="also write chat JSONL here")
    parser.add_argument("--conversations", type=int, default=6000)
    args = parser.parse_args(argv)
    snapshot = snapshot_folder(Path(args.cache), args.hub_id)
    save_random_checkpoint(snapshot, json.loads(Path(args.model_config).read_text()), seed=args.seed)
    build_tokenizer().save_pretrained(snapshot)
    print(f"wrote {args.hub_id} at {snapshot}")
    if args.chat_data:
        write_chat_data(Path(args.chat_data), args.conversations)
        print(f"wrote {args.conversations} conversations to {args.chat_data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

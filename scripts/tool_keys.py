"""Rebuilds zero_planner/catalog/tool_keys.json: the config keys Axolotl and LLaMA-Factory accept, and the
DeepSpeed presets they ship (Axolotl's deepspeed_configs/*.json, LLaMA-Factory's examples/deepspeed/ds_z*.json),
so that `zero-plan --from-axolotl` recognises a preset path by name where the file is absent.

    python scripts/tool_keys.py AXOLOTL_GIT_DIR LLAMAFACTORY_GIT_DIR TRANSFORMERS_WHEEL...

Reads the two projects' own schema sources at their HEAD commit (a bare clone is enough): Axolotl's pydantic
input model (AxolotlInputConfig and the mixins it inherits, src/axolotl/utils/schemas/*.py, plus the plugin
arguments of src/axolotl/integrations/*/args.py), LLaMA-Factory's HfArgumentParser dataclasses of
`llamafactory-cli train` (hparams/parser.py _TRAIN_ARGS: Model, Data, Training, Finetuning, Generating
arguments) and the fields of transformers' Seq2SeqTrainingArguments that its TrainingArguments extends, read
from the transformers wheels given (`pip download --no-deps transformers==V`; use the lowest and highest
version LLaMA-Factory's pyproject allows, since keys were removed in 5.x). Pydantic aliases count as keys
(Axolotl's `model_type` is `type_of_model`'s alias). Both tools are too heavy to install here (they pin
torch), so the lists are committed with their source and checked by tests/test_importers.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "zero_planner" / "catalog" / "tool_keys.json"


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def _classes(repo: str, paths: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Returns class name -> (base names, annotated field names) over the given files at HEAD."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for path in paths:
        tree = ast.parse(_git(repo, "show", f"HEAD:{path}"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                fields = []
                for s in node.body:
                    if not (isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)):
                        continue
                    if s.target.id.startswith("_") or s.target.id == "model_config":
                        continue
                    fields.append(s.target.id)
                    if isinstance(s.value, ast.Call):  # Field(alias="...") / field(...): the alias is a key too
                        for kw in s.value.keywords:
                            if kw.arg in ("alias", "validation_alias") and isinstance(kw.value, ast.Constant):
                                fields.append(kw.value.value)
                found[node.name] = (bases, fields)
    return found


def _fields(classes: dict, name: str, seen: set[str] | None = None) -> set[str]:
    seen = seen if seen is not None else set()
    if name in seen or name not in classes:
        return set()
    seen.add(name)
    bases, fields = classes[name]
    out = set(fields)
    for base in bases:
        out |= _fields(classes, base, seen)
    return out


def _presets(repo: str, prefix: str, files: list[str]) -> dict[str, dict]:
    """Returns file name -> DeepSpeed JSON for every .json under `prefix` at HEAD."""
    return {
        Path(f).name: json.loads(_git(repo, "show", f"HEAD:{f}"))
        for f in files
        if f.startswith(prefix) and f.endswith(".json")
    }


def axolotl(repo: str) -> dict:
    files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
    schemas = [f for f in files if f.startswith("src/axolotl/utils/schemas/") and f.endswith(".py")]
    plugins = [f for f in files if f.startswith("src/axolotl/integrations/") and f.endswith("/args.py")]
    classes = _classes(repo, schemas)
    keys = _fields(classes, "AxolotlInputConfig")
    plugin_classes = _classes(repo, plugins)
    for name in plugin_classes:
        keys |= _fields(plugin_classes, name)
    dataset_keys = _fields(classes, "SFTDataset")
    return {
        "source": "github.com/axolotl-ai-cloud/axolotl",
        "commit": _git(repo, "rev-parse", "HEAD").strip(),
        "files": "src/axolotl/utils/schemas/*.py (AxolotlInputConfig and its bases), src/axolotl/integrations/*/args.py",
        "keys": sorted(keys),
        "dataset_keys": sorted(dataset_keys),
        "presets": _presets(repo, "deepspeed_configs/", files),
    }


def init_fields(node: ast.ClassDef) -> list[str]:
    """Returns the fields of a TrainingArguments-like dataclass body that its __init__ takes: annotated public
    names, less those declared field(init=False) and `framework` (a class constant in transformers' source)."""
    names = []
    for s in node.body:
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and not s.target.id.startswith("_"):
            init_false = isinstance(s.value, ast.Call) and any(
                kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False
                for kw in s.value.keywords
            )
            if not init_false and s.target.id != "framework":
                names.append(s.target.id)
    return names


def _hf_training_fields(wheel: str) -> tuple[str, set[str]]:
    """Returns (version, init fields of Seq2SeqTrainingArguments) read from a transformers wheel's source."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        sources = [z.read(f"transformers/{name}").decode() for name in ("training_args.py", "training_args_seq2seq.py")]
    classes: dict[str, tuple[list[str], list[str]]] = {}
    for text in sources:
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                classes[node.name] = (bases, init_fields(node))
    version = Path(wheel).name.split("-")[1]
    return version, _fields(classes, "Seq2SeqTrainingArguments")


def llamafactory(repo: str, wheels: list[str]) -> dict:
    base = "src/llamafactory/hparams/"
    names = ["model_args.py", "data_args.py", "training_args.py", "finetuning_args.py", "generating_args.py"]
    classes = _classes(repo, [base + n for n in names])
    keys: set[str] = set()
    for name in ("ModelArguments", "DataArguments", "TrainingArguments", "FinetuningArguments", "GeneratingArguments"):
        keys |= _fields(classes, name)
    hf: set[str] = set()
    versions = []
    for wheel in wheels:
        version, names = _hf_training_fields(wheel)
        versions.append(version)
        hf |= names
    return {
        "source": "github.com/hiyouga/LLaMA-Factory",
        "commit": _git(repo, "rev-parse", "HEAD").strip(),
        "files": "src/llamafactory/hparams/{model,data,training,finetuning,generating}_args.py (parser.py _TRAIN_ARGS)"
        f" + the union of transformers {' and '.join(versions)} Seq2SeqTrainingArguments",
        "keys": sorted(keys | hf),
        "presets": _presets(repo, "examples/deepspeed/ds_z", _git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()),
    }


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    data = {"axolotl": axolotl(argv[0]), "llamafactory": llamafactory(argv[1], argv[2:])}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}: {len(data['axolotl']['keys'])} Axolotl keys, {len(data['llamafactory']['keys'])} LLaMA-Factory keys")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

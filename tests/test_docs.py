"""The README and docs/ point at things that exist: links, their anchors, and the repository paths they name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
README_MAX_LINES = 250  # issue 28: the README is the front door; narratives live in docs/

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A backticked repository path: starts at a top-level folder of this repository and ends in a file or folder name.
REPO_PATH = re.compile(r"`((?:zero_planner|benchmarks|scripts|tests|docs|ds_configs|\.ci)/[\w./*-]*)")
# A file named in prose, backticked or not: a package path (plan/memory.py, run/train.py, catalog/gpus.json, with or
# without zero_planner/) or one from a top-level folder (benchmarks/memory_regression.py).
PACKAGE_FILE = re.compile(r"(?<![\w/.])(?:zero_planner/)?((?:plan|run|models|catalog)/[\w/]+\.(?:py|json)\b)")
TOP_FILE = re.compile(r"(?<![\w/.])((?:zero_planner|benchmarks|scripts|tests)/[\w/]+\.(?:py|json|sh|md)\b)")


def anchors(markdown: str) -> set[str]:
    """Returns the GitHub anchors of a Markdown file's headings (lowercase, punctuation dropped, spaces to -)."""
    found = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_anchors_follow_github_rules():
    text = "## `--probe K`: measure the top\n```\n# not a heading\n```\n### \"Will my Axolotl / X\" fit?\n"
    assert anchors(text) == {"--probe-k-measure-the-top", "will-my-axolotl--x-fit"}


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move narrative to docs/"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_resolve(doc):
    text = doc.read_text()
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not broken, f"{doc.name}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_named_paths_exist(doc):
    missing = []
    for name in REPO_PATH.findall(doc.read_text()):
        name = name.rstrip(".")
        if "*" in name or "{" in name:
            if not list(ROOT.glob(name)):
                missing.append(name)
        elif not (ROOT / name).exists():
            missing.append(name)
    assert not missing, f"{doc.name} names paths that do not exist: {sorted(set(missing))}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_files_named_in_prose_exist(doc):
    # design.md and extending.md point a contributor at modules by path: a moved or renamed module fails here.
    text = doc.read_text()
    missing = {name for name in PACKAGE_FILE.findall(text) if not (ROOT / "zero_planner" / name).exists()}
    missing |= {name for name in TOP_FILE.findall(text) if not (ROOT / name).exists()}
    assert not missing, f"{doc.name} names files that do not exist: {sorted(missing)}"


def test_every_benchmark_is_listed_in_benchmarks_readme():
    # benchmarks/README.md says which to run when (gates, GPU harnesses, suites and fits, studies): a new script, shell
    # file or folder must join one of its lists.
    text = (ROOT / "benchmarks" / "README.md").read_text()
    named = set(re.findall(r"`([\w.-]+?)(?:/| [^`]*)?`", text))
    here = {p.name for p in (ROOT / "benchmarks").iterdir() if not p.name.startswith(("_", "."))}
    here -= {"README.md", "step_time_validation.json", "suites", "__pycache__"}
    assert here <= named, f"benchmarks/README.md lists none of: {sorted(here - named)}"

"""The package's import graph, read from the source with ast (nothing is imported): no import cycles, and every
import points down the layers

    shared (the top-level modules that are not entries, models/, catalog/)  <  plan/ (deciding a plan)
    <  run/ (running it)  <  the entry modules (cli, launch, train, probe, __main__)

Module-level and function-level imports count alike (a function-level import is a dependency deferred, not
removed); relative imports are resolved. docs/design.md, Layout.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "zero_planner"
LAYERS = ("shared", "plan", "run", "entry")
ENTRIES = ("cli", "launch", "train", "probe", "__main__")
"""Modules run as commands (pyproject's scripts, `python -m` in plan files and launcher command lines)."""


@dataclass(frozen=True)
class Edge:
    """One import statement: `importer` imports `imported` at `path`:`line`."""

    importer: str
    imported: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.path}:{self.line})"


def module_files(package_dir: Path) -> dict[str, Path]:
    """Returns {dotted module name: file} for every .py file of the package (a package's __init__.py under the
    package's own name)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        name = ".".join(path.relative_to(package_dir.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def layer(module: str) -> str:
    """Returns the layer of a dotted module name of the package (one of LAYERS)."""
    parts = module.split(".")[1:]  # below the package itself
    if len(parts) == 1 and parts[0] in ENTRIES:
        return "entry"
    if parts and parts[0] in ("plan", "run"):
        return parts[0]
    return "shared"


def _imported_names(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """Returns the dotted names an import statement asks for, relative ones resolved against `importer`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        # `from . import x` in a package's __init__ is relative to the package itself, elsewhere to the parent.
        anchor = importer.split(".") if is_package else importer.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([node.module] if node.module else []))
    # `from pkg import name` imports the submodule pkg.name where there is one, else a name defined in pkg.
    return [f"{base}.{alias.name}" for alias in node.names]


def _main_guard(node: ast.AST) -> bool:
    """True for `if __name__ == "__main__":`, whose body runs only when the file is the program, never on import."""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                                   for c in test.comparators))  # fmt: skip


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Returns the module's import statements at any depth but inside its `__main__` guard (a script's command)."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        todo.extend(child for child in ast.iter_child_nodes(node) if not _main_guard(child))
    return found


def import_edges(package_dir: Path) -> list[Edge]:
    """Returns every import of one of the package's modules by another, first statement per pair, sorted."""
    modules = module_files(package_dir)
    root = package_dir.parent
    first: dict[tuple[str, str], Edge] = {}
    for importer, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), filename=str(path))):
            for name in _imported_names(node, importer, is_package):
                while name not in modules and "." in name:  # a name defined in a module: the module
                    name = name.rsplit(".", 1)[0]
                if name in modules and name != importer:
                    edge = Edge(importer, name, str(path.relative_to(root)), node.lineno)
                    first.setdefault((importer, name), edge)
    return sorted(first.values(), key=lambda e: (e.importer, e.imported))


def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """Returns the strongly connected groups of two or more modules (each sorted): every module of a group reaches
    every other through imports. Tarjan's algorithm, iterative."""
    graph: dict[str, list[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, []).append(edge.imported)
        graph.setdefault(edge.imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def upward_imports(edges: list[Edge]) -> list[Edge]:
    """Returns the imports whose imported module stands in a higher layer than its importer."""
    return [e for e in edges if LAYERS.index(layer(e.imported)) > LAYERS.index(layer(e.importer))]


def cycle_report(edges: list[Edge], groups: list[list[str]]) -> str:
    """Returns the imports inside each cycle, one per line (file and line), for a failure message."""
    lines = []
    for group in groups:
        members = set(group)
        lines.append("cycle: " + " <-> ".join(group))
        lines += [f"  {e}" for e in edges if e.importer in members and e.imported in members]
    return "\n".join(lines)


# --- the package ---


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return import_edges(PACKAGE_DIR)


def test_the_graph_is_read(edges):
    # A reader that found no imports would pass the two tests below; these edges exist in the code.
    found = {(e.importer, e.imported) for e in edges}
    assert ("zero_planner.cli", "zero_planner.plan.search") in found  # function-level
    assert ("zero_planner.run.train", "zero_planner.plan.saves") in found  # module-level, `from pkg import mod`
    assert ("zero_planner.probe", "zero_planner.run.train") in found  # an entry above run/
    assert len(edges) > 150


def test_no_import_cycles(edges):
    groups = import_cycles(edges)
    assert not groups, "import cycles (a file that holds two jobs):\n" + cycle_report(edges, groups)


def test_no_import_cycles_among_the_benchmarks():
    """benchmarks/ is a package too (its scripts import each other as benchmarks.X): the same rule holds there."""
    edges = import_edges(PACKAGE_DIR.parent / "benchmarks")
    assert ("benchmarks.refit_step_time", "benchmarks.throughput_check") in {(e.importer, e.imported) for e in edges}
    groups = import_cycles(edges)
    assert not groups, "import cycles among benchmarks/:\n" + cycle_report(edges, groups)


def test_imports_point_down_the_layers(edges):
    up = upward_imports(edges)
    assert not up, (f"imports that point up {' < '.join(LAYERS)} (move the shared part below both):\n"
                    + "\n".join(f"  {layer(e.importer)} {e} {layer(e.imported)}" for e in up))  # fmt: skip


def test_every_module_has_a_layer():
    names = module_files(PACKAGE_DIR)
    assert {layer(n) for n in names} == set(LAYERS)
    assert [layer(f"zero_planner.{n}") for n in ENTRIES] == ["entry"] * len(ENTRIES)
    assert layer("zero_planner.planfile") == layer("zero_planner.models.spec") == layer("zero_planner") == "shared"
    assert layer("zero_planner.plan") == "plan" and layer("zero_planner.run.train") == "run"


# --- the checker itself, on a small package written here ---


def write_package(root: Path, files: dict[str, str]) -> Path:
    """Writes `files` ({path under the package: source}) as the package `pkg` under `root`; returns its folder."""
    package = root / "pkg"
    for name, source in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return package


CLEAN = {
    "__init__.py": "",
    "errors.py": "import os\n",
    "plan/__init__.py": "",
    "plan/memory.py": "from pkg.errors import InputError\n",
    "plan/search.py": "from . import memory\nfrom ..errors import InputError\n",
    "run/__init__.py": "",
    "run/train.py": "import pkg.plan.memory\n\ndef f():\n    from pkg.plan.search import plan\n",
    "cli.py": "from pkg.run import train\n",
}


def test_checker_passes_a_clean_graph_and_resolves_relative_imports(tmp_path):
    edges = import_edges(write_package(tmp_path, CLEAN))
    assert [(e.importer, e.imported, e.line) for e in edges] == [
        ("pkg.cli", "pkg.run.train", 1),
        ("pkg.plan.memory", "pkg.errors", 1),
        ("pkg.plan.search", "pkg.errors", 2),  # `from ..errors`
        ("pkg.plan.search", "pkg.plan.memory", 1),  # `from . import memory`
        ("pkg.run.train", "pkg.plan.memory", 1),
        ("pkg.run.train", "pkg.plan.search", 4),  # inside a function
    ]
    assert import_cycles(edges) == [] and upward_imports(edges) == []


def test_checker_finds_a_cycle_and_names_its_imports(tmp_path):
    files = {**CLEAN, "plan/memory.py": "def f():\n    from pkg.plan import search\n"}
    edges = import_edges(write_package(tmp_path, files))
    groups = import_cycles(edges)
    assert groups == [["pkg.plan.memory", "pkg.plan.search"]]
    report = cycle_report(edges, groups)
    assert "pkg.plan.memory -> pkg.plan.search (pkg/plan/memory.py:2)" in report
    assert "pkg.plan.search -> pkg.plan.memory (pkg/plan/search.py:1)" in report


def test_a_scripts_main_guard_is_not_an_import_of_the_module(tmp_path):
    """A command whose code lives above its module (`if __name__ == "__main__": from pkg.cli import main`) is no
    cycle; the same import in the module's body, or under any other `if`, is one."""
    guard = 'import sys\n\nif __name__ == "__main__":\n    from pkg.run.train import f\n'
    files = {**CLEAN, "plan/memory.py": guard}
    assert import_cycles(import_edges(write_package(tmp_path / "a", files))) == []
    other = guard.replace('__name__ == "__main__"', "sys.argv")
    files = {**CLEAN, "plan/memory.py": other}
    cycles = import_cycles(import_edges(write_package(tmp_path / "b", files)))
    assert cycles == [["pkg.plan.memory", "pkg.plan.search", "pkg.run.train"]]


def test_checker_finds_an_upward_import(tmp_path):
    files = {**CLEAN, "errors.py": "import os\n\ndef f():\n    from .run.train import f\n"}
    up = upward_imports(import_edges(write_package(tmp_path, files)))
    assert [str(e) for e in up] == ["pkg.errors -> pkg.run.train (pkg/errors.py:4)"]
    # The entry modules may import anything; nothing may import them.
    files = {**CLEAN, "run/train.py": "from pkg import cli\n"}
    assert [str(e) for e in upward_imports(import_edges(write_package(tmp_path / "b", files)))] == [
        "pkg.run.train -> pkg.cli (pkg/run/train.py:1)"
    ]


def test_strategy_names_are_listed_once():
    # Adding a strategy family: its name goes into strategies.STRATEGIES and nowhere else. The CLI's choices, the
    # probe's and the report's orders read it; the family table must name every strategy and no other.
    from zero_planner.cli import STAGE_CHOICES
    from zero_planner.run.report import STAGE_ORDER
    from zero_planner.strategies import STRATEGIES, STRATEGY_FAMILIES

    assert STAGE_CHOICES == ("auto", *STRATEGIES) and STAGE_ORDER == list(STRATEGIES)
    assert set(STRATEGY_FAMILIES) == set(STRATEGIES)
    written = []  # a list, tuple or set literal holding three or more strategy names, outside strategies.py
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.name == "strategies.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                names = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in STRATEGIES]
                if len(names) >= 3:
                    written.append(f"{path.relative_to(PACKAGE_DIR)}:{node.lineno} {names}")
    assert written == []


MAX_PARAMS, MAX_LINES = 10, 80
"""Issue 60's targets: no function in zero_planner/ over 10 parameters (self and cls not counted) or 80 lines."""

OVER_THE_LIMITS = {
    "run.modeling:build_training_model": (15, 0), "plan.saves:disk_need": (13, 0),
    "plan.memory:run_phase_peaks": (12, 0), "plan.memory:host_parts": (11, 0), "run.train:_save": (11, 0),
    "plan.memory:model_states": (0, 130), "models.activations:_saved_bytes": (0, 119),
    "cli:run": (0, 104), "models.analytic:lora_16bit_activations": (0, 115), "plan.advice:advice": (0, 108),
    "plan.memory:activation_bytes": (0, 99),
    "plan.memory:estimate_memory": (0, 97), "models.analytic:sdpa_16bit_activations": (0, 84),
}
"""The functions still over a limit, as (parameters, lines) where over it (0 where within): a ratchet. A function
may shrink, and then its entry must shrink or go; none may grow, and no new one may join."""


def function_sizes(package_dir: Path) -> dict[str, tuple[int, int]]:
    """Returns {"module:function": (parameters, lines)} for every function and method of the package (a method's
    self or cls not counted; *args and **kwargs count one each; decorators not counted as lines)."""
    sizes = {}
    for path in sorted(package_dir.rglob("*.py")):
        module = ".".join(path.relative_to(package_dir).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
                count = len(params) - (bool(a.args) and a.args[0].arg in ("self", "cls"))
                size = (count, node.end_lineno - node.lineno + 1)
                name = f"{module}:{node.name}"  # two of a name in one module (methods): the larger of each
                sizes[name] = tuple(map(max, size, sizes.get(name, size)))
    return sizes


def over_the_limits(sizes: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    return {name: (p if p > MAX_PARAMS else 0, n if n > MAX_LINES else 0) for name, (p, n) in sizes.items()
            if p > MAX_PARAMS or n > MAX_LINES}  # fmt: skip


def test_no_function_grows_past_the_limits():
    found = over_the_limits(function_sizes(PACKAGE_DIR))
    grown = {name: (size, OVER_THE_LIMITS.get(name)) for name, size in found.items()
             if name not in OVER_THE_LIMITS or any(now > was for now, was in zip(size, OVER_THE_LIMITS[name]))}
    assert grown == {}, f"over {MAX_PARAMS} parameters or {MAX_LINES} lines (now, allowed): {grown}"
    shrunk = {name: (found.get(name, (0, 0)), was) for name, was in OVER_THE_LIMITS.items() if found.get(name) != was}
    assert shrunk == {}, f"smaller than OVER_THE_LIMITS says (now, listed); lower or drop the entry: {shrunk}"


def test_the_size_ratchet_counts_parameters_and_lines(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    root = write_package(tmp_path / "s", {"m.py": (
        "def wide(a, b, c, d, e, f, g, h, i, j, *k, **l):\n    pass\n\n"
        "class C:\n    def narrow(self, a, b, c, d, e, f, g, h, i, j):\n        pass\n\n"
        f"def tall():\n{body}\n")})  # fmt: skip
    sizes = function_sizes(root)
    assert sizes["m:wide"] == (12, 2) and sizes["m:narrow"] == (10, 2) and sizes["m:tall"] == (0, 81)
    assert over_the_limits(sizes) == {"m:wide": (12, 0), "m:tall": (0, 81)}

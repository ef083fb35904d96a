"""No two tansaku modules import each other, directly or through others, counting imports inside functions.

Run: pytest tests/test_import_cycles.py -q

``lint-imports`` checks the layers (cli → demo → trainer | pipelines → envs → core → data_cards) but reads
each package as a whole, so a cycle inside one package (a module and the module it imports lazily in a
function, to dodge the cycle at import time) passes it. This test reads every module's source with ``ast``,
takes each ``import`` / ``from … import`` of a tansaku module wherever it stands (top level, function body,
``try``), except under ``if TYPE_CHECKING:``, and fails on every strongly connected group of two or more
modules, naming each import of the cycle and its line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_PACKAGED = {"tests", "bench", "docs", "runs", "build", "examples", ".venv"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["tansaku", *parts])


def package_modules() -> dict[str, Path]:
    """Every module of the package: the repository root is the package ``tansaku``."""
    tops = {p: p.relative_to(ROOT).parts[0] for p in ROOT.rglob("*.py")}
    return {module_name(p): p for p, top in tops.items()
            if top not in NOT_PACKAGED and not top.endswith(".egg-info")}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The tansaku modules ``name`` imports anywhere in its source → the first line that does."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target in modules and target != name:
            found.setdefault(target, line)

    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            node.body = [ast.Pass()]  # never executed: its imports make no cycle
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = node.module if node.level == 0 else ".".join(p for p in (base, node.module) if p)
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                submodule = f"{module}.{alias.name}"
                add(submodule if submodule in modules else module, node.lineno)
    return found


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return groups


def import_graph() -> dict[str, dict[str, int]]:
    modules = package_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def test_the_checker_finds_a_cycle_hidden_in_a_function():
    graph = {"a": {"b": 3}, "b": {"c": 9}, "c": {"a": 40}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]] and cycles({"a": {"b": 1}, "b": {}}) == []


def test_the_graph_reads_relative_and_function_level_imports():
    graph = import_graph()
    assert len(graph) > 100
    process = graph["tansaku.envs.search.worker_process"]
    assert {"tansaku.envs.search.embedded", "tansaku.envs.search.workers"} <= set(process)  # `from .x import`
    assert "tansaku.trainer.cpu" in graph["tansaku.trainer.rl"]  # imported inside build_rl_trainer


def test_no_import_cycles_among_tansaku_modules():
    graph = import_graph()
    lines = []
    for group in cycles(graph):
        members = set(group)
        lines.append(f"cycle of {len(group)} modules:")
        lines += [f"  {module} imports {target} (line {line})" for module in group
                  for target, line in sorted(graph[module].items()) if target in members]
    assert not lines, "\n".join(["tansaku modules that import each other (move what both need into a third "
                                 "module):", *lines])

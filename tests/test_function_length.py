"""No function of the package is longer than 60 lines: a longer one is split by responsibility into named
helpers (issue 50). A function's length is ``end_lineno - lineno + 1`` of its ``ast`` node, docstring and
nested functions included; methods and nested functions are measured too.

Run: pytest tests/test_function_length.py
"""

from __future__ import annotations

import ast

from fixtures.package_sources import ROOT, package_py_files

MAX_FUNCTION_LINES = 60


def long_functions(source: str, max_lines: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """``(name, first line, length)`` of every function in ``source`` longer than ``max_lines``."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > max_lines]


def _body(lines: int, indent: int) -> str:
    return "\n".join(" " * indent + f"x{i} = {i}" for i in range(lines)) + "\n"


def test_the_measure_counts_docstrings_nested_functions_and_methods():
    assert long_functions('def f():\n    """Doc."""\n' + _body(58, 4)) == []  # 60 lines
    method = 'class C:\n    async def g(self):\n        """Doc."""\n' + _body(59, 8)
    assert long_functions(method) == [("g", 2, 61)]
    nested = "def outer():\n    def inner():\n" + _body(60, 8)
    assert [name for name, _, _ in long_functions(nested)] == ["outer", "inner"]


def test_no_function_is_over_60_lines():
    files = package_py_files()
    assert ROOT / "core" / "runner.py" in files and ROOT / "demo.py" in files
    skipped = ("tests", "bench", ".venv")
    assert not any(part in skipped for path in files for part in path.relative_to(ROOT).parts)
    found = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
             for path in files for name, line, length in long_functions(path.read_text(encoding="utf-8"))]
    assert not found, (f"{len(found)} functions over {MAX_FUNCTION_LINES} lines (split them):\n"
                       + "\n".join(found))

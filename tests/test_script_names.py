"""Every ``tansaku`` name the code outside the package uses exists: bench, examples, CI scripts, doc examples.

Run: pytest tests/test_script_names.py -q

The package's own tests import what they use, so a rename shows at once; the scripts around it do not run in
the default suite (``bench/*.py`` runs for hours, ``.ci/wheel_check`` builds a venv, a README block is run by a
reader). A rename that leaves one of them behind fails only there, late: ``tansaku.core.store.code_version``
moved to ``tansaku.core.provenance`` and ``.ci/wheel_check`` failed in CI after the suites had passed. Each
script's Python (a ``.py`` file, a ``<<'EOF'`` here-document in a shell script, a fenced ``python`` block in a
doc, with ``...,`` elisions dropped) is parsed, not run: every ``from tansaku.… import name`` must resolve, and every attribute read through a
name bound to a tansaku module or object (``import tansaku.core.store as store`` then ``store.code_version``)
must exist, by the same resolution as ``tests/test_docs_names.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_docs_names import name_problem

ROOT = Path(__file__).resolve().parents[1]
HEREDOC = re.compile(r"<<'?(\w+)'?[^\n]*\n(.*?)\n\1\n", re.S)
FENCED_PYTHON = re.compile(r"^\s*```python\n(.*?)^\s*```", re.S | re.M)


def scripts() -> dict[str, str]:
    """Label → Python source of every script around the package."""
    found = {}
    for path in [*sorted(ROOT.glob("bench/*.py")), *sorted(ROOT.glob("examples/**/*.py")),
                 *sorted(ROOT.glob(".ci/*.py")), *sorted(ROOT.glob("docs/*.py"))]:
        found[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    for path in [ROOT / ".ci" / "run", ROOT / ".ci" / "wheel_check", ROOT / "setup.sh"]:
        for i, (_, body) in enumerate(HEREDOC.findall(path.read_text(encoding="utf-8"))):
            if "import " in body:
                found[f"{path.relative_to(ROOT).as_posix()} here-document {i + 1}"] = body
    for path in [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]:
        for i, body in enumerate(FENCED_PYTHON.findall(path.read_text(encoding="utf-8"))):
            found[f"{path.relative_to(ROOT).as_posix()} python block {i + 1}"] = body
    return found


def dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``, or None when the chain does not start at a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def names_used(source: str) -> list[str]:
    """The dotted tansaku names ``source`` imports or reads through an imported tansaku name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a doc sketch elides entries: {..., "mine": Engine(...)}
        tree = ast.parse(re.sub(r"\.\.\.\s*,", "", source))
    bound: dict[str, str] = {}  # local name → the tansaku name it stands for
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tansaku":
                    used.append(alias.name)
                    local = alias.asname or "tansaku"
                    bound[local] = alias.name if alias.asname else "tansaku"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tansaku":
            for alias in node.names:
                if alias.name != "*":
                    used.append(f"{node.module}.{alias.name}")
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            chain = dotted(node)
            if chain and chain[0] in bound:
                used.append(".".join([bound[chain[0]], *chain[1:]]))
    return list(dict.fromkeys(used))


def problems(source: str) -> list[str]:
    return [f"{name}: {problem}" for name in names_used(source) if (problem := name_problem(name))]


def test_the_check_catches_a_moved_name():
    source = ("import tansaku.core.store as store\nfrom tansaku.core.provenance import code_version\n"
              "from tansaku.core import provenance\n"
              "store.code_version()\nprovenance.package_versions()\nprovenance.gone\n")
    assert sorted(problems(source)) == [
        "tansaku.core.provenance.gone: tansaku.core.provenance has no attribute 'gone'",
        "tansaku.core.store.code_version: tansaku.core.store has no attribute 'code_version'"]


def test_here_documents_and_doc_blocks_are_read():
    labels = scripts()
    assert any(label.startswith(".ci/wheel_check here-document") for label in labels)
    assert any(label.startswith("bench/") for label in labels)


@pytest.mark.parametrize("label", sorted(scripts()))
def test_every_tansaku_name_the_script_uses_exists(label):
    found = problems(scripts()[label])
    assert not found, f"{label} uses what is not there:\n" + "\n".join(found)

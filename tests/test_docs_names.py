"""Every ``tansaku.…`` name and every repository path the docs put in backticks exists.

Run: pytest tests/test_docs_names.py -q

The docs (``docs/*.md`` and ``README.md``) name modules, functions and files so that a reader can go to them;
a rename or a move that leaves a doc behind sends the reader nowhere. Each inline code span (not fenced
blocks, which hold examples of code a reader would write) is split into words; a word that starts with
``tansaku.`` must import (the longest importable module, then attributes:
``tansaku.trainer.report.run_report``; ``module:attr`` is read as ``module.attr``; ``[…]`` and ``(…)`` after
it are dropped), and a word that starts with a top-level folder or file of the repository (``trainer/``,
``tests/``, ``pyproject.toml`` …) must exist, less a ``::test`` or ``:LINE`` suffix. Words holding a
placeholder (``<name>``, ``…``, ``*``, ``{}``, ``$``) are templates, not names. ``docs/cli.md`` is generated
from ``--help`` (``tests/test_cli_reference.py`` checks it).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "cli.md")]
# What a repository path starts with: the checkout's own top-level entries (not run or build output), and the
# source folders, so that a path under a folder that was removed is still checked.
TOP_LEVEL = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} - {"runs", "out", "build", "dist"}
TOP_LEVEL -= {p.name for p in ROOT.glob("*.egg-info")}
TOP_LEVEL |= {"core", "envs", "pipelines", "trainer", "data_cards", "testing", "tests", "bench", "docs",
              "examples"}
FENCED = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
PLACEHOLDER = re.compile(r"[<>…*{}$|]")


def mentioned(doc: Path) -> list[str]:
    """The words of ``doc``'s inline code spans, outside fenced blocks, trailing punctuation dropped."""
    text = FENCED.sub("", doc.read_text(encoding="utf-8"))
    words = (word.strip().rstrip(".,;:") for span in CODE_SPAN.findall(text)
             for word in re.split(r"[\s,()=]+", span))
    return [word for word in words if word and not PLACEHOLDER.search(word)]


def name_problem(name: str) -> str | None:
    """Why the dotted ``name`` does not resolve, or None: the longest importable module, then attributes."""
    parts = re.split(r"[\[(]", name.replace(":", "."))[0].split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):  # that module (or a parent) is not there
                continue
            raise
        for i, attribute in enumerate(parts[cut:]):
            if not hasattr(found, attribute):
                return f"{'.'.join(parts[:cut + i])} has no attribute {attribute!r}"
            found = getattr(found, attribute)
        return None
    return f"no module {'.'.join(parts[:2])}"


def path_problem(word: str) -> str | None:
    """Why the repository path ``word`` is not there, or None."""
    path = re.split(r"::|#|:(?=\d)", word)[0]
    return None if (ROOT / path).exists() else f"no file or folder {path}"


def problems(doc: Path) -> list[str]:
    found = []
    for word in dict.fromkeys(mentioned(doc)):
        if word.startswith("tansaku."):
            problem = name_problem(word)
        elif "/" in word and word.split("/")[0] in TOP_LEVEL or word in TOP_LEVEL:
            problem = path_problem(word)
        else:
            continue
        if problem:
            found.append(f"`{word}`: {problem}")
    return found


def test_the_check_catches_a_stale_name_and_path(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("See `tansaku.trainer.report.run_report`, `tansaku.trainer.prefix_train` and\n"
                   "`trainer/prefix_train.py`, `tests/test_docs_names.py::test_x`, `envs/<name>.py`.\n"
                   "```python\nfrom tansaku.nowhere import x   # `tansaku.nowhere` in a fenced block\n```\n",
                   encoding="utf-8")
    assert problems(doc) == [
        "`tansaku.trainer.prefix_train`: tansaku.trainer has no attribute 'prefix_train'",
        "`trainer/prefix_train.py`: no file or folder trainer/prefix_train.py"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_name_and_path_the_doc_gives_exists(doc):
    found = problems(doc)
    assert not found, f"{doc.relative_to(ROOT)} names what is not there:\n" + "\n".join(found)

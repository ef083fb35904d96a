"""The README stays a short entry point and the docs stay free of process notes.

    pytest tests/test_docs.py -q
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 250
# The README's test command, as CI runs it (.ci/run).
TEST_COMMAND = '.venv/bin/python -m pytest -m "not slow" -q'


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert TEST_COMMAND in ci and TEST_COMMAND in README.read_text(encoding="utf-8")
    assert "./setup.sh && .venv/bin/synth demo --out runs/demo" in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_process_notes(doc):
    text = doc.read_text(encoding="utf-8").lower()
    for word in ("issue #", "sitting"):
        assert word not in text, f"{doc.name} mentions {word!r}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc):
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"

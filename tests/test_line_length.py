"""No line of the package's Python files is longer than 110 characters (ruff's ``line-length``, counted in
characters, not bytes: Japanese text counts one per character).

Run: pytest tests/test_line_length.py
"""

from __future__ import annotations

from fixtures.package_sources import ROOT, package_py_files

MAX_LINE_CHARS = 110


def long_lines(text: str, max_chars: int = MAX_LINE_CHARS) -> list[tuple[int, int]]:
    """``(line number, length)`` of every line of ``text`` longer than ``max_chars`` characters."""
    return [(n, len(line)) for n, line in enumerate(text.splitlines(), 1) if len(line) > max_chars]


def test_the_measure_counts_characters():
    assert long_lines("a" * 110 + "\n" + "日" * 110) == []
    assert long_lines("ok\n" + "日" * 111 + "\n") == [(2, 111)]


def test_no_line_is_over_110_characters():
    files = package_py_files()
    assert ROOT / "demo.py" in files
    found = [f"{path.relative_to(ROOT)}:{n} ({length} characters)"
             for path in files for n, length in long_lines(path.read_text(encoding="utf-8"))]
    shown = "\n".join(found[:200]) + (f"\n… and {len(found) - 200} more" if len(found) > 200 else "")
    assert not found, f"{len(found)} lines over {MAX_LINE_CHARS} characters:\n{shown}"

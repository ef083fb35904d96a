"""The hand-written doc tables that describe each registry's entries name exactly what the registry holds:
a task, an LLM engine added (or removed) without its row in docs/ fails here (the generated table in
docs/cli.md is checked by test_cli_reference)."""

import re
from pathlib import Path

from tansaku.core.llm.spec import LLM_ENGINES
from tansaku.envs.tasks import TASKS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def first_column(doc: Path, header: str) -> list[str]:
    """The first cell of each row of the table whose header row starts with ``| header |``."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return rows


def test_the_task_table_lists_every_registered_task():
    names = [re.fullmatch(r"`([a-z_]+)`", cell).group(1) for cell in first_column(DOCS / "tasks.md", "task")]
    assert sorted(names) == sorted(TASKS)


def test_the_llm_spec_table_lists_every_registered_engine():
    engines = [re.match(r"`([a-z]+):", cell).group(1) for cell in first_column(DOCS / "llm.md", "spec")]
    assert sorted(engines) == sorted(LLM_ENGINES)


def test_a_stale_table_is_caught(tmp_path):
    doc = tmp_path / "tasks.md"
    doc.write_text("| task | what |\n|---|---|\n| `multihop_qa` | x |\n\nafter\n", encoding="utf-8")
    assert first_column(doc, "task") == ["`multihop_qa`"] and sorted(["multihop_qa"]) != sorted(TASKS)

#!/usr/bin/env python3
"""What a tansaku wheel must hold, checked against the checkout it was built from (stdlib only).

    python .ci/wheel_contents.py dist/tansaku-0.1.0-py3-none-any.whl     # prints the top-level names

- the only top-level name is ``tansaku`` (every file under ``tansaku/`` or ``tansaku-*.dist-info/``;
  ``top_level.txt``, when present, says ``tansaku``);
- every package of the checkout (a folder with ``__init__.py`` outside tests/, bench/, docs/) and each of its
  modules is inside, so a new subpackage missing from pyproject's ``packages`` list fails here, not on a
  user's machine;
- every file matched by pyproject's ``package-data`` globs is inside, and the data the toolkit reads at run
  time (examples, prompts, recipes, chat template, data card template) is there by name.

``tests/test_packaging.py`` imports :func:`problems`; ``.ci/wheel_check`` runs this file.
"""

from __future__ import annotations

import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_PACKAGED = {"tests", "bench", "docs", ".venv", "build", "dist", ".ci", ".git"}
# Read at run time through importlib.resources or Path(__file__): a wheel without them imports fine and
# fails only when a command runs.
REQUIRED = [
    "tansaku/core/chat_template.jinja",
    "tansaku/data_cards/dataset_card.md.jinja",
    "tansaku/examples/miniwiki.jsonl",
    "tansaku/examples/general_chat.jsonl",
    "tansaku/examples/teacher_script.py",
    "tansaku/pipelines/trajectories/scenarios.yaml",
    "tansaku/trainer/recipes/sft-tiny.yaml",
    "tansaku/trainer/recipes/rl-tiny.yaml",
]
REQUIRED_GLOBS = ["examples/laws/*.xml", "pipelines/*/prompts/*.md", "trainer/recipes/*.yaml"]


def top_level_names(names: list[str]) -> set[str]:
    """Import names a wheel installs: first path parts, dist-info excluded (``foo.py`` → ``foo``)."""
    tops = set()
    for name in names:
        first = name.split("/", 1)[0]
        if not first.endswith((".dist-info", ".data")):
            tops.add(first.removesuffix(".py"))
    return tops


def checkout_files(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(wheel paths of every package module, wheel paths of every package-data file) of the checkout."""
    modules = []
    for init in sorted(root.rglob("__init__.py")):
        rel = init.parent.relative_to(root)
        if rel.parts and (rel.parts[0] in NOT_PACKAGED or any(p.startswith(".") for p in rel.parts)):
            continue
        modules += [f"tansaku/{(rel / f.name).as_posix()}" for f in sorted(init.parent.glob("*.py"))]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    data = []
    for package, patterns in config["tool"]["setuptools"]["package-data"].items():
        folder = root.joinpath(*package.split(".")[1:])
        for pattern in patterns:
            data += [f"tansaku/{f.relative_to(root).as_posix()}" for f in sorted(folder.glob(pattern)) if f.is_file()]
    return modules, data


def problems(wheel: str | Path, root: Path = ROOT) -> list[str]:
    """Everything wrong with ``wheel``; empty when it is complete."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        top_level = next((z.read(n).decode().split() for n in names if n.endswith(".dist-info/top_level.txt")), None)
    out = []
    stray = [n for n in names if not (n.startswith("tansaku/") or
                                      (n.startswith("tansaku-") and n.split("/", 1)[0].endswith(".dist-info")))]
    if stray:
        out.append(f"files outside tansaku/ and tansaku-*.dist-info/: {stray[:10]}")
    if top_level_names(names) != {"tansaku"}:
        out.append(f"top-level names {sorted(top_level_names(names))}, expected ['tansaku']")
    if top_level is not None and top_level != ["tansaku"]:
        out.append(f"top_level.txt lists {top_level}, expected ['tansaku']")
    present = set(names)
    modules, data = checkout_files(root)
    required = REQUIRED + [f"tansaku/{f.relative_to(root).as_posix()}" for g in REQUIRED_GLOBS for f in root.glob(g)]
    for kind, wanted in (("modules", modules), ("package data", data), ("run-time data", required)):
        missing = [w for w in wanted if w not in present]
        if missing:
            out.append(f"{kind} missing from the wheel: {missing[:10]}{' …' if len(missing) > 10 else ''}")
    for glob in REQUIRED_GLOBS:
        if not list(root.glob(glob)):
            out.append(f"the checkout has no {glob} (the check itself is stale)")
    leaked = sorted({n.split("/")[1] for n in names if n.startswith("tansaku/") and n.split("/")[1] in NOT_PACKAGED})
    if leaked:
        out.append(f"folders that must not ship: {leaked}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    with zipfile.ZipFile(argv[1]) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
    found = problems(argv[1])
    print(f"wheel {Path(argv[1]).name}: {len(names)} files, top-level names {sorted(top_level_names(names))}")
    for p in found:
        print(f"  PROBLEM: {p}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

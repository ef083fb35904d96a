"""Packaging and layout rules: the import-layer contract, what the wheel holds, short modules, installed
import names only.

    pytest tests/test_packaging.py -q

The full check — install the wheel into a fresh venv and run ``synth demo --small`` from it — is
``.ci/wheel_check`` (minutes); here the wheel is built and inspected, and ``.ci/wheel_check --no-demo``
(install and import checks, seconds) runs, so the script CI runs last cannot fail on what the suite could see.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PACKAGE_DIRS = ("core", "envs", "pipelines", "trainer", "data_cards", "testing")
MAX_LINES = 400

_spec = importlib.util.spec_from_file_location("wheel_contents", ROOT / ".ci" / "wheel_contents.py")
wheel_contents = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheel_contents)


def _modules() -> list[Path]:
    files = [ROOT / "demo.py", ROOT / "cli.py"]
    for folder in PACKAGE_DIRS:
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_import_layers_are_kept():
    lint = BIN / "lint-imports"
    if not lint.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    out = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "KEPT" in out.stdout and "0 broken" in out.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from the checkout; setuptools' build/ and egg-info go to a temp folder, not the checkout."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("the `build` package is not installed (pip install -e '.[dev]')")
    tmp = tmp_path_factory.mktemp("wheel")
    (tmp / "setup.cfg").write_text(f"[build]\nbuild_base = {tmp / 'build'}\n[egg_info]\negg_base = {tmp}\n"
                                   f"[bdist_wheel]\nbdist_dir = {tmp / 'bdist'}\n", encoding="utf-8")
    env = {**os.environ, "DIST_EXTRA_CONFIG": str(tmp / "setup.cfg")}
    out = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp / "dist"),
                          str(ROOT)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (found,) = (tmp / "dist").glob("tansaku-*.whl")
    return found


def test_wheel_installs_only_tansaku_with_its_data(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
    assert wheel_contents.top_level_names(names) == {"tansaku"}
    assert wheel_contents.problems(wheel) == []
    for needed in ("tansaku/examples/miniwiki.jsonl", "tansaku/core/chat_template.jinja",
                   "tansaku/data_cards/dataset_card.md.jinja", "tansaku/trainer/recipes/sft-tiny.yaml",
                   "tansaku/pipelines/multihop/prompts/question.v1.md", "tansaku/cli.py", "tansaku/core/jsonl.py",
                   "tansaku/testing/canned_server.py"):
        assert needed in names
    assert not [n for n in names if n.startswith(("tansaku/tests/", "tansaku/bench/", "tansaku/docs/"))]


def test_wheel_check_reports_what_is_wrong(wheel, tmp_path):
    """The contents check is not vacuous: a stray top-level module and a missing template are named."""
    broken = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            if item.filename != "tansaku/core/chat_template.jinja":
                dst.writestr(item, src.read(item.filename))
        dst.writestr("core/__init__.py", "")
    found = "\n".join(wheel_contents.problems(broken))
    assert "top-level names ['core', 'tansaku']" in found
    assert "tansaku/core/chat_template.jinja" in found


def test_wheel_check_without_the_demo_passes():
    """CI's own packaging script, less its demo: a stale name in it failed CI once after the suites passed."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("the `build` package is not installed (pip install -e '.[dev]')")
    out = subprocess.run(["bash", str(ROOT / ".ci" / "wheel_check"), "--no-demo"], capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "wheel_check: OK" in out.stdout


def test_modules_stay_short():
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_code_imports_by_installed_name_only():
    """``from pipelines…`` works only from the checkout; installed, everything is ``tansaku.…``."""
    bad = re.compile(r"^\s*(from|import)\s+(core|envs|pipelines|trainer|data_cards|demo|cli)\b", re.MULTILINE)
    hits = [f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            for p in [*_modules(), *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "bench").rglob("*.py"))]
            for text in [p.read_text(encoding="utf-8")] for m in bad.finditer(text)]
    assert not hits, hits
    if shutil.which("grep"):
        out = subprocess.run(["grep", "-rn", "--include=*.py", "--exclude-dir=.venv", "--exclude-dir=build",
                              r"^from pipelines\|^from envs\|^import envs", "."],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.stdout == ""

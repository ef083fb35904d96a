"""A build killed with ``kill -9`` anywhere leaves only folders the next build proves its own (issue 28).

``synth index build`` (and the index ``synth build egov`` makes in its folder) writes a hidden sibling
``.NAME.partial-*`` whose first file names the folder it is for, and swaps it in at the end through
``.NAME.old-*`` (``tansaku.core.swapped_outputs.swapped_in``). A child process runs the build and kills itself with
SIGKILL at a chosen point (inside the article build, while the index is written, once it is written, between the
two renames of the swap, before the old folder is removed, in the question build); the rerun must finish,
remove every leftover, and give the same rows as an uninterrupted build, row by row.

    pytest tests/test_partial_folders.py -q
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core import ownership, swapped_outputs
from tansaku.core.errors import InputError
from tansaku.core.store import read_manifest, read_rows
from tansaku.envs.search import build_index
from tansaku.envs.search.embedded import EmbeddedBackend

ROOT = Path(__file__).resolve().parents[1]
LAW = ROOT / "tests" / "fixtures" / "egov" / "506AC0000000901_20250401_000000000000000.xml"
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "search"))
from dataset import fixture_rows, write_dataset  # noqa: E402

sys.path.remove(str(ROOT / "tests" / "fixtures" / "search"))

# Runs a build and SIGKILLs itself at POINT (argv: point, then what to build).
KILLED = """
import os, shutil, signal, sys
from pathlib import Path
from tansaku.core.context import BuildContext
from tansaku.envs.search import build_index, embedded_index
from tansaku.envs.tasks import EgovMCQ
from tansaku.pipelines.egov import build as egov
from tansaku.pipelines.egov.config import EgovConfig

point, what, src, out = sys.argv[1:5]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)

def after(module, name):  # call the original, then die
    original = getattr(module, name)
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        die()
        return result
    setattr(module, name, wrapper)

if point == "articles":
    after(egov, "parse_law_bytes")
elif point == "index_chunks":
    chunks = embedded_index.iter_chunks
    def some_chunks(*args, **kwargs):
        for i, chunk in enumerate(chunks(*args, **kwargs)):
            if i == 3:
                die()
            yield chunk
    embedded_index.iter_chunks = some_chunks
elif point == "index_written":
    after(embedded_index, "_write_index")
elif point in ("swap", "old"):
    replace, rmtree = os.replace, shutil.rmtree
    def killing_replace(a, b):
        replace(a, b)
        if point == "swap" and ".old-" in str(b):
            die()
    def killing_rmtree(path, *args, **kwargs):
        if point == "old" and ".old-" in str(path):
            die()
        rmtree(path, *args, **kwargs)
    os.replace, shutil.rmtree = killing_replace, killing_rmtree  # as every module sees them
elif point == "questions":
    after(EgovMCQ, "gold_drops")  # the gold_check stage of the question build
if what == "egov":
    egov.build_egov(EgovConfig(laws=[Path(src)]), Path(out), BuildContext(quiet=True))
else:
    build_index(Path(src), Path(out))
sys.exit(3)  # not killed: the point was never reached
"""


def killed_run(tmp_path: Path, point: str, what: str, src: Path, out: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED, encoding="utf-8")
    env = {**os.environ, "TANSAKU_QUIET": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, script, point, what, str(src), str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-2000:])


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def index_rows(index: Path, ids: list[str]) -> list[dict | None]:
    backend = EmbeddedBackend(index)
    return [backend.get(i) for i in ids] + [{k: backend.meta[k] for k in ("documents", "chunks", "format")}]


# ---------------------------------------------------------------- synth index build


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> tuple[Path, list[str], list]:
    d = tmp_path_factory.mktemp("docs")
    dataset = write_dataset(d / "docs")
    build_index(dataset, d / "ref")
    ids = [r["id"] for r in fixture_rows()]
    return dataset, ids, index_rows(d / "ref", ids)


@pytest.mark.parametrize("point, rebuild", [(p, r) for p in ("index_chunks", "index_written", "swap")
                                             for r in (False, True)] + [("old", True)])
def test_killed_index_build_is_finished_by_the_next_one(docs, tmp_path, point, rebuild):
    dataset, ids, ref = docs
    index = tmp_path / "work" / "ix"
    index.parent.mkdir()
    if rebuild:  # an earlier index is being replaced
        build_index(dataset, index)
    killed_run(tmp_path, point, "index", dataset, index)
    assert leftovers(index.parent), "the kill left no partial folder: the point is not covered"
    result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(dataset), "--index", str(index)])
    assert result.exit_code == 0, result.output
    assert leftovers(index.parent) == [] and sorted(os.listdir(index.parent)) == ["ix"]
    assert index_rows(index, ids) == ref


def test_index_build_through_a_symlink_replaces_what_it_points_to(docs, tmp_path):
    dataset, ids, ref = docs
    real, link = tmp_path / "real", tmp_path / "link"
    build_index(dataset, real)
    link.symlink_to(real, target_is_directory=True)
    result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(dataset), "--index", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert sorted(os.listdir(tmp_path)) == ["link", "real"] and index_rows(link, ids) == ref


# ---------------------------------------------------------------- swapped_in beside another build


def merged(folder: Path, text: str = "old") -> Path:
    """A finished output of a swapped-in kind (a merge): as ``.NAME.old-*`` it is provably a leftover."""
    folder.mkdir(parents=True)
    (folder / ownership.MODEL_MARKER).write_text(json.dumps({"kind": "merge", "files": ["w"]}), encoding="utf-8")
    (folder / "w").write_text(text, encoding="utf-8")
    return folder


def swap(out: Path):  # what train merge does: claim (create, lock) the folder, then swap into it
    return ownership.claimed(out, "--out", lambda: None), swapped_outputs.swapped_in(out, "--out")


def test_a_sweep_by_a_second_build_leaves_a_live_builds_folders_alone(tmp_path, monkeypatch):
    out, replace = merged(tmp_path / "out"), os.replace

    def second_build_between_the_renames(a, b):
        replace(a, b)
        if ".old-" in str(b):  # out is missing now: a second build makes a fresh one, locks it and sweeps
            out.mkdir()
            with ownership.folder_lock(out, "--out"):
                swapped_outputs.sweep_leftovers(out)
            assert len(leftovers(tmp_path)) == 2  # .out.partial-* and .out.old-*: both in use

    monkeypatch.setattr(os, "replace", second_build_between_the_renames)
    claim, swapping = swap(out)
    with claim, swapping as tmp:
        swapped_outputs.sweep_leftovers(out)  # a sweep while the block is open
        assert tmp.is_dir()
        (tmp / "w").write_text("new", encoding="utf-8")
    assert (out / "w").read_text(encoding="utf-8") == "new" and leftovers(tmp_path) == []


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
time.sleep(300)
"""


def test_the_leftover_of_a_killed_build_is_swept(tmp_path):
    out, partial = tmp_path / "out", tmp_path / ".out.partial-abcd1234"
    out.mkdir()
    partial.mkdir()
    (partial / ownership.PARTIAL_MARKER).write_text(json.dumps({"of": "out"}), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(partial)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        swapped_outputs.sweep_leftovers(out)
        assert partial.is_dir()  # its build is alive
    finally:
        proc.kill()  # SIGKILL: the kernel drops its lock
        proc.wait(timeout=30)
        proc.stdout.close()
    swapped_outputs.sweep_leftovers(out)
    assert leftovers(tmp_path) == []


def test_a_failed_swap_puts_the_old_output_back(tmp_path, monkeypatch):
    out, replace, calls = merged(tmp_path / "out"), os.replace, []

    def second_fails(a, b):  # out → .out.old-* works; .out.partial-* → out fails
        calls.append(b)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        replace(a, b)

    monkeypatch.setattr(os, "replace", second_fails)
    claim, swapping = swap(out)
    with pytest.raises(OSError, match="Input/output error"), claim, swapping as tmp:
        (tmp / "w").write_text("new", encoding="utf-8")
    assert (out / "w").read_text(encoding="utf-8") == "old" and leftovers(tmp_path) == []


def refuse(*_args, **_kwargs):
    raise PermissionError(errno.EACCES, "Permission denied")


@pytest.mark.parametrize("stand_in", [False, True])
def test_swapping_into_a_read_only_folder_is_one_line(tmp_path, monkeypatch, stand_in):
    if stand_in:  # what mkdtemp raises there for a non-root user (root ignores chmod)
        monkeypatch.setattr(swapped_outputs, "tempfile", SimpleNamespace(mkdtemp=refuse))
    elif os.geteuid() == 0:
        pytest.skip("root ignores chmod (the stand-in covers it)")
    parent = tmp_path / "ro"
    out = merged(parent / "out")
    parent.chmod(0o555)
    claim, swapping = swap(out)
    try:
        with pytest.raises(InputError, match=f"^--out {re.escape(str(out))}: .*parent folder {re.escape(str(parent))} must be"):
            with claim, swapping:
                pass
    finally:
        parent.chmod(0o755)
    assert os.listdir(parent) == ["out"] and (out / "w").read_text(encoding="utf-8") == "old"


# ---------------------------------------------------------------- synth build egov


def egov_rows(out: Path) -> dict:
    splits = sorted(read_manifest(out)["splits"])
    articles = read_rows(out / "articles")
    return {"questions": {s: read_rows(out, s) for s in splits}, "articles": articles,
            "index": index_rows(out / "index", [a["id"] for a in articles])}


@pytest.fixture(scope="module")
def egov_ref(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("egov") / "ref"
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(LAW), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return egov_rows(out)


@pytest.mark.parametrize("point", ["articles", "index_chunks", "index_written", "swap", "questions"])
def test_killed_egov_build_resumes_in_its_own_folder(egov_ref, tmp_path, point):
    out = tmp_path / "egov"
    killed_run(tmp_path, point, "egov", LAW, out)
    assert not (out / "manifest.json").exists()
    assert bool(leftovers(out)) == (point not in ("articles", "questions")), leftovers(out)
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(LAW), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert leftovers(out) == [] and not (out / ".work").exists() and not (out / "articles" / ".work").exists()
    assert egov_rows(out) == egov_ref

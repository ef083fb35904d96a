"""A command never destroys what the user did not ask to replace (issue 15).

``synth build … --out DIR`` and ``synth index build --index DIR`` write only into a missing or empty folder
or one they provably made (``manifest.json`` / ``tansaku_index.json`` of the same kind); anything else is
refused in one line (exit 2) with every byte left as it was. Two builds into one folder: the second is
refused while the first holds the folder's lock, which the kernel drops even on ``kill -9``.

    pytest tests/test_data_safety.py -q
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fixtures.cli_checks import refused, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tansaku.cli import synth_app

ROOT = Path(__file__).resolve().parents[1]
MINIWIKI = str(ROOT / "examples" / "miniwiki.jsonl")


def build_corpus(out: str | Path):
    return CliRunner().invoke(synth_app, ["build", "corpus", "--input", MINIWIKI, "--out", str(out), "-q"])


def build_index(dataset: Path, index: str | Path):
    return CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(dataset), "--index", str(index)])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "c"
    assert build_corpus(out).exit_code == 0
    return out


# ---------------------------------------------------------------- index build


def test_index_refuses_a_folder_with_user_files(corpus, tmp_path):
    target = tmp_path / "v"
    target.mkdir()
    (target / "keep").write_text("x")
    before, parent = snapshot(tmp_path), sorted(os.listdir(tmp_path))
    refused(build_index(corpus, target), str(target), "keep")
    assert snapshot(tmp_path) == before and sorted(os.listdir(tmp_path)) == parent


def test_index_is_never_built_into_a_dataset_folder(corpus, tmp_path):
    before = snapshot(corpus)
    # the index would be its own input: refused while the options are parsed (tansaku.core.cli_types)
    refused(build_index(corpus, corpus), "is the input --dataset")
    assert snapshot(corpus) == before
    other = tmp_path / "other"  # a dataset folder that is no input: ownership refuses it by its kind
    shutil.copytree(corpus, other)
    before = snapshot(other)
    refused(build_index(corpus, other), "dataset folder")
    assert snapshot(other) == before


def test_index_refuses_an_existing_file(corpus, tmp_path):
    target = tmp_path / "ix"
    target.write_bytes(b"precious")
    refused(build_index(corpus, target), "is a file")
    assert sorted(os.listdir(tmp_path)) == ["ix"] and target.read_bytes() == b"precious"


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_index_refuses_a_name_that_is_no_folder_of_its_own(corpus, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep").write_text("x")
    refused(build_index(corpus, name), "--index")
    assert sorted(os.listdir(tmp_path)) == ["keep"]


def test_index_replaces_its_own_index_and_leaves_no_temp_folders(corpus, tmp_path):
    assert build_index(corpus, tmp_path / "ix").exit_code == 0
    assert build_index(corpus, tmp_path / "ix").exit_code == 0  # its own earlier output: replaced
    assert sorted(os.listdir(tmp_path)) == ["ix"]
    assert json.loads((tmp_path / "ix" / "tansaku_index.json").read_text())["documents"] > 0


def test_a_failed_index_build_leaves_no_trace(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()  # no manifest, no rows: not a document dataset
    result = build_index(bad, tmp_path / "ix")
    assert result.exit_code == 2
    assert sorted(os.listdir(tmp_path)) == ["bad"]


# ---------------------------------------------------------------- dataset builds (--out)


def test_out_refuses_a_folder_holding_user_data(tmp_path):
    out = tmp_path / "p"
    (out / "data").mkdir(parents=True)
    (out / "data" / "precious").write_bytes(b"\x00keep")
    before = snapshot(tmp_path)
    refused(build_corpus(out), str(out), "data")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("entry", ["notes.txt", "README.md", ".work/other", "manifest.json"])
def test_out_refuses_any_file_no_build_made(tmp_path, entry):
    out = tmp_path / "p"
    (out / entry).parent.mkdir(parents=True, exist_ok=True)
    (out / entry).write_text('{"name": "mine"}')  # a manifest.json too, when tansaku did not write it
    before = snapshot(tmp_path)
    refused(build_corpus(out), str(out))
    assert snapshot(tmp_path) == before


def test_out_refuses_a_nested_dataset_where_the_build_writes(corpus, tmp_path):
    out = tmp_path / "p"
    out.mkdir()
    os.symlink(corpus, out / "link")  # also a foreign entry: a link, whatever it points to
    (out / "data").mkdir()
    for f in ("manifest.json", "README.md"):
        (out / "data" / f).write_bytes((corpus / f).read_bytes())
    before = snapshot(tmp_path)
    refused(build_corpus(out), "data")
    assert snapshot(tmp_path) == before


def test_out_empty_means_the_current_folder_and_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x").write_text("keep")
    refused(build_corpus(""), "--out")
    assert snapshot(tmp_path) == {"./": None, "data/": None, "data/x": b"keep"}


def test_out_refuses_an_index_and_a_file(corpus, tmp_path):
    assert build_index(corpus, tmp_path / "ix").exit_code == 0
    (tmp_path / "f").write_bytes(b"keep")
    before = snapshot(tmp_path)
    refused(build_corpus(tmp_path / "ix"), "search index")
    refused(build_corpus(tmp_path / "f"), "is a file")
    assert snapshot(tmp_path) == before


def test_out_that_cannot_be_created_is_bad_input(tmp_path):
    (tmp_path / "f").write_bytes(b"keep")
    refused(build_corpus(tmp_path / "f" / "sub"), "cannot create")
    assert (tmp_path / "f").read_bytes() == b"keep"


def test_egov_refuses_a_foreign_out_before_writing_its_articles_and_index(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep", encoding="utf-8")
    before = snapshot(out)
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(ROOT / "examples" / "laws"),
                                            "--out", str(out), "--limit", "2", "-q"])
    refused(result, "no tansaku build made it", "notes.txt")
    assert snapshot(out) == before  # no out/articles, no out/index left behind


def test_out_may_hold_nested_tansaku_outputs_and_its_own_build(corpus, tmp_path):
    """The egov build keeps its articles dataset and index inside its dataset folder."""
    out = tmp_path / "out"
    out.mkdir()
    assert build_index(corpus, out / "index").exit_code == 0
    assert build_corpus(out / "articles").exit_code == 0
    nested = snapshot(out)
    assert build_corpus(out).exit_code == 0
    assert build_corpus(out).exit_code == 0  # same recipe: the finished build, untouched
    after = snapshot(out)
    assert all(after[k] == v for k, v in nested.items()) and (out / "manifest.json").exists()


# ---------------------------------------------------------------- one build at a time

HOLD = """
import sys
from pathlib import Path
from tansaku.core.ownership import folder_lock
with folder_lock(Path(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


def hold_lock(folder: Path, option: str) -> subprocess.Popen:
    """Another process holding ``folder``'s build lock, until its stdin closes or it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), option], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("kill", [False, True])
def test_a_second_build_into_the_same_out_is_refused(tmp_path, kill):
    out = tmp_path / "out"
    out.mkdir()
    holder = hold_lock(out, "--out")
    try:
        refused(build_corpus(out), "another process")
        assert os.listdir(out) == []
    finally:
        if kill:  # kill -9: the kernel drops the lock, nothing stale is left behind
            holder.send_signal(signal.SIGKILL)
        holder.communicate("")
    assert build_corpus(out).exit_code == 0 and (out / "manifest.json").exists()


def test_a_second_index_build_into_the_same_folder_is_refused(corpus, tmp_path):
    assert build_index(corpus, tmp_path / "ix").exit_code == 0
    before = snapshot(tmp_path)
    holder = hold_lock(tmp_path / "ix", "--index")
    try:
        refused(build_index(corpus, tmp_path / "ix"), "another process")
        assert snapshot(tmp_path) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate("")
    assert build_index(corpus, tmp_path / "ix").exit_code == 0


# ---------------------------------------------------------------- property: any foreign folder is refused

NAMES = st.one_of(
    st.sampled_from(["data", "README.md", "manifest.json", "tansaku_index.json", ".work", "recipe.json", "keep"]),
    st.text(alphabet="abcXYZ019._- あ", min_size=1, max_size=10).filter(lambda n: n not in (".", "..")),
)
ENTRY = st.one_of(st.binary(max_size=64), st.dictionaries(NAMES, st.binary(max_size=32), max_size=3))
CONTENTS = st.dictionaries(NAMES, ENTRY, min_size=1, max_size=5)


def populate(folder: Path, contents: dict) -> None:
    folder.mkdir()
    for name, entry in contents.items():
        if isinstance(entry, bytes):
            (folder / name).write_bytes(entry)
        else:
            (folder / name).mkdir()
            for sub, data in entry.items():
                (folder / name / sub).write_bytes(data)


def nonempty(contents: dict) -> bool:
    """An empty ``.work`` folder alone is what a build killed before its first write leaves: allowed."""
    return any(not (n == ".work" and e == {}) for n, e in contents.items())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=CONTENTS.filter(nonempty), index=st.booleans())
def test_a_build_into_any_foreign_folder_refuses_and_touches_nothing(corpus, contents, index):
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "target"
        populate(target, contents)
        before = snapshot(Path(tmp))
        refused(build_index(corpus, target) if index else build_corpus(target), str(target))
        assert snapshot(Path(tmp)) == before

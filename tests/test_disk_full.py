"""A full disk is the user's to fix: one line naming the output, exit 2, never a traceback (issue 28).

A ``write()``/``flush()``/``close()`` that fails with ``ENOSPC`` raises an ``OSError`` without a file name, and
tantivy and safetensors (Rust) report it only as text (``… (os error 28) …``): each used to be a traceback.
Python writes are made to fail under the command's output (``full_disk``), pyarrow's and the Rust writers'
where they write; four commands also run in a child process under a real file-size limit (``RLIMIT_FSIZE``:
the kernel refuses the write with ``EFBIG``), which needs no mount and no root.

    pytest tests/test_disk_full.py -q
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app, train_app

ROOT = Path(__file__).resolve().parents[1]
ENV_FIXTURES = ROOT / "tests" / "fixtures" / "envs"
FULL = "No space left on device"


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, FULL)  # what write()/close() raise: no file name


class _FullFile:
    """A file opened for writing on a full disk: opening works, every write fails."""

    def __init__(self, real):
        self._real = real

    write = writelines = flush = staticmethod(_enospc)

    def close(self):
        self._real.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()

    def __getattr__(self, name):
        return getattr(self._real, name)


def full_disk(monkeypatch, under: Path) -> None:
    """Every Python and pyarrow write into ``under`` (or the file ``under``) fails as on a full disk."""
    real_open = builtins.open
    target = Path(os.path.abspath(under))

    def full_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        inside = isinstance(file, (str, os.PathLike)) and (
            (path := Path(os.path.abspath(file))) == target or target in path.parents)
        return _FullFile(handle) if inside and any(c in mode for c in "wax+") else handle

    monkeypatch.setattr(builtins, "open", full_open)
    monkeypatch.setattr(io, "open", full_open)  # pathlib's write_text opens through io.open
    import pyarrow.parquet as pq

    def write_table(self, *_a, **_k):  # pyarrow's own message, with its errno
        raise OSError(errno.ENOSPC, f"Error writing bytes to file. Detail: [errno 28] {FULL}")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)


def _one_line_naming(result, path: Path) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.output + result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and re.match(rf"error: (--[\w-]+ )?{re.escape(str(path))}", lines[0]) and FULL in lines[0], result.stderr


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ENV_FIXTURES))
    try:
        from helpers import build_fixture_index
    finally:
        sys.path.remove(str(ENV_FIXTURES))
    return build_fixture_index(tmp_path_factory.mktemp("full-ix"))


@pytest.mark.parametrize("build, inputs", [("corpus", ["--input", str(ROOT / "examples" / "miniwiki.jsonl")]),
                                           ("egov", ["--laws", str(ROOT / "examples" / "laws")])])
def test_a_build_on_a_full_disk(build, inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    full_disk(monkeypatch, out)
    result = CliRunner().invoke(synth_app, ["build", build, *inputs, "--out", str(out), "-q"])
    _one_line_naming(result, out)


def test_index_build_when_tantivy_hits_a_full_disk(tmp_path, monkeypatch, index_dir):
    """tantivy's ``ValueError`` carries the errno only in its text."""
    import tantivy

    class FullIndex:
        def __init__(self, *_a, **_k):
            raise ValueError(f"An IO error occurred: '{FULL} (os error 28) at path \"{tmp_path}/.ix.partial-x/a\"'")

    monkeypatch.setattr(tantivy, "Index", FullIndex)
    dataset = index_dir.parent / "corpus"
    result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(dataset), "--index", str(tmp_path / "ix")])
    _one_line_naming(result, tmp_path / "ix")


def test_merge_when_safetensors_hits_a_full_disk(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import safetensors.torch
    from safetensors import SafetensorError

    models = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        safetensors.torch.save_file({"w": torch.ones(2, 2)}, str(tmp_path / name / "model.safetensors"))
        (tmp_path / name / "config.json").write_text('{"model_type": "toy"}', encoding="utf-8")
        models.append(str(tmp_path / name))

    def full(*_a, **_k):
        raise SafetensorError(f"Error while serializing: I/O error: {FULL} (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    result = CliRunner().invoke(train_app, ["merge", "soup", *models, "--out", str(tmp_path / "merged")])
    _one_line_naming(result, tmp_path / "merged")


def _limited(max_bytes: int):
    def preexec():  # the kernel refuses writes past the limit (EFBIG) instead of killing the process
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return preexec


def _real_limit_args(command: str, out: Path, index_dir: Path, tmp_path: Path) -> list[str]:
    if command == "corpus":
        return ["build", "corpus", "--input", str(ROOT / "examples" / "miniwiki_large.jsonl"), "--out", str(out), "-q"]
    if command == "index":
        return ["index", "build", "--dataset", str(index_dir.parent / "corpus"), "--index", str(out)]
    rows = tmp_path / "rows.jsonl"
    rows.write_text((ENV_FIXTURES / "multihop.jsonl").read_text(encoding="utf-8") * 5, encoding="utf-8")
    if command == "export":
        return ["serve-env", "--task", "multihop_qa", "--index", str(index_dir), "--dataset", str(rows),
                "--export", str(out)]
    model = tmp_path / "answers.jsonl"
    model.write_text(json.dumps({"content": "<think>答える</think>{{白砂市}}"}, ensure_ascii=False) + "\n",
                     encoding="utf-8")
    return ["train", "eval", "--task", "multihop_qa", "--dataset", str(rows), "--model", f"scripted:{model}",
            "--index", str(index_dir), "--k", "1", "--out", str(out)]


@pytest.mark.parametrize("command", ["corpus", "index", "eval", "export"])
def test_a_real_file_size_limit_is_one_line(tmp_path, command, index_dir):
    """The same through the real writers (Python, pyarrow, tantivy) in a child process."""
    out = tmp_path / "out"
    args = _real_limit_args(command, out, index_dir, tmp_path)
    cli = "from tansaku.cli import main; main()"  # `python -m tansaku.cli [train] …`, as accelerate runs it
    env = {**os.environ, "TANSAKU_QUIET": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("TANSAKU_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", cli, *args], capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=_limited(2048))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(rf"error: (--[\w-]+ )?{re.escape(str(out))}", lines[0]), proc.stderr
    assert "File too large" in lines[0], proc.stderr


@pytest.mark.parametrize("command", ["eval", "select"])
def test_a_full_disk_is_never_reported_against_the_index_a_command_reads(command, tmp_path, monkeypatch):
    """``--index`` is an input of train eval and train select: with no --out, a full disk names train select's
    --run (what it writes into) or says the output could not be written; it used to name the index."""
    import tansaku.envs.evaluate as evaluate
    import tansaku.trainer.select as select

    monkeypatch.setattr(evaluate, "run_eval", _enospc)
    monkeypatch.setattr(select, "select_checkpoint", _enospc)
    index, run, rows = tmp_path / "ix", tmp_path / "run", ENV_FIXTURES / "multihop.jsonl"
    index.mkdir()
    common = ["--task", "multihop_qa", "--dataset", str(rows), "--index", str(index)]
    (tmp_path / "x.jsonl").write_text('{"content": "{{A}}"}\n', encoding="utf-8")
    args = ["eval", *common, "--model", f"scripted:{tmp_path / 'x.jsonl'}"] if command == "eval" else ["select", "--run", str(run), *common]
    result = CliRunner().invoke(train_app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output + result.stderr, result.stderr
    (line,) = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert FULL in line and str(index) not in line, line
    if command == "select":
        assert re.match(rf"error: (--[\w-]+ )?{re.escape(str(run))}: ", line)
    else:
        assert line.startswith("error: No space left on device") and "output could not be written" in line

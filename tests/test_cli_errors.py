"""The CLI's error contract: bad input → one line on stderr and exit 2; a bug → its traceback and exit 1.

    pytest tests/test_cli_errors.py -q
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tansaku
from tansaku.cli import synth_app, train_app
from tansaku.core.context import BuildContext

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("search_fixture", ROOT / "tests" / "fixtures" / "search" / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)


def _one_line_exit_2(result) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


@pytest.mark.parametrize("app, args", [
    (synth_app, ["build", "corpus", "--input", "{tmp}/missing.jsonl", "--out", "{tmp}/out"]),
    (synth_app, ["build", "egov", "--laws", "{tmp}/missing", "--out", "{tmp}/out"]),  # was: an empty dataset
    (synth_app, ["build", "multihop", "--triples", "{tmp}/missing.jsonl", "--out", "{tmp}/out", "--until", "chains"]),
    (synth_app, ["build", "multihop", "--corpus", "{tmp}/missing", "--out", "{tmp}/out", "--until", "chains"]),
    (synth_app, ["build", "trajectories", "--dataset", "{tmp}/missing", "--out", "{tmp}/out",
                 "--teacher", "scripted:{tmp}/t.jsonl", "--index", "{tmp}/ix"]),
    (synth_app, ["build", "deepresearch", "--corpus", "{tmp}/missing", "--index", "{tmp}/ix", "--out", "{tmp}/out",
                 "--llm", "scripted:deepresearch"]),
    (synth_app, ["import", "jemhopqa", "{tmp}/missing.json", "--out", "{tmp}/out"]),
    (synth_app, ["index", "build", "--dataset", "{tmp}/missing", "--index", "{tmp}/ix"]),
    (synth_app, ["search", "--index", "{tmp}/missing", "港"]),
    (synth_app, ["info", "{tmp}/missing"]),
    (train_app, ["sft", "--config", "{tmp}/missing.yaml"]),
    (train_app, ["eval", "--task", "multihop_qa", "--dataset", "{tmp}/missing.jsonl", "--model", "scripted:x.jsonl",
                 "--index", "{tmp}/ix"]),
    (train_app, ["merge", "soup", "{tmp}/a", "{tmp}/b", "--out", "{tmp}/merged"]),
])
def test_missing_input_is_one_line_and_exit_2(tmp_path, app, args):
    result = CliRunner().invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    _one_line_exit_2(result)


@pytest.mark.parametrize("args", [
    ["build", "multihop", "--out", "{tmp}/out"],                                    # neither --corpus nor --triples
    ["build", "multihop", "--triples", "{tmp}/t.jsonl", "--out", "{tmp}/out", "--until", "nope"],
    ["build", "corpus", "--input", "{tmp}/t.jsonl", "--out", "{tmp}/out", "--format", "nope"],
    ["index", "build", "--dataset", "{tmp}", "--index", "opensearch:x"],              # embedded backend, OS target
    ["build", "deepresearch", "--corpus", "{tmp}/c", "--index", "{tmp}/ix", "--out", "{tmp}/out", "--llm", "gpt:x",
     "--clarify-share", "2"],
    ["build", "egov", "--laws", "{tmp}", "--out", "{tmp}/out", "--heldout-share", "1.5"],
])
def test_invalid_option_is_one_line_and_exit_2(tmp_path, args):
    (tmp_path / "t.jsonl").write_text('{"subject": "a", "relation": "b", "object": "c"}\n', encoding="utf-8")
    _one_line_exit_2(CliRunner().invoke(synth_app, [a.replace("{tmp}", str(tmp_path)) for a in args]))


def test_invalid_llm_spec_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"subject": "a", "relation": "b", "object": "c"}\n', encoding="utf-8")
    result = CliRunner().invoke(synth_app, ["build", "multihop", "--triples", str(tmp_path / "t.jsonl"), "--out",
                                            str(tmp_path / "out"), "--llm", "gpt:nope", "--until", "chains"])
    _one_line_exit_2(result)
    assert "unknown LLM backend" in result.stderr


def test_invalid_query_is_one_line_and_exit_2(tmp_path):
    from tansaku.envs.search import build_index

    build_index(fixture.write_dataset(tmp_path / "ds"), tmp_path / "ix")
    for bad in ['{"script": {"source": "x"}}', '{"bool": {"must": [', "  "]:
        result = CliRunner().invoke(synth_app, ["search", "--index", str(tmp_path / "ix"), bad])
        _one_line_exit_2(result)


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"subject": "a", "relation": "b", "object": "c"}\n{oops\n', encoding="utf-8")
    result = CliRunner().invoke(synth_app, ["build", "multihop", "--triples", str(tmp_path / "t.jsonl"),
                                            "--out", str(tmp_path / "out"), "--until", "chains"])
    _one_line_exit_2(result)
    assert "t.jsonl:2: not valid JSON" in result.stderr


@pytest.mark.parametrize("error", ["ValueError('internal invariant broken')", "ZeroDivisionError('division by zero')"])
def test_a_bug_keeps_its_traceback_and_exits_1(tmp_path, error):
    """Anything that is not a TansakuError is a bug: Python's traceback on stderr, exit status 1."""
    code = (
        "import sys, tansaku.core.store as store\n"
        "def boom(*a, **k):\n"
        f"    raise {error}\n"
        "store.read_manifest = boom\n"
        "from tansaku.cli import synth_app\n"
        f"synth_app(['info', {str(tmp_path)!r}], prog_name='synth')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "Traceback (most recent call last)" in out.stderr and "in boom" in out.stderr
    assert error.split("(")[0] in out.stderr.strip().splitlines()[-1]
    assert not out.stderr.startswith("error: ")


def test_a_bug_is_not_swallowed_by_the_runner(monkeypatch, tmp_path):
    import tansaku.core.store as store

    def boom(*_a, **_k):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(store, "read_manifest", boom)
    result = CliRunner().invoke(synth_app, ["info", str(tmp_path)])
    assert result.exit_code == 1 and isinstance(result.exception, ZeroDivisionError)
    assert "error:" not in result.stderr


def test_version():
    for app in (synth_app, train_app):
        result = CliRunner().invoke(app, ["--version"])
        assert result.exit_code == 0
        assert result.stdout.strip() == f"tansaku {metadata.version('tansaku')}" == f"tansaku {tansaku.__version__}"


def test_importing_the_cli_loads_no_heavy_library():
    """``synth --help`` stays fast because the CLI imports each command's code only when it runs."""
    heavy = ("torch", "transformers", "trl", "datasets", "polars", "vllm", "peft", "opensearchpy")
    code = f"import sys, tansaku.cli; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"tansaku.cli imports {out.stdout.strip()}"


def test_missing_index_fails_before_any_work(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"subject": "a", "relation": "b", "object": "c"}\n', encoding="utf-8")
    result = CliRunner().invoke(synth_app, ["build", "multihop", "--triples", str(tmp_path / "t.jsonl"),
                                            "--index", str(tmp_path / "noix"), "--out", str(tmp_path / "out")])
    _one_line_exit_2(result)
    assert "noix does not exist" in result.stderr and not (tmp_path / "out").exists()


def test_eval_of_a_dataset_without_a_heldout_split_names_split(tmp_path):
    """`train eval` reads the held-out 'test' split and never falls back to the rows a model trained on."""
    from tansaku.core.engine import map_stage
    from tansaku.core.heldout import HeldOut
    from tansaku.core.store import build_dataset

    rows = [{"qid": f"q{i}", "question": f"問{i}", "answer": "a"} for i in range(5)]
    build_dataset(out=tmp_path / "ds", name="ds", pipeline="p", pipeline_version="1", config={}, seed=0, inputs=[],
                  source=rows, stages=[map_stage("keep", lambda r: r)], context=BuildContext(quiet=True), heldout=HeldOut(0, "qid"))
    (tmp_path / "x.jsonl").write_text('{"content": "x"}\n', encoding="utf-8")  # a scripted: file must exist
    result = CliRunner().invoke(train_app, ["eval", "--task", "multihop_qa", "--dataset", str(tmp_path / "ds"),
                                            "--model", f"scripted:{tmp_path / 'x.jsonl'}", "--index",
                                            str(tmp_path / "ix")])
    _one_line_exit_2(result)
    assert "no 'test' split" in result.stderr and "--split" in result.stderr

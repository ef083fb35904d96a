"""JSON files a user or an earlier run left (manifests, index metadata, reports, trainer states) are read one way,
``tansaku.core.jsontext.read_file``: whatever is wrong with one — unreadable, not UTF-8, not JSON, 100k-deep
nesting, a list where an object belongs — is one line naming the file, or the file is treated as absent where
the caller can do without it; never an ``AttributeError`` / ``RecursionError`` / ``UnicodeDecodeError`` traceback.

    pytest tests/test_json_files.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.envs.compare import load_report
from tansaku.envs.search.documents import DatasetError, keyword_fields_of
from tansaku.trainer.report import load_log_history

ROOT = Path(__file__).resolve().parents[1]
DEEP = b"[" * 100_000 + b"]" * 100_000
NOT_UTF8 = b'{"config": {"keyword_fields": ["\xff"]}}'
BROKEN = {"list": b'[{"config": {"keyword_fields": ["a"]}}]', "deep": DEEP, "not_utf8": NOT_UTF8}


def test_read_file_raises_one_error_type_for_every_broken_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": "\\ud800", "b": [1]}')  # a BOM and a lone surrogate are fine
    assert jsontext.read_file(path) == {"a": "\ufffd", "b": [1]}
    reasons = {}
    for name, data in {"deep": DEEP, "not_utf8": NOT_UTF8, "invalid": b"{", "empty": b"",
                       "long_number": b"9" * 5_000}.items():
        path.write_bytes(data)
        with pytest.raises(jsontext.JSONInputError) as caught:
            jsontext.read_file(path)
        reasons[name] = caught.value.msg
    with pytest.raises(jsontext.JSONInputError, match="cannot be read"):
        jsontext.read_file(tmp_path / "missing.json")
    with pytest.raises(jsontext.JSONInputError, match="cannot be read"):
        jsontext.read_file(tmp_path)  # a folder
    assert reasons["deep"] == "nested too deeply, over 64 levels" and "UTF-8" in reasons["not_utf8"]
    assert "line 1 column 2" in reasons["invalid"]
    assert all("\n" not in reason for reason in reasons.values())


def test_read_object_is_a_dict_or_the_default(tmp_path):
    path = tmp_path / "x.json"
    assert jsontext.read_object(path) is None and jsontext.read_object(path, {}) == {}
    for data in (b"[1]", b'"x"', b"null", DEEP, NOT_UTF8, b"{"):
        path.write_bytes(data)
        assert jsontext.read_object(path, "absent") == "absent"
    path.write_text('{"a": 1}', encoding="utf-8")
    assert jsontext.read_object(path) == {"a": 1}


def _dataset(tmp_path: Path, manifest: bytes | None) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "search"))
    try:
        from dataset import write_dataset
    finally:
        sys.path.pop(0)
    folder = write_dataset(tmp_path / "ds")
    if manifest is None:
        (folder / "manifest.json").unlink()
    else:
        (folder / "manifest.json").write_bytes(manifest)
    return folder


def test_keyword_fields_of_a_valid_or_missing_manifest(tmp_path):
    assert keyword_fields_of(_dataset(tmp_path / "a", b'{"config": {"keyword_fields": ["category"]}}')) == ["category"]
    assert keyword_fields_of(_dataset(tmp_path / "b", None)) == []
    assert keyword_fields_of(_dataset(tmp_path / "c", b'{"config": {}}')) == []


@pytest.mark.parametrize("name", [*BROKEN, "fields_not_a_list", "config_not_an_object"])
def test_keyword_fields_of_a_broken_manifest_is_one_line(tmp_path, name):
    """``train rl`` with ``corpus: DIR`` reaches this through ``build_index``, and so does ``synth index build``."""
    data = BROKEN.get(name) or {"fields_not_a_list": b'{"config": {"keyword_fields": "category"}}',
                                "config_not_an_object": b'{"config": ["keyword_fields"]}'}[name]
    folder = _dataset(tmp_path, data)
    with pytest.raises(DatasetError, match=f"^{folder / 'manifest.json'}: ") as caught:
        keyword_fields_of(folder)
    assert isinstance(caught.value, InputError) and "\n" not in str(caught.value)
    if name in BROKEN:
        result = CliRunner().invoke(synth_app, ["index", "build", "--dataset", str(folder),
                                                "--index", str(tmp_path / "ix")])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --dataset {folder / 'manifest.json'}: "), result.stderr


@pytest.mark.parametrize("data", [*BROKEN.values(), b"{"])
def test_a_broken_eval_report_is_one_line(tmp_path, data):
    (tmp_path / "report.json").write_bytes(data)
    with pytest.raises(InputError, match=f"^{tmp_path / 'report.json'}"):
        load_report(tmp_path)


def test_a_broken_trainer_state_counts_as_none(tmp_path):
    history = [{"step": 1, "loss": 0.5}]
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (tmp_path / "checkpoint-\u00b2").mkdir()  # no checkpoint of TRL's: skipped, not a ValueError
    (tmp_path / "checkpoint-\u00b2" / "trainer_state.json").write_text("{}")
    for data in (*BROKEN.values(), b"{"):
        (tmp_path / "trainer_state.json").write_bytes(data)
        assert load_log_history(tmp_path) == history  # the latest checkpoint's, as with no state file
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history + ["x"]}))
    assert load_log_history(tmp_path) == history

"""Evaluation sets stay evaluation sets (issue 49): ``synth import jemhopqa`` puts every question in ``test`` (the
dev file: ``validation``) and writes no ``train`` split unless ``--as-train`` asks for one; then ``train`` plus a
held-out ``test``, a warning on stderr, and the card and manifest say so. Fictional questions only.

    pytest tests/test_jemhopqa_import.py -q
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import load_dataset

from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.heldout import heldout_split
from tansaku.core.store import StoreError, read_rows
from tansaku.envs.evaluate import load_rows
from tansaku.pipelines.multihop.jemhopqa import IMPORT_VERSION, import_jemhopqa
from tansaku.pipelines.multihop.jemhopqa_config import JemhopqaImportConfig

FIXTURES = Path(__file__).parent / "fixtures" / "jemhopqa"
SYNTH = Path(sys.executable).with_name("synth")
LOGGER = "tansaku.pipelines.multihop.jemhopqa"
ITEMS = [{"qid": f"q{i}", "type": "compositional", "question": f"『本{i}』の著者の出生地は？", "answer": "朝霧市",
          "derivations": [[f"本{i}", "著者", ["水城遥"]], ["水城遥", "出生地", ["朝霧市"]]],
          "page_ids": ["1", "2"], "time_dependent": False} for i in range(40)]


@pytest.fixture
def train_file(tmp_path) -> Path:
    path = tmp_path / "train_ver1.2.json"
    path.write_text(json.dumps(ITEMS, ensure_ascii=False), encoding="utf-8")
    return path


def _imported(path: Path, out: Path, **options) -> dict:
    return import_jemhopqa(JemhopqaImportConfig(path=path, **options), out, BuildContext(quiet=True))


def _description(folder: Path) -> str:
    return " ".join((folder / "README.md").read_text(encoding="utf-8").split())


def test_every_question_is_in_test_by_default_and_nothing_is_warned(train_file, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        manifest = _imported(train_file, tmp_path / "eval")
    assert not caplog.records
    assert manifest["splits"] == {"test": len(ITEMS)} and not manifest.get("heldout")
    assert manifest["pipeline_version"] == IMPORT_VERSION
    assert manifest["config"]["as_train"] is False and manifest["config"]["split"] == "test"
    assert {r["qid"] for r in read_rows(tmp_path / "eval", "test")} == {i["qid"] for i in ITEMS}
    card = _description(tmp_path / "eval")
    assert "JEMHopQA is an evaluation set: every question is in the `test` split" in card
    assert "there is no `train` split" in card
    # what reads it: train eval's default split works; a trainer's 'train' is refused, no fallback to 'test'
    assert len(load_rows(tmp_path / "eval")) == len(ITEMS)
    with pytest.raises(InputError, match=r"has no 'train' split \(it holds: test\): name one of its splits"):
        load_rows(tmp_path / "eval", "train")
    assert list(load_dataset(str(tmp_path / "eval"))) == ["test"]


def test_the_dev_file_stays_validation(tmp_path):
    manifest = _imported(FIXTURES / "dev_mini.json", tmp_path / "dev")
    assert list(manifest["splits"]) == ["validation"] and manifest["config"]["split"] == "validation"
    assert "every question is in the `validation` split (`train eval --dataset DIR --split validation`)" in \
        _description(tmp_path / "dev")


def test_as_train_keeps_the_held_out_share_and_warns(train_file, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        manifest = _imported(train_file, tmp_path / "train", as_train=True, heldout_share=0.3, seed=1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    test = {r["qid"] for r in read_rows(tmp_path / "train", "test")}
    train = {r["qid"] for r in read_rows(tmp_path / "train", "train")}
    assert len(warnings) == 1 and "JEMHopQA is an evaluation set" in warnings[0], warnings
    assert f"{len(train)} of its questions are in the 'train' split" in warnings[0]
    assert f"({len(test)} held out in 'test', share 0.3)" in warnings[0]
    assert test == {i["qid"] for i in ITEMS if heldout_split(i["qid"], 0.3, 1) == "test"}
    assert test and train and not test & train and len(test | train) == len(ITEMS)
    assert manifest["heldout"]["share"] == 0.3 and manifest["heldout"]["rows"] == len(test)
    assert manifest["config"]["as_train"] is True and manifest["config"]["split"] == "train+test"
    card = _description(tmp_path / "train")
    assert "Imported as training data on request (`--as-train`), although JEMHopQA is an evaluation set" in card


def test_as_train_applies_to_the_dev_file_too(tmp_path):
    manifest = _imported(FIXTURES / "dev_mini.json", tmp_path / "dev", as_train=True, heldout_share=0)
    assert list(manifest["splits"]) == ["train"] and manifest["config"]["split"] == "train+test"


def test_the_choice_is_part_of_the_recipe(train_file, tmp_path):
    """An import into a folder made with the other choice is refused, not mixed."""
    _imported(train_file, tmp_path / "eval")
    with pytest.raises(StoreError, match="as_train false → true"):
        _imported(train_file, tmp_path / "eval", as_train=True)
    assert list(json.loads((tmp_path / "eval" / "manifest.json").read_text(encoding="utf-8"))["splits"]) == ["test"]


def test_a_bad_share_is_refused_without_as_train_too(train_file, tmp_path):
    with pytest.raises(InputError, match="--heldout-share"):
        _imported(train_file, tmp_path / "bad", heldout_share=1.5)
    assert not (tmp_path / "bad").exists()


def _synth(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "TANSAKU_QUIET": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(SYNTH), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def test_the_cli_warns_on_stderr_only_with_as_train(train_file, tmp_path):
    plain = _synth("import", "jemhopqa", train_file, "--out", tmp_path / "eval")
    assert plain.returncode == 0, plain.stderr
    assert "evaluation set" not in plain.stderr
    asked = _synth("import", "jemhopqa", train_file, "--out", tmp_path / "train", "--as-train")
    assert asked.returncode == 0, asked.stderr
    lines = [line for line in asked.stderr.splitlines() if "JEMHopQA is an evaluation set" in line]
    assert len(lines) == 1 and "--as-train" in lines[0], asked.stderr
    assert "evaluation set" not in asked.stdout
    splits = json.loads((tmp_path / "train" / "manifest.json").read_text(encoding="utf-8"))["splits"]
    assert set(splits) == {"train", "test"}

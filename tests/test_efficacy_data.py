"""bench/efficacy.py's data guard: results measured on other questions are never mixed into one report, while a
dataset rebuilt by later code that only records more about each row (a new version, the same task view) is."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tansaku.core.store import write_manifest, write_rows

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def efficacy():
    sys.path.insert(0, str(BENCH))  # efficacy.py imports efficacy_report from beside itself
    try:
        spec = importlib.util.spec_from_file_location("efficacy_bench", BENCH / "efficacy.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def _dataset(path: Path, derivation: str, answer: str = "楓瀬市") -> Path:
    rows = [{"id": "q1", "question": "鈴虫の港の著者の出身地は？", "answer": answer,
             "derivations": [{"subject": "樫沼美汐", "relation": derivation, "objects": [answer]}]}]
    path.mkdir()
    version, counts = write_rows(path, {"test": lambda: iter(rows)})
    write_manifest(path, {"version": version, "splits": counts})
    return path


def test_the_task_view_ignores_what_the_task_does_not_read(efficacy, tmp_path):
    old = _dataset(tmp_path / "old", "出生地")
    relabelled = _dataset(tmp_path / "new", "出身地")
    other_answer = _dataset(tmp_path / "other", "出生地", answer="雫瀬市")
    versions = {json.loads((p / "manifest.json").read_text())["version"] for p in (old, relabelled)}
    assert len(versions) == 2  # whole-row versions differ
    assert efficacy.task_view(old) == efficacy.task_view(relabelled)
    assert efficacy.task_view(old) != efficacy.task_view(other_answer)


def _result(results: Path, name: str, data: dict) -> None:
    results.mkdir(exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps({"data": data}), encoding="utf-8")


def test_results_on_other_questions_are_refused(efficacy, tmp_path, capsys):
    results = tmp_path / "results"
    now = {"multihop": "v2", "multihop_task_view": "aaaa"}
    _result(results, "sft-seed0", {"multihop": "v1"})  # recorded before task views: logged, not refused
    _result(results, "gspo-seed0", {"multihop": "v2", "multihop_task_view": "aaaa"})
    efficacy.check_same_data(results, now)
    assert "sft-seed0.json recorded multihop v1 without a task view" in capsys.readouterr().out
    _result(results, "grpo-seed0", {"multihop": "v3", "multihop_task_view": "bbbb"})
    with pytest.raises(SystemExit, match="grpo-seed0.json was measured on other questions"):
        efficacy.check_same_data(results, now)


def test_an_rl_arm_starts_only_from_the_sft_model_that_was_measured(efficacy, tmp_path, monkeypatch):
    """On a fresh checkout the SFT start is trained again, and used only when it is the one recorded."""
    recorded = {"start": str(tmp_path / "gone" / "sft-seed1" / "checkpoint-16"), "start_step": 16,
                "heldout": {"test": {"pass@1": 0.312}, "phrasing": {"pass@1": 0.24}}}
    again = {"start": str(tmp_path / "work" / "sft-seed1" / "checkpoint-16"), "start_step": 16,
             "heldout": {"test": {"pass@1": 0.312}, "phrasing": {"pass@1": 0.24}}}
    monkeypatch.setattr(efficacy, "sft_seed", lambda work, seed, args: again)
    assert efficacy.sft_start(tmp_path / "work", 1, recorded, None) == Path(again["start"])
    again["heldout"]["phrasing"]["pass@1"] = 0.25
    with pytest.raises(SystemExit, match="not the recorded step 16"):
        efficacy.sft_start(tmp_path / "work", 1, recorded, None)
    existing = tmp_path / "work" / "sft-seed1" / "checkpoint-16"
    existing.mkdir(parents=True)  # the same checkpoint under this --work: used as it is, nothing trained
    monkeypatch.setattr(efficacy, "sft_seed", lambda *a: pytest.fail("trained again"))
    assert efficacy.sft_start(tmp_path / "work", 1, recorded, None) == existing

"""The ``rl`` split: RL prompts the SFT model never trained on (``--rl-share``), by the same stable key as ``test``.

multihop keys on ``bridge``, egov on ``article_id``; ``synth build trajectories`` reads ``train`` only and
``train rl`` reads ``rl`` unless its recipe names a split; the ``test`` side does not move when ``rl_share``
changes.

Run: pytest tests/test_rl_split.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tansaku.cli import synth_app
from tansaku.core.context import BuildContext
from tansaku.core.errors import InputError
from tansaku.core.heldout import HeldOut
from tansaku.core.store import read_manifest, read_rows
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.multihop.config import MultihopConfig
from tansaku.pipelines.trajectories.config import TrajectoriesConfig
from tansaku.trainer.recipe_arguments import RLTask

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from tansaku.envs.search import build_index
    from tansaku.pipelines.corpus.build import build_corpus
    from tansaku.pipelines.multihop.build import build_multihop

    base = tmp_path_factory.mktemp("rl-split")
    build_corpus(CorpusConfig(input=ROOT / "examples" / "miniwiki.jsonl", format="jsonl"), base / "corpus", BuildContext(quiet=True))
    build_index(base / "corpus", base / "index")
    for name, rl_share in (("plain", 0.0), ("with-rl", 0.3)):
        build_multihop(MultihopConfig(corpus=base / "corpus", max_per_subject=0, max_per_bridge=0, max_per_relation_pair=0, rl_share=rl_share), base / name, BuildContext(quiet=True))
    return base


def test_three_splits_keep_each_bridge_on_one_side_and_test_does_not_move(built):
    manifest = read_manifest(built / "with-rl")
    splits = {s: read_rows(built / "with-rl", s) for s in ("train", "rl", "test")}
    assert all(splits.values()), manifest["splits"]
    bridges = {s: {r["bridge"] for r in rows} for s, rows in splits.items()}
    assert not (bridges["train"] & bridges["rl"]) and not (bridges["rl"] & bridges["test"])
    assert not (bridges["train"] & bridges["test"])
    assert manifest["heldout"]["rl_share"] == 0.3 and manifest["heldout"]["rl_rows"] == len(splits["rl"])
    plain = read_manifest(built / "plain")
    assert "rl" not in plain["splits"] and "rl_share" not in plain["heldout"]  # no option: the recipe is unchanged
    assert [r["qid"] for r in read_rows(built / "plain", "test")] == [r["qid"] for r in splits["test"]]
    assert plain["splits"]["train"] == len(splits["train"]) + len(splits["rl"])
    card = (built / "with-rl" / "README.md").read_text(encoding="utf-8")
    assert "`rl` (" in card and "train rl" in card


def test_train_rl_reads_the_rl_split_unless_told_otherwise(built):
    assert RLTask(name="multihop_qa", data=str(built / "with-rl")).prompt_split() == "rl"
    assert RLTask(name="multihop_qa", data=str(built / "plain")).prompt_split() == "train"
    assert RLTask(name="multihop_qa", data=str(built / "with-rl"), split="train").prompt_split() == "train"
    from tansaku.trainer.rl import task_rows
    from tansaku.trainer.rl_rewards import rl_task

    spec = RLTask(name="multihop_qa", data=str(built / "with-rl"), index=str(built / "index"))
    rl_questions = {r["question"] for r in read_rows(built / "with-rl", "rl")}
    assert {r["question"] for r in task_rows(spec, rl_task(spec))} == rl_questions


def test_trajectories_read_train_only(built, tmp_path):
    from tansaku.pipelines.trajectories.build import build_trajectories

    script = ROOT / "examples" / "teacher_script.py"
    build_trajectories(TrajectoriesConfig(dataset=built / "with-rl", teacher=f"scripted:{script}", index=built / "index",
                                          translator=f"scripted:{script}:rewrite", n=1),
                       tmp_path / "sft", BuildContext(quiet=True))
    asked = {r["question_id"] for r in read_rows(tmp_path / "sft")} | {
        json.loads(r["record"]).get("question_id") for r in read_rows(tmp_path / "sft", "rejected") if r["record"]}
    train_ids = {r.get("qid") for r in read_rows(built / "with-rl", "train")}
    assert asked & train_ids and asked - {None} <= train_ids


def test_bad_shares_are_refused_before_any_write(tmp_path):
    with pytest.raises(InputError, match="--rl-share"):
        HeldOut(0.2, "bridge", 0, rl_share=0.8)
    result = CliRunner().invoke(synth_app, ["build", "egov", "--laws", str(ROOT / "examples" / "laws"),
                                            "--out", str(tmp_path / "e"), "--rl-share", "-0.1", "-q"])
    assert result.exit_code == 2 and "--rl-share" in result.stderr and not (tmp_path / "e").exists()

"""Template questions without an LLM: relation names normalised by the table, and frames chosen per relation
pair so every combination reads as Japanese (no stray placeholders, doubled particles or の-chains where a
clause exists)."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from tansaku.core.errors import InputError
from tansaku.pipelines.multihop.questions import (
    FRAMES,
    frames_for,
    generate_template,
    question_problem,
    template_question,
)
from tansaku.pipelines.multihop.relations import DEFAULT, KINDS, Relations

CHAIN = {"chain_id": "c1", "subject": "ノルウェイの森", "bridge": "村上春樹", "answer": "京都府"}


def test_spellings_of_one_relation_become_one():
    assert {DEFAULT.canonical(r) for r in ("出身地", "出生地", "生誕地")} == {"出生地"}
    assert {DEFAULT.canonical(r) for r in ("設立", "設立年", "創立")} == {"設立"}
    assert DEFAULT.canonical("血液型") == "血液型"  # unknown: kept as it is


def test_a_user_table_extends_and_overrides(tmp_path):
    extra = tmp_path / "rel.json"
    extra.write_text(json.dumps({"血液型": {"variants": ["血液"], "kind": "thing", "of": "{S}の血液型",
                                          "ask": "{S}の血液型は何型ですか？"}}, ensure_ascii=False), encoding="utf-8")
    table = Relations.load(extra)
    assert table.canonical("血液") == "血液型" and table.canonical("出身地") == "出生地"
    assert table.version != DEFAULT.version
    extra.write_text(json.dumps({"色": {"kind": "colour", "of": "x", "ask": "y"}}), encoding="utf-8")
    with pytest.raises(InputError, match="needs kind"):
        Relations.load(extra)
    extra.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="not a readable JSON table"):
        Relations.load(extra)


def test_at_least_ten_frames_and_a_pair_gets_most_of_them():
    assert len(FRAMES) >= 10
    assert len(frames_for(DEFAULT.phrase("著者"), DEFAULT.phrase("出生地"))) >= 10


def _one_relation_per_kind_and_shape() -> list[str]:
    """A listed relation of each kind with a clause, one with a noun phrase, and an unlisted one."""
    picks = []
    for kind in KINDS:
        for verbal in (True, False):
            names = [r for r in DEFAULT.table if DEFAULT.phrase(r).kind == kind and DEFAULT.phrase(r).verbal is verbal]
            picks += names[:1]
    return picks + ["血液型", "好きな色"]


@pytest.mark.parametrize("r1, r2", list(itertools.permutations(_one_relation_per_kind_and_shape(), 2)))
def test_every_frame_of_every_relation_pair_reads_as_japanese(r1, r2):
    first = DEFAULT.phrase(r1)
    for seed in range(24):  # draws every allowed frame of the pair
        q = template_question({**CHAIN, "chain_id": f"c{seed}", "relations": [r1, r2]}, seed)["question"]
        assert "{" not in q and "}" not in q
        assert q.endswith(("？", "。")) and q.startswith("「ノルウェイの森」")
        assert not re.search(r"(の|は|が|を|に)\1", q), q          # no doubled particle
        assert not re.search(r"(がある|された|生まれた)[^？。]*\1", q), q  # no clause said twice
        assert question_problem(q, CHAIN) is None, q                # names the subject; not the bridge or answer
        if first.verbal:  # a clause exists for hop 1: never 「「X」の著者の職業は何ですか」
            assert not re.fullmatch(r"「ノルウェイの森」の[^、「」]+の[^、「」]+は(何|誰|どこ|いつ)ですか？", q), q


def test_template_stage_keeps_its_checks():
    assert generate_template({**CHAIN, "relations": ["著者", "出生地"]}).get("generator") == "template"
    leaky = {**CHAIN, "subject": "京都府の作家", "relations": ["著者", "出生地"]}
    assert generate_template(leaky).reason == "answer_leaked"

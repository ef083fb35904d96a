"""Unit tests of deepresearch's keyword groups, rubric schema and clarify selection (no LLM, no index)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tansaku.pipelines.deepresearch.clarify import (
    answer_rule_problem,
    question_rule_problem,
    select_for_clarification,
)
from tansaku.pipelines.deepresearch.keywords import (
    KeywordConfig,
    document_frequency,
    keyword_groups,
    noun_phrases,
)
from tansaku.pipelines.deepresearch.rubric import RubricError, validate_rubric

WIKI = Path(__file__).parent / "fixtures" / "deepresearch" / "wiki.jsonl"
DOCS = [json.loads(line) for line in WIKI.read_text(encoding="utf-8").splitlines()]


def test_noun_phrases_join_compounds_and_skip_numbers():
    phrases = noun_phrases("翠嶺本線は1931年に白鷺駅まで延びた。毎年、蒼井焼が売られる。")
    assert "白鷺駅" in phrases and "蒼井焼" in phrases
    assert not any(p[0].isdigit() for p in phrases)
    assert "毎年" not in phrases


def test_document_frequency_thresholds():
    pairs = [(f"d{i}", "common") for i in range(10)] + [("d1", "rare"), ("d1", "pair"), ("d2", "pair")]
    config = KeywordConfig(min_df=2, max_df_ratio=0.5, max_df_floor=0)
    df = {k: d for k, d, _ in document_frequency(pairs, 10, config).iter_rows()}
    assert df == {"pair": 2}
    # The upper bound scales with the corpus, but never drops below the floor on small corpora.
    assert KeywordConfig().thresholds(20)["max_df"] == 10
    assert KeywordConfig().thresholds(3979)["max_df"] == 398


def test_groups_span_articles_and_no_single_page_holds_all():
    config = KeywordConfig()
    groups = keyword_groups(DOCS, config)
    assert len(groups) >= 5
    text_of = {d["id"]: d["title"] + d["text"] for d in DOCS}
    for g in groups:
        assert len(g["keywords"]) == config.group_size and len(g["doc_ids"]) >= config.min_articles
        assert not any(all(k in text_of[d] for k in g["keywords"]) for d in text_of), g["keywords"]
    assert keyword_groups(DOCS, config) == groups  # deterministic
    assert len(keyword_groups(DOCS, KeywordConfig(max_groups=2))) == 2


def _criterion(text, kind="coverage", weight=1, scale="binary", entities=("蒼井焼",), sources=()):
    return {"criterion": text, "weight": weight, "scale": scale, "kind": kind, "entities": list(entities),
            "source_doc_ids": list(sources)}


GOOD = {"criteria": [
    _criterion("蒼井焼の起源と復興の経緯を説明している", weight=3),
    _criterion("柚木玄斎が東雲窯に入った年を1928年としている", kind="fact", entities=["柚木玄斎"],
               sources=["dr0011"], weight=2),
    _criterion("東雲窯と蒼井陶器市を比較する表がある", kind="format", entities=["東雲窯"], scale="0-2"),
    _criterion("出典を3件以上挙げている", kind="other", entities=[]),
]}
NAMES = ["蒼井焼", "柚木玄斎", "東雲窯"]
SOURCES = ["dr0010", "dr0011", "dr0012"]


def test_valid_rubric_is_normalized():
    rubric = validate_rubric(GOOD, SOURCES, NAMES)
    assert [c["id"] for c in rubric] == ["c1", "c2", "c3", "c4"]
    assert math.isclose(sum(c["weight"] for c in rubric), 1.0, abs_tol=1e-3)
    assert rubric[1]["source_doc_ids"] == ["dr0011"]


def test_generic_only_rubric_rejected():
    generic = {"criteria": [_criterion("出典を3件以上挙げている", kind="other", entities=[]),
                            _criterion("分かりやすい日本語で書かれている", kind="other", entities=[]),
                            _criterion("結論が明確に述べられている", kind="other", entities=[])]}
    with pytest.raises(RubricError) as err:
        validate_rubric(generic, SOURCES, NAMES)
    assert err.value.reason == "rubric_generic"
    # Specific criteria that carry little weight next to a heavy generic one are rejected too.
    heavy = {"criteria": GOOD["criteria"][:3] + [_criterion("出典を3件以上挙げている", kind="other", entities=[],
                                                             weight=10)]}
    with pytest.raises(RubricError, match="generic weight"):
        validate_rubric(heavy, SOURCES, NAMES)


@pytest.mark.parametrize("field,value", [("weight", 0), ("weight", -1), ("weight", 11), ("weight", "重い"),
                                         ("weight", None), ("scale", "1-10"), ("scale", 5), ("kind", "style"),
                                         ("criterion", ""), ("entities", "蒼井焼")])
def test_bad_fields_rejected_by_schema(field, value):
    bad = json.loads(json.dumps(GOOD, ensure_ascii=False))
    bad["criteria"][0][field] = value
    with pytest.raises(RubricError) as err:
        validate_rubric(bad, SOURCES, NAMES)
    assert err.value.reason == "rubric_schema"
    assert "criteria/0" in str(err.value)


def test_missing_keys_sources_and_sizes():
    with pytest.raises(RubricError, match="rubric_schema|required"):
        validate_rubric({"criteria": [{"criterion": "蒼井焼の起源を書く"}] * 3}, SOURCES, NAMES)
    with pytest.raises(RubricError) as err:
        validate_rubric({"criteria": GOOD["criteria"][:2]}, SOURCES, NAMES)  # fewer than 3 criteria
    assert err.value.reason == "rubric_schema"
    unknown = json.loads(json.dumps(GOOD, ensure_ascii=False))
    unknown["criteria"][1]["source_doc_ids"] = ["dr9999"]
    with pytest.raises(RubricError) as err:
        validate_rubric(unknown, SOURCES, NAMES)
    assert err.value.reason == "rubric_unknown_source"
    sourceless = json.loads(json.dumps(GOOD, ensure_ascii=False))
    sourceless["criteria"][1]["source_doc_ids"] = []
    with pytest.raises(RubricError, match="fact criterion"):
        validate_rubric(sourceless, SOURCES, NAMES)


@pytest.mark.parametrize("share", [0.0, 0.3, 0.5, 1.0])
def test_clarify_selection_is_a_seeded_draw_per_record(share):
    rows = [{"group_id": f"g{i}"} for i in range(2000)]
    select = select_for_clarification(share, seed=3)
    marked = {r["group_id"] for r in map(select, rows) if r["needs_clarification"]}
    assert abs(len(marked) / len(rows) - share) < 0.04  # about the share, exactly at 0 and 1
    assert share not in (0.0, 1.0) or len(marked) == share * len(rows)
    # per record: the same ones whatever else is in the run or in what order (a resume, a larger run)
    assert {r["group_id"] for r in map(select, reversed(rows[:500])) if r["needs_clarification"]} == \
           {f"g{i}" for i in range(500)} & marked
    assert marked != {r["group_id"] for r in map(select_for_clarification(share, 4), rows)
                      if r["needs_clarification"]} or share in (0.0, 1.0)  # the seed decides
    with pytest.raises(ValueError):
        select_for_clarification(1.5, 0)


def test_clarify_rules():
    record = {"instruction": "蒼井焼と東雲窯の関係を、明治以降の歴史に絞って調べ、年表にまとめてください。",
              "entities": ["蒼井焼", "東雲窯"]}
    request, question = "蒼井焼と東雲窯について調べてください。", "どの時代を中心に調べればよいですか？"
    assert question_rule_problem(record, request, question) is None
    assert question_rule_problem(record, request, "蒼井焼について調べます。")  # not a question
    assert question_rule_problem(record, record["instruction"], question)  # the request is not vaguer
    assert question_rule_problem(record, "焼き物について調べてください。", question)  # the subject is lost
    assert question_rule_problem(record, request, "doc_id: dr0010 を見ますか？")  # tool output leaked
    assert question_rule_problem(record, "【指示】蒼井焼と東雲窯", question)  # a prompt label copied
    assert question_rule_problem(record, "Aoi ware 蒼井焼", "Which era should I focus on?") == "not Japanese"
    answer = "明治以降に絞って、年表にしてください。"
    assert answer_rule_problem(record, request, question, answer) is None
    assert answer_rule_problem(record, request, question, "どの時代がいいですか？")  # another question
    assert answer_rule_problem(record, request, question, record["instruction"]) == "echo"  # pasted, not answered
    assert answer_rule_problem(record, request, question, "Meiji era please.") == "not Japanese"

"""The rule-based e-Gov kinds beyond cloze (``actor``, ``effect``, ``true_statement``) pinned on literal
article texts of a fictional law, and the contradiction check that keeps a "wrong" choice wrong."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from fixtures.egov_articles import article, law_articles

from tansaku.core.context import BuildContext
from tansaku.pipelines.egov import cloze, statements
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.egov.leak import row_leaks

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "egov"

# A fictional 架空灯台管理法: each article is (caption, sentences of its first paragraph).
LAW = [
    ("灯台管理人の届出", ["灯台管理人は、灯台の点検を終えたときは、その結果を港湾長に届け出なければならない。"]),
    ("港湾長の命令", ["港湾長は、灯台の安全のため必要があると認めるときは、灯台管理人に対し、点検を命ずることができる。",
                      "灯台の所有者は、点検の費用を負担する義務を負う。"]),
    ("点検の期間", ["灯台管理人は、灯台の点検を三十日以内に終えなければならない。"]),
    ("記録の保存", ["灯台の所有者は、点検の記録を五年間保存しなければならない。"]),
    ("灯火の停止", ["灯火が停止したときは、灯台管理人は、直ちに予備の灯火を点じなければならない。"]),
    ("費用の請求", ["灯台管理人が自己の費用で修繕をしたときは、灯台の所有者に対し、その費用の償還を請求することができる。"]),
    ("立入り", ["港湾長は、前条の規定による点検のため、灯台に立ち入ることができる。"]),  # a pointer: never quoted
    ("委託", ["灯台の所有者は、灯台の管理を灯台管理人に委託することができる。"]),
    ("船長の通報", ["船長は、灯火の異常を認めたときは、遅滞なく港湾長に通報しなければならない。"]),
    ("水先人の協力", ["水先人は、灯台管理人の求めに応じ、点検に協力しなければならない。"]),
    ("灯台管理人の指定", ["国土交通大臣は、灯台管理人を指定することができる。"]),
    ("削除", ["削除"]),
]


@pytest.fixture(scope="module")
def law():
    articles = law_articles(LAW)
    return articles, statements.law_statement_pools(articles)["LAW"]


def targets_of(law, k: int, kind: str) -> list[dict]:
    articles, pool = law
    return [t for t in statements.statement_targets(articles[k - 1], pool) if t["kind"] == kind]


def test_actor_question_blanks_the_duty_holder_with_the_laws_other_actors(law):
    (target,) = targets_of(law, 1, "actor")
    assert target["answer"] == "灯台管理人"
    assert target["stem"].endswith("「【　　】は、灯台の点検を終えたときは、その結果を港湾長に届け出なければならない。」")
    # Other actors of the same law, nearest articles first; none of them written in the sentence (港湾長 is).
    assert target["distractors"] == ["灯台の所有者"] + target["distractors"][1:] and "港湾長" not in target["distractors"]
    assert len(set(target["distractors"])) == 3 and "灯台管理人" not in target["distractors"]


def test_actor_after_a_leading_condition(law):
    (target,) = targets_of(law, 5, "actor")
    assert target["answer"] == "灯台管理人"
    assert "「灯火が停止したときは、【　　】は、直ちに予備の灯火を点じなければならない。」" in target["stem"]


def test_effect_question_takes_other_effects_of_the_same_law(law):
    (target,) = targets_of(law, 6, "effect")
    assert target["answer"] == "灯台の所有者に対し、その費用の償還を請求することができる"
    assert "「灯台管理人が自己の費用で修繕をしたときは、【　　】。」" in target["stem"]
    # Effects of the law's other conditional sentences, nearest first (not the actor's duty of article 1, whose
    # effect names 港湾長 … and is just as far): 港湾長's order of article 2 is one.
    assert "灯台管理人に対し、点検を命ずることができる" in target["distractors"]


def test_perturbations_contradict_the_law_and_never_restate_it(law):
    articles, pool = law
    found = statements.perturbations("灯台の所有者は、点検の記録を五年間保存しなければならない。", pool, 3)
    assert found == [
        ("duty", "灯台の所有者は、点検の記録を五年間保存しなくてもよい。"),
        ("actor", "灯台管理人は、点検の記録を五年間保存しなければならない。"),  # the nearest other actors
        ("actor", "港湾長は、点検の記録を五年間保存しなければならない。"),
        ("number", "灯台の所有者は、点検の記録を十年間保存しなければならない。"),  # ×2, then ÷2
        ("number", "灯台の所有者は、点検の記録を二年間保存しなければならない。")]
    # A change whose result the law itself says elsewhere is no falsehood: 委託することができる is article 8.
    restated = statements.perturbations("灯台の所有者は、灯台の管理を灯台管理人に委託することができない。", pool, 7)
    assert "灯台の所有者は、灯台の管理を灯台管理人に委託することができる。" not in [t for _, t in restated]


def test_true_statement_has_one_true_sentence_and_three_checked_falsehoods(law):
    articles, pool = law
    (target,) = targets_of(law, 4, "true_statement")
    assert target["answer"] == "灯台の所有者は、点検の記録を五年間保存しなければならない。"
    assert len(target["distractors"]) == 3 and target["answer"] not in target["distractors"]
    law_text = pool["text"]
    assert all(d.rstrip("。") not in law_text for d in target["distractors"])  # each contradicts the law
    flips = Counter("duty" if "なくてもよい" in d else "number" if "五年" not in d else "actor"
                    for d in target["distractors"])
    assert flips == {"duty": 1, "number": 1, "actor": 1}  # one of each kind of change before any repeat


def test_a_sentence_leaning_on_the_one_before_is_quoted_with_it(law):
    articles, pool = law
    main = "灯台の所有者は、灯台の管理を灯台管理人に委託することができる。"
    leaning = article(30, "委託の解除", [main, "この場合において、灯台管理人が点検を怠ったときは、灯台の所有者は、委託を解除することができる。"])
    (effect,) = [t for t in statements.statement_targets(leaning, pool) if t["kind"] == "effect"]
    assert effect["stem"].endswith(f"「{main}この場合において、灯台管理人が点検を怠ったときは、【　　】。」")
    assert effect["answer"] == "灯台の所有者は、委託を解除することができる"
    alone = article(31, "委託の解除", ["この場合において、灯台管理人が点検を怠ったときは、灯台の所有者は、委託を解除することができる。"])
    assert statements.statement_targets(alone, pool) == []  # nothing to lean on: never quoted


def test_pointers_fragments_and_supplementary_provisions_are_never_quoted(law):
    articles, pool = law
    assert statements.statement_targets(articles[6], pool) == []  # 前条の規定による: not standalone
    assert statements.statement_targets(articles[11], pool) == []  # 削除
    suppl = article(20, "施行期日", ["灯台管理人は、この法律の施行の日から三十日以内に届け出なければならない。"], suppl=True)
    assert statements.statement_targets(suppl, pool) == []
    assert not statements._clean("灯台の点検を終えたとき。")  # an item of a list


def test_rows_from_targets_are_leak_free_and_mix_kinds(law):
    articles, pool = law
    cloze_pools = cloze.law_pools(articles)
    rows = []
    for a in articles:
        targets = cloze.cloze_targets(a, cloze_pools.get("LAW", {"units": {}, "terms": []}))
        rows += [{**r, "law_title": a["law_title"], "article_id": a["id"]}
                 for r in cloze.questions_from_targets(a, targets + statements.statement_targets(a, pool), 0, 2)]
    kinds = Counter(r["kind"] for r in rows)
    assert {"actor", "effect", "true_statement"} <= set(kinds)
    for r in rows:
        assert len(set(r["choices"])) == 4 and r["choices"][0] == r["answer"]
        assert not row_leaks(r), (r["question"], row_leaks(r))


@pytest.mark.realdata
def test_real_laws_coverage_and_kinds(tmp_path):
    """民法 + 行政手続法: a question for at least half of the main-provision articles, four kinds ≥ 10 %."""
    from tansaku.core.store import iter_rows
    from tansaku.pipelines.egov.build import build_egov
    from tansaku.pipelines.egov.parse import article_meta

    if not REAL.is_dir():
        pytest.skip("../shared/data/egov is not here")
    build_egov(EgovConfig(laws=REAL), tmp_path / "egov", BuildContext(quiet=True))
    rows = [r for split in ("train", "test") for r in iter_rows(tmp_path / "egov", split=split)]
    main = {a["id"] for a in iter_rows(tmp_path / "egov" / "articles")
            if not a["is_suppl"] and not article_meta(a).get("is_deleted")}
    assert len({r["article_id"] for r in rows} & main) >= len(main) / 2
    kinds = Counter(r["kind"] for r in rows)
    assert sum(n >= len(rows) / 10 for n in kinds.values()) >= 4, kinds

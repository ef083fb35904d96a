"""The rule-based e-Gov kinds from the grammar of provisions (``permission``, ``requirement``, ``subject``,
``body``) pinned on literal article texts of a fictional law, the checks that keep a wrong choice wrong, and the
coverage they give: ≥ 60 % of the main-provision articles of each example law (民法 and 行政手続法, and laws of
other shapes: tests/test_egov_coverage.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.egov_articles import article, law_articles

from tansaku.core.context import BuildContext
from tansaku.core.store import iter_rows
from tansaku.pipelines.egov import provisions, subjects
from tansaku.pipelines.egov.build import build_egov
from tansaku.pipelines.egov.config import EgovConfig
from tansaku.pipelines.egov.parse import article_meta

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "laws"
MIN_COVERAGE = 0.60

# A fictional 架空灯台管理法: each article is (caption, sentences of its first paragraph).
LAW = [
    ("灯台管理人の届出", ["灯台管理人は、灯台の点検を終えたときは、点検の結果を港湾長に届け出なければならない。"]),
    ("港湾長の命令", ["港湾長は、灯台の安全のため必要があると認めるときは、灯台管理人に対し、点検を命ずることができる。"]),
    ("記録の保存", ["灯台の所有者は、点検の記録を五年間保存しなければならない。"]),
    ("灯火の停止", ["灯火が停止したときは、灯台管理人は、直ちに予備の灯火を点じなければならない。"]),
    ("費用の請求", ["灯台管理人が自己の費用で修繕をしたときは、灯台の所有者に対し、修繕の費用の償還を請求することができる。"]),
    ("立入り", ["港湾長は、前条の規定による点検のため、灯台に立ち入ることができる。"]),  # a pointer: never quoted
    ("委託", ["灯台の所有者は、灯台の管理を灯台管理人に委託することができる。"]),
    ("船長の通報", ["船長は、灯火の異常を認めたときは、遅滞なく港湾長に通報しなければならない。"]),
    ("灯台の譲渡", ["灯台の譲渡は、港湾長の許可がなければ、その効力を生じない。"]),
    ("点検記録の備置き", ["点検記録は、灯台の事務所に備え置いて一般の閲覧に供する。"]),
    ("灯台の廃止", ["灯台の廃止は、国土交通大臣の告示によってその効力を生ずる。"]),
    ("灯火の色", ["灯台の灯火の色は、白色又は赤色の光とする。", "霧の深い夜に点ずる予備の灯火も、同様とする。"]),
    ("入室の制限", ["何人も、灯台の灯室に立ち入ってはならない。", "ただし、灯台管理人が許可したときは、この限りでない。"]),
    ("灯台の名称", ["灯台の名称は、港湾長が定めて公示する。"]),
    ("水先人の協力", ["水先人は、灯台管理人の求めに応じ、点検に協力しなければならない。"]),
    ("削除", ["削除"]),
]


@pytest.fixture(scope="module")
def law():
    articles = law_articles(LAW)
    return articles, provisions.law_provision_pools(articles)["LAW"]


def targets_of(law, k: int, kind: str) -> list[dict]:
    articles, pool = law
    return [t for t in provisions.provision_targets(articles[k - 1], pool) if t["kind"] == kind]


def test_clause_topic_and_condition_are_found_by_grammar():
    sentence = "町長は、放置自転車を発見したときは、当該自転車を売却し、又は廃棄することができる。"
    assert provisions.final_clause(sentence) == (18, "当該自転車を売却し、又は廃棄する", "ことができる", "ことができない")
    # A list of nouns is one clause (自筆証書、公正証書…), a short clause reaches back over the comma before it.
    assert provisions.final_clause("遺言は、自筆証書、公正証書又は秘密証書によってしなければならない。")[1] == \
        "自筆証書、公正証書又は秘密証書によってし"
    assert provisions.final_clause("報酬は、仕事の目的物の引渡しと同時に、支払わなければならない。")[1] == \
        "仕事の目的物の引渡しと同時に、支払わ"
    assert provisions.topics_of("協議が調わないときは、各共同相続人は、分割を請求することができる。") == ("各共同相続人",)
    assert provisions.condition_of("地役権は、継続的に行使され、かつ、外形上認識することができるものに限り、"
                                   "時効によって取得することができる。")[1:3] == (
        "継続的に行使され、かつ、外形上認識することができるもの", "に限り")


def test_permission_pairs_the_clause_with_its_contradiction_and_two_other_grants(law):
    articles, pool = law
    (target,) = targets_of(law, 2, "permission")
    assert target["answer"] == "点検を命ずることができる"
    assert target["stem"].endswith("「港湾長は、灯台の安全のため必要があると認めるときは、灯台管理人に対し、【　　】。」")
    flipped, *others = target["distractors"]
    assert flipped == "点検を命ずることができない" and flipped not in pool["text"]
    # The others grant, impose or forbid something: never "cannot"/"need not" of an unrelated act (vacuously true).
    assert all(o.endswith(provisions.POSITIVE) for o in others)
    assert all(o not in articles[1]["text"] for o in others)


def test_permission_never_offers_what_the_same_actor_may_do_elsewhere(law):
    # 灯台の所有者 may entrust the lighthouse (article 7) and must keep the records (article 3): neither is a wrong
    # choice for the other article, whose provision says no condition.
    for k, other in ((3, "委託"), (7, "保存")):
        for target in targets_of(law, k, "permission"):
            assert not any(other in d for d in target["distractors"]), target
    # An actor without 「…は、」 sits in the condition (「灯台管理人が修繕をしたときは、…請求することができる」).
    texts = [("甲", ["管理人は、毎月一回以上灯台を巡回しなければならない。"]),
             ("乙", ["管理人が自己の費用で修繕をしたときは、所有者に対し、修繕の費用の償還を請求することができる。"]),
             ("丙", ["船長は、灯火の異常を認めたときは、遅滞なく港湾長に通報しなければならない。"]),
             ("丁", ["港湾長は、灯台の安全のため、灯台の使用の停止を命ずることができる。"]),
             ("戊", ["水先人は、船舶の入港の際に水路を案内しなければならない。"])]
    articles = law_articles(texts)
    pool = provisions.law_provision_pools(articles)["LAW"]
    (target,) = [t for t in provisions.provision_targets(articles[0], pool) if t["kind"] == "permission"]
    assert not any("償還" in d for d in target["distractors"]), target


def test_permission_is_not_asked_when_the_law_says_the_flipped_clause():
    texts = [("甲", ["申請者は、書面により異議を申し出ることができる。"]),
             ("乙", ["代理人は、書面により異議を申し出ることができない。"])]
    articles = law_articles(texts)
    pool = provisions.law_provision_pools(articles)["LAW"]
    assert [t for t in provisions.provision_targets(articles[0], pool) if t["kind"] == "permission"] == []


def test_requirement_blanks_the_condition_and_takes_conditions_with_other_effects(law):
    (target,) = targets_of(law, 4, "requirement")
    assert target["answer"] == "灯火が停止した"
    assert target["stem"].endswith("「【　　】ときは、灯台管理人は、直ちに予備の灯火を点じなければならない。」")
    assert set(target["distractors"]) <= {"灯台の点検を終えた", "灯台の安全のため必要があると認める",
                                          "灯台管理人が自己の費用で修繕をした", "灯火の異常を認めた", "灯台管理人が許可した"}
    # After the topic: 「港湾長は、【　　】ときは、…」.
    (order,) = targets_of(law, 2, "requirement")
    assert order["answer"] == "灯台の安全のため必要があると認める" and "「港湾長は、【　　】ときは、" in order["stem"]


def test_requirement_drops_a_condition_with_the_same_consequence():
    texts = [("甲", ["許可を受けた者が死亡したときは、その許可は、効力を失う。"]),
             ("乙", ["許可を受けた者が営業を廃止したときは、その許可は、効力を失う。"]),
             ("丙", ["許可を受けた者が住所を移したときは、その旨を市長に届け出なければならない。"]),
             ("丁", ["許可を受けた者が法令に違反したときは、市長は、許可を取り消すことができる。"]),
             ("戊", ["市長が必要と認めるときは、職員に帳簿を検査させることができる。"])]
    articles = law_articles(texts)
    pool = provisions.law_provision_pools(articles)["LAW"]
    target = next(t for t in provisions.provision_targets(articles[0], pool) if t["kind"] == "requirement")
    assert target["answer"] == "許可を受けた者が死亡した"
    assert "許可を受けた者が営業を廃止した" not in target["distractors"]  # it would end the permit as well


def test_a_leaning_sentence_is_quoted_with_the_one_before_it(law):
    (exception,) = targets_of(law, 13, "requirement")
    assert exception["answer"] == "灯台管理人が許可した"
    assert exception["stem"].endswith("「何人も、灯台の灯室に立ち入ってはならない。ただし、【　　】ときは、この限りでない。」")
    alone = article(40, "予備の灯火", ["霧の深い夜に点ずる予備の灯火も、同様とする。"])
    assert provisions.provision_targets(alone, law[1]) == []  # 「同様とする」 with nothing to lean on


def test_subject_asks_what_a_provision_is_about_among_the_laws_other_topics(law):
    (target,) = targets_of(law, 9, "subject")
    assert target["answer"] == "灯台の譲渡"
    assert target["stem"].endswith("「【　　】は、港湾長の許可がなければ、その効力を生じない。」")
    assert "灯台の廃止" in target["distractors"] and "灯台管理人" not in target["distractors"]  # no persons
    assert subjects._topic("港湾長は、灯台の名称を定めることができる。")[0] == "港湾長"
    assert subjects._topic("その灯台は、港湾長が管理するものとする。") is None  # a demonstrative, not a topic
    assert subjects._entangled("遺贈の承認及び放棄", "遺贈の放棄", "遺言者の死亡の時にさかのぼって効力を生ずる")
    assert subjects._entangled("代理権を有しない者が他人の代理人としてした契約", "代理権を有しない者がした契約",
                               "相手方が取り消すことができる")


def test_body_finds_the_addressee_by_grammar_and_takes_the_laws_other_persons(law):
    (target,) = targets_of(law, 8, "body")
    assert target["answer"] == "港湾長"
    assert target["stem"].endswith("「船長は、灯火の異常を認めたときは、遅滞なく【　　】に通報しなければならない。」")
    assert "船長" not in target["distractors"] and len(set(target["distractors"])) == 3
    assert subjects._addressee("相続人は、家庭裁判所に対し、財産の分離を請求することができる。") == (5, "家庭裁判所")
    # 「…において」 is no addressee; nor the end of a longer noun (主たる【債務者】).
    assert subjects._addressee("行政庁は、他の行政庁において申請が審査中であることを理由としてはならない。") is None
    assert subjects._addressee("保証人は、まず主たる債務者に催告をすべき旨を請求することができる。") is None


def coverage(out: Path) -> float:
    articles = list(iter_rows(out / "articles"))
    main = {a["id"] for a in articles if not a["is_suppl"] and not article_meta(a).get("is_deleted")}
    rows = [r for split in ("train", "test") for r in iter_rows(out, split=split)]
    return len({r["article_id"] for r in rows} & main) / len(main)


def one_law(path: Path, tmp_path: Path) -> float:
    laws = tmp_path / path.stem
    laws.mkdir()
    shutil.copy(path, laws / path.name)
    build_egov(EgovConfig(laws=laws, retrieval=False), tmp_path / f"{path.stem}-out", BuildContext(quiet=True))
    return coverage(tmp_path / f"{path.stem}-out")


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.xml")), ids=lambda p: p.stem[:15])
def test_example_laws_have_a_question_for_most_articles(path, tmp_path):
    assert one_law(path, tmp_path) >= MIN_COVERAGE

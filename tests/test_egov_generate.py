"""Question generation: cloze targets and distractors, the LLM generator and judge on a scripted LLM,
near-duplicate removal, answer-position balance, retrieval rank."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tansaku.core.engine import Drop
from tansaku.core.llm import ScriptedLLM
from tansaku.pipelines.egov import cloze, generate
from tansaku.pipelines.egov.parse import iter_articles

FIX = Path(__file__).parent / "fixtures" / "egov"


@pytest.fixture(scope="module")
def articles() -> list[dict]:
    return [r for r in iter_articles([FIX]) if isinstance(r, dict)]


def test_kanji_numbers_round_trip():
    for n in list(range(1, 2000)) + [10_000, 20_000, 150_000, 1_234_567]:
        assert cloze.kanji_number(cloze.kanji_numeral(n)) == n


def test_periods_skip_dates_and_compounds():
    found = [m.group(0) for m in cloze.PERIOD.finditer("令和七年十月一日から三十日以内、一年六月を超えない、毎週六日")]
    assert found == ["三十日", "六日"]


def test_cloze_questions_from_fictional_law(articles):
    pools = cloze.law_pools(articles)
    by_id = {a["id"]: a for a in articles}
    rows = cloze.cloze_questions(by_id["506AC0000000901-4"], pools["506AC0000000901"], seed=0, per_article=2)
    assert {r["answer"] for r in rows} == {"十五日", "三日"}
    for r in rows:
        assert r["choices"][0] == r["answer"] and len(set(r["choices"])) == 4
        assert all(c.endswith("日") for c in r["choices"])
        assert "【　　】" in r["question"] and r["answer"] not in r["question"].split("\n")[-1]
        assert "貸出期間" in r["question"]  # the caption is a hint, not a leak
    terms = cloze.cloze_questions(by_id["506AC0000000901-2"], pools["506AC0000000901"], seed=0, per_article=5)
    assert {r["kind"] for r in terms} == {"term"}
    assert {r["answer"] for r in terms} <= {"利用者", "資料", "司書", "館長"}
    # deleted articles give nothing; nor a sentence that says too little once its references are elided (quote.py)
    assert cloze.cloze_questions(by_id["506AC0000000901-8"], pools["506AC0000000901"]) == []
    assert cloze.cloze_questions({**by_id["506AC0000000901-4"], "paragraphs": json.dumps([{
        "text": "前項の規定にかかわらず、第九条の期間は十五日とする。", "items": []}])}, pools["506AC0000000901"]) == []


def test_cloze_is_deterministic(articles):
    pools = cloze.law_pools(articles)
    a = [cloze.cloze_questions(x, pools[x["law_id"]], seed=3) for x in articles]
    b = [cloze.cloze_questions(x, pools[x["law_id"]], seed=3) for x in articles]
    assert a == b


def mcq_row(i: int, answer_index: int = 0) -> dict:
    return {"id": f"q{i:04d}", "question": f"問題{i}", "choices": [f"正{i}", f"誤a{i}", f"誤b{i}", f"誤c{i}"],
            "answer_index": answer_index, "answer": f"正{i}"}


@pytest.mark.parametrize("n", [400, 401, 1003])
def test_answer_positions_balanced_within_two_percent(n):
    rows = list(generate.balance_positions([mcq_row(i) for i in range(n)], seed=7))
    counts = Counter(r["answer_index"] for r in rows)
    assert set(counts) == {0, 1, 2, 3}
    assert all(abs(c / n - 0.25) <= 0.02 for c in counts.values()), counts
    for r in rows:
        i = int(r["id"][1:])
        assert r["choices"][r["answer_index"]] == r["answer"] == f"正{i}"
        assert sorted(r["choices"]) == sorted(mcq_row(i)["choices"])


def test_balance_is_seeded():
    rows = [mcq_row(i) for i in range(100)]
    a = list(generate.balance_positions(rows, seed=1))
    assert a == list(generate.balance_positions(list(reversed(rows)), seed=1))  # order-independent
    assert a != list(generate.balance_positions(rows, seed=2))


def test_near_duplicates_dropped():
    base = {"question": "次の法令の規定の空欄【　　】に入るものとして正しいものはどれか。\n「資料の貸出期間は、貸出しの日から起算して【　　】とする。」",
            "answer": "十五日"}
    rows = [base, {**base, "question": base["question"].replace("。」", "」")},  # near-identical
            {**base, "question": base["question"] + " "},                       # whitespace only
            {"question": "館長が臨時に休館できる日数の上限は一年につき何日か。", "answer": "十四日"}]
    out = list(generate.near_duplicates(rows))
    assert [type(o).__name__ for o in out] == ["dict", "Drop", "Drop", "dict"]
    assert out[1] == Drop("near_duplicate")


def test_validate_mcq_shapes():
    ok = generate.validate_mcq({"question": "Q", "choices": ["a", "b", "c", "d"], "answer_index": 2, "explanation": "e"})
    assert ok["answer"] == "c"
    assert generate.validate_mcq({"question": "", "choices": ["a", "b", "c", "d"], "answer_index": 0}) == Drop("empty_question")
    assert generate.validate_mcq({"question": "Q", "choices": ["a", "b", "c"], "answer_index": 0}) == Drop("bad_choices")
    assert generate.validate_mcq({"question": "Q", "choices": ["a", "ａ", "c", "d"], "answer_index": 0}) == Drop("bad_choices")
    assert generate.validate_mcq({"question": "Q", "choices": ["a", "b", "c", "d"], "answer_index": 4}) == Drop("bad_answer_index")
    assert generate.validate_mcq({"question": "Q", "choices": ["a", "b", "c", "d"], "answer_index": "x"}) == Drop("bad_answer_index")


def test_llm_generator_on_scripted_responses(articles):
    def respond(req):
        prompt = req.messages[0]["content"]
        assert "【条文】" in prompt and "{article_text}" not in prompt
        if "第三条の二" in prompt:
            return "申し訳ありません、作れません。"
        if "第四条" in prompt:
            raise RuntimeError("backend down")
        if "第五条" in prompt:
            return json.dumps({"question": "Q", "choices": ["a", "a", "b", "c"], "answer_index": 0, "explanation": ""})
        return "```json\n" + json.dumps({"question": "貸出しを停止できる期間の上限は？", "choices": ["六月", "一年", "三月", "二年"],
                                         "answer_index": 0, "explanation": "条文による。"}, ensure_ascii=False) + "\n```"

    subset = [a for a in articles if a["id"] in ("506AC0000000901-3_2", "506AC0000000901-4", "506AC0000000901-5",
                                                 "506AC0000000901-6")]
    out = generate.llm_generate(ScriptedLLM(respond), subset)
    assert out[:3] == [Drop("llm_bad_json"), Drop("llm_error"), Drop("bad_choices")]
    assert out[3]["answer"] == "六月" and out[3]["generator"] == "llm:mcq_generate_v1"


def test_llm_judge_threshold(articles):
    verdicts = iter([{"single_correct": 1, "grounded": 1, "plausible_distractors": 1, "no_leak": 1},
                     {"single_correct": 0, "grounded": 1, "plausible_distractors": 0, "no_leak": 1},
                     "not json at all", {"single_correct": 7, "grounded": 1, "plausible_distractors": 1, "no_leak": 1}])

    def respond(req):
        assert "ルーブリック" in req.messages[0]["content"]
        v = next(verdicts)
        return v if isinstance(v, str) else json.dumps(v)

    by_id = {a["id"]: a for a in articles}
    rows = [{**mcq_row(i), "article_id": "506AC0000000901-4"} for i in range(4)]
    out = generate.llm_judge(ScriptedLLM(respond), rows, by_id, threshold=0.75)
    assert out[0]["quality"] == 1.0 and out[1:] == [Drop("low_quality"), Drop("judge_bad_json"), Drop("judge_bad_json")]


@dataclass
class FakeHit:
    doc_id: str


class FakeBackend:
    def __init__(self, ids):
        self.ids, self.queries = ids, []

    def search(self, query, size=10):
        self.queries.append(query)
        return type("R", (), {"hits": [FakeHit(i) for i in self.ids[:size]]})


def test_retrieval_rank_searches_the_quoted_text():
    backend = FakeBackend(["a", "b", "c"])
    q = "次の法令の規定の空欄【　　】に入るものとして正しいものはどれか。\n「資料の貸出期間は、【　　】とする。」"
    assert generate.retrieval_rank(backend, q, "b") == 2
    assert [q["multi_match"]["query"] for q in backend.queries] == ["資料の貸出期間は、 とする。"]  # plain text, never DSL
    assert generate.retrieval_rank(backend, q, "z") is None
    assert generate.retrieval_rank(backend, q, "c", k=2) is None

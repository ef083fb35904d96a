"""The unseen mini-wiki: held-out evaluation set (c) of ``bench/efficacy.py``.

``examples/miniwiki_unseen.jsonl`` (75 fictional articles: prefectures, towns, rivers, people, companies,
works, schools, festivals, bridges) and ``examples/miniwiki_unseen_questions.jsonl`` (67 questions, 59 of
them 2-hop) were written by hand, not by a script or an LLM, and no model of the project trains on them:
no ``synth build`` reads them and their names share nothing with ``examples/miniwiki_large.jsonl``,
``examples/miniwiki.jsonl`` or ``tests/fixtures/``. The questions are phrased as users type them (terse,
polite, chatty), not in the template generator's frames, so a model that learned the templates of
``pipelines/multihop/questions.py`` gets no help from their wording.

A question row: ``evidence`` lists the articles needed, in reading order. For a 2-hop question it is
``[start, bridge]``: the question names the start entity, the start article names the bridge entity (which
the question never names), and the answer is in the bridge article. ``answer`` is its exact surface form there;
``aliases`` are other forms that occur there too.

    pytest tests/test_unseen_wiki.py -q
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tansaku.envs.search.embedded import EmbeddedBackend, build_embedded
from tansaku.envs.tasks import TASKS
from tansaku.pipelines.multihop.questions import template_parts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
WIKI = EXAMPLES / "miniwiki_unseen.jsonl"
QUESTIONS = EXAMPLES / "miniwiki_unseen_questions.jsonl"
# Every other fictional text of the project a model might have been trained or tested on.
OTHER_DATA = [EXAMPLES / "miniwiki_large.jsonl", EXAMPLES / "miniwiki.jsonl", EXAMPLES / "miniwiki_questions.jsonl",
              *sorted(p for p in (ROOT / "tests" / "fixtures").rglob("*") if p.is_file() and p.suffix in
                      (".jsonl", ".json", ".py"))]
LINK = re.compile(r"\[\[([^\]|]+)(?:\|[^\]]+)?\]\]")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def wiki() -> list[dict]:
    return _rows(WIKI)


@pytest.fixture(scope="module")
def articles(wiki) -> dict[str, dict]:
    return {row["title"]: row for row in wiki}


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    return _rows(QUESTIONS)


def _named(title: str) -> str:
    """How a question names an article: its title without a disambiguation suffix (「火の山の娘 (映画)」)."""
    return re.sub(r"\s*\(.*\)$", "", title)


# ---------------------------------------------------------------- the wiki
def test_wiki_rows_have_the_miniwiki_shape(wiki, articles):
    assert 60 <= len(wiki) <= 90
    assert len({r["id"] for r in wiki}) == len(wiki) and len(articles) == len(wiki)
    for row in wiki:
        assert set(row) == {"id", "title", "text", "url", "source_text", "outgoing_link", "redirect"}, row["id"]
        assert re.fullmatch(r"mwu\d{4}", row["id"])
        assert row["url"] == f"https://example.invalid/wiki/{row['title']}"
        source = row["source_text"]
        assert source.startswith("{{基礎情報 ") and f"\n'''{row['title']}'''\n" in source
        assert source.endswith("\n[[Category:架空]]")
        # outgoing_link: exactly the other articles the wikitext links (infobox and prose)
        linked = {t for t in LINK.findall(source) if t != "Category:架空"} - {row["title"]}
        assert set(row["outgoing_link"]) == linked and all(t in articles for t in linked), row["title"]
        assert "[[" not in row["text"] and "架空" in row["text"]


def test_wiki_text_is_prose_not_field_value_lines(wiki):
    for row in wiki:
        sentences = [s for s in row["text"].split("。") if s.strip()]
        assert 2 <= len(sentences) <= 5, (row["title"], len(sentences))
        # miniwiki_large writes short 「<field>は<value>」 sentences (「県の木はシラカバ」); these are prose
        assert sum(len(s) for s in sentences) / len(sentences) > 18, row["title"]  # miniwiki_large: at most 10
    assert sum("、" in r["text"] for r in wiki) == len(wiki)


def test_no_name_of_this_wiki_occurs_in_other_project_data(wiki):
    other = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in OTHER_DATA)
    shared = [r["title"] for r in wiki if _named(r["title"]) in other]
    assert not shared, f"titles also in other project data: {shared}"


# ---------------------------------------------------------------- the questions
def test_question_rows(questions, articles):
    assert len(questions) >= 48
    assert len({q["id"] for q in questions}) == len(questions)
    two_hop = [q for q in questions if q["hops"] == 2]
    assert len(two_hop) >= 40
    for q in questions:
        assert set(q) == {"id", "question", "answer", "aliases", "hops", "evidence"}, q["id"]
        assert q["hops"] == len(q["evidence"]) in (1, 2), q["id"]
        assert all(t in articles for t in q["evidence"]), q["id"]
        assert len(set(q["evidence"])) == len(q["evidence"]), q["id"]


def test_answer_and_aliases_are_in_the_last_evidence_article(questions, articles):
    for q in questions:
        text = articles[q["evidence"][-1]]["text"]
        for form in (q["answer"], *q["aliases"]):
            assert form and form in text, (q["id"], form)


def test_questions_name_neither_answer_nor_bridge(questions, articles):
    for q in questions:
        for form in (q["answer"], *q["aliases"]):
            assert form not in q["question"], (q["id"], form)
        assert _named(q["evidence"][0]) in q["question"], (q["id"], "start entity not named")
        if q["hops"] == 2:
            start, bridge = (articles[t] for t in q["evidence"])
            assert _named(bridge["title"]) not in q["question"], (q["id"], "bridge named")
            # a real second hop: the start article leads to the bridge and does not itself hold the answer
            assert bridge["title"] in start["outgoing_link"], q["id"]
            assert _named(bridge["title"]) in start["text"], q["id"]
            assert q["answer"] not in start["text"], (q["id"], "answer already in the start article")


def test_questions_are_not_template_output(questions):
    texts = [q["question"] for q in questions]
    assert all(template_parts(t) is None for t in texts)
    assert not any("」について、その" in t for t in texts)
    stiff = [t for t in texts if t.endswith(("を答えてください。", "はどこですか？"))]
    assert len(stiff) < 0.1 * len(texts), stiff
    assert len(set(texts)) == len(texts)


# ---------------------------------------------------------------- with the toolkit
def test_answer_articles_are_found_by_the_embedded_index(tmp_path, wiki, questions):
    build_embedded(wiki, tmp_path / "ix", quiet=True)
    backend = EmbeddedBackend(tmp_path / "ix")
    try:
        missed = []
        for title in sorted({t for q in questions for t in q["evidence"]}):
            top = [hit.title for hit in backend.search(title, 3).hits]
            if title not in top:
                missed.append((title, top))
        assert not missed
    finally:
        backend.close()


def test_gold_answers_score_under_the_multihop_task(questions):
    task = TASKS["multihop_qa_compact"]
    rows = [{"id": q["id"], "question": q["question"], "answer": q["answer"], "aliases": q["aliases"]}
            for q in questions]
    assert task.gold_failures(rows) == []
    finished = task.finalize(rows)
    assert all(isinstance(r, dict) and r["task"] == "multihop_qa_compact" for r in finished)
    assert len(finished) == len(rows)

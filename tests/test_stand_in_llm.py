"""The stand-in LLM (examples/stand_in_llm.py) answers from the data of the pipelines' real prompts.

The benchmarks and streaming tests run whole builds on it, so when it reads a prompt's instructions instead of its
data every article gets the same answer: an e-Gov build on the real laws then kept 1 question of 1,384 (all the
others near-duplicates of it), and every multihop article got the extraction rules' own noun pairs as triples.
"""

from __future__ import annotations

import doctest
import json

from tansaku.core.llm.base import ChatRequest
from tansaku.examples import stand_in_llm
from tansaku.pipelines.egov.generate import GENERATE_PROMPT, _article_prompt_values, fill, load_prompt
from tansaku.pipelines.multihop.triples import extract_request

ARTICLES = [
    {"law_title": "架空市民法", "article_title": "第四条", "text": "（成年）\n第四条\u3000年齢二十歳をもって、成年とする。"},
    {"law_title": "架空市民法", "article_title": "第九条", "text": "（取消し）\n第九条\u3000霧島町の住民は、書面により届け出るものとする。"},
]


def _ask(prompt: str):
    return json.loads(stand_in_llm.respond(ChatRequest(messages=[{"role": "user", "content": prompt}])))


def test_egov_question_is_built_from_the_article_not_the_rules():
    template, _ = load_prompt(GENERATE_PROMPT)
    answers = [_ask(fill(template, **_article_prompt_values(a))) for a in ARTICLES]
    correct = [a["choices"][a["answer_index"]] for a in answers]
    assert "年齢二十歳をもって" in correct[0]
    assert "霧島町の住民は" in correct[1]
    assert not any("正解" in c for a in answers for c in a["choices"])


def test_triples_come_from_the_text_only():
    doc = {"id": "d1", "title": "鳴沢市", "text": "鳴沢市は架空の都市である。人口は三万人。霧島県の県庁所在地。"}
    triples = _ask(extract_request(doc).messages[0]["content"])["triples"]
    evidence = {t["evidence"] for t in triples}
    assert triples and all(e in doc["text"] for e in evidence)
    assert not any(t["object"] in ("本文", "記事") for t in triples)


def test_docstring_examples():
    """tests/test_doctests.py leaves tansaku.examples out; the stand-in's examples are run here."""
    assert doctest.testmod(stand_in_llm).failed == 0

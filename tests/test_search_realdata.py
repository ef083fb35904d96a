"""Real corpus: index ../shared/data/jawiki (WikipediaAnnotatedCorpus, ~4k articles) and check bool
queries for precision: every hit's passage satisfies each must / must_not / filter clause.

    pytest tests/test_search_realdata.py -q -m realdata
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

from tansaku.envs.environments import SearchEnvironment
from tansaku.envs.search.embedded import EmbeddedBackend, build_embedded

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WAC = DATA / "jawiki" / "WikipediaAnnotatedCorpus" / "wac_docs.derived.jsonl"

pytestmark = [pytest.mark.realdata,
              pytest.mark.skipif(not WAC.exists(), reason=f"{WAC} is absent (no shared data)")]


def wac_rows():
    with WAC.open(encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            yield {"id": d["doc_id"], "title": d.get("title_guess") or "", "text": d["text"], "url": None,
                   "source": "wac", "meta": "{}"}


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    ix = tmp_path_factory.mktemp("wac") / "ix"
    meta = build_embedded(wac_rows(), ix, chunk_chars=400)
    assert meta["documents"] > 3000
    return EmbeddedBackend(ix)


def squash(s: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", s)).lower()


CASES = [
    # (must phrases, must_not phrases)
    (["幕府", "将軍"], ["鎌倉"]),
    (["天皇"], ["平安", "奈良"]),
    (["大学"], ["東京"]),
    (["鉄道", "駅"], []),
    (["川"], ["山", "県"]),
]


@pytest.mark.parametrize("must,must_not", CASES, ids=lambda x: ",".join(x))
def test_bool_precision(backend, must, must_not):
    q = {"bool": {"must": [{"match_phrase": {"text": p}} for p in must],
                  "must_not": [{"match_phrase": {"text": p}} for p in must_not]}}
    res = backend.search(q, size=50, collapse=False)
    assert res.hits, f"no hits for {q}"
    for h in res.hits:
        passage = backend.searcher.search(
            __import__("tantivy").Query.term_query(backend.schema, "chunk_id", f"{h.doc_id}#{h.chunk}"), 1).hits
        text = squash(backend.searcher.doc(passage[0][1]).get_first("text"))
        assert all(squash(p) in text for p in must), (h.doc_id, must)
        assert not any(squash(p) in text for p in must_not), (h.doc_id, must_not)


def test_filters_and_tools_on_real_corpus(backend):
    res = backend.search({"bool": {"must": [{"match": {"title": {"query": "足利", "operator": "and"}}}],
                                   "filter": [{"term": {"source": "wac"}}]}}, size=5)
    assert res.hits and all("足利" in squash(h.title) for h in res.hits)  # operator and: every bigram
    assert not backend.search({"bool": {"must": [{"match": {"title": "足利"}}],
                                        "filter": [{"term": {"source": "jaquad"}}]}}).hits
    tools = SearchEnvironment(backend)
    out = tools.search('{"match_phrase": {"text": "征夷大将軍"}}', 3)
    doc_id = out.split("doc_id: ", 1)[1].split(" ", 1)[0]
    page = tools.open_doc(doc_id)
    assert page.startswith(f"doc_id: {doc_id}") and "征夷大将軍" in squash(backend.get(doc_id)["text"])

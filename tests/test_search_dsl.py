"""DSL semantics of the embedded backend: hit sets equal a brute-force Python evaluation of the same
canonical query over the same analyzed passages, for both analyzers. Also the validator's contract.

With the ``char`` analyzer ``match`` runs on bigrams (analysis.py); the oracle here derives bigrams and
lone-character terms with plain ``str`` operations, independently of tantivy's n-gram tokenizer.

    pytest tests/test_search_dsl.py -q
"""

from __future__ import annotations

import importlib.util
import unicodedata
from pathlib import Path

import pytest

from tansaku.core.analysis import get_analyzer
from tansaku.envs.search import build_index, open_index
from tansaku.envs.search.documents import iter_chunks
from tansaku.envs.search.dsl import Fields, QueryError, parse_request, resolve_msm
from tansaku.envs.search.dsl_limits import Limits

FIX = Path(__file__).parent / "fixtures" / "search"
_spec = importlib.util.spec_from_file_location("search_fixture", FIX / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)

CHUNK_CHARS = 60  # small, so most fixture documents span several passages


@pytest.fixture(scope="module", params=["char", "sudachi"])
def indexed(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"dsl_{request.param}")
    ds = fixture.write_dataset(tmp / "ds")
    build_index(ds, tmp / "ix", analyzer=request.param, chunk_chars=CHUNK_CHARS)
    an = get_analyzer(request.param)
    passages = []
    for ch in iter_chunks(fixture.fixture_rows(), CHUNK_CHARS, ["category"]):
        passages.append({"id": ch["chunk_id"], "title": an.tokens(ch["title"]), "text": an.tokens(ch["text"]),
                         "bigrams": {f: _bigrams(ch[f]) for f in ("title", "text")},
                         "kw": {"doc_id": [ch["doc_id"]], "source": [ch["source"]], "title.keyword": [ch["title"]],
                                **ch["keywords"]}})
    return open_index(tmp / "ix"), an, passages


def _phrase_at(tokens: list[str], words: list[str], slop: int) -> bool:
    """In-order occurrence of ``words`` with at most ``slop`` extra positions in all gaps together."""
    if not words:
        return False
    positions = {}
    for i, t in enumerate(tokens):
        positions.setdefault(t, []).append(i)

    def extend(j: int, pos: int, used: int) -> bool:
        if j == len(words):
            return True
        return any(extend(j + 1, p, used + p - pos - 1) for p in positions.get(words[j], [])
                   if pos < p and used + p - pos - 1 <= slop)

    return any(extend(1, p, 0) for p in positions.get(words[0], []))


def _bigrams(text: str) -> set[str]:
    """Adjacent character pairs of the normalized text once whitespace is removed."""
    s = "".join(unicodedata.normalize("NFKC", text).lower().split())
    return {s[i:i + 2] for i in range(len(s) - 1)}


def oracle_match_terms(text: str, an) -> list[tuple[str, bool]]:
    """``match`` terms as documented in analysis.py: bigrams of each word; a one-character word itself."""
    if an.name != "char":
        return [(t, False) for t in dict.fromkeys(an.tokens(text))]
    out = []
    for w in unicodedata.normalize("NFKC", text).lower().split():
        for term in ([(w, False)] if len(w) == 1 else [(w[i:i + 2], True) for i in range(len(w) - 1)]):
            if term not in out:
                out.append(term)
    return out


def test_match_terms_follow_the_documented_rule():
    an = get_analyzer("char")
    for text in ["東京都の人口", "白砂 博物館", "港", "港 港町 町", "ＡＢｃ d  東京東京", "の の の", "ｶﾞｲﾄﾞ本"]:
        assert an.match_terms(text) == oracle_match_terms(text, an), text
    assert an.match_terms("白砂 博物館") == [("白砂", True), ("博物", True), ("物館", True)]


def brute(q: dict, doc: dict, an) -> bool:
    (kind, body), = q.items()
    if kind == "match":
        (f, s), = body.items()
        return _match(doc, f, s["query"], s["operator"], s["minimum_should_match"], an)
    if kind == "match_phrase":
        (f, s), = body.items()
        return _phrase_at(doc[f], an.tokens(s["query"]), s["slop"])
    if kind == "multi_match":
        fields = [f.partition("^")[0] for f in body["fields"]]
        if body["type"] == "phrase":
            return any(_phrase_at(doc[f], an.tokens(body["query"]), 0) for f in fields)
        return any(_match(doc, f, body["query"], body["operator"], body["minimum_should_match"], an) for f in fields)
    if kind == "term":
        (f, s), = body.items()
        return s["value"] in doc["kw"].get(f, [])
    if kind == "terms":
        (f, values), = ((k, v) for k, v in body.items() if k != "boost")
        return any(v in doc["kw"].get(f, []) for v in values)
    if kind == "match_all":
        return True
    must = all(brute(c, doc, an) for c in body["must"] + body["filter"])
    must_not = any(brute(c, doc, an) for c in body["must_not"])
    n_should = sum(brute(c, doc, an) for c in body["should"])
    has_must = bool(body["must"] or body["filter"])
    k = (resolve_msm(body["minimum_should_match"], len(body["should"]))
         if body["minimum_should_match"] is not None else (0 if has_must else 1 if body["should"] else 0))
    if body["should"] and not has_must:
        k = max(k, 1)
    return must and not must_not and n_should >= k


def _match(doc: dict, field: str, text: str, operator: str, msm, an) -> bool:
    terms = oracle_match_terms(text, an)
    if not terms:
        return False
    chars = set(doc[field])
    present = sum((t in doc["bigrams"][field]) if bigram else (t in chars) for t, bigram in terms)
    k = len(terms) if operator == "and" else max(1, resolve_msm(msm, len(terms))) if msm is not None else 1
    return present >= k


QUERIES = [
    "雪村製菓",
    {"match": {"text": "栗羊羹"}},
    {"match": {"text": {"query": "白砂 博物館", "operator": "and"}}},
    {"match": {"text": {"query": "港町漁港の研究船", "minimum_should_match": "75%"}}},
    {"match": {"title": {"query": "北浜県知事", "minimum_should_match": -1}}},
    {"match": {"text": {"query": "北浜", "minimum_should_match": 5}}},
    {"match": {"text": {"query": "栗 羊羹", "operator": "and"}}},                     # lone char + bigram
    {"match": {"text": {"query": "市 白砂博物館 漁港", "minimum_should_match": "60%"}}},
    {"match": {"title": {"query": "市 紅葉谷 ダム", "minimum_should_match": 2}}},
    {"match": {"text": "1952年"}},
    {"match_phrase": {"text": "港町地区"}},
    {"match_phrase": {"text": "北浜県知事"}},
    {"match_phrase": {"title": "白砂"}},
    {"match_phrase": {"title": "坂("}},             # whitespace in the title is invisible to phrases …
    {"match": {"title": {"query": "坂( 羊羹", "operator": "and"}}},  # … and to bigrams
    {"match": {"title": "坂( 山手"}},
    {"match_phrase": {"text": {"query": "青葉鉄道路線", "slop": 2}}},
    {"match_phrase": {"text": {"query": "白砂工場", "slop": 1}}},
    {"multi_match": {"query": "紅葉谷", "fields": ["title^3", "text"], "type": "phrase"}},
    {"multi_match": {"query": "温泉 旅館", "fields": ["title", "text"], "operator": "and"}},
    {"multi_match": {"query": "ダム 水道", "type": "most_fields"}},
    {"term": {"category": "人物"}},
    {"term": {"title.keyword": "白砂市"}},
    {"term": {"doc_id": "f010"}},
    {"terms": {"category": ["施設", "自然"]}},
    {"bool": {"must": [{"match_phrase": {"text": "白砂市"}}], "must_not": [{"term": {"category": "人物"}}]}},
    {"bool": {"filter": [{"term": {"category": "地理"}}]}},
    {"bool": {"must_not": [{"match": {"text": "市"}}]}},
    {"bool": {"should": [{"match_phrase": {"text": "雪村製菓"}}, {"match_phrase": {"text": "白砂市"}},
                         {"match_phrase": {"text": "港町"}}], "minimum_should_match": 2}},
    {"bool": {"must": [{"match": {"text": "知事"}}], "should": [{"term": {"category": "人物"}}],
              "minimum_should_match": 1}},
    {"bool": {"must": [{"bool": {"should": [{"term": {"category": "人物"}}, {"term": {"category": "行政"}}]}}],
              "filter": [{"match_phrase": {"text": "白砂市"}}],
              "must_not": [{"bool": {"must": [{"match_phrase": {"text": "陶芸"}}]}}]}},
    {"bool": {"should": [{"term": {"category": "法令"}}], "minimum_should_match": 3}},
    {"query": {"match_all": {}}, "size": 5},
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: str(q)[:50])
def test_hit_sets_equal_brute_force(indexed, query):
    backend, an, passages = indexed
    canonical, _ = parse_request(query, 1, backend.fields)
    expected = {p["id"] for p in passages if brute(canonical, p, an)}
    assert backend.matching_chunks(query) == expected


def test_suite_is_not_trivial(indexed):
    """Most suite queries match something but not everything, so equality above means something."""
    backend, an, passages = indexed
    sizes = [len(backend.matching_chunks(q)) for q in QUERIES]
    assert sum(0 < n < len(passages) for n in sizes) >= len(QUERIES) - 4


def test_char_phrases_ignore_whitespace_and_two_chars_use_the_bigram(indexed):
    backend, an, passages = indexed
    if an.name != "char":
        pytest.skip("whitespace-spanning phrases are a char-analyzer property")
    f003 = {p["id"] for p in passages if p["id"].startswith("f003#")}  # title 月見坂 (羊羹) on every passage
    assert f003 and backend.matching_chunks({"match_phrase": {"title": "月見坂(羊羹"}}) == f003
    two = repr(backend.translate(parse_request({"match_phrase": {"text": "白砂"}}, 1, backend.fields)[0]))
    assert "TermQuery" in two and "PhraseQuery" not in two


def test_flat_most_fields_scores_like_nested_or(indexed):
    """The embedded backend flattens an OR most_fields query into one OR (for block-max WAND); scores
    must equal those of the per-field ORs summed, as OpenSearch defines most_fields."""
    import tantivy

    backend, _, _ = indexed
    q = {"multi_match": {"query": "白砂市の港町 祭り", "fields": ["title^2", "text"], "type": "most_fields"}}
    flat = backend.translate(parse_request(q, 1, backend.fields)[0])
    nested = tantivy.Query.boolean_query([
        (tantivy.Occur.Should, tantivy.Query.boost_query(backend._match("title", "白砂市の港町 祭り", "or", None), 2.0)),
        (tantivy.Occur.Should, backend._match("text", "白砂市の港町 祭り", "or", None))])
    got = {(a.segment_ord, a.doc): s for s, a in backend.searcher.search(flat, 100).hits}
    want = {(a.segment_ord, a.doc): s for s, a in backend.searcher.search(nested, 100).hits}
    assert len(want) > 5 and got.keys() == want.keys()
    assert all(abs(got[d] - want[d]) < 1e-4 * max(1.0, want[d]) for d in want)


def test_ranking_respects_boost_and_collapse(indexed):
    backend, _, _ = indexed
    hits = backend.search({"multi_match": {"query": "白砂焼", "fields": ["title^5", "text"]}}, size=5).hits
    assert hits[0].title == "白砂焼"
    assert len({h.doc_id for h in hits}) == len(hits)  # one hit per document


def test_get_reassembles_passages(indexed):
    backend, _, _ = indexed
    row = next(r for r in fixture.fixture_rows() if r["id"] == "f026")
    doc = backend.get("f026")
    assert doc["text"] == row["text"] and doc["title"] == row["title"] and doc["category"] == ["事件"]
    assert backend.get("nope") is None


FIELDS = Fields(keyword=("category",))


@pytest.mark.parametrize("query,needle", [
    ({"regexp": {"text": "a.*"}}, "query.regexp"),
    ({"wildcard": {"text": "*町"}}, "query.wildcard"),
    ({"script": {"script": "1"}}, "scripts are never run"),
    ({"fuzzy": {"text": "港"}}, "query.fuzzy"),
    ({"match": {"text": {"query": "港", "fuzziness": "AUTO"}}}, "fuzziness"),
    ({"bool": {"must": [{"span_near": {}}]}}, "query.bool.must[0].span_near"),
    ({"term": {"text": "港"}}, "not a keyword field"),
    ({"match": {"category": "人物"}}, "not a text field"),
    ({"match": {"text": "x" * 300}}, "limit is 200"),
    ({"terms": {"category": [str(i) for i in range(100)]}}, "limit is 64"),
    ({"match_phrase": {"text": {"query": "港町", "slop": 99}}}, "slop"),
    ({"match": {"text": {"query": "港", "operator": "xor"}}}, "operator"),
    ({"match": {"text": {"query": "港", "minimum_should_match": "most"}}}, "minimum_should_match"),
    ({"bool": {}}, "at least one"),
    ({"bool": {"must": {"match": {"text": "a"}}, "extra": 1}}, "query.bool.extra"),
    ({"query": {"match_all": {}}, "size": 1000}, "over the limit"),
    ({"query": {"match_all": {}}, "aggs": {}}, "top-level keys"),
    ("{not json", "does not parse"),
    ("   ", "empty"),
    ([1, 2], "exactly one key"),
])
def test_invalid_queries_name_the_clause(query, needle):
    with pytest.raises(QueryError) as e:
        parse_request(query, None, FIELDS)
    assert needle in str(e.value)


def test_depth_and_clause_limits():
    deep = {"match": {"text": "港"}}
    for _ in range(6):
        deep = {"bool": {"must": [deep]}}
    with pytest.raises(QueryError, match="nesting is deeper than the limit of 5"):
        parse_request(deep, 3, FIELDS)
    wide = {"bool": {"should": [{"term": {"category": str(i)}} for i in range(40)]}}
    with pytest.raises(QueryError, match="too many clauses; the limit is 32"):
        parse_request(wide, 3, FIELDS)
    canonical, size = parse_request(wide, 3, FIELDS, Limits(max_clauses=50))
    assert size == 3 and len(canonical["bool"]["should"]) == 40


def test_msm_arithmetic_follows_opensearch():
    assert [resolve_msm(x, 4) for x in (2, -1, "75%", "-25%", "0%", 7)] == [2, 3, 3, 3, 0, 7]

"""Search does bounded work: every query, however hostile, returns hits or one declared one-line refusal.

Property tests throw random and hostile DSL (nested bools, long field lists, huge or odd
minimum_should_match, very long strings, unknown keys, wrong types) at the embedded backend over the
small fictional fixture index; the concrete cases pin the limits of ``envs/search/dsl.py`` (sloppy phrases
included: issue 28's worst case) and that the per-query timeout covers translation as well as execution.
A flood of worst-case queries over a bigger index is tests/test_search_flood.py.

    pytest tests/test_search_bounds.py -q -s      # -s prints the slowest query time
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tansaku.envs.search import build_index, open_index, search_cli
from tansaku.envs.search.base import SearchResult
from tansaku.envs.search.dsl import Fields, QueryError, parse_request
from tansaku.envs.search.dsl_limits import MAX_FIELDS, MAX_MSM_COUNT, MAX_REQUEST_CHARS, Limits
from tansaku.envs.search.embedded import EmbeddedBackend

FIX = Path(__file__).parent / "fixtures" / "search"
_spec = importlib.util.spec_from_file_location("search_fixture_bounds", FIX / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)

TIMEOUT_S = Limits().timeout_ms / 1000
SLACK_S = 2.0  # generous: the machine is shared with long benchmarks
WORDS = "東京港町大漁祭り市紅葉谷白砂博物館の は る　 abc"
slowest = [0.0]
answered = [0, 0]  # [answered with hits or none, refused]: the properties must exercise both


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounds")
    build_index(fixture.write_dataset(tmp / "ds"), tmp / "ix", chunk_chars=60)
    yield open_index(tmp / "ix")
    print(f"\nslowest hostile query: {slowest[0] * 1000:.1f} ms; answered {answered[0]}, refused {answered[1]}")


def outcome(backend, query, size=5):
    """Run one query; return the result or the QueryError, failing on anything else or a slow answer."""
    t0 = time.perf_counter()
    try:
        result = backend.search(query, size=size)
    except QueryError as e:
        result = e
    took = time.perf_counter() - t0
    slowest[0] = max(slowest[0], took)
    assert took < TIMEOUT_S + SLACK_S, (took, str(query)[:300])
    answered[isinstance(result, QueryError)] += 1
    if isinstance(result, QueryError):
        msg = str(result)
        assert msg and "\n" not in msg and len(msg) <= 320, msg[:400]
    else:
        assert isinstance(result, SearchResult)
    return result


# ---------------------------------------------------------------- strategies

junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12)
valid_text = st.text(alphabet=WORDS, min_size=1, max_size=12)
text = (valid_text | valid_text | st.text(alphabet=WORDS, max_size=260) | st.just("東京" * 100)
        | st.text(max_size=40) | st.integers(min_value=-10**30, max_value=10**30) | junk)
hostile_msm = st.one_of(
    st.integers(min_value=-10**500, max_value=10**500), st.from_regex(r"-?[0-9]{1,450}%?", fullmatch=True),
    st.sampled_from(["9" * 400 + "%", "²", "١%", "75 %", "-0%", "1e3", "NaN", "", "%", "101%"]), st.floats(), junk)
msm = st.none() | st.none() | st.integers(-4, 4) | st.sampled_from(["75%", "-25%", "100%", "2"]) | hostile_msm
field = st.sampled_from(["title", "text", "title^2", "text^0.5"]) | st.sampled_from(
    ["source", "bogus", "text^abc", "title^1e999", "text^nan", "title.keyword", ""]) | junk
fields = (st.lists(field, max_size=40) | st.lists(st.sampled_from(["title", "text^3"]), min_size=1, max_size=2,
                                                  unique=True)
          | st.integers(8990, 9010).map(lambda n: ["text"] * n) | field)
keyword = st.text(max_size=30) | st.just("f001") | st.integers(1000, 1100).map(lambda n: "x" * n) | junk
extras = st.just({}) | st.just({}) | st.dictionaries(st.sampled_from(["boost", "fuzziness", "zero_terms"]), junk,
                                                      max_size=1)


def _match(f, q, op, m, extra):
    return {"match": {f: {"query": q, "operator": op, "minimum_should_match": m, **extra}}}


leaf = st.one_of(
    st.builds(_match, st.sampled_from(["text", "title", "nope"]), text, st.sampled_from(["or", "and", "or", "xor"]) | junk,
              msm, extras),
    st.builds(lambda f, q, s: {"match_phrase": {f: {"query": q, "slop": s}}},
              st.sampled_from(["text", "title"]), text, st.integers(0, 3) | st.integers(-5, 10**6) | junk),
    st.builds(lambda q, fs, t, m, tb: {"multi_match": {"query": q, "fields": fs, "type": t,
                                                       "minimum_should_match": m, "tie_breaker": tb}},
              text, fields, st.sampled_from(["best_fields", "most_fields", "phrase", "cross_fields"]), msm,
              st.floats(0, 1) | st.floats() | st.integers()),
    st.builds(lambda f, v: {"term": {f: v}}, st.sampled_from(["doc_id", "source", "category", "text"]), keyword),
    st.builds(lambda f, vs: {"terms": {f: vs}}, st.sampled_from(["doc_id", "category"]),
              st.lists(keyword, max_size=80) | junk),
    st.just({"match_all": {}}), st.builds(lambda b: {"match_all": {"boost": b}}, junk),
    st.builds(lambda k, b: {k: b}, st.sampled_from(["regexp", "script", "span_near", "geo_shape", ""]), junk),
    junk,
)


def _bool(must, should, must_not, m, extra):
    return {"bool": {"must": must, "should": should, "must_not": must_not, "minimum_should_match": m, **extra}}


queries = st.recursive(
    leaf,
    lambda c: st.builds(_bool, st.lists(c, max_size=4), st.lists(c, max_size=40), st.lists(c, max_size=3) | c,
                        msm, st.just({}) | st.dictionaries(st.sampled_from(["boost", "filter", "unknown"]), junk,
                                                           max_size=2)),
    max_leaves=60)


long_text = st.text(alphabet=WORDS, min_size=1, max_size=200).filter(str.strip)
valid_msm = st.none() | st.integers(-MAX_MSM_COUNT, MAX_MSM_COUNT) | st.integers(-100, 100).map("{}%".format)
valid_leaf = st.one_of(
    st.builds(_match, st.sampled_from(["text", "title"]), long_text, st.sampled_from(["or", "and"]), valid_msm,
              st.just({})),
    st.builds(lambda f, q, s: {"match_phrase": {f: {"query": q, "slop": s}}},
              st.sampled_from(["text", "title"]), long_text, st.integers(0, 10)),
    st.builds(lambda q, fs, t, m: {"multi_match": {"query": q, "fields": fs, "type": t, "minimum_should_match": m}},
              long_text, st.lists(st.sampled_from(["title", "text^2"]), min_size=1, max_size=2, unique=True),
              st.sampled_from(["best_fields", "most_fields", "phrase"]), valid_msm),
    st.builds(lambda v: {"terms": {"doc_id": v}}, st.lists(st.from_regex(r"f0[0-3][0-9]", fullmatch=True),
                                                           min_size=1, max_size=64)),
    st.just({"match_all": {}}),
)
valid_queries = st.recursive(
    valid_leaf,
    lambda c: st.builds(lambda must, should, not_, m: {"bool": {"must": must, "should": should, "must_not": not_,
                                                                "minimum_should_match": m}},
                        st.lists(c, max_size=3), st.lists(c, min_size=1, max_size=6), st.lists(c, max_size=2),
                        valid_msm),
    max_leaves=30)


BIG = {"bool": {"should": [{"match_phrase": {"text": t}} for t in ("港町大漁祭り", "紅葉谷", "白砂博物館")]}}


def _nested(depth: int, width: int) -> dict:
    q: dict = {"match": {"text": "港"}}
    for _ in range(depth):
        q = {"bool": {"should": [q] * width}}
    return q


# ---------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(q=queries, as_json=st.booleans(), size=st.none() | st.integers(-2, 80) | junk)
def test_any_query_returns_hits_or_one_line_refusal(backend, q, as_json, size):
    if as_json:
        try:
            q = json.dumps(q, ensure_ascii=False)
        except ValueError:  # a float('nan') or a 5000-digit int: plain JSON cannot carry it
            return
    outcome(backend, q, size)


@settings(max_examples=120, deadline=None)
@given(q=valid_queries, as_json=st.booleans())
def test_legal_queries_run_inside_the_timeout(backend, q, as_json):
    """Well-formed queries at the limits (200-character texts, every field, wide bools) reach the engine."""
    result = outcome(backend, json.dumps(q, ensure_ascii=False) if as_json else q, 50)
    if isinstance(result, QueryError):  # only a structural limit may refuse a well-formed query
        assert "limit" in str(result), str(result)


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(0, 60), width=st.integers(1, 50), as_json=st.booleans())
def test_deep_and_wide_bools_are_refused_or_answered(backend, depth, width, as_json):
    if depth > 2:  # the query shares one child per level, but its JSON text grows as width ** depth
        width = min(width, 2) if depth <= 12 else 1
    q = _nested(depth, width)
    result = outcome(backend, json.dumps(q) if as_json else q)
    too_deep = depth + 1 > Limits().max_depth
    too_many = sum(width ** i for i in range(depth + 1)) > Limits().max_clauses
    assert isinstance(result, QueryError) == (too_deep or too_many), str(result)[:200]


@settings(max_examples=60, deadline=None)
@given(raw=st.text(max_size=200) | st.text(alphabet="{}[]\":,0123456789-.e", max_size=400))
def test_any_text_is_a_query_or_a_refusal(backend, raw):
    outcome(backend, raw)


# ---------------------------------------------------------------- concrete cases


def test_field_flood_is_refused_before_translation(backend):
    q = {"multi_match": {"query": "東京" * 100, "fields": ["text"] * 9000, "type": "phrase"}}
    with pytest.raises(QueryError, match=f"9000 fields; the limit is {MAX_FIELDS}"):
        backend.search(q)
    with pytest.raises(QueryError, match="listed twice"):
        backend.search({"multi_match": {"query": "東京", "fields": ["text", "text^2"]}})
    with pytest.raises(QueryError, match="each field is a string"):
        backend.search({"multi_match": {"query": "東京", "fields": [["text"]]}})
    assert backend.search({"multi_match": {"query": "東京" * 100, "fields": ["text", "title^2"],
                                            "type": "phrase"}}).hits == []


@pytest.mark.parametrize("bad", ["9" * 400 + "%", "9" * 400, 10**400, 1001, -1001, "101%", "-101%", "²", "١",
                                 "1.5", "75 %", "most", 2.0, True, [1]])
def test_minimum_should_match_is_strict(backend, bad):
    with pytest.raises(QueryError, match="minimum_should_match: use an integer from"):
        backend.search({"match": {"text": {"query": "港町", "minimum_should_match": bad}}})
    with pytest.raises(QueryError, match="minimum_should_match"):
        backend.search({"bool": {"should": [{"match": {"text": "港"}}], "minimum_should_match": bad}})


def test_minimum_should_match_valid_forms_are_canonical():
    def msm(v):
        return parse_request({"match": {"text": {"query": "港町", "minimum_should_match": v}}}, 1,
                             Fields())[0]["match"]["text"]["minimum_should_match"]

    assert [msm(v) for v in (2, -1, "2", " -1 ", "75%", "-25%", "100%", "-100%", MAX_MSM_COUNT)] == \
        [2, -1, 2, -1, "75%", "-25%", "100%", "-100%", MAX_MSM_COUNT]


def test_json_numbers_too_big_for_python_are_refused(backend):
    for q in ['{"match": {"text": {"query": "港", "minimum_should_match": ' + "9" * 5000 + "}}}",
              '{"match": {"text": {"query": ' + "9" * 400 + "}}}",
              '{"term": {"doc_id": ' + "1" * 400 + "}}"]:
        with pytest.raises(QueryError):
            backend.search(q)


def test_request_text_and_structure_limits(backend):
    with pytest.raises(QueryError, match=f"the limit is {MAX_REQUEST_CHARS}"):
        backend.search('{"match": {"text": "' + "港" * MAX_REQUEST_CHARS + '"}}')
    with pytest.raises(QueryError, match="nesting is deeper than the limit of 5"):
        backend.search(_nested(6, 1))
    with pytest.raises(QueryError, match="too many clauses; the limit is 32"):
        backend.search(_nested(1, 40))
    with pytest.raises(QueryError, match="the limit is 1000"):
        backend.search({"term": {"doc_id": "x" * 1001}})
    assert backend.search(_nested(4, 1)).hits


def test_refusals_quoting_hostile_names_stay_one_line(backend):
    for q in ({"match": {"te\nxt\r": "港"}}, {"x" * 10_000: {}}, {"bool": {"must": [{"match": {"text": "港"}}],
                                                                         "a\nb": 1}}):
        msg = str(outcome(backend, q))
        assert "\n" not in msg and len(msg) <= 320


def test_timeout_covers_translation(tmp_path, monkeypatch):
    """A query that may run long is translated in its worker process too, under its deadline: the caller's
    thread never translates it, so a slow translation is stopped with the query."""
    from tansaku.envs.search import embedded

    build_index(fixture.write_dataset(tmp_path / "ds"), tmp_path / "ix")
    want = [h.doc_id for h in EmbeddedBackend(tmp_path / "ix", Limits(timeout_ms=0)).search(BIG).hits]
    backend = EmbeddedBackend(tmp_path / "ix", Limits(timeout_ms=5000), workers=1)
    monkeypatch.setattr(embedded, "INLINE_POSTINGS_PER_MS", 0)  # every query is one that may run long

    def no_translation_here(q):
        raise AssertionError("translated in the caller's thread")

    backend.translate = no_translation_here
    assert [h.doc_id for h in backend.search(BIG).hits] == want and want
    backend.close()


def test_issue_28_worst_case_is_refused_before_it_runs(backend):
    """31 sloppy phrases of 200 common characters (slop 10) kept the engine busy for seconds each: refused now
    by what sloppy phrases may cost (the limit names both bounds); within them they are answered."""
    worst = {"bool": {"should": [{"match_phrase": {"text": {"query": "の" * 200, "slop": 10}}}] * 31}}
    with pytest.raises(QueryError, match=r"should\[0\].*2000 characters × slop; the limit is 8 clauses and 200"):
        backend.search(worst)
    with pytest.raises(QueryError, match=r"should\[8\].*9 clause\(s\)"):
        backend.search({"bool": {"should": [{"match_phrase": {"text": {"query": "港町", "slop": 1}}}] * 9}})
    msg = str(outcome(backend, json.dumps(worst, ensure_ascii=False)))
    assert msg.startswith("query.bool.should[0].match_phrase.text.slop: sloppy phrases") and "\n" not in msg
    at_bound = {"bool": {"should": [{"match_phrase": {"text": {"query": "港町大漁祭", "slop": 5}}}] * 8}}  # 8 × 25
    assert [h.doc_id for h in backend.search(at_bound).hits]
    assert backend.search({"match_phrase": {"text": {"query": "の" * 200, "slop": 0}}}).hits == []  # exact: cheap


def test_cli_search_refuses_over_limit_query_with_exit_2(backend):
    from typer.testing import CliRunner

    from tansaku.cli import synth_app

    q = json.dumps({"multi_match": {"query": "東京", "fields": ["text"] * 100}})
    res = CliRunner().invoke(synth_app, ["search", "--index", str(backend.index_dir), q])
    assert res.exit_code == 2, res.output
    assert "the limit is 32" in res.output and len(res.output.strip().splitlines()) == 1
    with pytest.raises(QueryError, match="minimum_should_match"):
        search_cli(str(backend.index_dir), '{"match": {"text": {"query": "港", "minimum_should_match": "9%%"}}}')

"""Model-facing tools: every hostile or invalid input comes back as an ``Error:`` string, budgets hold,
pages continue, descriptions vary by seed and stay TRL-readable.

    pytest tests/test_tools.py -q
"""

from __future__ import annotations

import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tansaku.envs.search import build_index, open_index
from tansaku.envs.tools import OPEN_SUMMARIES, SEARCH_SUMMARIES, SearchTools, ToolsConfig

FIX = Path(__file__).parent / "fixtures" / "search"
_spec = importlib.util.spec_from_file_location("search_fixture", FIX / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tools")
    build_index(fixture.write_dataset(tmp / "ds"), tmp / "ix", chunk_chars=80)
    return open_index(tmp / "ix")


HOSTILE = [
    '{"script": {"source": "System.exit(0)"}}',
    '{"script_score": {"query": {"match_all": {}}, "script": "1"}}',
    '{"regexp": {"text": "(a+)+$"}}',
    '{"wildcard": {"text": "*港"}}',
    '{"prefix": {"title": "白"}}',
    '{"fuzzy": {"text": {"value": "港町", "fuzziness": 2}}}',
    '{"match": {"text": {"query": "港町", "fuzziness": "AUTO"}}}',
    '{"query_string": {"query": "*:*"}}',
    '{"bool": {"must": [{"bool": {"must": [{"bool": {"must": [{"bool": {"must": [{"bool": {"must": '
    '[{"bool": {"must": [{"match": {"text": "港"}}]}}]}}]}}]}}]}}]}}',
    json.dumps({"bool": {"should": [{"match": {"text": str(i)}} for i in range(100)]}}),
    '{"terms": {"category": ' + json.dumps([str(i) for i in range(500)]) + "}}",
    '{"match": {"text": "' + "港" * 5000 + '"}}',
    '{"query": {"match_all": {}}, "size": 100000}',
    '{"match_all": {}, "_delete": true}',
    '{"delete_by_query": {"index": "*"}}',
    '{"match": {"nonexistent_field": "x"}}',
    '{"term": {"text": "港"}}',
    '{"match": {"text": {"query": ["list", "of", "things"]}}}',
    '{"bool": {"must": "not a clause"}}',
    '{"match": {"text": "a"}',
    "{" * 10000,
    "[" * 100000,
    '{"match": {"text": NaN}}',
    '{"match_phrase": {"text": {"query": "港町", "slop": -3}}}',
    "",
    "   \n  ",
]


@pytest.mark.parametrize("query", HOSTILE, ids=lambda q: q[:40])
def test_hostile_queries_return_error_text(backend, query):
    out = SearchTools(backend).search(query)
    assert isinstance(out, str) and out.startswith("Error: ") and "Traceback" not in out
    assert "search failed" not in out  # caught by the validator, not by the last-resort handler
    assert len(out) < 400  # one actionable line, not a dump


@pytest.mark.parametrize("size", [0, -1, 11, "many", 2.5, True])
def test_bad_sizes(backend, size):
    assert SearchTools(backend).search("港町", size).startswith("Error: ")


def test_non_string_query_and_backend_crash(backend):
    tools = SearchTools(backend)
    assert tools.search(12345).startswith("Error: ")

    class Broken:
        def search(self, *a, **k):
            raise RuntimeError("segfault-ish")

        def get(self, doc_id):
            raise OSError("disk gone")

    broken = SearchTools(Broken())
    assert broken.search("港").startswith("Error: search failed (RuntimeError)")
    assert broken.open_doc("f001").startswith("Error: could not open")


def test_search_output_and_budgets(backend):
    out = SearchTools(backend, ToolsConfig(top_k=3)).search("白砂焼 陶芸家")
    assert out.startswith("[1] doc_id: f024 | title: 白砂焼") and "【白砂焼】" in out
    assert out.count("doc_id:") == 3
    cut = SearchTools(backend, ToolsConfig(chars_per_call=300, truncation="cut")).search("白砂市", 10)
    assert len(cut) <= 300 and cut.endswith("…(truncated)")
    drop = SearchTools(backend, ToolsConfig(chars_per_call=300, truncation="drop")).search("白砂市", 10)
    assert len(drop) <= 300 + 80 and "more hits not shown" in drop and "truncated" not in drop
    assert SearchTools(backend).search('{"term": {"category": "存在しない"}}').startswith("No results")
    dsl = SearchTools(backend).search('{"bool": {"must": [{"match_phrase": {"text": "白砂市"}}], '
                                      '"filter": [{"term": {"category": "人物"}}]}}', 10)
    ids = [line.split()[2] for line in dsl.splitlines() if line.startswith("[")]
    assert set(ids) == {"f002", "f020", "f025", "f036"}  # every 人物 document that mentions 白砂市


def test_open_doc_pages(backend):
    tools = SearchTools(backend, ToolsConfig(page_chars=40))
    text = backend.get("f001")["text"]
    page, offset, seen = tools.open_doc("f001"), 0, ""
    while True:
        assert page.startswith("doc_id: f001 | title: 雪村製菓")
        body = page.split("\n", 1)[1].rsplit("\n", 1)[0]
        seen += body
        if page.endswith("[end of document]"):
            break
        offset = int(page.rsplit("offset=", 1)[1].rstrip(")]"))
        page = tools.open_doc("f001", offset)
    assert seen == text
    assert tools.open_doc("f001", 10_000).startswith("Error: offset 10000 is past the end")
    assert tools.open_doc("f001", -5).startswith("Error:")
    assert tools.open_doc("f001", "abc").startswith("Error:")
    assert tools.open_doc("../../etc/passwd").startswith("Error: no document")
    assert tools.open_doc("f001", "3").split("\n")[1].startswith(text[3:10])


def test_descriptions_drawn_per_episode_and_schema_readable(backend):
    seen = {(t.search_variant, t.open_variant) for t in (SearchTools(backend, seed=s) for s in range(40))}
    assert len({s for s, _ in seen}) == len(SEARCH_SUMMARIES) and len({o for _, o in seen}) == len(OPEN_SUMMARIES)
    assert SearchTools(backend, seed=7).search_variant == SearchTools(backend, seed=7).search_variant
    fixed = SearchTools(backend, ToolsConfig(description_variant=2), seed=1)
    assert fixed.search_variant == 2 and fixed.open_variant == 2
    schemas = SearchTools(backend, seed=3).schemas()
    assert [s["function"]["name"] for s in schemas] == ["search", "open_doc"]
    params = schemas[0]["function"]["parameters"]
    assert params["required"] == ["query"] and params["properties"]["size"]["type"] == "integer"
    search_fn, open_fn = SearchTools(backend, seed=3).functions()
    assert "doc_id: f024" in search_fn("白砂焼") and open_fn("f024").startswith("doc_id: f024")


def test_concurrent_callers_share_one_backend(backend):
    tools = SearchTools(backend)
    queries = ["白砂市", "雪村製菓", '{"match_phrase": {"text": "港町"}}', '{"regexp": {}}'] * 50
    expected = {q: tools.search(q) for q in set(queries)}
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(tools.search, queries))
    assert results == [expected[q] for q in queries]

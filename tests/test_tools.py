"""Model-facing tools (``SearchEnvironment``, the one implementation): every hostile or invalid input raises
``ToolError`` with a short readable message (TRL shows it as ``{'error': …}``), budgets hold, pages continue,
descriptions vary per episode and stay TRL-readable.

    pytest tests/test_tools.py -q
"""

from __future__ import annotations

import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tansaku.envs.environments import SearchEnvironment, tool_methods, tool_schemas
from tansaku.envs.search import build_index, open_index
from tansaku.envs.tools import OPEN_SUMMARIES, SEARCH_SUMMARIES, ToolError, ToolsConfig

FIX = Path(__file__).parent / "fixtures" / "search"
_spec = importlib.util.spec_from_file_location("search_fixture", FIX / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tools")
    build_index(fixture.write_dataset(tmp / "ds"), tmp / "ix", chunk_chars=80)
    return open_index(tmp / "ix")


def tools(backend, **config) -> SearchEnvironment:
    """An environment without a practical call budget (budgets are tested in test_environments.py)."""
    return SearchEnvironment(backend, ToolsConfig(**config), max_tool_calls=10**9)


def failure(call, *args) -> str:
    with pytest.raises(ToolError) as info:
        call(*args)
    return str(info.value)


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
def test_hostile_queries_raise_a_short_readable_error(backend, query):
    message = failure(tools(backend).search, query)
    assert message and "Traceback" not in message
    assert "search failed" not in message  # caught by the validator, not by the last-resort handler
    assert len(message) < 400  # one actionable line, not a dump


@pytest.mark.parametrize("size", [0, -1, 11, "many", 2.5, True])
def test_bad_sizes(backend, size):
    assert "size" in failure(tools(backend).search, "港町", size)


def test_non_string_query_and_backend_crash(backend):
    assert "query must be text" in failure(tools(backend).search, 12345)

    class Broken:
        def search(self, *a, **k):
            raise RuntimeError("segfault-ish")

        def get(self, doc_id):
            raise OSError("disk gone")

    assert failure(tools(Broken()).search, "港").startswith("search failed (RuntimeError)")
    assert failure(tools(Broken()).open_doc, "f001").startswith("could not open")


def test_search_output_and_budgets(backend):
    out = tools(backend, top_k=3).search("白砂焼 陶芸家")
    assert out.startswith("[1] doc_id: f024 | title: 白砂焼") and "【白砂焼】" in out
    assert out.count("doc_id:") == 3
    cut = tools(backend, chars_per_call=300, truncation="cut").search("白砂市", 10)
    assert len(cut) <= 300 and cut.endswith("…(truncated)")
    drop = tools(backend, chars_per_call=300, truncation="drop").search("白砂市", 10)
    assert len(drop) <= 300 + 80 and "more hits not shown" in drop and "truncated" not in drop
    assert tools(backend).search('{"term": {"category": "存在しない"}}').startswith("No results")  # not a failure
    dsl = tools(backend).search('{"bool": {"must": [{"match_phrase": {"text": "白砂市"}}], '
                                '"filter": [{"term": {"category": "人物"}}]}}', 10)
    ids = [line.split()[2] for line in dsl.splitlines() if line.startswith("[")]
    assert set(ids) == {"f002", "f020", "f025", "f036"}  # every 人物 document that mentions 白砂市


def test_open_doc_pages(backend):
    env = tools(backend, page_chars=40)
    text = backend.get("f001")["text"]
    page, offset, seen = env.open_doc("f001"), 0, ""
    while True:
        assert page.startswith("doc_id: f001 | title: 雪村製菓")
        body = page.split("\n", 1)[1].rsplit("\n", 1)[0]
        seen += body
        if page.endswith("[end of document]"):
            break
        offset = int(page.rsplit("offset=", 1)[1].rstrip(")]"))
        page = env.open_doc("f001", offset)
    assert seen == text
    assert failure(env.open_doc, "f001", 10_000).startswith("offset 10000 is past the end")
    assert "0 or more" in failure(env.open_doc, "f001", -5)
    assert "integer" in failure(env.open_doc, "f001", "abc")
    assert failure(env.open_doc, "../../etc/passwd").startswith("no document")
    assert env.open_doc("f001", "3").split("\n")[1].startswith(text[3:10])


def test_descriptions_drawn_per_episode_and_schema_readable(backend):
    env = tools(backend)
    drawn = []
    for i in range(40):
        env.reset(id=f"q{i}", question=f"質問{i}")
        schemas = {s["function"]["name"]: s["function"] for s in tool_schemas(env)}
        drawn.append((env.tool_variant, schemas["search"]["description"], schemas["open_doc"]["description"]))
    assert {v for v, _, _ in drawn} == set(range(len(SEARCH_SUMMARIES)))
    for variant, search_text, open_text in drawn:  # the schema really is the recorded variant's text
        assert search_text == SEARCH_SUMMARIES[variant] and open_text == OPEN_SUMMARIES[variant]
    env.reset(id="q7")
    first = env.tool_variant
    env.reset(id="q7")
    assert env.tool_variant == first  # stable per row (reruns hit the LLM cache)
    fixed = SearchEnvironment(backend, ToolsConfig(description_variant=2))
    for i in range(5):
        fixed.reset(id=f"q{i}")
        assert fixed.tool_variant == 2
    schemas = tool_schemas(tools(backend, top_k=3, max_k=7))
    assert [s["function"]["name"] for s in schemas] == ["open_doc", "search"]  # TRL's order (alphabetical)
    params = schemas[1]["function"]["parameters"]
    assert params["required"] == ["query"] and params["properties"]["size"]["type"] == "integer"
    assert "3" in params["properties"]["size"]["description"] and "7" in params["properties"]["size"]["description"]
    functions = tool_methods(tools(backend))
    assert "doc_id: f024" in functions["search"]("白砂焼") and functions["open_doc"]("f024").startswith("doc_id: f024")


def test_concurrent_callers_share_one_backend(backend):
    env = tools(backend)
    queries = ["白砂市", "雪村製菓", '{"match_phrase": {"text": "港町"}}'] * 50
    expected = {q: env.search(q) for q in set(queries)}
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(env.search, queries))
    assert results == [expected[q] for q in queries]

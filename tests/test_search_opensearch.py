"""OpenSearch backend: the request bodies it builds (pure functions, no server), a fake client for the
error paths, and contract tests against a live cluster when OPENSEARCH_URL is set.

    pytest tests/test_search_opensearch.py -q
    OPENSEARCH_URL=https://localhost:9200 OPENSEARCH_USER=admin OPENSEARCH_PASSWORD=… \\
      OPENSEARCH_VERIFY_CERTS=0 pytest tests/test_search_opensearch.py -q -m opensearch
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from pathlib import Path

import pytest

from tansaku.core.errors import InputError
from tansaku.envs.search import QueryError
from tansaku.envs.search.dsl import Fields, parse_request
from tansaku.envs.search.opensearch_backend import (
    OpenSearchBackend,
    build_opensearch,
    bulk_actions,
    index_body,
    search_body,
)

FIX = Path(__file__).parent / "fixtures" / "search"
_spec = importlib.util.spec_from_file_location("search_fixture", FIX / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)


def test_index_body_mappings_and_analysis():
    body = index_body(["category", "law_title"], "kuromoji")
    props = body["mappings"]["properties"]
    assert props["title"]["fields"]["keyword"]["type"] == "keyword" and props["title"]["analyzer"] == "ja"
    assert props["category"] == {"type": "keyword"} and props["doc_id"] == {"type": "keyword"}
    assert body["settings"]["analysis"]["analyzer"]["ja"]["tokenizer"] == "kuromoji_tokenizer"
    sudachi = index_body([], "sudachi")["settings"]["analysis"]
    assert sudachi["tokenizer"]["sudachi_c"]["split_mode"] == "C"
    with pytest.raises(ValueError):
        index_body([], "mecab")


def test_bulk_actions_use_passage_ids():
    actions = list(bulk_actions(fixture.fixture_rows()[:3], "idx", ["category"], chunk_chars=60))
    assert all(a["_index"] == "idx" and a["_id"] == a["_source"]["chunk_id"] for a in actions)
    assert {a["_source"]["doc_id"] for a in actions} == {"f001", "f002", "f003"}
    assert actions[0]["_source"]["category"] == "企業" and actions[0]["_source"]["position"] == 0
    assert len(actions) > 3  # 60-char passages split these documents


def test_search_body_is_validated_opensearch_dsl():
    canonical, size = parse_request('{"query": {"bool": {"must": [{"match": {"text": "港町"}}], '
                                    '"filter": {"term": {"category": "施設"}}}}, "size": 4}', None,
                                    Fields(keyword=("category",)))
    body = search_body(canonical, size, 1500)
    assert body["size"] == 4 and body["timeout"] == "1500ms" and body["collapse"] == {"field": "doc_id"}
    match = body["query"]["bool"]["must"][0]["match"]["text"]
    assert match == {"query": "港町", "operator": "or", "boost": 1.0}  # None options are dropped
    assert body["query"]["bool"]["filter"] == [{"term": {"category": {"value": "施設", "boost": 1.0}}}]


class FakeClient:
    """Records what is sent; answers like a cluster would."""

    def __init__(self, response=None, error=None):
        self.sent, self.response, self.error = [], response, error
        self.indices = self

    def get_mapping(self, index):
        return {index: {"mappings": {"properties": {"doc_id": {"type": "keyword"}, "category": {"type": "keyword"},
                                                    "text": {"type": "text"}}}}}

    def search(self, index, body):
        self.sent.append((index, body))
        if self.error:
            raise self.error
        return self.response


def test_backend_sends_only_validated_search_requests():
    hit = {"_score": 2.0, "_source": {"doc_id": "f014", "title": "港町大漁祭り", "text": "港町地区で毎年十月", "position": 0,
                                      "offset": 0}}
    client = FakeClient({"timed_out": False, "hits": {"hits": [hit]}})
    b = OpenSearchBackend("fixture", client)
    assert b.fields.keyword == ("category",)
    res = b.search("港町", 3)
    assert res.hits[0].doc_id == "f014" and "【港町】" in res.hits[0].snippet
    assert client.sent[0][0] == "fixture"
    with pytest.raises(QueryError, match="query.script"):
        b.search({"script": {"source": "x"}})
    assert len(client.sent) == 1  # the invalid query never reached the cluster
    client.response = {"timed_out": True, "hits": {"hits": []}}
    with pytest.raises(QueryError, match="timeout"):
        b.search("港町")


def test_cluster_rejection_becomes_query_error():
    from opensearchpy.exceptions import RequestError

    b = OpenSearchBackend("fixture", FakeClient(error=RequestError(400, "search_phase_execution_exception", {})))
    with pytest.raises(QueryError, match="rejected by OpenSearch"):
        b.search("港町")


live = pytest.mark.skipif(not os.environ.get("OPENSEARCH_URL"), reason="OPENSEARCH_URL is not set (no cluster)")


@pytest.mark.opensearch
@live
def test_live_cluster_contract():
    from tansaku.envs.environments import SearchEnvironment
    from tansaku.envs.search.opensearch_backend import client_from_env
    from tansaku.envs.tools import ToolError

    client = client_from_env()
    name = f"tansaku-test-{uuid.uuid4().hex[:8]}"
    try:
        meta = build_opensearch(fixture.fixture_rows(), name, ["category"], client=client)
        assert meta["chunks"] == 36 and not meta["errors"]
        b = OpenSearchBackend(name, client)
        hits = b.search({"bool": {"must": [{"match_phrase": {"text": "白砂市"}}],
                                  "filter": [{"term": {"category": "人物"}}]}}, 10).hits
        assert {h.doc_id for h in hits} == {"f002", "f020", "f025", "f036"}
        assert b.get("f001")["title"] == "雪村製菓"
        with pytest.raises(ToolError):
            SearchEnvironment(b).search('{"regexp": {"text": "."}}')
    finally:
        client.indices.delete(index=name, ignore=[404])


class FakeIndices:
    """An in-memory cluster's ``indices`` API: what exists, with which mapping; records deletions."""

    def __init__(self, existing: dict):
        self.existing, self.deleted, self.created = existing, [], []

    def exists(self, index):
        return index in self.existing

    def get_mapping(self, index):
        return {index: {"mappings": self.existing[index]}}

    def delete(self, index):
        self.deleted.append(index)
        del self.existing[index]

    def create(self, index, body):
        self.created.append(index)
        self.existing[index] = body["mappings"]
        self.settings = body["settings"]

    def refresh(self, index):
        pass

    def put_settings(self, index, body):
        self.existing[index].setdefault("_settings", []).append(body)


class FakeCluster:
    def __init__(self, existing: dict):
        self.indices = FakeIndices(existing)


def test_rebuild_replaces_only_an_index_tansaku_built(monkeypatch):
    from opensearchpy import helpers

    monkeypatch.setattr(helpers, "streaming_bulk", lambda client, actions, **kw: ((True, a) for a in actions))
    foreign = FakeCluster({"logs": {"properties": {"msg": {"type": "text"}}}})
    with pytest.raises(InputError, match="tansaku did not build it"):
        build_opensearch(fixture.fixture_rows(), "logs", client=foreign, analyzer="kuromoji", overwrite=True)
    assert foreign.indices.deleted == [] and "logs" in foreign.indices.existing
    with pytest.raises(InputError, match="pass overwrite=True"):
        build_opensearch(fixture.fixture_rows(), "logs", client=foreign, analyzer="kuromoji", overwrite=False)
    ours = FakeCluster({})
    first = build_opensearch(fixture.fixture_rows(), "wiki", client=ours, analyzer="kuromoji")
    assert first["chunks"] > 0 and ours.indices.existing["wiki"]["_meta"] == {"tansaku": {"analyzer": "kuromoji"}}
    build_opensearch(fixture.fixture_rows(), "wiki", client=ours, analyzer="kuromoji", overwrite=True)
    assert ours.indices.deleted == ["wiki"] and ours.indices.created == ["wiki", "wiki"]


class BusyCluster(FakeCluster):
    """A cluster whose write queue is full at first: the first bulk request of each passage is answered 429
    (rejected, retry later) for every other passage; one passage is refused for good (400)."""

    def __init__(self):
        super().__init__({})
        from opensearchpy.serializer import JSONSerializer

        self.transport = type("Transport", (), {"serializer": JSONSerializer()})()
        self.seen, self.requests, self.stored = set(), 0, {}

    def bulk(self, body, **kw):
        self.requests += 1
        lines = [json.loads(line) for line in body.strip().split("\n")]
        items = []
        for action, doc in zip(lines[::2], lines[1::2]):
            _id = action["index"]["_id"]
            busy = _id not in self.seen and len(self.seen) % 2 == 0
            self.seen.add(_id)
            status = 400 if doc["position"] == 0 and doc["doc_id"] == "doc-bad" else 429 if busy else 201
            if status == 201:
                self.stored[_id] = doc
            items.append({"index": {"_id": _id, "status": status, **({"error": "x"} if status >= 400 else {})}})
        return {"errors": any(i["index"]["status"] >= 400 for i in items), "items": items}


def test_bulk_load_retries_rejected_batches_and_counts_what_still_fails(monkeypatch):
    """The real ``streaming_bulk`` against a busy cluster: 429s are sent again after a backoff (slept here
    for nothing), a refused passage is counted with its error, refreshes are off while loading and back after."""
    from opensearchpy.helpers import actions

    slept = []
    monkeypatch.setattr(actions.time, "sleep", slept.append)
    rows = [*fixture.fixture_rows(), {"id": "doc-bad", "title": "壊れた", "text": "本文。" * 10}]
    cluster = BusyCluster()
    meta = build_opensearch(rows, "wiki", client=cluster, analyzer="kuromoji")
    expected = {a["_id"] for a in bulk_actions(rows, "wiki")}
    assert meta["failed"] == 1 and len(meta["errors"]) == 1 and meta["errors"][0]["index"]["status"] == 400
    assert set(cluster.stored) == expected - {"doc-bad#0"} and meta["chunks"] == len(expected) - 1
    assert slept and cluster.requests > 1  # the rejected half was sent again, after a backoff
    assert cluster.indices.settings["refresh_interval"] == "-1"  # created without refreshes …
    assert cluster.indices.existing["wiki"]["_settings"] == [{"index": {"refresh_interval": None}}]  # … reset after

"""The search ``Backend`` protocol and ``backend_for``: both engines implement the protocol (members and their
parameters), every index spec kind opens the right engine, and a bad spec is one ``InputError`` line raised
before any connection or folder is made. No OpenSearch server: its client is a fake.

    pytest tests/test_search_backend_protocol.py -q
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from tansaku.core.errors import InputError, MissingInputError
from tansaku.envs.search import (
    Backend,
    QueryError,
    backend_for,
    build_index,
    open_index,
    opensearch_backend,
    require_index,
    search_cli,
)
from tansaku.envs.search.embedded import EmbeddedBackend
from tansaku.envs.search.opensearch_backend import OpenSearchBackend, parse_spec

FIX = Path(__file__).parent / "fixtures" / "search"
_spec = importlib.util.spec_from_file_location("search_fixture_protocol", FIX / "dataset.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)

PROTOCOL_MEMBERS = ("open", "build", "exists", "require", "search", "get", "close", "describe")
BAD_SPECS = [
    "https://host:9200",             # no index in the URL path
    "https://host:9200/a/b",         # a path, not one index
    "https:///wiki",                 # no host
    "opensearch:",                   # no name
    "opensearch:_all",               # every index of the cluster
    "opensearch:logs-*",             # a wildcard: many indices
    "opensearch:a,b",                # a list of indices
    "opensearch:remote:wiki",        # another cluster's index (cross-cluster syntax)
    "opensearch:my index\nsecond",   # whitespace; the message still fits on one line
]


class FakeClient:
    """Answers the mapping an ``OpenSearchBackend`` reads when opened; records ``close``."""

    def __init__(self):
        self.indices, self.closed = self, False

    def get_mapping(self, index):
        return {index: {"mappings": {"properties": {"doc_id": {"type": "keyword"}, "category": {"type": "keyword"}}}}}

    def close(self):
        self.closed = True


@pytest.fixture
def fake_cluster(monkeypatch):
    """``client_from_env`` replaced: every client made is a ``FakeClient``; the URLs asked for are recorded."""
    made: list[tuple[str | None, FakeClient]] = []

    def client_from_env(url=None):
        made.append((url, FakeClient()))
        return made[-1][1]

    monkeypatch.setattr(opensearch_backend, "client_from_env", client_from_env)
    return made


def test_both_engines_implement_the_protocol(envs_index):
    embedded = open_index(envs_index)
    try:
        opensearch = OpenSearchBackend("wiki", FakeClient())
        assert isinstance(embedded, Backend) and isinstance(opensearch, Backend)
        assert issubclass(EmbeddedBackend, Backend) and issubclass(OpenSearchBackend, Backend)
        cls: type[Backend] = EmbeddedBackend  # the typed form of the same promise
        assert cls.exists(envs_index)
    finally:
        embedded.close()


def test_engines_accept_every_protocol_parameter():
    """runtime_checkable checks names only: each member's parameters must be there too, by name and in order."""
    for engine in (EmbeddedBackend, OpenSearchBackend):
        for name in PROTOCOL_MEMBERS:
            wanted = list(inspect.signature(getattr(Backend, name)).parameters)
            got = list(inspect.signature(getattr(engine, name)).parameters)
            assert got[:len(wanted)] == wanted, (engine.__name__, name, got)


def test_a_class_missing_a_member_is_not_a_backend():
    class NoClose:
        def open(self): ...
        def build(self): ...
        def exists(self): ...
        def require(self): ...
        def search(self): ...
        def get(self): ...
        def describe(self): ...

    assert not isinstance(NoClose(), Backend)


@pytest.mark.parametrize("spec, backend, engine", [
    ("out/index", None, EmbeddedBackend),
    (Path("out/index"), None, EmbeddedBackend),
    ("out/index", "embedded", EmbeddedBackend),
    ("opensearch:wiki", None, OpenSearchBackend),
    ("https://host:9200/wiki", None, OpenSearchBackend),
    ("http://localhost:9200/wiki", None, OpenSearchBackend),
    ("opensearch:wiki", "opensearch", OpenSearchBackend),
    ("wiki", "opensearch", OpenSearchBackend),  # --backend opensearch: a bare name is an index name
])
def test_each_spec_kind_maps_to_its_engine(spec, backend, engine):
    assert backend_for(spec, backend) is engine


@pytest.mark.parametrize("spec, url, name", [
    ("opensearch:wiki", None, "wiki"),
    ("https://host:9200/wiki", "https://host:9200", "wiki"),
    ("http://localhost:9200/wiki/", "http://localhost:9200", "wiki"),
    ("wiki-2024.v1", None, "wiki-2024.v1"),
])
def test_opensearch_specs_name_a_cluster_and_one_index(spec, url, name):
    assert parse_spec(spec) == (url, name)


@pytest.mark.parametrize("spec", BAD_SPECS)
def test_a_bad_spec_is_one_input_error_line_before_any_connection(spec, fake_cluster):
    for call in (lambda: open_index(spec), lambda: require_index(spec), lambda: search_cli(spec, "港"),
                 lambda: backend_for(spec).exists(spec)):
        with pytest.raises(InputError) as info:
            call()
        message = str(info.value)
        assert "\n" not in message and ("OpenSearch index" in message or "URL path" in message), message
    assert fake_cluster == []


def test_a_wrong_or_unknown_backend_name_is_one_input_error_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ds = fixture.write_dataset(tmp_path / "ds")
    with pytest.raises(InputError, match="pass --backend opensearch"):
        build_index(ds, "opensearch:wiki")  # --backend embedded (the default) with an OpenSearch spec
    with pytest.raises(InputError, match="unknown backend 'elastic'; use embedded or opensearch"):
        build_index(ds, tmp_path / "ix", backend="elastic")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no folder made for either


def test_open_index_opens_the_cluster_and_index_the_spec_names(fake_cluster):
    backend = open_index("https://host:9200/wiki")
    assert isinstance(backend, OpenSearchBackend) and backend.index == "wiki"
    assert backend.fields.keyword == ("category",)
    (url, client), = fake_cluster
    assert url == "https://host:9200" and backend.client is client
    backend.close()  # the client it made is closed; one given to it stays the caller's
    assert client.closed
    given = FakeClient()
    OpenSearchBackend("wiki", given).close()
    assert not given.closed
    assert open_index("opensearch:wiki").index == "wiki" and fake_cluster[-1][0] is None  # $OPENSEARCH_URL


def test_build_index_routes_to_the_engine_with_the_parsed_name(tmp_path, monkeypatch, fake_cluster):
    ds = fixture.write_dataset(tmp_path / "ds")
    calls = []
    monkeypatch.setattr(opensearch_backend, "build_opensearch",
                        lambda rows, name, keyword_fields, analyzer, chunk_chars, client, overwrite:
                        calls.append((len(list(rows)), name, keyword_fields, analyzer, overwrite)) or {"chunks": 1})
    assert build_index(ds, "https://host:9200/wiki", backend="opensearch") == {"chunks": 1}
    assert build_index(ds, "wiki", backend="opensearch", analyzer="kuromoji", overwrite=False) == {"chunks": 1}
    assert calls == [(36, "wiki", ["category"], "auto", True), (36, "wiki", ["category"], "kuromoji", False)]
    assert [url for url, _ in fake_cluster] == ["https://host:9200", None]
    meta = build_index(ds, tmp_path / "ix")  # embedded: a folder
    assert meta["backend"] == "embedded" and meta["documents"] == 36 and EmbeddedBackend.exists(tmp_path / "ix")


def test_require_index_checks_folders_now_and_clusters_when_opened(tmp_path, monkeypatch, envs_index):
    with pytest.raises(MissingInputError, match=r"index .*missing does not exist; build it first"):
        require_index(tmp_path / "missing", "build it first")
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "tansaku_index.json").write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="damaged search index"):
        require_index(tmp_path / "damaged")
    assert require_index(envs_index) is None
    monkeypatch.delenv("OPENSEARCH_URL", raising=False)  # a connection attempt would fail: none is made
    assert require_index("opensearch:wiki") is None
    with pytest.raises(QueryError, match="does not exist"):
        search_cli(str(tmp_path / "missing"), "港")

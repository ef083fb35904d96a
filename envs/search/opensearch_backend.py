"""The OpenSearch backend: a thin layer over ``opensearch-py`` with the same fields, ids and DSL as embedded.

Configuration (environment): ``OPENSEARCH_URL`` (e.g. https://localhost:9200), ``OPENSEARCH_USER`` /
``OPENSEARCH_PASSWORD`` (basic auth), ``OPENSEARCH_VERIFY_CERTS`` (default 1; 0 for self-signed test
clusters), ``OPENSEARCH_CA_CERTS`` (a CA bundle path).

The request bodies are pure functions (``index_body``, ``bulk_actions``, ``search_body``) so they are
tested without a server; the client is only asked to create the index, bulk-load and ``search``. A
model's query passes ``dsl.parse_request`` first and only ever reaches the ``_search`` endpoint of
the one index this backend was opened on: never an admin API.

Japanese analysis: ``kuromoji`` (analysis-kuromoji plugin, bundled with most distributions) or
``sudachi`` (analysis-sudachi plugin, mode C); ``auto`` picks sudachi when the cluster has it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tansaku.core.errors import InputError
from tansaku.core.index_target import index_name_problem, parse_service

from .base import Hit, SearchResult, highlight_texts, make_snippet
from .documents import iter_chunks, iter_documents, keyword_fields_of
from .dsl import Fields, QueryError, parse_request
from .dsl_limits import Limits

TANSAKU_META = "tansaku"  # key under the mapping's _meta that marks an index tansaku built

JA_ANALYSIS = {
    "kuromoji": {"analyzer": {"ja": {
        "type": "custom", "tokenizer": "kuromoji_tokenizer",
        "filter": ["kuromoji_baseform", "kuromoji_part_of_speech", "cjk_width", "ja_stop", "lowercase"]}}},
    "sudachi": {
        "tokenizer": {"sudachi_c": {"type": "sudachi_tokenizer", "split_mode": "C",
                                    "discard_punctuation": True}},
        "analyzer": {"ja": {"type": "custom", "tokenizer": "sudachi_c",
                            "filter": ["sudachi_normalizedform", "lowercase"]}}},
}


def parse_spec(spec: str | Path) -> tuple[str | None, str]:
    """(cluster URL, or None for $OPENSEARCH_URL; index name) of ``opensearch:NAME``,
    ``http(s)://host:port/NAME`` (``tansaku.core.index_target``'s grammar, the one every ``--index`` option is
    checked by) or a bare ``NAME`` (``--backend opensearch``). InputError, one line, for a spec that names no
    one index."""
    spec = str(spec)
    service = parse_service(spec)
    if service is not None:
        return service
    if problem := index_name_problem(spec):
        raise InputError(f"{spec!r} {problem}")
    return None, spec


def client_from_env(url: str | None = None):
    """An ``OpenSearch`` client from the environment; raises with a clear message when unset."""
    from opensearchpy import OpenSearch  # opensearch-py: only for the opensearch backend

    url = url or os.environ.get("OPENSEARCH_URL")
    if not url:
        raise InputError("OPENSEARCH_URL is not set; set it (and OPENSEARCH_USER/PASSWORD) or use --backend "
                         "embedded")
    auth = None
    if os.environ.get("OPENSEARCH_USER"):
        auth = (os.environ["OPENSEARCH_USER"], os.environ.get("OPENSEARCH_PASSWORD", ""))
    verify = os.environ.get("OPENSEARCH_VERIFY_CERTS", "1").lower() not in ("0", "false", "no")
    kwargs = {"hosts": [url], "http_auth": auth, "verify_certs": verify, "ssl_show_warn": verify,
              "timeout": 30, "max_retries": 2, "retry_on_timeout": True}
    if os.environ.get("OPENSEARCH_CA_CERTS"):
        kwargs["ca_certs"] = os.environ["OPENSEARCH_CA_CERTS"]
    return OpenSearch(**kwargs)


def index_body(keyword_fields: Iterable[str] = (), analyzer: str = "kuromoji", shards: int = 1) -> dict:
    """Settings and mappings for a passage index (the same fields as the embedded index)."""
    if analyzer not in JA_ANALYSIS:
        raise InputError(f"unknown OpenSearch analyzer {analyzer!r}; use kuromoji or sudachi")
    props = {
        "chunk_id": {"type": "keyword"}, "doc_id": {"type": "keyword"}, "source": {"type": "keyword"},
        "url": {"type": "keyword", "index": False},
        "title": {"type": "text", "analyzer": "ja",
                  "fields": {"keyword": {"type": "keyword", "ignore_above": 1024}}},
        "text": {"type": "text", "analyzer": "ja"},
        "position": {"type": "integer"}, "offset": {"type": "integer"}, "n_chunks": {"type": "integer"},
        "meta": {"type": "text", "index": False},
    }
    for f in keyword_fields:
        props.setdefault(f, {"type": "keyword"})
    # _meta marks the index as tansaku's: a rebuild replaces only an index that carries it.
    return {"settings": {"number_of_shards": shards, "analysis": JA_ANALYSIS[analyzer]},
            "mappings": {"dynamic": "strict", "_meta": {TANSAKU_META: {"analyzer": analyzer}},
                         "properties": props}}


def made_by_tansaku(client, index: str) -> bool:
    """Whether the existing ``index`` carries tansaku's ``_meta`` mark (so a rebuild may replace it)."""
    mappings = client.indices.get_mapping(index=index)
    return any(TANSAKU_META in ((entry.get("mappings") or {}).get("_meta") or {})
               for entry in mappings.values())


def bulk_actions(rows: Iterable[dict], index: str, keyword_fields: Iterable[str] = (),
                 chunk_chars: int = 800) -> Iterator[dict]:
    """Index actions, one per passage, with ``_id`` = the passage id (``doc_id#position``)."""
    for ch in iter_chunks(rows, chunk_chars, keyword_fields):
        src = {k: ch[k] for k in ("chunk_id", "doc_id", "title", "text", "source", "url",
                                  "position", "offset", "n_chunks", "meta")}
        for f, values in ch["keywords"].items():
            src[f] = values if len(values) != 1 else values[0]
        yield {"_op_type": "index", "_index": index, "_id": ch["chunk_id"], "_source": src}


def _strip_none(x):
    if isinstance(x, dict):
        return {k: _strip_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_strip_none(v) for v in x]
    return x


def search_body(canonical: dict, size: int, timeout_ms: int, collapse: bool = True) -> dict:
    """The ``_search`` body for a validated query (``dsl.parse_request`` output)."""
    body = {"query": _strip_none(canonical), "size": size, "timeout": f"{timeout_ms}ms",
            "_source": ["doc_id", "title", "text", "position", "offset"], "track_total_hits": False}
    if collapse:
        body["collapse"] = {"field": "doc_id"}
    return body


# streaming_bulk, not parallel_bulk: only streaming_bulk retries a rejected (429) batch with backoff; the
# cluster's own shards and ingest threads give the parallelism. 500 passages (~0.5 MB) per request.
BULK = {"chunk_size": 500, "max_chunk_bytes": 10 * 2**20, "max_retries": 6, "initial_backoff": 2,
        "max_backoff": 60, "raise_on_error": False, "raise_on_exception": True}


def build_opensearch(rows: Iterable[dict], index: str, keyword_fields: Iterable[str] = (),
                     analyzer: str = "auto", chunk_chars: int = 800, client=None,
                     overwrite: bool = False) -> dict:
    """Create ``index`` with Japanese analysis and stream the passages in with ``streaming_bulk``."""
    from opensearchpy import helpers  # opensearch-py: only for the opensearch backend

    client = client or client_from_env()
    keyword_fields = [f for f in keyword_fields if f not in ("doc_id", "source")]
    if analyzer == "auto":
        plugins = {p.get("component") for p in client.cat.plugins(format="json")}
        analyzer = "sudachi" if "analysis-sudachi" in plugins else "kuromoji"
    if client.indices.exists(index=index):
        if not overwrite:
            raise InputError(f"OpenSearch index {index!r} exists; pass overwrite=True to replace it")
        if not made_by_tansaku(client, index):  # someone else's index (or an alias to it): never delete it
            raise InputError(f"OpenSearch index {index!r} exists and tansaku did not build it (no _meta."
                             f"{TANSAKU_META} in its mapping); choose another --index name")
        client.indices.delete(index=index)
    body = index_body(keyword_fields, analyzer)
    # No refreshes while loading (OpenSearch's bulk-indexing advice): the segments are built once, at the end.
    body["settings"]["refresh_interval"] = "-1"
    client.indices.create(index=index, body=body)
    t0, ok, failed, errors = time.perf_counter(), 0, 0, []
    actions = bulk_actions(rows, index, keyword_fields, chunk_chars)  # a generator: the corpus is never held
    # Backpressure: a cluster that answers 429 (its write queue full) gets the same batch again after 2, 4, …
    # up to 60 s; a passage that still fails is counted and its first errors kept, the load goes on.
    for success, info in helpers.streaming_bulk(client, actions, **BULK):
        if success:
            ok += 1
        else:
            failed += 1
            if len(errors) < 20:
                errors.append(info)
    # back to the default
    client.indices.put_settings(index=index, body={"index": {"refresh_interval": None}})
    client.indices.refresh(index=index)
    return {"backend": "opensearch", "index": index, "analyzer": analyzer, "chunks": ok, "failed": failed,
            "errors": errors, "keyword_fields": keyword_fields,
            "build_seconds": round(time.perf_counter() - t0, 3)}


class OpenSearchBackend:
    """Searches one OpenSearch index with validated queries; a ``backend.Backend`` whose spec is
    ``parse_spec``'s."""

    def __init__(self, index: str, client=None, limits: Limits = Limits(),
                 keyword_fields: Iterable[str] | None = None, url: str | None = None):
        """``client``: a given one stays the caller's; without one, one from the environment (``url`` or
        $OPENSEARCH_URL) is made here, and ``close`` closes it."""
        self.index, self.limits = index, limits
        self._owns_client = client is None
        self.client = client or client_from_env(url)
        if keyword_fields is None:  # read them back from the mapping
            mapping = self.client.indices.get_mapping(index=index)[index]["mappings"]["properties"]
            keyword_fields = [k for k, v in mapping.items() if v.get("type") == "keyword"
                              and k not in ("chunk_id", "doc_id", "source", "url")]
        self.fields = Fields(keyword=tuple(keyword_fields))

    @classmethod
    def open(cls, spec: str | Path, limits: Limits = Limits()) -> OpenSearchBackend:
        url, name = parse_spec(spec)
        return cls(name, limits=limits, url=url)

    @classmethod
    def build(cls, dataset_dir: str | Path, spec: str | Path, analyzer: str | None = None,
              chunk_chars: int = 800, overwrite: bool = True) -> dict:
        """``build_opensearch`` from a dataset folder; analyzer ``auto`` (default), ``kuromoji`` or
        ``sudachi``."""
        url, name = parse_spec(spec)
        keyword_fields = keyword_fields_of(dataset_dir)
        return build_opensearch(iter_documents(dataset_dir), name, keyword_fields, analyzer or "auto",
                                chunk_chars, client=client_from_env(url), overwrite=overwrite)

    @classmethod
    def exists(cls, spec: str | Path) -> bool:
        """True for a well-formed spec: only the cluster knows, and it is asked when the index is opened."""
        parse_spec(spec)
        return True

    @classmethod
    def require(cls, spec: str | Path, hint: str) -> None:
        parse_spec(spec)  # a malformed spec fails now; a missing index when opened (no connection here)

    def close(self) -> None:
        """Close the client's connections when this backend made the client (a given one stays open)."""
        if self._owns_client:
            self.client.close()

    def search(self, query: str | dict, size: int | None = 10, collapse: bool = True,
               snippet_chars: int = 200, default_size: int = 10, max_size: int | None = None) -> SearchResult:
        # opensearch-py: only for the opensearch backend
        from opensearchpy.exceptions import RequestError, TransportError

        t0 = time.perf_counter()
        canonical, size = parse_request(query, size, self.fields, self.limits, default_size, max_size)
        try:
            res = self.client.search(index=self.index,
                                     body=search_body(canonical, size, self.limits.timeout_ms, collapse))
        except RequestError as e:  # the cluster rejected the query: the model can act on its reason
            raise QueryError(f"query: rejected by OpenSearch ({e.error})") from None
        except TransportError as e:
            raise QueryError(f"query: search failed ({e.status_code}); try again or simplify it") from None
        if res.get("timed_out"):
            raise QueryError(f"query: took longer than the {self.limits.timeout_ms} ms timeout; simplify it")
        highlight = highlight_texts(canonical)
        hits = [Hit(doc_id=h["_source"]["doc_id"], title=h["_source"].get("title", ""),
                    score=float(h["_score"] or 0),
                    snippet=make_snippet(h["_source"].get("text", ""), highlight, snippet_chars),
                    chunk=int(h["_source"].get("position", 0)), offset=int(h["_source"].get("offset", 0)))
                for h in res["hits"]["hits"]]
        return SearchResult(hits=hits, took_ms=(time.perf_counter() - t0) * 1000)

    def get(self, doc_id: str) -> dict | None:
        body = {"query": {"term": {"doc_id": str(doc_id)}}, "size": 10_000, "sort": [{"position": "asc"}]}
        parts = [h["_source"] for h in self.client.search(index=self.index, body=body)["hits"]["hits"]]
        if not parts:
            return None
        first = parts[0]
        out = {k: first.get(k) for k in ("title", "url", "source", "meta")}
        out.update(doc_id=str(doc_id), text="".join(p.get("text", "") for p in parts))
        for f in self.fields.keyword:
            v = first.get(f)
            out[f] = v if isinstance(v, list) else ([] if v is None else [v])
        return out

    def describe(self) -> dict:
        return {"backend": "opensearch", "index": self.index, "keyword_fields": list(self.fields.keyword)}

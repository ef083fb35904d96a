"""The embedded search backend: a tantivy index on disk, built once, opened read-only by many searchers.

    build_embedded(rows, "out/index", keyword_fields=["category"], analyzer="char")
    backend = EmbeddedBackend("out/index")
    backend.search({"bool": {"must": [{"match_phrase": {"text": "鎌倉幕府"}}]}}, size=5)

One index document per passage (see documents.py), written by embedded_index.py. Field names in the DSL map to
tantivy fields: ``title``/``text`` analyzed, ``title.keyword``, ``doc_id``, ``source`` and the dataset's
keyword columns (``kw_<name>``) exact. With the ``char`` analyzer ``title``/``text`` are indexed twice (see
analysis.py): characters with positions for ``match_phrase``, and bigrams (``title_bi``/``text_bi``,
no positions) for ``match``/``multi_match``. ``tansaku_index.json`` next to the tantivy files records
the layout ``format``, the analyzer and the keyword fields, so ``open`` can refuse an index of an
older layout, register the right tokenizers (tantivy forgets custom tokenizers on every
``Index.open``) and validate queries against the right fields.

One ``Searcher`` is shared by all threads (tantivy searchers are immutable snapshots and thread-safe). A
query that reads few postings (cost.py) runs in the caller's thread; any other in a worker process that is
killed at the query's timeout (workers.py), so a timed-out query stops using CPU.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path

import tantivy

from tansaku.core import ownership
from tansaku.core.analysis import get_analyzer
from tansaku.core.errors import MissingInputError

from .base import Hit, SearchResult, highlight_texts, make_snippet
from .cost import INLINE_POSTINGS_PER_MS, QueryCost
from .documents import iter_documents, keyword_fields_of
from .dsl import Fields, QueryError, parse_request, resolve_msm
from .dsl_limits import Limits
from .embedded_index import FORMAT, build_embedded
from .index_meta import damaged, read_index_meta
from .workers import QueryWorkers, index_identity

GET_CACHE = 512  # documents EmbeddedBackend.get keeps
__all__ = ["EmbeddedBackend", "build_embedded"]


def _tantivy_field(name: str) -> str:
    if name == "title.keyword":
        return "title_keyword"
    if name in ("doc_id", "source", "title", "text"):
        return name
    return f"kw_{name}"


class EmbeddedBackend:
    """Read-only searcher over an index built by ``build_embedded``; a ``backend.Backend`` whose spec is a
    folder."""

    @classmethod
    def open(cls, spec: str | Path, limits: Limits = Limits()) -> EmbeddedBackend:
        return cls(spec, limits)

    @classmethod
    def build(cls, dataset_dir: str | Path, spec: str | Path, analyzer: str | None = None,
              chunk_chars: int = 800, overwrite: bool = True) -> dict:
        """``build_embedded`` from a dataset folder; analyzer ``char`` (default) or ``sudachi``. ``overwrite``
        is
        moot: only an earlier tansaku index is ever replaced (``ownership``)."""
        # Checked before the dataset is read: an index inside its dataset would change the dataset (its hash)
        # it indexes, and a dataset given as --index is said to be one.
        ownership.refuse_other_kind(ownership.require_named(spec, "--index"), "--index", "index")
        ownership.refuse_overlap(spec, {"--dataset": dataset_dir}, "--index")
        return build_embedded(iter_documents(dataset_dir), spec, keyword_fields_of(dataset_dir),
                              analyzer or "char", chunk_chars, source_name=str(dataset_dir))

    @classmethod
    def exists(cls, spec: str | Path) -> bool:
        return Path(spec).is_dir()

    @classmethod
    def require(cls, spec: str | Path, hint: str) -> None:
        """MissingInputError for a missing folder; opened once, so a damaged index is refused
        (``index_meta``)."""
        if not cls.exists(spec):
            raise MissingInputError(f"index {spec} does not exist; {hint}")
        cls(spec).close()

    def __init__(self, index_dir: str | Path, limits: Limits = Limits(), workers: int | None = None):
        """``workers``: most worker processes for expensive queries (default: one per core but one, at most
        8)."""
        self.index_dir = Path(index_dir)
        self.meta = read_index_meta(self.index_dir, FORMAT)
        self.analyzer = get_analyzer(self.meta["analyzer"])
        try:  # tantivy's meta.json or a segment file missing, truncated or corrupt: ValueError (or OSError)
            self.index = tantivy.Index.open(str(self.index_dir))
            self.analyzer.register(self.index)  # tantivy forgets custom tokenizers on open
            self.schema = self.index.schema
            self.searcher = self.index.searcher()
        except (ValueError, OSError) as exc:
            raise damaged(index_dir, str(exc)) from None
        self.fields = Fields(keyword=tuple(self.meta["keyword_fields"]))
        self.limits = limits
        # get's cache: a dict on the instance, not lru_cache(self._get) — that bound method held in an
        # attribute would be a reference cycle, so the backend (and the finalizer that stops its workers)
        # would last until a cyclic GC instead of ending with its last reference.
        self._docs: OrderedDict[str, dict | None] = OrderedDict()
        self._docs_lock = threading.Lock()
        # Worker processes for the queries that may run long (workers.py), started on the first one; the
        # identity lets a worker refuse an index rebuilt in place since this one was opened.
        self._identity = index_identity(self.index_dir)
        self._workers: QueryWorkers | None = None
        self._workers_lock, self._max_workers = threading.Lock(), workers

    # ---- query translation -------------------------------------------------------------------
    def _boosted(self, q, boost: float):
        return q if boost == 1.0 else tantivy.Query.boost_query(q, boost)

    def _term(self, field: str, token: str):
        return tantivy.Query.term_query(self.schema, field, token)

    def _match_terms(self, field: str, text: str, boost: float = 1.0) -> list:
        """One term query per match term (analysis.py): bigram field for bigrams, else the char field."""
        return [self._boosted(self._term(f"{field}_bi" if bigram else field, t), boost)
                for t, bigram in self.analyzer.match_terms(text)]

    def _match(self, field: str, text: str, operator: str, msm) -> object:
        """OR / AND / minimum_should_match over the match terms."""

        Q, Occur = tantivy.Query, tantivy.Occur
        terms = self._match_terms(field, text)
        if not terms:
            return Q.empty_query()
        if operator == "and":
            k = len(terms)
        else:
            k = max(1, resolve_msm(msm, len(terms))) if msm is not None else 1
        if k > len(terms):
            return Q.empty_query()
        if len(terms) == 1:
            return terms[0]
        occur = Occur.Must if k == len(terms) else Occur.Should
        return Q.boolean_query([(occur, t) for t in terms], k if occur == Occur.Should and k > 1 else None)

    def _phrase(self, field: str, text: str, slop: int):
        Q, Occur = tantivy.Query, tantivy.Occur
        tokens = self.analyzer.tokens(text)
        if not tokens:
            return Q.empty_query()
        if len(tokens) == 1:
            return self._term(field, tokens[0])
        if slop or not self.analyzer.has_bigrams:
            return Q.phrase_query(self.schema, field, tokens, slop)
        if len(tokens) == 2:  # the bigram field holds exactly the adjacent pairs: same hits, no positions
            return self._term(f"{field}_bi", tokens[0] + tokens[1])
        phrase = Q.phrase_query(self.schema, field, tokens, slop)
        # An exact phrase contains each of its adjacent pairs, and the bigram field indexes exactly those
        # pairs (whitespace ignored, as for char positions): requiring them (score 0) lets tantivy lead the
        # intersection with the rarest bigram instead of walking the posting lists of の, は, る … .
        pairs = dict.fromkeys(a + b for a, b in zip(tokens, tokens[1:]))
        return Q.boolean_query([(Occur.Must, phrase)] + [
            (Occur.Must, Q.const_score_query(self._term(f"{field}_bi", p), 0.0)) for p in pairs])

    def translate(self, q: dict):
        """Canonical DSL clause (from ``dsl.parse_request``) → tantivy Query."""

        Q, Occur = tantivy.Query, tantivy.Occur
        (kind, body), = q.items()
        if kind == "match":
            (f, s), = body.items()
            return self._boosted(self._match(f, s["query"], s["operator"], s["minimum_should_match"]),
                                 s["boost"])
        if kind == "match_phrase":
            (f, s), = body.items()
            return self._boosted(self._phrase(f, s["query"], s["slop"]), s["boost"])
        if kind == "multi_match":
            if (body["type"] == "most_fields" and body["operator"] == "or"
                    and body["minimum_should_match"] is None):
                # One flat OR of every field's terms scores the same as OR-of-ORs (BM25 sums) and, unlike
                # nested booleans, lets tantivy prune with block-max WAND.
                terms = [t for spec in body["fields"] for t in self._match_terms(
                    spec.partition("^")[0], body["query"], float(spec.partition("^")[2] or 1))]
                flat = (Q.empty_query() if not terms else terms[0] if len(terms) == 1
                        else Q.boolean_query([(Occur.Should, t) for t in terms]))
                return self._boosted(flat, body["boost"])
            subs = []
            for spec in body["fields"]:
                name, _, b = spec.partition("^")
                sub = (self._phrase(name, body["query"], 0) if body["type"] == "phrase"
                       else self._match(name, body["query"], body["operator"], body["minimum_should_match"]))
                subs.append(self._boosted(sub, float(b or 1)))
            if body["type"] == "most_fields":
                combined = subs[0] if len(subs) == 1 else Q.boolean_query([(Occur.Should, s) for s in subs])
            else:
                combined = Q.disjunction_max_query(subs, body["tie_breaker"])
            return self._boosted(combined, body["boost"])
        if kind == "term":
            (f, s), = body.items()
            return self._boosted(self._term(_tantivy_field(f), s["value"]), s["boost"])
        if kind == "terms":
            (f, values), = ((k, v) for k, v in body.items() if k != "boost")
            return Q.const_score_query(Q.term_set_query(self.schema, _tantivy_field(f), values),
                                       body["boost"])
        if kind == "match_all":
            return Q.const_score_query(Q.all_query(), body["boost"])
        # bool
        subs = [(Occur.Must, self.translate(c)) for c in body["must"]]
        subs += [(Occur.Must, Q.const_score_query(self.translate(c), 0.0)) for c in body["filter"]]
        subs += [(Occur.MustNot, self.translate(c)) for c in body["must_not"]]
        should = [(Occur.Should, self.translate(c)) for c in body["should"]]
        has_must = any(o == Occur.Must for o, _ in subs)
        if body["minimum_should_match"] is None:  # OpenSearch default: 1 without must/filter, else 0
            k = 0 if has_must else (1 if should else 0)
        else:
            k = resolve_msm(body["minimum_should_match"], len(should))
        if k > len(should):
            return Q.empty_query()
        if not has_must and not should:
            subs.append((Occur.Must, Q.const_score_query(Q.all_query(), 0.0)))  # only must_not: all others
        return self._boosted(Q.boolean_query(subs + should, k if k >= 1 else None), body["boost"])

    # ---- search ------------------------------------------------------------------------------
    def search(self, query: str | dict, size: int | None = 10, collapse: bool = True,
               snippet_chars: int = 200, default_size: int = 10, max_size: int | None = None) -> SearchResult:
        """Ranked hits; with ``collapse`` only the best passage of each document is kept."""
        t0 = time.perf_counter()
        canonical, size = parse_request(query, size, self.fields, self.limits, default_size, max_size)
        limit = min(size * 4, 400) if collapse else size

        # A query that reads few postings (cost.py) runs here: a hand-off costs more than it. Any other runs
        # in a worker process, killed at the deadline, so a timed-out query stops using CPU.
        budget = INLINE_POSTINGS_PER_MS * self.limits.timeout_ms
        if self.limits.timeout_ms <= 0 or self.postings(canonical, budget) <= budget:
            try:
                raw = self.searcher.search(self.translate(canonical), limit, count=False).hits
            except ValueError as e:  # tantivy refuses a query it cannot run
                raise QueryError(f"query: the engine refused it ({e})") from None
        else:
            raw = self.workers().search(canonical, limit, self.limits.timeout_ms)
        highlight = highlight_texts(canonical)
        hits, seen = [], set()
        for score, addr in raw:
            d = self.searcher.doc(addr)
            doc_id = d.get_first("doc_id")
            if collapse and doc_id in seen:
                continue
            seen.add(doc_id)
            hits.append(Hit(doc_id=doc_id, title=d.get_first("title") or "", score=float(score),
                            snippet=make_snippet(d.get_first("text") or "", highlight, snippet_chars),
                            chunk=int(d.get_first("position") or 0), offset=int(d.get_first("offset") or 0)))
            if len(hits) >= size:
                break
        return SearchResult(hits=hits, took_ms=(time.perf_counter() - t0) * 1000)

    def postings(self, canonical: dict, budget: int | None = None) -> int:
        """Estimated postings a canonical query reads here (cost.py; past ``budget`` it may stop counting)."""
        cost = QueryCost(self.analyzer, self.searcher.doc_freq, _tantivy_field, self.searcher.num_docs)
        return cost.postings(canonical, budget)

    def workers(self) -> QueryWorkers:
        """This index's pool of killable worker processes, made on first use; ``close`` ends it."""
        with self._workers_lock:
            if self._workers is None or self._workers.pid != os.getpid():  # none yet, or a forked copy's
                self._workers = QueryWorkers(self.index_dir, self._identity, self._max_workers)
                # No worker outlives its backend: the finalizer holds the pool, not the backend (which holds
                # no reference cycle), so it runs as soon as the backend's last reference goes.
                weakref.finalize(self, self._workers.close)
            return self._workers

    def close(self) -> None:
        """Stop the worker processes (a later expensive query starts new ones)."""
        with self._workers_lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()

    def matching_chunks(self, query: str | dict, limit: int = 10_000) -> set[str]:
        """Every matching passage id (tests compare this with a brute-force evaluation)."""
        canonical, _ = parse_request(query, 1, self.fields, self.limits)
        hits = self.searcher.search(self.translate(canonical), limit, count=False).hits
        return {self.searcher.doc(a).get_first("chunk_id") for _, a in hits}

    def get(self, doc_id: str) -> dict | None:
        """The whole document (its passages joined), or None; the last :data:`GET_CACHE` looked up are
        cached."""
        doc_id = str(doc_id)
        with self._docs_lock:
            if doc_id in self._docs:
                self._docs.move_to_end(doc_id)
                return self._docs[doc_id]
        doc = self._get(doc_id)
        with self._docs_lock:
            self._docs[doc_id] = doc
            if len(self._docs) > GET_CACHE:
                self._docs.popitem(last=False)
        return doc

    def _get(self, doc_id: str) -> dict | None:
        q = tantivy.Query.term_query(self.schema, "doc_id", str(doc_id))
        hits = self.searcher.search(q, 100_000, count=False).hits
        if not hits:
            return None
        parts = sorted((self.searcher.doc(a) for _, a in hits), key=lambda d: d.get_first("position"))
        first = parts[0]
        meta = first.get_first("meta")
        out = {"doc_id": str(doc_id), "title": first.get_first("title") or "",
               "text": "".join(p.get_first("text") or "" for p in parts),
               "url": first.get_first("url"), "source": first.get_first("source") or "",
               "meta": bytes(meta).decode("utf-8") if meta else ""}
        for f in self.meta["keyword_fields"]:
            out[f] = first.get_all(f"kw_{f}")
        return out

    def describe(self) -> dict:
        return {"backend": "embedded", "path": str(self.index_dir), **self.meta}

"""The embedded search backend: a tantivy index on disk, built once, opened read-only by many searchers.

    build_embedded(rows, "out/index", keyword_fields=["category"], analyzer="char")
    backend = EmbeddedBackend("out/index")
    backend.search({"bool": {"must": [{"match_phrase": {"text": "鎌倉幕府"}}]}}, size=5)

One index document per passage (see documents.py). Field names in the DSL map to tantivy fields:
``title``/``text`` analyzed, ``title.keyword``, ``doc_id``, ``source`` and the dataset's keyword
columns (``kw_<name>``) exact. With the ``char`` analyzer ``title``/``text`` are indexed twice (see
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
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import tantivy

from tansaku.core import jsontext, ownership
from tansaku.core.analysis import BIGRAM_TOKENIZER, get_analyzer
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.progress import progress_bar

from .base import Hit, SearchResult, highlight_texts, make_snippet
from .cost import INLINE_POSTINGS_PER_MS, QueryCost
from .documents import iter_chunks, iter_documents, keyword_fields_of
from .dsl import Fields, Limits, QueryError, parse_request, resolve_msm
from .index_meta import damaged, read_index_meta
from .workers import QueryWorkers, index_identity

META_FILE = ownership.INDEX_MARKER
GET_CACHE = 512  # documents EmbeddedBackend.get keeps
FORMAT = 2  # 2: bigram fields for match (char analyzer); 1 had characters only
_FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,40}$")


def _tantivy_field(name: str) -> str:
    if name == "title.keyword":
        return "title_keyword"
    if name in ("doc_id", "source", "title", "text"):
        return name
    return f"kw_{name}"


def _schema(analyzer_name: str, keyword_fields: list[str]):
    tok = get_analyzer(analyzer_name).tokenizer_name
    sb = tantivy.SchemaBuilder()
    for raw in ("chunk_id", "doc_id", "source", "url"):
        sb.add_text_field(raw, stored=True, tokenizer_name="raw")
    sb.add_text_field("title", stored=True, tokenizer_name=tok)
    sb.add_text_field("title_keyword", stored=False, tokenizer_name="raw")
    sb.add_text_field("text", stored=True, tokenizer_name=tok)
    if get_analyzer(analyzer_name).has_bigrams:  # match scores here; positions are not needed
        for f in ("title_bi", "text_bi"):
            sb.add_text_field(f, stored=False, tokenizer_name=BIGRAM_TOKENIZER, index_option="freq")
    for num in ("position", "offset", "n_chunks"):
        sb.add_unsigned_field(num, stored=True, indexed=False)
    sb.add_bytes_field("meta", stored=True, indexed=False)
    for f in keyword_fields:
        sb.add_text_field(f"kw_{f}", stored=True, tokenizer_name="raw")
    return sb.build()


def build_embedded(rows: Iterable[dict], index_dir: str | Path, keyword_fields: Iterable[str] = (),
                   analyzer: str = "char", chunk_chars: int = 800, heap_mb: int = 256, threads: int = 1,
                   source_name: str = "", quiet: bool = False) -> dict:
    """Stream ``rows`` (document records) into a new index at ``index_dir``; return its metadata.

    A progress bar counts passages (on a terminal only; ``quiet`` turns it off).

    Only a missing or empty folder or an earlier tansaku index is built into (``tansaku.core.ownership``);
    anything else raises InputError and is left untouched. Builds into a hidden temp sibling, locked, and
    swaps it in at the end, so an interrupted build never leaves a half index where a good one was.
    Memory is bounded by ``heap_mb`` (tantivy flushes a segment when its indexing heap is full). 256 MB keeps 100k passages in one segment (peak RSS
    ~220 MB): with 64 MB they made 4 segments, and every query paid per-segment work (match CPU 0.43 →
    0.29 ms, phrase 0.46 → 0.32 ms measured at 100k with one segment).
    """


    keyword_fields = [f for f in keyword_fields if f not in ("doc_id", "source")]
    for f in keyword_fields:
        if not _FIELD_NAME.match(f) or f in ("title", "text", "title_keyword"):
            raise InputError(f"keyword field name {f!r} cannot be indexed (letters, digits, _; not title/text)")
    an = get_analyzer(analyzer)
    index_dir = ownership.require_named(index_dir, "--index")
    with ownership.claimed(index_dir, "--index", lambda: _check_index_dir(index_dir)):
        return _build_locked(rows, index_dir, an, analyzer, keyword_fields, chunk_chars, heap_mb, threads,
                             source_name, quiet)


def _check_index_dir(index_dir: Path) -> None:
    """Refuse (InputError, nothing written) an ``index_dir`` that is a file, a dataset or any folder that
    holds something but no tansaku index: only an index this code wrote is ever replaced."""
    ownership.refuse_other_kind(index_dir, "--index", "index")
    if not ownership.is_index(index_dir) and (foreign := ownership.foreign_entries(index_dir, "index")):
        raise InputError(f"--index {index_dir} is not empty and is not a tansaku search index (it holds "
                         f"{ownership.describe(foreign)}); choose a new or empty folder for --index")


def _build_locked(rows, index_dir: Path, an, analyzer: str, keyword_fields: list[str], chunk_chars: int,
                  heap_mb: int, threads: int, source_name: str, quiet: bool) -> dict:
    """``build_embedded`` once ``index_dir`` is checked, created and locked: written into a marked hidden sibling
    and swapped in whole (``ownership.swapped_in``), so a killed build leaves only what the next one removes."""
    with ownership.swapped_in(index_dir, "--index") as tmp:
        return _write_index(rows, tmp, index_dir.name, an, analyzer, keyword_fields, chunk_chars, heap_mb,
                            threads, source_name, quiet)


def _write_index(rows, tmp: Path, label: str, an, analyzer: str, keyword_fields: list[str], chunk_chars: int,
                 heap_mb: int, threads: int, source_name: str, quiet: bool) -> dict:
    schema = _schema(analyzer, keyword_fields)
    index = tantivy.Index(schema, path=str(tmp))
    an.register(index)
    writer = index.writer(heap_size=heap_mb * 1_000_000, num_threads=threads)
    t0, n_docs, n_chunks, last_doc = time.perf_counter(), 0, 0, None
    with progress_bar(f"index {label}", quiet=quiet) as advance:
        for ch in iter_chunks(rows, chunk_chars, keyword_fields):
            doc = tantivy.Document()
            for f in ("chunk_id", "doc_id", "source"):
                doc.add_text(f, ch[f])
            if ch["url"]:
                doc.add_text("url", str(ch["url"]))
            doc.add_text("title_keyword", ch["title"])
            if an.name == "char":
                doc.add_text("title", ch["title"])
                doc.add_text("text", ch["text"])
                # Whitespace removed: bigrams are then exactly the adjacent pairs of the char tokens.
                doc.add_text("title_bi", "".join(ch["title"].split()))
                doc.add_text("text_bi", "".join(ch["text"].split()))
            else:
                doc.add_pre_tokenized_text("title", an.pre_tokenized(ch["title"]))
                doc.add_pre_tokenized_text("text", an.pre_tokenized(ch["text"]))
            for f in ("position", "offset", "n_chunks"):
                doc.add_unsigned(f, ch[f])
            if ch["meta"]:
                doc.add_bytes("meta", str(ch["meta"]).encode("utf-8"))
            for f, values in ch["keywords"].items():
                for v in values:
                    doc.add_text(f"kw_{f}", v)
            writer.add_document(doc)
            n_chunks += 1
            if ch["doc_id"] != last_doc:
                n_docs, last_doc = n_docs + 1, ch["doc_id"]
            advance(1)
    writer.commit()
    writer.wait_merging_threads()
    meta = {"format": FORMAT, "backend": "embedded", "analyzer": analyzer, "keyword_fields": keyword_fields,
            "chunk_chars": chunk_chars, "documents": n_docs, "chunks": n_chunks, "source": source_name,
            "build_seconds": round(time.perf_counter() - t0, 3)}
    (tmp / META_FILE).write_text(jsontext.dumps(meta, indent=2), encoding="utf-8")
    return meta


class EmbeddedBackend:
    """Read-only searcher over an index built by ``build_embedded``; a ``backend.Backend`` whose spec is a folder."""

    @classmethod
    def open(cls, spec: str | Path, limits: Limits = Limits()) -> EmbeddedBackend:
        return cls(spec, limits)

    @classmethod
    def build(cls, dataset_dir: str | Path, spec: str | Path, analyzer: str | None = None,
              chunk_chars: int = 800, overwrite: bool = True) -> dict:
        """``build_embedded`` from a dataset folder; analyzer ``char`` (default) or ``sudachi``. ``overwrite`` is
        moot: only an earlier tansaku index is ever replaced (``ownership``)."""
        # Checked before the dataset is read: an index inside its dataset would change the dataset (its hash)
        # it indexes, and a dataset given as --index is said to be one.
        ownership.refuse_other_kind(Path(spec), "--index", "index")
        ownership.refuse_overlap(spec, {"--dataset": dataset_dir}, "--index")
        return build_embedded(iter_documents(dataset_dir), spec, keyword_fields_of(dataset_dir),
                              analyzer or "char", chunk_chars, source_name=str(dataset_dir))

    @classmethod
    def exists(cls, spec: str | Path) -> bool:
        return Path(spec).is_dir()

    @classmethod
    def require(cls, spec: str | Path, hint: str) -> None:
        """MissingInputError for a missing folder; opened once, so a damaged index is refused (``index_meta``)."""
        if not cls.exists(spec):
            raise MissingInputError(f"index {spec} does not exist; {hint}")
        cls(spec).close()

    def __init__(self, index_dir: str | Path, limits: Limits = Limits(), workers: int | None = None):
        """``workers``: most worker processes for expensive queries (default: one per core but one, at most 8)."""
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
        # get's cache: a dict on the instance, not lru_cache(self._get) — that bound method held in an attribute
        # would be a reference cycle, so the backend (and the finalizer that stops its workers) would last until
        # a cyclic GC instead of ending with its last reference.
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
            return self._boosted(self._match(f, s["query"], s["operator"], s["minimum_should_match"]), s["boost"])
        if kind == "match_phrase":
            (f, s), = body.items()
            return self._boosted(self._phrase(f, s["query"], s["slop"]), s["boost"])
        if kind == "multi_match":
            if body["type"] == "most_fields" and body["operator"] == "or" and body["minimum_should_match"] is None:
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
            return Q.const_score_query(Q.term_set_query(self.schema, _tantivy_field(f), values), body["boost"])
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

        # A query that reads few postings (cost.py) runs here: a hand-off costs more than it. Any other runs in
        # a worker process, killed at the deadline, so a timed-out query stops using CPU.
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
                # No worker outlives its backend: the finalizer holds the pool, not the backend (which holds no
                # reference cycle), so it runs as soon as the backend's last reference goes.
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
        """The whole document (its passages joined), or None; the last :data:`GET_CACHE` looked up are cached."""
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

"""What a search engine implements (``Backend``), and the one place that maps an index spec to the engine.

    cls = backend_for("out/index")                 # EmbeddedBackend: a folder
    cls = backend_for("opensearch:wiki")           # OpenSearchBackend: $OPENSEARCH_URL, index "wiki"
    cls = backend_for("https://host:9200/wiki")    # OpenSearchBackend: that cluster, index "wiki"
    cls = backend_for("wiki", "opensearch")        # --backend opensearch: a bare name is an index name
    backend = cls.open("out/index")                # then .search(…), .get(doc_id), .close()

``open_index``, ``build_index``, ``require_index`` and ``search_cli`` (``envs/search/__init__.py``) all ask
``backend_for``; a new engine is one class implementing ``Backend`` in its own module plus one line of
``SEARCH_BACKENDS`` here (docs/extending.md, "Adding a search backend"). ``--backend``'s choices,
``--analyzer``'s and their help texts and errors are made from that dict.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tansaku.core.errors import InputError

from .base import SearchResult
from .dsl_limits import Limits


@dataclass(frozen=True)
class SearchEngine:
    """One search engine. ``backend``: ``"module:Class"`` of its ``Backend``, imported only when an index of
    it is built or opened (each engine loads its own libraries: tantivy, opensearch-py …). ``analyzers``: what
    ``--analyzer`` takes with it, its default first. ``prefixes``: the spec forms that name its indexes
    without ``--backend`` (``opensearch:NAME``, a URL); with none, only ``--backend`` chooses it (a folder is
    ``DEFAULT_BACKEND``'s). ``title``: its name in messages."""

    backend: str
    analyzers: tuple[str, ...]
    prefixes: tuple[str, ...] = ()
    title: str = ""


# The search engines ``--backend`` names; adding one is one line here plus its module. The analyzers:
# core.analysis.ANALYZERS (embedded; not imported here: it loads tantivy and Sudachi) and the OpenSearch
# plugins (opensearch_backend.JA_ANALYSIS, or "auto": sudachi when the cluster has it).
SEARCH_BACKENDS: dict[str, SearchEngine] = {
    "embedded": SearchEngine("tansaku.envs.search.embedded:EmbeddedBackend", ("char", "sudachi"),
                             (), "tantivy"),
    "opensearch": SearchEngine("tansaku.envs.search.opensearch_backend:OpenSearchBackend",
                               ("auto", "kuromoji", "sudachi"), ("opensearch:", "http://", "https://"),
                               "OpenSearch"),
}
DEFAULT_BACKEND = "embedded"  # what an index folder is (a spec no engine's prefixes claim)


def backend_names() -> tuple[str, ...]:
    """What ``--backend`` takes, now."""
    return tuple(SEARCH_BACKENDS)


def analyzer_names(backend: str | None = None) -> tuple[str, ...]:
    """What ``--analyzer`` takes with ``backend`` (None: with some backend)."""
    engines = SEARCH_BACKENDS.values() if backend is None else [SEARCH_BACKENDS[backend]]
    return tuple(dict.fromkeys(name for engine in engines for name in engine.analyzers))


def backend_help() -> str:
    """``--backend``'s help: the engines, the default first (``embedded | opensearch``)."""
    return " | ".join(SEARCH_BACKENDS)


def analyzer_help() -> str:
    """``--analyzer``'s help: each engine's analyzers, its default marked."""
    return "; ".join(f"{name}: {engine.analyzers[0]} (default)"
                     + "".join(f" | {a}" for a in engine.analyzers[1:])
                     for name, engine in SEARCH_BACKENDS.items())


@runtime_checkable
class Backend(Protocol):
    """One search engine: built from a document dataset, opened on an index spec, queried with the DSL.

    The class methods take the spec as the user gave it (``backend_for`` chose the class); the instance
    methods are what tools, environments and pipelines call on an opened index.
    """

    @classmethod
    def open(cls, spec: str | Path, limits: Limits = Limits()) -> Backend:
        """The index ``spec`` names, opened for searching; InputError/MissingInputError when it cannot be."""
        ...

    @classmethod
    def build(cls, dataset_dir: str | Path, spec: str | Path, analyzer: str | None = None,
              chunk_chars: int = 800, overwrite: bool = True) -> dict:
        """Index the document dataset ``dataset_dir`` into ``spec``; return the index metadata."""
        ...

    @classmethod
    def exists(cls, spec: str | Path) -> bool:
        """Whether ``spec`` may name a built index, known without a connection (a remote one: True)."""
        ...

    @classmethod
    def require(cls, spec: str | Path, hint: str) -> None:
        """Fail fast (MissingInputError, InputError) for an index that cannot be opened, with no
        connection."""
        ...

    def search(self, query: str | dict, size: int | None = 10, collapse: bool = True,
               snippet_chars: int = 200, default_size: int = 10, max_size: int | None = None) -> SearchResult:
        """Ranked hits for a plain-text or DSL query (``dsl.parse_request``); QueryError for a bad one."""
        ...

    def get(self, doc_id: str) -> dict | None:
        """The whole document ``{"doc_id", "title", "text", "url", "source", "meta", <keyword fields>}``, or
        None."""
        ...

    def close(self) -> None:
        """Release what the backend holds (worker processes, connections); the owner calls it once done."""
        ...

    def describe(self) -> dict:
        """JSON-able facts about the opened index (backend name, where it is, its fields)."""
        ...


def backend_named_by(spec: str | Path) -> str:
    """The engine whose spec form ``spec`` has (``opensearch:NAME``, a URL …); ``DEFAULT_BACKEND`` for a
    folder."""
    text = str(spec)
    return next((name for name, engine in SEARCH_BACKENDS.items()
                 if engine.prefixes and text.startswith(engine.prefixes)), DEFAULT_BACKEND)


def backend_for(spec: str | Path, backend: str | None = None) -> type[Backend]:
    """The engine class for an index ``spec``; ``backend`` (``--backend``) when the user named one.

    A spec whose form belongs to another engine is refused (``--backend embedded`` with ``opensearch:x``:
    else a folder named ``opensearch:x`` would appear in the cwd); an engine with spec forms of its own also
    takes a bare name (``--backend opensearch wiki``). An unknown ``backend``: InputError.
    """
    if backend is None:
        backend = backend_named_by(spec)
    if backend not in SEARCH_BACKENDS:
        raise InputError(f"unknown backend {backend!r}; use {' or '.join(SEARCH_BACKENDS)}")
    owner = backend_named_by(spec)
    if owner != backend and owner != DEFAULT_BACKEND:
        title = SEARCH_BACKENDS[owner].title or owner
        raise InputError(f"--index {spec} names an {title} index; pass --backend {owner}")
    # Imported here, not at the top: each engine loads only its own libraries (tantivy and rich, or
    # opensearch-py), and a search worker (workers.py) that imports this package starts fast.
    module, _, name = SEARCH_BACKENDS[backend].backend.partition(":")
    return getattr(importlib.import_module(module), name)

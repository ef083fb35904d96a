"""What a search engine implements (``Backend``), and the one place that maps an index spec to the engine.

    cls = backend_for("out/index")                 # EmbeddedBackend: a folder
    cls = backend_for("opensearch:wiki")           # OpenSearchBackend: $OPENSEARCH_URL, index "wiki"
    cls = backend_for("https://host:9200/wiki")    # OpenSearchBackend: that cluster, index "wiki"
    cls = backend_for("wiki", "opensearch")        # --backend opensearch: a bare name is an index name
    backend = cls.open("out/index")                # then .search(…), .get(doc_id), .close()

``open_index``, ``build_index``, ``require_index`` and ``search_cli`` (``envs/search/__init__.py``) all ask
``backend_for``; a new engine is one class implementing ``Backend`` plus one branch here
(docs/extending.md, "Adding a search backend").
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from tansaku.core.errors import InputError

from .base import SearchResult
from .dsl import Limits

# A spec that starts with one of these names an OpenSearch index; anything else is an index folder.
OPENSEARCH_PREFIXES = ("opensearch:", "http://", "https://")
BACKEND_NAMES = ("embedded", "opensearch")  # what --backend accepts
# What --analyzer accepts per engine: core.analysis.ANALYZERS (embedded; not imported here: it loads tantivy and
# Sudachi) and the OpenSearch plugins (opensearch_backend.JA_ANALYSIS, or "auto": sudachi when the cluster has it).
ANALYZER_NAMES = {"embedded": ("char", "sudachi"), "opensearch": ("auto", "kuromoji", "sudachi")}


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
        """Fail fast (MissingInputError, InputError) for an index that cannot be opened, with no connection."""
        ...

    def search(self, query: str | dict, size: int | None = 10, collapse: bool = True, snippet_chars: int = 200,
               default_size: int = 10, max_size: int | None = None) -> SearchResult:
        """Ranked hits for a plain-text or DSL query (``dsl.parse_request``); QueryError for a bad one."""
        ...

    def get(self, doc_id: str) -> dict | None:
        """The whole document ``{"doc_id", "title", "text", "url", "source", "meta", <keyword fields>}``, or None."""
        ...

    def close(self) -> None:
        """Release what the backend holds (worker processes, connections); the owner calls it once done."""
        ...

    def describe(self) -> dict:
        """JSON-able facts about the opened index (backend name, where it is, its fields)."""
        ...


def is_opensearch_spec(spec: str | Path) -> bool:
    """Whether ``spec`` names an OpenSearch index by its form (``opensearch:NAME``, ``http(s)://…``)."""
    return str(spec).startswith(OPENSEARCH_PREFIXES)


def backend_for(spec: str | Path, backend: str | None = None) -> type[Backend]:
    """The engine class for an index ``spec``; ``backend`` (``--backend``) when the user named one.

    ``backend="embedded"`` with an OpenSearch spec is refused: else a folder named ``opensearch:x`` would
    appear in the cwd. ``backend="opensearch"`` also accepts a bare index name. An unknown ``backend``:
    InputError.
    """
    if backend is None:
        backend = "opensearch" if is_opensearch_spec(spec) else "embedded"
    # Imported here, not at the top: each engine loads only its own libraries (tantivy and rich, or
    # opensearch-py), and a search worker (workers.py) that imports this package starts fast.
    if backend == "embedded":
        if is_opensearch_spec(spec):
            raise InputError(f"--index {spec} names an OpenSearch index; pass --backend opensearch")
        from .embedded import EmbeddedBackend

        return EmbeddedBackend
    if backend == "opensearch":
        from .opensearch_backend import OpenSearchBackend

        return OpenSearchBackend
    raise InputError(f"unknown backend {backend!r}; use {' or '.join(BACKEND_NAMES)}")

"""Search over document datasets: an embedded tantivy index (default) or OpenSearch, one validated DSL.

    from tansaku.envs.search import build_index, open_index, QueryError
    build_index("out/corpus", "out/index")                 # synth index build --dataset … --index …
    backend = open_index("out/index")                      # or "https://host:9200/INDEX", "opensearch:INDEX"
    backend.search('{"bool": {"must": [{"match_phrase": {"text": "鎌倉幕府"}}]}}', size=5)
    backend.get("wiki00010002")                            # {"doc_id", "title", "text", "meta", …}

The query language (a subset of the OpenSearch DSL) is documented in ``envs/search/dsl.py``; what an engine
implements, and which spec opens which engine, in ``envs/search/backend.py``.
"""

from __future__ import annotations

from pathlib import Path

from tansaku.core import jsontext
from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.out_folder import read_manifest

from .backend import SEARCH_BACKENDS, Backend, analyzer_names, backend_for, backend_named_by
from .base import Hit, SearchResult
from .dsl import QueryError
from .dsl_limits import Limits

__all__ = ["build_index", "open_index", "require_index", "QueryError", "SearchResult", "Hit", "Limits",
           "Backend", "SEARCH_BACKENDS", "backend_for", "build_index_cli", "search_cli"]


def build_index(dataset_dir: str | Path, index_dir: str | Path, backend: str = "embedded",
                analyzer: str | None = None, chunk_chars: int = 800, overwrite: bool = True) -> dict:
    """Index a document dataset folder; return the index metadata (documents, chunks, seconds …).

    ``backend``: a key of ``SEARCH_BACKENDS``, each with its analyzers. ``"embedded"``: ``index_dir`` is a
    folder; analyzer ``char`` (default) or ``sudachi``. ``"opensearch"``: ``index_dir`` is an index name,
    ``opensearch:NAME`` or ``URL/NAME``; analyzer ``auto`` (default), ``kuromoji`` or ``sudachi``.
    """
    return backend_for(index_dir, backend).build(dataset_dir, index_dir, analyzer, chunk_chars, overwrite)


def open_index(target: str | Path, limits: Limits = Limits()) -> Backend:
    """An embedded index folder, ``opensearch:NAME`` (uses $OPENSEARCH_URL) or ``https://host:9200/NAME``."""
    return backend_for(target).open(target, limits)


def require_index(target: str | Path, hint: str = "build it with `synth index build`") -> None:
    """Fail fast with ``MissingInputError`` when ``target`` names an index folder that does not exist, and
    with ``InputError`` when it is damaged (opened once: ``index_meta``); OpenSearch targets are checked when
    opened. Builds call this before any work, not at the first search."""
    backend_for(target).require(target, hint)


def build_index_cli(dataset: str, index: str, backend: str = "embedded", analyzer: str | None = None) -> dict:
    """Entry point of ``synth index build --dataset DIR --index DIR [--backend NAME]`` (``SEARCH_BACKENDS``).

    Returns the index metadata to print. Raises MissingInputError/InputError for a missing or bad dataset.
    """
    engine = backend if backend is not None else backend_named_by(index)
    if analyzer is not None and engine in SEARCH_BACKENDS and analyzer not in analyzer_names(engine):
        # refused before any work
        raise InputError(f"--analyzer {analyzer!r}: the {engine} backend takes "
                         f"{' or '.join(analyzer_names(engine))}")
    if not Path(dataset).exists():
        raise MissingInputError(f"dataset folder {dataset} does not exist")
    manifest_file = Path(dataset) / "manifest.json"
    if manifest_file.is_file():  # an empty corpus is refused before an index folder is made for it
        splits = read_manifest(dataset).get("splits")
        if isinstance(splits, dict) and splits.get("train") == 0:
            raise InputError(f"--dataset {dataset} holds 0 documents: its build kept none (`synth info "
                             f"{dataset}` "
                             "shows the stage that dropped them); rebuild it before indexing")
    meta = build_index(dataset, index, backend=backend, analyzer=analyzer)
    if not meta.get("documents"):
        raise InputError(f"--dataset {dataset}: the index {index} holds 0 documents (no row of the train "
                         "split has text); rebuild the dataset")
    return meta


def search_cli(index: str, query: str, size: int | None = None) -> dict:
    """Entry point of ``synth search --index DIR 'text or JSON DSL' [--size N] [--json]``.

    Returns ``{"hits": [{"doc_id", "title", "score", "snippet"}, …], "took_ms": …}`` (what ``--json``
    prints). Raises ``QueryError`` for a bad query: the CLI prints its one-line message and exits 2.
    """
    backend = backend_for(index)
    if not backend.exists(index):
        raise QueryError(f"index: {index} does not exist; build it with `synth index build`")
    return backend.open(index).search(query, size=size).to_dict()


def format_hits(result: dict) -> str:
    """Human-readable lines for ``synth search`` without ``--json``."""
    lines = [f"{len(result['hits'])} hits in {result['took_ms']:.1f} ms"]
    for i, h in enumerate(result["hits"], 1):
        lines.append(f"[{i}] {h['doc_id']}  {h['title']}  ({h['score']:.3f})\n    {h['snippet']}")
    return "\n".join(lines) if result["hits"] else lines[0]


def dumps(result: dict) -> str:
    return jsontext.dumps(result)

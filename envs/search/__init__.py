"""Search over document datasets: an embedded tantivy index (default) or OpenSearch, one validated DSL.

    from tansaku.envs.search import build_index, open_index, QueryError
    build_index("out/corpus", "out/index")                   # synth index build --dataset … --index …
    backend = open_index("out/index")                        # or "https://host:9200/INDEX", "opensearch:INDEX"
    backend.search('{"bool": {"must": [{"match_phrase": {"text": "鎌倉幕府"}}]}}', size=5)
    backend.get("wiki00010002")                              # {"doc_id", "title", "text", "meta", …}

The query language (a subset of the OpenSearch DSL) is documented in ``envs/search/dsl.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from tansaku.core import jsontext, ownership
from tansaku.core.errors import InputError, MissingInputError

from .base import Hit, SearchResult
from .dsl import Limits, QueryError

__all__ = ["build_index", "open_index", "require_index", "QueryError", "SearchResult", "Hit", "Limits",
           "build_index_cli", "search_cli"]


def _opensearch_target(target: str) -> tuple[str | None, str] | None:
    """(cluster URL or None for $OPENSEARCH_URL, index name) when ``target`` names an OpenSearch index."""
    if target.startswith("opensearch:"):
        return None, target.split(":", 1)[1]
    if target.startswith(("http://", "https://")):
        u = urlparse(target)
        index = u.path.strip("/")
        if not index or "/" in index:
            raise InputError(f"{target}: give the index as the URL path, e.g. https://host:9200/my-index")
        return f"{u.scheme}://{u.netloc}", index
    return None


def build_index(dataset_dir: str | Path, index_dir: str | Path, backend: str = "embedded",
                analyzer: str | None = None, chunk_chars: int = 800, overwrite: bool = True) -> dict:
    """Index a document dataset folder; return the index metadata (documents, chunks, seconds …).

    ``backend="embedded"``: ``index_dir`` is a folder; analyzer ``char`` (default) or ``sudachi``.
    ``backend="opensearch"``: ``index_dir`` is an index name, ``opensearch:NAME`` or ``URL/NAME``;
    analyzer ``auto`` (default), ``kuromoji`` or ``sudachi``.
    """
    from .documents import iter_documents, keyword_fields_of

    if backend == "embedded":  # an index inside its dataset would change the dataset (its hash) it indexes
        ownership.refuse_other_kind(Path(index_dir), "--index", "index")  # a dataset as --index: said so
        ownership.refuse_overlap(index_dir, {"--dataset": dataset_dir}, "--index")
    keyword_fields = keyword_fields_of(dataset_dir)
    rows = iter_documents(dataset_dir)
    if backend == "embedded":
        if _opensearch_target(str(index_dir)):  # else a folder named "opensearch:x" would appear in the cwd
            raise InputError(f"{index_dir} names an OpenSearch index; pass --backend opensearch")
        from .embedded import build_embedded

        return build_embedded(rows, index_dir, keyword_fields, analyzer or "char", chunk_chars,
                              source_name=str(dataset_dir))
    if backend == "opensearch":
        from .opensearch_backend import build_opensearch, client_from_env

        url, name = _opensearch_target(str(index_dir)) or (None, str(index_dir))
        return build_opensearch(rows, name, keyword_fields, analyzer or "auto", chunk_chars,
                                client=client_from_env(url), overwrite=overwrite)
    raise InputError(f"unknown backend {backend!r}; use embedded or opensearch")


def open_index(target: str | Path, limits: Limits = Limits()):
    """An embedded index folder, ``opensearch:NAME`` (uses $OPENSEARCH_URL) or ``https://host:9200/NAME``."""
    os_target = _opensearch_target(str(target))
    if os_target:
        from .opensearch_backend import OpenSearchBackend, client_from_env

        url, name = os_target
        return OpenSearchBackend(name, client_from_env(url), limits)
    from .embedded import EmbeddedBackend

    return EmbeddedBackend(target, limits)


def require_index(target: str | Path, hint: str = "build it with `synth index build`") -> None:
    """Fail fast with ``MissingInputError`` when ``target`` names an index folder that does not exist, and with
    ``InputError`` when it is damaged (opened once: ``index_meta``); OpenSearch targets are checked when opened.
    Builds call this before any work, not at the first search."""
    if _opensearch_target(str(target)) is None:
        if not Path(target).is_dir():
            raise MissingInputError(f"index {target} does not exist; {hint}")
        open_index(target)


def build_index_cli(dataset: str, index: str, backend: str = "embedded", analyzer: str | None = None) -> dict:
    """Entry point of ``synth index build --dataset DIR --index DIR [--backend embedded|opensearch]``.

    Returns the index metadata to print. Raises MissingInputError/InputError for a missing or bad dataset.
    """
    if not Path(dataset).exists():
        raise MissingInputError(f"dataset folder {dataset} does not exist")
    # Imported here, as build_index's: a search worker (workers.py) imports this package and starts 3× faster
    # without the dataset store (pyarrow, numpy).
    from tansaku.core.store import read_manifest

    manifest_file = Path(dataset) / "manifest.json"
    if manifest_file.is_file():  # an empty corpus is refused before an index folder is made for it
        splits = read_manifest(dataset).get("splits")
        if isinstance(splits, dict) and splits.get("train") == 0:
            raise InputError(f"--dataset {dataset} holds 0 documents: its build kept none (`synth info {dataset}` "
                             "shows the stage that dropped them); rebuild it before indexing")
    meta = build_index(dataset, index, backend=backend, analyzer=analyzer)
    if not meta.get("documents"):
        raise InputError(f"--dataset {dataset}: the index {index} holds 0 documents (no row of the train split has "
                         "text); rebuild the dataset")
    return meta


def search_cli(index: str, query: str, size: int | None = None) -> dict:
    """Entry point of ``synth search --index DIR 'text or JSON DSL' [--size N] [--json]``.

    Returns ``{"hits": [{"doc_id", "title", "score", "snippet"}, …], "took_ms": …}`` (what ``--json``
    prints). Raises ``QueryError`` for a bad query: the CLI prints its one-line message and exits 2.
    """
    if not str(index).startswith(("opensearch:", "http://", "https://")) and not os.path.isdir(index):
        raise QueryError(f"index: {index} does not exist; build it with `synth index build`")
    return open_index(index).search(query, size=size).to_dict()


def format_hits(result: dict) -> str:
    """Human-readable lines for ``synth search`` without ``--json``."""
    lines = [f"{len(result['hits'])} hits in {result['took_ms']:.1f} ms"]
    for i, h in enumerate(result["hits"], 1):
        lines.append(f"[{i}] {h['doc_id']}  {h['title']}  ({h['score']:.3f})\n    {h['snippet']}")
    return "\n".join(lines) if result["hits"] else lines[0]


def dumps(result: dict) -> str:
    return jsontext.dumps(result)

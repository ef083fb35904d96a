"""Reading document datasets and cutting them into passages (chunks) for the search index.

A document dataset is what ``synth build corpus`` writes (see docs/contracts.md, "Document dataset"):
``DIR/data/train-*.parquet`` with ``id, title, text, url, source, meta`` and optional keyword columns
named in ``DIR/manifest.json`` → ``config.keyword_fields``. Rows are streamed, never all loaded.

Chunks never overlap and cover the text exactly, so ``"".join(chunk texts) == text`` and a chunk's
``offset`` is a real character offset into the document (``open_doc`` continues from it).

    >>> [len(c["text"])
    ...  for c in chunk_document({"id": "d", "title": "t", "text": "あ" * 15 + "。" + "い" * 10}, 20)]
    [16, 10]
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.core.out_folder import MANIFEST, StoreError, read_manifest

SENTENCE_ENDS = "。！？!?\n"


class DatasetError(InputError):
    """The folder is not a readable document dataset."""


def _meta_text(meta) -> str:
    """The index stores a document's metadata as JSON text: a corpus's is text already, a struct column
    (e-Gov articles) arrives as a dict."""
    if not meta:
        return ""
    return meta if isinstance(meta, str) else jsontext.dumps(meta, sort_keys=True)


def keyword_fields_of(dataset_dir: str | Path) -> list[str]:
    """Keyword columns the dataset declares (``manifest.json`` → ``config.keyword_fields``); none without a
    manifest. ``DatasetError`` (one line naming the file) for a manifest ``out_folder.read_manifest`` refuses
    (unreadable, not UTF-8, not JSON, nested too deeply, not an object …) or whose ``config.keyword_fields``
    is not a list."""
    if not (Path(dataset_dir) / MANIFEST).exists():
        return []
    try:
        manifest = read_manifest(dataset_dir)
    except StoreError as e:
        raise DatasetError(str(e)) from None
    config = manifest.get("config") or {}
    fields = (config.get("keyword_fields") if isinstance(config, dict) else None) or []
    if not isinstance(config, dict) or not isinstance(fields, list):
        raise DatasetError(f"{Path(dataset_dir) / MANIFEST}: config.keyword_fields must be a list of column "
                           f"names")
    return [str(f) for f in fields]


def iter_documents(dataset_dir: str | Path, split: str = "train") -> Iterator[dict]:
    """Stream the rows of a document dataset (through ``tansaku.core.store``)."""
    # Imported here: the store brings pyarrow and numpy, which a search worker (workers.py) never needs.
    from tansaku.core.store import iter_rows

    try:
        for row in iter_rows(dataset_dir, split=split):
            if not row.get("id") or row.get("text") is None:
                raise DatasetError(f"{dataset_dir}: a row lacks 'id' or 'text' (columns: {sorted(row)})")
            yield row
    except StoreError as e:
        raise DatasetError(str(e)) from e


def _cut_points(text: str, max_chars: int) -> list[int]:
    """End offsets of chunks: cut after the last sentence end that fits, else hard at max_chars."""
    cuts, start, n = [], 0, len(text)
    while start < n:
        end = min(n, start + max_chars)
        if end < n:
            best = max(text.rfind(ch, start, end) for ch in SENTENCE_ENDS)
            # Only accept a sentence end in the second half, so chunks stay reasonably full.
            if best >= start + max_chars // 2:
                end = best + 1
        cuts.append(end)
        start = end
    return cuts or [0]


def chunk_document(row: dict, max_chars: int = 800, keyword_fields: Iterable[str] = ()) -> list[dict]:
    """Passages of one document row, each with doc_id, title, position, offset and its parent's fields."""
    if max_chars < 20:
        raise ValueError("max_chars must be at least 20")
    doc_id = str(row["id"])
    title = unicodedata.normalize("NFKC", str(row.get("title") or ""))
    # NFKC here (not only in the analyzer) so stored text, indexed tokens and offsets all agree.
    text = unicodedata.normalize("NFKC", str(row.get("text") or ""))
    keywords = {}
    for f in keyword_fields:
        v = row.get(f)
        if v is None:
            continue
        keywords[f] = ([str(x) for x in v] if isinstance(v, list)
                       else [str(v).lower() if isinstance(v, bool) else str(v)])
    chunks, start = [], 0
    cuts = _cut_points(text, max_chars)
    for pos, end in enumerate(cuts):
        chunks.append({
            "chunk_id": f"{doc_id}#{pos}",
            "doc_id": doc_id,
            "title": title,
            "text": text[start:end],
            "position": pos,
            "offset": start,
            "n_chunks": len(cuts),
            "source": str(row.get("source") or ""),
            "url": row.get("url"),
            # The parent's metadata rides on the first chunk only (get() reads it from there).
            "meta": _meta_text(row.get("meta")) if pos == 0 else "",
            "keywords": keywords,
        })
        start = end
    return chunks


def iter_chunks(rows: Iterable[dict], max_chars: int = 800,
                keyword_fields: Iterable[str] = ()) -> Iterator[dict]:
    keyword_fields = list(keyword_fields)
    for row in rows:
        yield from chunk_document(row, max_chars, keyword_fields)

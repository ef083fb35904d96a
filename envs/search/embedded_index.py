"""Writing an embedded index: document rows → tantivy passages in a new folder, swapped in whole.

    build_embedded(iter_documents("out/corpus"), "out/index", keyword_fields=["category"], analyzer="char")

The layout (fields, analyzers, ``tansaku_index.json``) is described in embedded.py, which reads what this
writes; ``EmbeddedBackend.build`` is the usual entry point (it checks the dataset and index folders first).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path

import tantivy

from tansaku.core import jsontext, ownership, safe_write, swapped_outputs
from tansaku.core.analysis import BIGRAM_TOKENIZER, get_analyzer
from tansaku.core.errors import InputError
from tansaku.core.progress import progress_bar

from .documents import iter_chunks

META_FILE = ownership.INDEX_MARKER
FORMAT = 2  # 2: bigram fields for match (char analyzer); 1 had characters only
_FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,40}$")


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
    Memory is bounded by ``heap_mb`` (tantivy flushes a segment when its indexing heap is full). 256 MB keeps
    100k passages in one segment (peak RSS ~220 MB): with 64 MB they made 4 segments, and every query paid
    per-segment work (match CPU 0.43 → 0.29 ms, phrase 0.46 → 0.32 ms measured at 100k with one segment).
    """
    keyword_fields = [f for f in keyword_fields if f not in ("doc_id", "source")]
    for f in keyword_fields:
        if not _FIELD_NAME.match(f) or f in ("title", "text", "title_keyword"):
            raise InputError(f"keyword field name {f!r} cannot be indexed (letters, digits, _; not "
                             f"title/text)")
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
    """``build_embedded`` once ``index_dir`` is checked, created and locked: written into a marked hidden
    sibling and swapped in whole (``swapped_outputs.swapped_in``), so a killed build leaves only what the next
    one removes."""
    with swapped_outputs.swapped_in(index_dir, "--index") as tmp:
        return _write_index(rows, tmp, index_dir.name, an, analyzer, keyword_fields, chunk_chars, heap_mb,
                            threads, source_name, quiet)


def _write_index(rows, tmp: Path, label: str, an, analyzer: str, keyword_fields: list[str], chunk_chars: int,
                 heap_mb: int, threads: int, source_name: str, quiet: bool) -> dict:
    schema = _schema(analyzer, keyword_fields)
    index = tantivy.Index(schema, path=str(tmp))
    an.register(index)
    writer = index.writer(heap_size=heap_mb * 1_000_000, num_threads=threads)
    t0 = time.perf_counter()
    try:
        n_docs, n_chunks = _add_chunks(writer, rows, label, an, chunk_chars, keyword_fields, quiet)
        writer.commit()
    finally:
        # Join tantivy's indexing threads before the caller swaps tmp in or removes it: after a failed row a
        # writer left to the garbage collector (the traceback holds this frame) went on writing segment files
        # into tmp after it was removed, leaving an unmarked folder no later build can prove its own.
        writer.wait_merging_threads()
    meta = {"format": FORMAT, "backend": "embedded", "analyzer": analyzer, "keyword_fields": keyword_fields,
            "chunk_chars": chunk_chars, "documents": n_docs, "chunks": n_chunks, "source": source_name,
            "build_seconds": round(time.perf_counter() - t0, 3)}
    safe_write.write_text_atomic(tmp / META_FILE, jsontext.dumps(meta, indent=2))
    return meta


def _add_chunks(writer, rows, label: str, an, chunk_chars: int, keyword_fields: list[str],
                quiet: bool) -> tuple[int, int]:
    """Every passage of ``rows`` added to ``writer``; returns (documents, passages)."""
    n_docs, n_chunks, last_doc = 0, 0, None
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
    return n_docs, n_chunks

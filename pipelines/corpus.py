"""`synth build corpus`: a document collection → a normalized document dataset in the store.

    synth build corpus --input ../shared/data/jawiki/WikipediaAnnotatedCorpus --out out/corpus
    synth build corpus --input examples/miniwiki.jsonl --format jsonl --out out/corpus

Rows: ``id, title, text, url, source, meta`` (``meta`` is a JSON object string; see docs/contracts.md).
Input formats, detected from the path unless ``--format`` says:

- ``jsonl``: one ``{"id", "title", "text"[, "url"]}`` object per line; any other keys (``source_text``,
  ``outgoing_link``, ``redirect``, ``category`` …) are kept in ``meta`` for later stages.
- ``cirrus``: Wikimedia CirrusSearch dumps (``*-cirrussearch-content.json[.gz]``, the ``general`` dump too:
  pages outside the article namespace are dropped with a reason): lines alternate an index action and a page;
  links, headings, categories and wikitext go to ``meta``.

``jsonl`` and ``cirrus`` files may be ``.gz``, ``.bz2`` or ``.zst``: they are decompressed as a stream
(``tansaku.core.jsonl.open_compressed``), never held in memory.
- ``wac``: the WikipediaAnnotatedCorpus raw ``org/`` sentence files (parenthetical sentences are put back
  in place; splits from ``id/*.id``).
- ``jaquad``: JaQuAD SQuAD-style JSON files; one document per article title.

Everything streams: memory is bounded by one chunk of records plus 16 bytes per kept document (dedup).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from tansaku.core.engine import Drop, global_stage, map_stage
from tansaku.core.errors import InputError
from tansaku.core.jsonl import (
    COMPRESSED,
    DECOMPRESSION_ERRORS,
    BadLine,
    iter_jsonl,
    open_compressed,
    unreadable,
)
from tansaku.core.options import check_count
from tansaku.core.store import build_dataset, describe_input

PIPELINE_VERSION = "1"
FORMATS = ("jsonl", "cirrus", "wac", "jaquad")
_KNOWN_KEYS = {"id", "title", "text", "url"}


class CorpusInputError(InputError):
    """The input path or format cannot be read as a document collection."""


# ---------------------------------------------------------------- normalization


def normalize_text(text: str) -> str:
    """NFKC, unified line ends, runs of blanks collapsed, at most one empty line in a row.

    >>> normalize_text("足利　尊氏は、\\r\\n\\n\\n\\n鎌倉時代の武将。  ")
    '足利 尊氏は、\\n\\n鎌倉時代の武将。'
    """
    text = unicodedata.normalize("NFKC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t\u00a0\u200b]+", " ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


_CJK = r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff々〆ヶ]"


def normalize_title(title: str) -> str:
    """NFKC and no blank between two Japanese characters (Wikipedia titles have none).

    >>> normalize_title("足利　尊氏"), normalize_title("Ｐｙｔｈｏｎ 入門")
    ('足利尊氏', 'Python 入門')
    """
    title = normalize_text(title).replace("\n", " ")
    return re.sub(rf"(?<={_CJK}) (?={_CJK})", "", title)


def wiki_url(title: str, lang: str = "ja") -> str:
    return f"https://{lang}.wikipedia.org/wiki/{quote(title.replace(' ', '_'))}"


# ---------------------------------------------------------------- readers (each yields raw records)


def _first_line(path: Path) -> str:
    # Only used to sniff the format: a bad byte there must not stop detection (the reader reports it as a
    # bad line with file:line), and a BOM must not hide the '{"index"' of a cirrus dump.
    try:
        with io.TextIOWrapper(open_compressed(path), encoding="utf-8-sig", errors="replace") as f:
            return f.readline()
    except DECOMPRESSION_ERRORS as exc:
        if path.suffix.lower() not in COMPRESSED:
            raise
        raise CorpusInputError(unreadable(path, exc)) from None


def _json_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` per non-empty line; a bad line becomes an ``_error`` record instead."""
    for lineno, obj in iter_jsonl(path, on_bad="yield"):
        yield lineno, ({"_error": obj.reason, "_where": obj.where} if isinstance(obj, BadLine) else obj)


def read_jsonl(path: Path) -> Iterator[dict]:
    for lineno, obj in _json_objects(path):
        if "_error" in obj:
            yield obj
            continue
        meta = {k: v for k, v in obj.items() if k not in _KNOWN_KEYS}
        yield {"id": obj.get("id"), "title": obj.get("title"), "text": obj.get("text"),
               "url": obj.get("url"), "source": "jsonl", "meta": meta, "_where": f"{path}:{lineno}"}


def read_cirrus(path: Path) -> Iterator[dict]:
    """CirrusSearch content dump: an ``{"index": {"_id": …}}`` line, then the page, and so on."""
    page_id = None
    for lineno, obj in _json_objects(path):
        if "_error" in obj:
            yield obj
            page_id = None
            continue
        if "index" in obj and isinstance(obj["index"], dict):
            page_id = obj["index"].get("_id")
            continue
        pid = obj.get("page_id") or page_id or ""
        pid = str(pid) if isinstance(pid, (str, int)) else ""
        page_id = None
        if obj.get("namespace", 0) != 0:
            yield {"_error": "not_an_article", "_where": f"{path}:{lineno}"}
            continue
        title = obj.get("title") or ""
        meta = {k: obj[k] for k in ("opening_text", "heading", "category", "outgoing_link", "source_text",
                                    "redirect", "wikibase_item", "timestamp") if k in obj}
        if isinstance(meta.get("redirect"), list):  # [{"namespace": 0, "title": …}] → titles
            meta["redirect"] = [r.get("title") if isinstance(r, dict) else r for r in meta["redirect"]]
        yield {"id": pid or None, "title": title, "text": obj.get("text"),
               "url": wiki_url(title) if isinstance(title, str) else None, "source": "cirrus", "meta": meta,
               "_where": f"{path}:{lineno}"}


_SID = re.compile(r"^# S-ID:(\S+)(.*)$")
_PAREN = re.compile(r"括弧始:(\S*) 括弧終:(\S*) 括弧位置:(\d+)")
_TITLE_GUESS = re.compile(r"^(.{1,40}?)(?:には|とは|は|も)[、,]")


def _wac_document(path: Path, splits: dict[str, str]) -> dict:
    """Rebuild one lead section: parenthetical sentences (readings, dates) go back at their position."""
    sentences: list[list] = []  # [text, [(pos, open, close, text), …]]
    header = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := _SID.match(line):
            header = m.group(2)
            continue
        if header is None:
            continue
        if (p := _PAREN.search(header)) and sentences:
            sentences[-1][1].append((int(p.group(3)), p.group(1), p.group(2), line))
        else:
            sentences.append([line, []])
        header = None
    parts = []
    for text, parens in sentences:
        # Positions count characters of the original sentence, earlier parentheticals included,
        # so insert in ascending order.
        for pos, open_, close, inner in sorted(parens, key=lambda t: t[0]):
            text = text[:pos] + open_ + inner + close + text[pos:]
        parts.append(text)
    plain = "".join(t for t, _ in sentences)
    doc_id = path.stem
    guess = _TITLE_GUESS.match(plain)
    return {"id": doc_id, "title": guess.group(1) if guess else plain[:20], "text": "".join(parts),
            "url": None, "source": "wac",
            "meta": {"split": splits.get(doc_id), "title_guessed": True, "sentences": len(sentences)}}


def read_wac(root: Path) -> Iterator[dict]:
    splits: dict[str, str] = {}
    for split in ("train", "dev", "test"):
        f = root / "id" / f"{split}.id"
        if f.exists():
            splits.update({line.strip(): split for line in f.read_text().splitlines() if line.strip()})
    org = root / "org" if (root / "org").is_dir() else root
    for path in sorted(org.rglob("*.org")):
        try:
            yield _wac_document(path, splits)
        except (OSError, UnicodeDecodeError) as e:
            yield {"_error": "unreadable_file", "_where": f"{path}: {e}"}


def read_jaquad(root: Path) -> Iterator[dict]:
    """SQuAD-style ``{"data": [{"title", "paragraphs": [{"context"}…]}…]}``; a file or article of another
    shape is dropped with its reason and place, never a traceback."""
    files = [root] if root.is_file() else sorted(root.rglob("*.json"))
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError, RecursionError) as e:  # ValueError: bad JSON or bad UTF-8
            yield {"_error": "unreadable_file", "_where": f"{path}: {e}"}
            continue
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            yield {"_error": "not_squad_json", "_where": f'{path}: expected {{"data": [articles…]}}'}
            continue
        for i, article in enumerate(data["data"]):
            where = f"{path}: data[{i}]"
            paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
            if not isinstance(paragraphs, list) or not all(
                    isinstance(p, dict) and isinstance(p.get("context"), str) for p in paragraphs):
                yield {"_error": "malformed_article", "_where": where}
                continue
            contexts = list(dict.fromkeys(p["context"] for p in paragraphs))
            title = article.get("title", "")
            yield {"id": f"jaquad-{path.stem}-{i}", "title": title, "text": "\n\n".join(contexts),
                   "url": wiki_url(title) if isinstance(title, str) and title else None, "source": "jaquad",
                   "meta": {"paragraphs": len(contexts)}, "_where": where}


def detect_format(path: Path) -> str:
    if not path.exists():
        raise CorpusInputError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "manifest.json").is_file() and (path / "data").is_dir():  # its manifest is no JaQuAD file
            raise CorpusInputError(f"{path} is a tansaku dataset, not a document collection; give the files "
                                   "it was built from, or use it directly as --corpus / --dataset")
        if (path / "org").is_dir() or any(path.glob("*.org")):
            return "wac"
        if any(path.rglob("*.json")):
            return "jaquad"
        raise CorpusInputError(f"{path}: a folder, but neither WikipediaAnnotatedCorpus (org/) nor JaQuAD (*.json)")
    name = path.name
    if "cirrussearch" in name:
        return "cirrus"
    compressed = path.suffix.lower() in COMPRESSED
    base = name[: -len(path.suffix)] if compressed else name
    if base.endswith((".jsonl", ".ndjson")) or (compressed and base.endswith(".json")):
        return "cirrus" if _first_line(path).lstrip().startswith('{"index"') else "jsonl"
    if name.endswith(".json"):
        return "jaquad"
    raise CorpusInputError(f"{path}: cannot tell the format; pass --format one of {', '.join(FORMATS)}")


def read_documents(path: str | Path, fmt: str = "auto") -> Iterator[dict]:
    path = Path(path)
    if not path.exists():
        raise CorpusInputError(f"{path}: no such file or folder")
    fmt = detect_format(path) if fmt == "auto" else fmt
    readers = {"jsonl": read_jsonl, "cirrus": read_cirrus, "wac": read_wac, "jaquad": read_jaquad}
    if fmt not in readers:
        raise CorpusInputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt in ("jsonl", "cirrus") and not path.is_file():
        raise CorpusInputError(f"--format {fmt} reads one file; {path} is a folder")
    if fmt == "wac" and not path.is_dir():
        raise CorpusInputError(f"--format wac reads a WikipediaAnnotatedCorpus folder; {path} is a file")
    return readers[fmt](path)


# ---------------------------------------------------------------- stages


def normalize_document(raw: dict) -> dict | Drop:
    """One output row whose every column has its contract type (so no single row decides the parquet
    schema), or a Drop naming the reason and the input's file:line."""
    where = raw.get("_where", "")
    if "_error" in raw:
        return Drop(raw["_error"], detail=where)
    record = {k: v for k, v in raw.items() if k != "_where"}
    text, title, url, doc_id = raw.get("text"), raw.get("title"), raw.get("url"), raw.get("id")
    if text is not None and not isinstance(text, str):
        return Drop("bad_text_type", record, f"{where}: text is {type(text).__name__}, not a string")
    if not isinstance(text, str) or not text.strip():
        return Drop("empty_text", record, where)
    if title is not None and not isinstance(title, str):
        return Drop("bad_title_type", record, f"{where}: title is {type(title).__name__}, not a string")
    if not isinstance(title, str) or not title.strip():
        return Drop("empty_title", record, where)
    if url is not None and not isinstance(url, str):  # a number or object is no URL: coercing would invent one
        return Drop("bad_url_type", record, f"{where}: url is {type(url).__name__}, not a string")
    if doc_id is not None and (isinstance(doc_id, bool) or not isinstance(doc_id, (str, int))):
        return Drop("bad_id_type", record, f"{where}: id is {type(doc_id).__name__}, not a string or integer")
    if not isinstance(raw.get("meta") or {}, dict):
        return Drop("bad_meta_type", record, where)
    meta = dict(raw.get("meta") or {})
    norm_text, norm_title = normalize_text(text), normalize_title(title)
    if norm_text != text:
        meta["original_text"] = text
    if norm_title != title:
        meta["original_title"] = title
    if doc_id in (None, ""):
        # No id in the input: derive a stable one from the content so reruns agree.
        doc_id = "doc-" + hashlib.sha1(f"{norm_title}\n{norm_text}".encode()).hexdigest()[:12]
    return {"id": str(doc_id), "title": norm_title, "text": norm_text, "url": url,
            "source": raw["source"], "meta": json.dumps(meta, ensure_ascii=False, sort_keys=True)}


def dedup_documents(records: Iterator[dict]) -> Iterator[dict | Drop]:
    """Drop repeated ids and repeated texts; keeps 16 bytes per document, not the documents."""
    seen_ids: set[bytes] = set()
    seen_texts: set[bytes] = set()
    for r in records:
        id_key = hashlib.blake2b(r["id"].encode(), digest_size=16).digest()
        text_key = hashlib.blake2b(r["text"].encode(), digest_size=16).digest()
        if id_key in seen_ids:
            yield Drop("duplicate_id", record=r)
        elif text_key in seen_texts:
            yield Drop("duplicate_text", record=r)
        else:
            seen_ids.add(id_key)
            seen_texts.add(text_key)
            yield r


def corpus_stages(min_chars: int = 1) -> list:
    def long_enough(r: dict) -> dict | Drop:
        return r if len(r["text"]) >= min_chars else Drop("too_short")

    return [map_stage("normalize", normalize_document),
            map_stage("min_length", long_enough, params={"min_chars": min_chars}),
            global_stage("dedup", dedup_documents, params={"keys": ["id", "text"]})]


def build_corpus(input: str | Path, out: str | Path, fmt: str = "auto", min_chars: int = 1,
                 name: str | None = None, quiet: bool = False, keep_rejected: bool = False) -> dict:
    """Build the document dataset; returns the manifest. Rerunning with the same ``out`` resumes.

    ``keep_rejected`` is off by default: the drops are whole documents (duplicates of a dump can be many);
    turn it on to inspect what ``min_length``/``dedup`` removed (the ``rejected`` split)."""

    check_count("--min-chars", min_chars, 0)
    input = Path(input)
    fmt = detect_format(input) if fmt == "auto" else fmt
    read_documents(input, fmt)  # fail fast on a bad path/format, before any work is set up
    config = {"format": fmt, "min_chars": min_chars}
    licenses = {"wac": "cc-by-sa-4.0", "jaquad": "cc-by-sa-3.0", "cirrus": "cc-by-sa-4.0"}
    return build_dataset(
        out=out, name=name or f"corpus-{input.stem}", pipeline="corpus", pipeline_version=PIPELINE_VERSION,
        config=config, seed=0, inputs=[describe_input(input)],
        source=lambda: read_documents(input, fmt), stages=corpus_stages(min_chars), quiet=quiet,
        keep_rejected=keep_rejected,
        card={"pretty_name": f"tansaku corpus: {input.name}", "license": licenses.get(fmt, "other"),
              "task_categories": ["text-retrieval"],
              "description": f"Normalized documents from `{input.name}` ({fmt}) for tansaku's search index "
                             "and synthesis pipelines. `text` is NFKC + whitespace normalized; "
                             "`meta.original_text` keeps the raw text where it differs.",
              "limitations": ["Inherits the license and biases of the source collection.",
                              "Titles of WikipediaAnnotatedCorpus documents are guessed from the first "
                              "sentence (`meta.title_guessed`)." if fmt == "wac" else
                              "Documents are deduplicated by exact normalized text only."]},
    )

"""The readers of ``synth build corpus``: each input format yields raw records (``id, title, text, url,
source, meta`` plus ``_where``, the file:line a drop names; a bad line or file is an ``_error`` record, never
an exception), which ``tansaku.pipelines.corpus.build`` normalizes.

    for raw in read_documents("../shared/data/jawiki/JaQuAD", "auto"): ...
    read_documents("docs.jsonl", "jsonl", JsonlFields(id="doc_id", title="title_guess"))

Formats: ``jsonl`` (keys mapped by :class:`JsonlFields`), ``cirrus`` (CirrusSearch dumps), ``wac``
(WikipediaAnnotatedCorpus ``org/``), ``jaquad`` (SQuAD-style JSON); see the ``corpus`` module docstring.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.core.input_files import regular_files
from tansaku.core.jsonl import (
    COMPRESSED,
    DECOMPRESSION_ERRORS,
    BadLine,
    iter_jsonl,
    open_compressed,
    unreadable,
)

FORMATS = ("jsonl", "cirrus", "wac", "jaquad")


@dataclass(frozen=True)
class JsonlFields:
    """Which key of a JSON-lines record holds each document field (``--id-field`` … on the CLI)."""

    id: str = "id"
    title: str = "title"
    text: str = "text"
    url: str = "url"

    def __post_init__(self) -> None:
        names = [self.id, self.title, self.text, self.url]
        for option, name in zip(("--id-field", "--title-field", "--text-field", "--url-field"), names):
            if not isinstance(name, str) or not name.strip():
                raise InputError(f"{option} must name a key of the records, got {name!r}")
        if len(set(names)) != len(names):
            raise InputError(f"--id-field, --title-field, --text-field and --url-field must differ, got "
                             f"{names}")

    def recipe(self) -> dict:
        return asdict(self)


class CorpusInputError(InputError):
    """The input path or format cannot be read as a document collection."""



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


def read_jsonl(path: Path, fields: JsonlFields = JsonlFields()) -> Iterator[dict]:
    known = set(fields.recipe().values())
    for lineno, obj in _json_objects(path):
        if "_error" in obj:
            yield obj
            continue
        meta = {k: v for k, v in obj.items() if k not in known}
        yield {"id": obj.get(fields.id), "title": obj.get(fields.title), "text": obj.get(fields.text),
               "url": obj.get(fields.url), "source": "jsonl", "meta": meta, "_where": f"{path}:{lineno}"}


def first_record_keys(path: Path, limit: int = 8) -> list[str]:
    """The keys of the first JSON object in a JSON-lines file (for a hint naming what the records hold)."""
    for _, obj in _json_objects(path):
        return [k for k in obj if not k.startswith("_")][:limit]
    return []


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
        if f.is_file():  # a regular file: a FIFO there would block the read (tansaku.core.input_files)
            splits.update({line.strip(): split for line in f.read_text().splitlines() if line.strip()})
    org = root / "org" if (root / "org").is_dir() else root
    # a FIFO or device named *.org is skipped, never opened
    for path in regular_files(sorted(org.rglob("*.org"))):
        try:
            yield _wac_document(path, splits)
        except (OSError, UnicodeDecodeError) as e:
            yield {"_error": "unreadable_file", "_where": f"{path}: {e}"}


def read_jaquad(root: Path) -> Iterator[dict]:
    """SQuAD-style ``{"data": [{"title", "paragraphs": [{"context"}…]}…]}``; a file or article of another
    shape is dropped with its reason and place, never a traceback."""
    files = [root] if root.is_file() else list(regular_files(sorted(root.rglob("*.json"))))  # never a FIFO
    for path in files:
        try:
            data = jsontext.loads(path.read_bytes())  # nesting bounded, lone surrogates read as U+FFFD
        except (OSError, ValueError) as e:  # ValueError: bad JSON or UTF-8, nested too deeply
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
        raise CorpusInputError(f"{path}: a folder, but neither WikipediaAnnotatedCorpus (org/) nor JaQuAD "
                               f"(*.json)")
    name = path.name
    if "cirrussearch" in name:
        return "cirrus"
    compressed = path.suffix.lower() in COMPRESSED
    base = name[: -len(path.suffix)] if compressed else name
    if base.endswith((".jsonl", ".ndjson")) or (compressed and base.endswith(".json")):
        return "cirrus" if _first_line(path).lstrip().startswith('{"index"') else "jsonl"
    if name.endswith(".json"):
        return "jaquad"
    raise CorpusInputError(f"--input {path}: cannot tell the format; pass --format one of "
                           f"{', '.join(FORMATS)}")


def read_documents(path: str | Path, fmt: str = "auto",
                   fields: JsonlFields = JsonlFields()) -> Iterator[dict]:
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
    if fields != JsonlFields() and fmt != "jsonl":
        raise CorpusInputError(f"--id-field/--title-field/--text-field/--url-field apply to JSON lines; "
                               f"{path} is read as {fmt}")
    return readers[fmt](path, fields) if fmt == "jsonl" else readers[fmt](path)


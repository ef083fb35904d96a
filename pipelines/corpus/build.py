"""`synth build corpus`: a document collection → a normalized document dataset in the store.

    synth build corpus --input ../shared/data/jawiki/WikipediaAnnotatedCorpus --out out/corpus
    synth build corpus --input examples/miniwiki.jsonl --format jsonl --out out/corpus

Rows: ``id, title, text, url, source, meta`` (``meta`` is a JSON object string; see docs/contracts.md).
Input formats, detected from the path unless ``--format`` says:

- ``jsonl``: one ``{"id", "title", "text"[, "url"]}`` object per line; any other keys (``source_text``,
  ``outgoing_link``, ``redirect``, ``category`` …) are kept in ``meta`` for later stages. Other key names
  are mapped with ``--id-field`` / ``--title-field`` / ``--text-field`` (``JsonlFields``).
- ``cirrus``: Wikimedia CirrusSearch dumps (``*-cirrussearch-content.json[.gz]``, the ``general`` dump too:
  pages outside the article namespace are dropped with a reason): lines alternate an index action and a page;
  links, headings, categories and wikitext go to ``meta``.

``jsonl`` and ``cirrus`` files may be ``.gz``, ``.bz2`` or ``.zst``: they are decompressed as a stream
(``tansaku.core.jsonl.open_compressed``), never held in memory.
- ``wac``: the WikipediaAnnotatedCorpus raw ``org/`` sentence files (parenthetical sentences are put back
  in place; splits from ``id/*.id``).
- ``jaquad``: JaQuAD SQuAD-style JSON files; one document per article title.

The readers live in ``tansaku.pipelines.corpus.readers``. Everything streams: memory is bounded by one chunk
of records plus 16 bytes per kept document (dedup).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from tansaku.core import jsontext
from tansaku.core.context import BuildContext
from tansaku.core.engine import Drop, global_stage, map_stage
from tansaku.core.licenses import SOURCE_LICENSES, choose_license
from tansaku.core.out_folder import precheck_out
from tansaku.core.provenance import describe_input
from tansaku.core.store import build_dataset
from tansaku.pipelines.corpus.config import CorpusConfig
from tansaku.pipelines.corpus.readers import (  # noqa: F401 - CorpusInputError, read_documents: re-exported
    FORMATS,
    CorpusInputError,
    JsonlFields,
    detect_format,
    first_record_keys,
    read_documents,
)

PIPELINE_VERSION = "2"  # 2: the config is CorpusConfig's fields
# The corpus's columns, typed the same whatever the input (an empty split still loads with `datasets`).
COLUMN_TYPES = {**{c: pa.string() for c in ("id", "title", "text", "url", "source")}, "meta": pa.string()}


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
    # a number or object is no URL: coercing would invent one
    if url is not None and not isinstance(url, str):
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
            "source": raw["source"], "meta": jsontext.dumps(meta, sort_keys=True)}


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


def _empty_hints(input: Path, fmt: str, fields: JsonlFields) -> dict[str, str]:
    """What fixes a corpus build that kept no document, per ``stage:reason`` (``tansaku.core.out_folder``)."""
    if fmt != "jsonl":
        return {}
    keys = ", ".join(first_record_keys(input)) or "none"
    return {f"normalize:empty_{field}": f"the records have no non-empty {getattr(fields, field)!r} key: name "
                                        f"the key that holds the {field} with --{field}-field (the first "
                                        f"record has keys: {keys})"
            for field in ("title", "text")}


def build_corpus(config: CorpusConfig, out: str | Path, context: BuildContext | None = None) -> dict:
    """Build the document dataset; returns the manifest. Rerunning with the same ``out`` resumes.

    ``config`` holds every setting (``CorpusConfig``). ``keep_rejected`` is off by default: the drops are
    whole documents (duplicates of a dump can be many); turn it on to inspect what ``min_length``/``dedup``
    removed (the ``rejected`` split). ``context``: shards and progress (``BuildContext``)."""
    c = config.check()  # every option's declared bounds, before any work
    fields = JsonlFields(id=c.id_field, title=c.title_field, text=c.text_field, url=c.url_field)
    min_chars = c.min_chars
    input = Path(c.input)
    fmt = detect_format(input) if c.format == "auto" else c.format
    read_documents(input, fmt, fields)  # fail fast on a bad path/format, before any work is set up
    # JSONL: none, push refuses
    chosen = choose_license(c.license, c.license_file, input, SOURCE_LICENSES.get(fmt))
    precheck_out(out, pipeline="corpus", inputs={"--input": input, "--license-file": c.license_file})
    return chosen.write(out, build_dataset(
        out=out, name=c.name or f"corpus-{input.stem}", pipeline="corpus", pipeline_version=PIPELINE_VERSION,
        # a new license: a new recipe
        config={**c.recipe(), "detected_format": fmt, **chosen.recipe()}, seed=0,
        inputs=[describe_input(input)], source=lambda: read_documents(input, fmt, fields),
        stages=corpus_stages(min_chars), context=context, keep_rejected=c.keep_rejected,
        column_types=COLUMN_TYPES, empty_hints=_empty_hints(input, fmt, fields),
        card={"pretty_name": f"tansaku corpus: {input.name}", **chosen.card,
              "task_categories": ["text-retrieval"],
              "description": f"Normalized documents from `{input.name}` ({fmt}) for tansaku's search index "
                             "and synthesis pipelines. `text` is NFKC + whitespace normalized; "
                             "`meta.original_text` keeps the raw text where it differs.",
              "limitations": ["Inherits the license and biases of the source collection.",
                              "Titles of WikipediaAnnotatedCorpus documents are guessed from the first "
                              "sentence (`meta.title_guessed`)." if fmt == "wac" else
                              "Documents are deduplicated by exact normalized text only."]},
    ))

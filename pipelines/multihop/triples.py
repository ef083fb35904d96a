"""Stage 1 of ``synth build multihop``: (subject, relation, object) triples, then entity linking.

Three sources, one record shape::

    {"triple_id", "subject", "relation", "object", "subject_id", "doc_id", "evidence", "source",
     "object_hint"}           # object_hint: the wikilink target an infobox value pointed to, else None

* :func:`infobox_triples` — the infobox templates of an article's wikitext (``meta.source_text``),
  parsed with mwparserfromhell; a value with wikilinks gives one object per link.
* :func:`llm_extract` — an LLM reads the article text and returns JSON triples, each with an evidence
  span; a triple whose evidence does not occur in the text is dropped (``evidence_not_in_text``).
* :func:`read_triples_file` — ``--triples PATH``: JSONL of ``{subject, relation, object}`` or a JEMHopQA
  JSON file, whose ``derivations`` become triples (one per object).

:func:`link_triple` then adds ``subject_key``/``object_key`` (join keys), ``subject_title``/``object_id``/
``object_title`` and ``link`` (how the object was linked) from an :class:`~.entities.ArticleIndex`.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import mwparserfromhell

from tansaku.core import jsontext
from tansaku.core.engine import Drop
from tansaku.core.errors import InputError
from tansaku.core.jsonl import iter_jsonl
from tansaku.core.llm import ChatRequest, ask_json
from tansaku.pipelines.multihop.entities import ArticleIndex, display_name, entity_key, exact_key
from tansaku.pipelines.multihop.relations import Relations

PROMPTS = Path(__file__).with_name("prompts")
EXTRACT_PROMPT = "extract_triples.v1.md"

# Infobox fields that hold pictures, layout or prose rather than a fact about the subject.
_SKIP_FIELD = re.compile(r"画像|image|キャプション|caption|脚注|備考|注釈|サイン|署名|ウェブサイ"
                         r"ト|website|url|公式サイト|ロゴ|logo|色|幅|サイズ|size|地図|map|^名前$|^氏"
                         r"名$|^name$|^タイトル$|^title$",
                         re.IGNORECASE)
_ITEM_SPLIT = re.compile(r"<br\s*/?>|\n\s*[*#]?\s*", re.IGNORECASE)
_SEPARATORS_ONLY = re.compile(r"^[\s、,，/／・]*$")
MAX_OBJECT_CHARS = 60


class TriplesError(InputError):
    """A triples file is missing or malformed; the message names the file and line."""


def triple_id(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:16]


def make_triple(subject: str, relation: str, obj: str, *, source: str, doc_id: str | None = None,
                subject_id: str | None = None, evidence: str | None = None,
                object_hint: str | None = None) -> dict:
    s, r, o = display_name(subject), display_name(relation), display_name(obj)
    return {"triple_id": triple_id(s, r, o, source, str(doc_id)), "subject": s, "relation": r, "object": o,
            "subject_id": subject_id, "doc_id": doc_id, "evidence": evidence, "source": source,
            "object_hint": object_hint}


def doc_meta(doc: dict) -> dict:
    """The ``meta`` column of a document row as a dict (it is a JSON string in the dataset)."""
    meta = doc.get("meta")
    if isinstance(meta, dict):
        return meta
    try:
        return json.loads(meta) if meta else {}
    except json.JSONDecodeError:
        return {}


# ---------------------------------------------------------------- infobox (wikitext)


def _render_template(template) -> str:
    """Dates like {{生年月日と年齢|1949|1|12}} become 1949年1月12日; other templates vanish."""
    name = str(template.name).strip()
    nums = [str(p.value).strip() for p in template.params if not p.showkey][:3]
    if "年月日" in name and len(nums) == 3 and all(n.isdigit() for n in nums):
        return f"{int(nums[0])}年{int(nums[1])}月{int(nums[2])}日"
    return ""


def _value_objects(value) -> list[tuple[str, str | None]]:
    """(object surface, wikilink target or None) for each item of an infobox value."""

    for template in value.filter_templates(recursive=False):
        try:
            value.replace(template, _render_template(template))
        except ValueError:
            pass
    objects = []
    for item in _ITEM_SPLIT.split(str(value)):
        code = mwparserfromhell.parse(item)
        links = code.filter_wikilinks(recursive=False)
        rest = str(code)
        for link in links:
            rest = rest.replace(str(link), "")
        if links and _SEPARATORS_ONLY.match(mwparserfromhell.parse(rest).strip_code()):
            for link in links:
                target = str(link.title).strip()
                text = link.text.strip_code().strip() if link.text else target
                if ":" not in target:  # ファイル:, Category: … are not entities
                    objects.append((text, target))
        else:
            text = code.strip_code().strip()
            if text:
                objects.append((text, None))
    return [(o, h) for o, h in objects if 0 < len(o) <= MAX_OBJECT_CHARS]


def infobox_triples(doc: dict) -> list[dict]:
    """Triples from the infobox templates (``Infobox …``, ``基礎情報 …``) of ``meta.source_text``."""

    wikitext = doc_meta(doc).get("source_text")
    if not wikitext:
        return []
    triples = []
    for template in mwparserfromhell.parse(wikitext).filter_templates(recursive=False):
        name = str(template.name).strip()
        if not (name.lower().startswith("infobox") or name.startswith("基礎情報")):
            continue
        for param in template.params:
            field = unicodedata.normalize("NFKC", str(param.name)).strip()
            if not param.showkey or not field or field.isdigit() or _SKIP_FIELD.search(field):
                continue
            for obj, hint in _value_objects(param.value):
                triples.append(make_triple(doc["title"], field, obj, source="infobox", doc_id=str(doc["id"]),
                                           subject_id=str(doc["id"]), evidence=str(param.value).strip()[:200],
                                           object_hint=hint))
    return triples


# ---------------------------------------------------------------- LLM extraction


def _squash(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def evidence_in_text(evidence: str, text: str) -> bool:
    """The evidence span occurs in the text (NFKC, whitespace ignored).

    >>> evidence_in_text("京都府 出身", "村上春樹は京都府出身の作家。")
    True
    >>> evidence_in_text("大阪府出身", "村上春樹は京都府出身の作家。")
    False
    """
    span = _squash(evidence or "")
    return bool(span) and span in _squash(text)


TRIPLES_SCHEMA = {
    "type": "object",
    "properties": {"triples": {"type": "array", "items": {
        "type": "object",
        "properties": {k: {"type": "string"} for k in ("subject", "relation", "object", "evidence")},
        "required": ["subject", "relation", "object", "evidence"]}}},
    "required": ["triples"],
}


def extract_request(doc: dict, max_chars: int = 3000, seed: int = 0):
    prompt = (PROMPTS / EXTRACT_PROMPT).read_text(encoding="utf-8")
    user = prompt.replace("{title}", doc["title"]).replace("{text}", doc["text"][:max_chars])
    return ChatRequest(messages=[{"role": "user", "content": user}], max_tokens=1024, temperature=0.0,
                       seed=seed, json_schema=TRIPLES_SCHEMA)


def triples_from_llm_answer(doc: dict, answer: dict | Drop, max_chars: int = 3000) -> list[dict | Drop]:
    """One parsed extraction answer (from :func:`tansaku.core.llm.ask_json`) into triples; Drops name
    what was wrong with each rejected one."""

    if isinstance(answer, Drop):
        return [answer]
    items = answer.get("triples")
    if not isinstance(items, list):
        return [Drop("llm_no_triples")]
    out: list[dict | Drop] = []
    text = doc["text"][:max_chars]
    for item in items:
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) and item[k].strip()
                                                 for k in ("subject", "relation", "object")):
            out.append(Drop("llm_triple_incomplete"))
        elif not evidence_in_text(item.get("evidence") or "", text):
            out.append(Drop("evidence_not_in_text"))
        elif len(display_name(item["object"])) > MAX_OBJECT_CHARS:
            out.append(Drop("object_too_long"))
        else:
            is_self = entity_key(item["subject"]) == entity_key(doc["title"])
            out.append(make_triple(doc["title"] if is_self else item["subject"], item["relation"],
                                   item["object"], source="llm", doc_id=str(doc["id"]),
                                   subject_id=str(doc["id"]) if is_self else None,
                                   evidence=item["evidence"]))
    return out


def llm_extract(docs: list[dict], llm, max_chars: int = 3000, seed: int = 0) -> list[list[dict | Drop]]:
    """One extraction call per document (batched); returns each document's triples and drops."""
    answers = ask_json(llm, [extract_request(d, max_chars, seed) for d in docs])
    return [triples_from_llm_answer(d, answer, max_chars) for d, answer in zip(docs, answers)]


# ---------------------------------------------------------------- --triples PATH


def _jemhopqa_triples(items: list, path: Path) -> Iterator[dict]:
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("derivations"), list):
            raise TriplesError(f"{path}: item {n} has no 'derivations' list; is this a JEMHopQA file?")
        subjects = list(dict.fromkeys(display_name(d[0]) for d in item["derivations"]
                                      if isinstance(d, list) and d))
        page_ids = [str(p) for p in item.get("page_ids") or []]
        # page_ids list the articles of the distinct derivation subjects in order (one per hop).
        page_of = dict(zip(subjects, page_ids)) if len(page_ids) == len(subjects) else {}
        for d in item["derivations"]:
            if not (isinstance(d, list) and len(d) == 3 and isinstance(d[2], list)):
                raise TriplesError(f"{path}: item {n} ({item.get('qid')}) has a malformed derivation {d!r}")
            s = display_name(d[0])
            for obj in dict.fromkeys(str(o) for o in d[2]):
                t = make_triple(s, str(d[1]), obj, source="jemhopqa", subject_id=page_of.get(s),
                                doc_id=page_of.get(s))
                t["origin"] = item.get("qid")
                yield t


def read_triples_file(path: str | Path) -> Iterator[dict]:
    """Triples from a JSONL file of ``{subject, relation, object}`` or from a JEMHopQA JSON file."""
    path = Path(path)
    if not path.is_file():
        raise TriplesError(f"--triples {path}: no such file")
    # a sniff: a bad byte is the reader's to name
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        head = f.read(1024).lstrip()
    if head.startswith("["):
        try:
            items = jsontext.loads(path.read_bytes())  # nesting bounded, lone surrogates read as U+FFFD
        except ValueError as e:  # bad JSON or UTF-8, nested too deeply
            raise TriplesError(f"{path}: not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None
        yield from _jemhopqa_triples(items, path)
        return
    for lineno, row in iter_jsonl(path, error=TriplesError):
        if not all(isinstance(row.get(k), str) and row[k].strip() for k in ("subject", "relation", "object")):
            raise TriplesError(f"{path}:{lineno}: needs non-empty string fields subject, relation, object")
        sid = row.get("subject_id")
        yield make_triple(row["subject"], row["relation"], row["object"], source=row.get("source") or "jsonl",
                          subject_id=str(sid) if sid is not None else None,
                          doc_id=str(sid) if sid is not None else None, evidence=row.get("evidence"))


# ---------------------------------------------------------------- linking


def index_from_triples(triples) -> ArticleIndex:
    """Without a corpus, the articles are the triple subjects (each subject has a page of its own)."""
    index = ArticleIndex()
    for t in triples:
        index.add(t.get("subject_id") or f"subject:{exact_key(t['subject'])}", t["subject"])
    return index


def link_stage_triple(triple: dict, index: ArticleIndex, relations: Relations) -> dict:
    """What the build's ``link`` stage does to a triple: statistics and joins read the relation's canonical
    name (``relation``), the derivations keep the source's own spelling (``relation_text``)."""
    return link_triple({**triple, "relation": relations.canonical(triple["relation"]),
                        "relation_text": triple["relation"]}, index)


def link_triple(triple: dict, index: ArticleIndex) -> dict:
    """Add join keys and article links to a triple."""
    subject = index.link(triple["subject"], triple.get("doc_id"))
    obj = None
    if triple.get("object_hint"):
        obj = index.link(triple["object_hint"], triple.get("doc_id"))
    if obj is None:
        obj = index.link(triple["object"], triple.get("doc_id"))
    out = dict(triple)
    if subject is not None:
        out["subject_id"] = out.get("subject_id") or subject[0]
        out["subject_title"] = subject[1]
        out["subject_key"] = exact_key(subject[1])
    else:
        out["subject_title"] = None
        out["subject_key"] = entity_key(triple["subject"])
    out["object_id"], out["object_title"], out["link"] = obj if obj is not None else (None, None, None)
    out["object_key"] = exact_key(obj[1]) if obj is not None else entity_key(triple["object"])
    return out

"""e-Gov law XML files (folders, zip files) → article records (the e-Gov article dataset of contracts.md).

Accepted inputs: 法令標準XML v3 files (root ``Law``), the e-Gov API v2 response wrapper
(``law_data_response`` with ``law_info`` / ``revision_info`` / ``law_full_text``), API v1 /
older bulk wrappers (``DataRoot`` / ``ApplData`` / ``LawFullText``, metadata as ``DataInfo`` attributes
or child elements; ``Delete="true"`` marks deleted provisions). Anything that cannot be read is reported
as a :class:`Skip` with a named reason; one bad file or element never stops the others.

Article ids (``LAWID-NUM``, ``LAWID-sK-NUM`` in the K-th 附則) are unique per build and stay the same from
one revision of a law to the next, so questions and search results keep pointing at "article N of law X".
When several files hold the same law (revisions of it, e.g. ``LAWID_20230401_….xml`` and
``LAWID_20240401_….xml``), only the newest revision is read — the current text is what users of e-Gov
data expect — and the articles of the others are dropped as ``duplicate_law_revision`` (see
:func:`superseded_revisions`). Inputs (folders, zips, zips in zips) are listed and read by
``tansaku.pipelines.egov.sources``.

    python -m tansaku.pipelines.egov.parse ../shared/data/egov            # prints counts per law and skips

    for item in iter_articles(["laws/", "more.zip"]):
        if isinstance(item, Skip): print(item.reason, item.message)
        else: print(item["id"], item["title"])
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from copy import deepcopy
from datetime import date as date_type
from pathlib import Path

import pyarrow as pa
from lxml import etree

from tansaku.core import jsontext
from tansaku.core.errors import InputError
from tansaku.pipelines.egov.extract import (
    ExtractError,
    ascii_int,
    extract_article,
    flatten_lines,
    ruby_readings,
)
from tansaku.pipelines.egov.sources import (
    Skip,
    iter_law_files,
    list_law_sources,
    read_law_source,
    split_source,
)
from tansaku.pipelines.egov.xml_safety import MAX_XML_BYTES, UnsafeXMLError, parse_xml_bytes

ERA_OFFSETS = {"Meiji": 1867, "Taisho": 1911, "Showa": 1925, "Heisei": 1988, "Reiwa": 2018}
LAW_ID = re.compile(r"^\d{3}[A-Z0-9]{9,14}$")
HIERARCHY = {"Part": "PartTitle", "Chapter": "ChapterTitle", "Section": "SectionTitle",
             "Subsection": "SubsectionTitle", "Division": "DivisionTitle"}
# The ``meta`` column of an article row, typed (``article_meta`` reads it, and the JSON text older builds
# wrote).
ARTICLE_META = pa.struct([
    ("source_file", pa.string()), ("parser", pa.string()), ("path", pa.list_(pa.string())),
    ("abbrev", pa.list_(pa.string())), ("kana", pa.string()),
    ("ruby", pa.list_(pa.struct([("base", pa.string()), ("reading", pa.string())]))),
    ("is_deleted", pa.bool_()), ("kind", pa.string()), ("suppl_label", pa.string()),
    ("amend_law_num", pa.string()), ("fallback_reason", pa.string()),
])
_KANJI_DIGITS = {c: i for i, c in enumerate("〇一二三四五六七八九")}
_KANJI_UNITS = {"十": 10, "百": 100, "千": 1000}


def kanji_to_int(text: str) -> int | None:
    """Kanji numeral (as in article titles) → int; arabic and full-width digits pass through.

    >>> kanji_to_int("三百九十八"), kanji_to_int("二十二"), kanji_to_int("十"), kanji_to_int("１２")
    (398, 22, 10, 12)
    """
    text = unicodedata.normalize("NFKC", text)
    if text.isdigit():  # ASCII after NFKC (full-width digits), bounded: int() refuses over 4300 digits
        return ascii_int(text)
    total, current = 0, 0
    for ch in text:
        if ch in _KANJI_DIGITS:
            current = current * 10 + _KANJI_DIGITS[ch] if current else _KANJI_DIGITS[ch]
        elif ch in _KANJI_UNITS:
            total += (current or 1) * _KANJI_UNITS[ch]
            current = 0
        else:
            return None
    return total + current if text else None


def article_num_from_title(title: str) -> str | None:
    """``第三条の二`` → ``3_2`` (the form of e-Gov's ``Num`` attribute).

    >>> article_num_from_title("第三百九十八条の二十二"), article_num_from_title("第１条")
    ('398_22', '1')
    """
    m = re.match(r"第([〇一二三四五六七八九十百千0-9０-９]+)条((?:の[〇一二三四五六七八九十百千0-9０-９]+)*)",
                 title)
    if not m:
        return None
    nums = [kanji_to_int(m.group(1))] + [kanji_to_int(b) for b in m.group(2).split("の")[1:]]
    return "_".join(str(n) for n in nums) if None not in nums else None


# ---------------------------------------------------------------- law metadata


def _find_text(root: etree._Element, *tags: str) -> str | None:
    for tag in tags:
        el = next(root.iter(tag), None)
        if el is not None and (el.text or "").strip():
            return el.text.strip()
        for info in root.iter("DataInfo"):  # older bulk files carry metadata as attributes
            if info.get(tag):
                return info.get(tag).strip()
    return None


def law_metadata(root: etree._Element, law: etree._Element, source: str) -> dict:
    """Law-level fields, from the wrapper when there is one, else from the ``Law`` element and file name."""
    path, member = split_source(source)
    stem = Path(member if member is not None else path).stem
    law_id = _find_text(root, "law_id", "LawId") if root is not law else None
    if not law_id and LAW_ID.match(stem.split("_")[0]):
        law_id = stem.split("_")[0]
    era, year = law.get("Era", ""), law.get("Year", "")
    law_type = law.get("LawType", "") or _find_text(root, "law_type") or ""
    if not law_id:  # no id anywhere: a stable one from the law number's parts
        law_id = re.sub(r"[^0-9A-Za-z]+", "", f"{era}{year}{law_type}{law.get('Num', '')}") or stem
    title_el = law.find("LawBody/LawTitle")
    title = ""
    if title_el is not None:
        plain = deepcopy_without_rt(title_el)
        title = unicodedata.normalize("NFKC", "".join(plain.itertext()).strip())
    title = title or _find_text(root, "law_title", "LawTitle") or ""
    date = _find_text(root, "promulgation_date", "PromulgationDate") if root is not law else None
    if not date and era in ERA_OFFSETS and law.get("PromulgateMonth"):
        date = _promulgation_date(era, year, law.get("PromulgateMonth"), law.get("PromulgateDay") or "1",
                                  source)
    abbrev = (title_el.get("Abbrev") or "") if title_el is not None else ""
    return {"law_id": law_id, "law_num": (law.findtext("LawNum") or _find_text(root, "law_num") or "")
            .strip(), "law_title": title, "law_type": law_type, "era": era, "promulgation_date": date,
            "abbrev": [a for a in re.split(r"[,、，]", abbrev) if a.strip()],
            "kana": title_el.get("Kana", "") if title_el is not None else ""}


class LawMetadataError(InputError):
    """A law's own metadata cannot be read (a promulgation date of ``Year="²"``): that law is dropped
    (``bad_law_metadata``), the others are read."""


def _promulgation_date(era: str, year: str, month: str, day: str, source: str) -> str:
    """``YYYY-MM-DD`` from the ``Law`` element's era-year, month and day attributes (ASCII digits only)."""
    numbers = [ascii_int(year, 3), ascii_int(month, 2), ascii_int(day, 2)]
    try:
        if None in numbers:
            raise ValueError("not numbers")
        return date_type(ERA_OFFSETS[era] + numbers[0], numbers[1], numbers[2]).isoformat()
    except ValueError:
        shown = ", ".join(f"{k}={v[:20]!r}" for k, v in (("Year", year), ("PromulgateMonth", month),
                                                          ("PromulgateDay", day)))
        raise LawMetadataError(f"{source}: <Law {shown}> is not a promulgation date") from None


def deepcopy_without_rt(el: etree._Element) -> etree._Element:
    el = deepcopy(el)
    etree.strip_elements(el, "Rt", with_tail=False)
    return el


_NAME_DATE = re.compile(r"^[0-9A-Z]{12,17}_(\d{8})(?:_|$)")  # e-Gov naming: LAWID_YYYYMMDD_AMENDID


def revision_date(root: etree._Element, law: etree._Element, source: str) -> str:
    """The date (``YYYYMMDD``; ``""`` when unknown) from which a law file's text is in force.

    Taken from the API v2 wrapper (``amendment_enforcement_date``, ``law_revision_id``), else the e-Gov
    file name's date stamp (``LAWID_YYYYMMDD_AMENDID.xml``), else an old bulk file's ``Updated``.
    """
    def digits(v: str | None) -> str:
        return re.sub(r"[^0-9]", "", v or "")[:8]

    if root is not law:
        if date := digits(_find_text(root, "amendment_enforcement_date")):
            return date
        if m := _NAME_DATE.match(_find_text(root, "law_revision_id") or ""):
            return m.group(1)
    path, member = split_source(source)
    if m := _NAME_DATE.match(Path(member if member is not None else path).name):
        return m.group(1)
    return digits(_find_text(root, "Updated")) if root is not law else ""


def superseded_revisions(sources: Iterable[str], max_bytes: int = MAX_XML_BYTES) -> dict[str, str]:
    """``{older source: newest source}`` for every law file whose law another file holds in a newer revision.

    Article ids are ``LAWID[-sK]-NUM`` and must be unique per build, so only one revision of a law can be
    kept: the newest (latest :func:`revision_date`; equal dates: the last source name, so the choice is
    stable). Reads and parses every file once more (no extraction); unreadable files are left to the
    parse, which reports them.
    """
    by_law: dict[str, list[tuple[str, str]]] = {}
    for src in sources:
        data = read_law_source(src, max_bytes)
        if isinstance(data, Skip):
            continue
        try:
            root = parse_xml_bytes(data, src, max_bytes)
        except UnsafeXMLError:
            continue
        law = root if root.tag == "Law" else next(root.iter("Law"), None)
        if law is None or law.find("LawBody") is None:
            continue
        try:
            law_id = law_metadata(root, law, src)["law_id"]
        except LawMetadataError:  # the parse drops this file with its reason; it supersedes nothing
            continue
        by_law.setdefault(law_id, []).append((revision_date(root, law, src), src))
    out = {}
    for revisions in by_law.values():
        newest = max(revisions)[1]
        out |= {src: newest for _, src in revisions if src != newest}
    return out


# ---------------------------------------------------------------- records


def _provision_units(law: etree._Element) -> Iterator[tuple[etree._Element, int | None, etree._Element]]:
    """(element to extract, supplementary provision index or None, its provision)."""
    body = law.find("LawBody")
    main = body.find("MainProvision")
    provisions = [(main, None)] if main is not None else []
    provisions += [(sp, k) for k, sp in enumerate(body.iterchildren("SupplProvision"))]
    for prov, k in provisions:
        articles = list(prov.iter("Article"))
        for art in articles:
            yield art, k, prov
        if not articles and prov.find("Paragraph") is not None:
            yield prov, k, prov  # a provision made of bare paragraphs (short laws, most 附則)


def _record(el, k, prov, meta: dict, source: str, prefer: str) -> dict:
    content, fallback_why = extract_article(el, prefer=prefer)
    is_article = el.tag == "Article"
    num = el.get("Num") if is_article else ""
    if is_article and not num:
        num = article_num_from_title(content["title"]) or ""
    label = norm_label(prov.findtext("SupplProvisionLabel")) if k is not None else ""
    if not is_article:
        content["title"] = label
    path = [norm_label("".join(a.find(HIERARCHY[a.tag]).itertext()))
            for a in reversed(list(el.iterancestors()))
            if a.tag in HIERARCHY and a.find(HIERARCHY[a.tag]) is not None]
    lines = flatten_lines(content)
    text = "\n".join(lines)
    deleted = (el.get("Delete") == "true"
               or re.fullmatch(r"(（[^）]*）\n)?\S*[\u3000 ]?削除", text) is not None)
    article_title = content["title"]
    doc_title = " ".join(p for p in (meta["law_title"], label if is_article else "", article_title) if p)
    record_meta = {"source_file": source, "parser": content["parser"], "path": path,
                   "abbrev": meta["abbrev"], "kana": meta["kana"], "ruby": ruby_readings(el),
                   "is_deleted": deleted, "kind": "article" if is_article else "paragraphs",
                   "suppl_label": label if k is not None else None,
                   "amend_law_num": prov.get("AmendLawNum") if k is not None else None,
                   "fallback_reason": fallback_why if fallback_why and prefer == "ja-law-parser" else None}
    return {
        "id": meta["law_id"] + (f"-s{k}" if k is not None else "") + (f"-{num}" if num else "-p"),
        "title": unicodedata.normalize("NFKC", doc_title), "text": text,
        "url": f"https://laws.e-gov.go.jp/law/{meta['law_id']}", "source": "egov",
        "meta": record_meta,
        "law_id": meta["law_id"], "law_num": meta["law_num"], "law_title": meta["law_title"],
        "law_type": meta["law_type"], "era": meta["era"], "promulgation_date": meta["promulgation_date"],
        "article_num": num, "article_title": article_title, "caption": content["caption"] or "",
        "paragraphs": jsontext.dumps(content["paragraphs"]), "is_suppl": k is not None,
    }


def article_meta(article: dict) -> dict:
    """An article row's ``meta`` as a dict (a struct since articles version 3; JSON text before)."""
    meta = article.get("meta") or {}
    return json.loads(meta) if isinstance(meta, str) else dict(meta)


def norm_label(text: str | None) -> str:
    return re.sub(r"[ \t\r\n]+", " ", text or "").strip()


def parse_law_bytes(data: bytes, source: str, prefer: str = "ja-law-parser") -> Iterator[dict | Skip]:
    """All article records of one law file, in document order, with a Skip for anything unreadable."""
    try:
        root = parse_xml_bytes(data, source)
    except UnsafeXMLError as e:
        yield Skip(source, e.reason, str(e))
        return
    law = root if root.tag == "Law" else next(root.iter("Law"), None)
    if law is None:
        yield Skip(source, "no_law_element", f"{source}: no <Law> element (root is <{root.tag}>)")
        return
    if law.find("LawBody") is None:
        yield Skip(source, "no_law_body", f"{source}: <Law> has no <LawBody>")
        return
    try:
        meta = law_metadata(root, law, source)
    except LawMetadataError as e:
        yield Skip(source, "bad_law_metadata", str(e))
        return
    seen: dict[str, int] = {}
    for el, k, prov in _provision_units(law):
        try:
            record = _record(el, k, prov, meta, source, prefer)
        except ExtractError as e:
            where = el.get("Num") or el.findtext("ArticleTitle") or el.tag
            yield Skip(source, "unreadable_article", f"{source}: article {where}: {e}")
            continue
        if not record["text"]:
            yield Skip(source, "empty_article", f"{source}: {record['id']} has no text")
            continue
        n = seen.get(record["id"], 0)
        seen[record["id"]] = n + 1
        if n:  # broken files repeat numbers; keep both, ids stay unique
            record["id"] += f"-dup{n}"
        yield record


def iter_articles(paths: Iterable[str | Path], prefer: str = "ja-law-parser") -> Iterator[dict | Skip]:
    """Every article record under ``paths``; an older revision of a law also given newer is one Skip."""
    paths = list(paths)
    superseded = superseded_revisions(s for s in list_law_sources(paths) if not isinstance(s, Skip))
    for item in iter_law_files(paths):
        if isinstance(item, Skip):
            yield item
        elif item[0] in superseded:
            yield Skip(item[0], "duplicate_law_revision",
                       f"{item[0]}: an older revision of the law in {superseded[item[0]]}; the newest is "
                       f"kept")
        else:
            yield from parse_law_bytes(item[1], item[0], prefer)


def main(argv: list[str]) -> None:
    laws: Counter = Counter()
    for item in iter_articles(argv or ["."]):
        if isinstance(item, Skip):
            print(f"skip {item.reason}: {item.message}", file=sys.stderr)
        else:
            laws[(item["law_title"], item["is_suppl"])] += 1
    for (title, suppl), n in sorted(laws.items()):
        print(f"{title}\t{'附則' if suppl else '本則'}\t{n}")


if __name__ == "__main__":
    main(sys.argv[1:])

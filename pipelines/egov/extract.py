"""One ``Article`` (or a provision's bare paragraphs) → a nested JSON-able structure, two ways.

``extract_article(el)`` first builds ja-law-parser's typed model from the already-parsed (and
safety-checked) lxml element (``Article.from_xml_tree``: no second parse, no entity handling of its own),
and falls back to a plain lxml walk when ja-law-parser rejects the element (real laws deviate from the
XSD: a ``Paragraph`` without ``ParagraphNum``, an ``Article`` without paragraphs, inline tags it does not
know). Both return the same shape, so later stages cannot tell them apart except by ``parser``::

    {"title": "第三条の二", "caption": "（意思能力）", "parser": "ja-law-parser",
     "paragraphs": [{"num": 1, "label": "", "caption": None, "text": "…", "extra": ["表の行…"],
                     "items": [{"num": "1", "title": "一", "text": "…", "extra": [], "items": [...]}]}]}

``text`` holds the sentences (Ruby base text only; readings are collected by ``ruby_readings``);
``extra`` holds tables (one line per row, cells joined by an ideographic space), lists and other
structures flattened to lines.
"""

from __future__ import annotations

import re
from copy import deepcopy

from ja_law_parser.model import Article, Paragraph
from lxml import etree

from tansaku.core.errors import InputError

_WS = re.compile(r"[ \t\r\n]+")
CELL_SEP = "\u3000"


def norm(text: str | None) -> str:
    """Collapse XML layout whitespace (ASCII only: the ideographic space is part of law text)."""
    return _WS.sub(" ", text).strip() if text else ""


def join_sentences(texts) -> str:
    """A paragraph's ``Sentence`` texts as one text: as written when each ends in 。; old laws write no 。, so
    there a sentence not ending in it is kept apart from the next by an ideographic space
    (…之ヲ決ス　可否同数…).

    >>> (join_sentences(["甲ハ乙ヲ決ス", "可否同数ナルトキハ議長之ヲ決ス"]),
    ...  join_sentences(["甲は決する。", "ただし、…。"]))
    ('甲ハ乙ヲ決ス\u3000可否同数ナルトキハ議長之ヲ決ス', '甲は決する。ただし、…。')
    """
    out = ""
    for text in texts:
        if out and text and not out.endswith(("。", "\u3000")):
            out += "\u3000"
        out += text
    return out


class ExtractError(InputError):
    """Neither ja-law-parser nor the lxml walk could read the element."""


_ASCII_DIGITS = re.compile(r"[0-9]+")


def ascii_int(value: str | None, max_digits: int = 9) -> int | None:
    """``value`` (an XML attribute) as an int when it is 1 to ``max_digits`` ASCII digits, else None.

    Not ``str.isdigit``: it accepts ``²`` and other digits that ``int()`` refuses; and ``int()`` refuses
    more than 4300 digits. One hostile attribute must cost its law, never the build.

    >>> ascii_int("05"), ascii_int("²"), ascii_int("十二"), ascii_int("9" * 5000), ascii_int(None)
    (5, None, None, None, None)
    """
    if not isinstance(value, str) or len(value) > max_digits or not _ASCII_DIGITS.fullmatch(value):
        return None
    return int(value)


# ---------------------------------------------------------------- ja-law-parser path


def _jlp_sentence_text(container) -> str:
    if container is None:
        return ""
    parts = []
    if container.sentences:
        parts.append(join_sentences(s.text for s in container.sentences))
    for column in getattr(container, "columns", None) or []:
        parts.append(join_sentences(s.text for s in column.sentences or []))
    return norm(CELL_SEP.join(p for p in parts if p))


def _jlp_table_lines(table) -> list[str]:
    lines = []
    for row in table.table_header_rows or []:
        # ja-law-parser 0.3 keeps only the first TableHeaderColumn of a row (and iterates its children,
        # so headers come out empty); read the row's header cells through that element's parent.
        raw = row.table_header_column_raw
        cells = raw.getparent().iterchildren("TableHeaderColumn") if raw is not None else []
        lines.append(CELL_SEP.join(norm("".join(c.xpath(".//text()[not(ancestor::Rt)]"))) for c in cells))
    for row in table.table_rows:
        lines.append(CELL_SEP.join(norm("".join(c.texts())) for c in row.table_columns))
    return [line for line in lines if line]


def _jlp_extra(node, sentence=None) -> list[str]:
    lines: list[str] = []
    if sentence is not None and getattr(sentence, "table", None) is not None:
        lines += _jlp_table_lines(sentence.table)
    for name in ("amend_provisions", "classes", "table_structs", "fig_structs", "style_structs", "lists"):
        for struct in getattr(node, name, None) or []:
            if name == "table_structs":
                if struct.table_struct_title is not None:
                    lines.append(norm(struct.table_struct_title.text))
                for remarks in struct.pre_remarks or []:
                    lines += [norm(t) for t in remarks.texts()]
                lines += _jlp_table_lines(struct.table)
                for remarks in struct.post_remarks or []:
                    lines += [norm(t) for t in remarks.texts()]
            else:
                lines += [norm(t) for t in struct.texts()]
    return [line for line in lines if line]


def _jlp_item(item, level: int) -> dict:
    prefix = "item" if level == 0 else f"subitem{level}"
    title = getattr(item, f"{prefix}_title")
    sentence = getattr(item, f"{prefix}_sentence")
    children = getattr(item, "subitems" if level == 0 else f"subitems{level + 1}", None) or []
    return {"num": item.num, "title": norm(title.text) if title is not None else "",
            "text": _jlp_sentence_text(sentence), "extra": _jlp_extra(item, sentence),
            "items": [_jlp_item(c, level + 1) for c in children]}


def _jlp_paragraph(p) -> dict:
    return {"num": p.num, "label": norm(p.paragraph_num.text),
            "caption": norm(p.paragraph_caption.text) if p.paragraph_caption is not None else None,
            "text": _jlp_sentence_text(p.paragraph_sentence), "extra": _jlp_extra(p),
            "items": [_jlp_item(i, 0) for i in p.items or []]}


def _extract_jlp(el: etree._Element) -> dict:
    if el.tag == "Article":
        art = Article.from_xml_tree(el)
        return {"title": norm(art.article_title.text),
                "caption": norm(art.article_caption.text) if art.article_caption is not None else None,
                "paragraphs": [_jlp_paragraph(p) for p in art.paragraphs], "parser": "ja-law-parser"}
    # A provision with bare paragraphs: parse each paragraph on its own.
    paragraphs = [_jlp_paragraph(Paragraph.from_xml_tree(p)) for p in el.iterchildren("Paragraph")]
    return {"title": "", "caption": None, "paragraphs": paragraphs, "parser": "ja-law-parser"}


# ---------------------------------------------------------------- lxml fallback


def _lx_text(el) -> str:
    return norm("".join(el.itertext())) if el is not None else ""


def _lx_sentence_text(el) -> str:
    if el is None:
        return ""
    sentences = join_sentences(_lx_text(s) for s in el.iterchildren("Sentence"))
    columns = [_lx_text(c) for c in el.iterchildren("Column")]
    if not sentences and not columns:  # text put straight into the container
        return _lx_text(el) if el.find("Table") is None else ""
    return norm(CELL_SEP.join(p for p in [sentences, *columns] if p))


def _lx_lines(el) -> list[str]:
    """Any structure → text lines: table rows as cells joined, everything with sentences as one line."""
    if el.tag in ("TableRow", "TableHeaderRow"):
        return [CELL_SEP.join(_lx_text(c) for c in el)]
    if el.tag.endswith(("Title", "Sentence", "Label")) or el.find("Sentence") is not None or len(el) == 0:
        text = _lx_sentence_text(el) if el.find("Sentence") is not None else _lx_text(el)
        return [text] if text else []
    lines: list[str] = []
    for child in el:
        if isinstance(child.tag, str):
            lines += _lx_lines(child)
    return [line for line in lines if line]


def _lx_node_parts(el, title_tag: str, sentence_tag: str, skip: set[str]):
    sentence = el.find(sentence_tag)
    extra: list[str] = []
    if sentence is not None and sentence.find("Table") is not None:
        extra += _lx_lines(sentence.find("Table"))
    for child in el:
        if (isinstance(child.tag, str) and child.tag not in skip
                and child.tag not in (title_tag, sentence_tag)):
            extra += _lx_lines(child)
    return _lx_sentence_text(sentence), extra


def _lx_item(el) -> dict:
    tag = el.tag
    children = [c for c in el if isinstance(c.tag, str) and re.fullmatch(r"Subitem\d+", c.tag)]
    text, extra = _lx_node_parts(el, f"{tag}Title", f"{tag}Sentence", {c.tag for c in children})
    return {"num": el.get("Num", ""), "title": _lx_text(el.find(f"{tag}Title")), "text": text,
            "extra": extra, "items": [_lx_item(c) for c in children]}


def _lx_paragraph(el, index: int) -> dict:
    caption = el.find("ParagraphCaption")
    text, extra = _lx_node_parts(el, "ParagraphNum", "ParagraphSentence", {"ParagraphCaption", "Item"})
    num = el.get("Num")
    return {"num": index if ascii_int(num) is None else ascii_int(num),
            "label": _lx_text(el.find("ParagraphNum")),
            "caption": _lx_text(caption) if caption is not None else None, "text": text, "extra": extra,
            "items": [_lx_item(i) for i in el.iterchildren("Item")]}


def _extract_lxml(el: etree._Element) -> dict:
    el = deepcopy(el)
    etree.strip_elements(el, "Rt", with_tail=False)  # keep Ruby base text, drop readings
    paragraphs = [_lx_paragraph(p, i) for i, p in enumerate(el.iterchildren("Paragraph"), 1)]
    if el.tag == "Article" and not paragraphs:
        # Deviant laws put sentences straight under the article; keep them as one paragraph.
        rest = [c for c in el if isinstance(c.tag, str) and c.tag not in ("ArticleTitle", "ArticleCaption")]
        lines = [line for c in rest for line in _lx_lines(c)]
        if lines:
            paragraphs = [{"num": 1, "label": "", "caption": None, "text": lines[0], "extra": lines[1:],
                           "items": []}]
    caption = el.find("ArticleCaption")
    return {"title": _lx_text(el.find("ArticleTitle")),
            "caption": _lx_text(caption) if caption is not None else None,
            "paragraphs": paragraphs, "parser": "lxml"}


def extract_article(el: etree._Element, prefer: str = "ja-law-parser") -> tuple[dict, str | None]:
    """Return (content, why ja-law-parser was not used or None). ``prefer="lxml"`` skips ja-law-parser."""
    why = "lxml preferred"
    if prefer == "ja-law-parser":
        try:
            return _extract_jlp(el), None
        except Exception as e:  # pydantic ValidationError, NotImplementedError for unknown inline tags, …
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    try:
        return _extract_lxml(el), why
    except Exception as e:
        raise ExtractError(f"{type(e).__name__}: {e}") from e


def ruby_readings(el: etree._Element) -> list[dict]:
    """Ruby base text and reading pairs, e.g. ``[{"base": "罹", "reading": "り"}]``."""
    out = []
    for ruby in el.iter("Ruby"):
        reading = "".join(_lx_text(rt) for rt in ruby.iterchildren("Rt"))
        base = norm((ruby.text or "") + "".join(
            "".join(c.itertext()) + (c.tail or "") if c.tag != "Rt" else (c.tail or "") for c in ruby))
        out.append({"base": base, "reading": reading})
    return out


def flatten_lines(content: dict) -> list[str]:
    """The article as display lines: caption, ``第三条の二　…``, ``２　…``, ``一　…`` and table rows."""
    lines = [content["caption"]] if content.get("caption") else []

    def node(title: str, n: dict) -> None:
        head = CELL_SEP.join(p for p in (title, n["text"]) if p)
        if head:
            lines.append(head)
        lines.extend(n["extra"])
        for item in n["items"]:
            node(item["title"], item)

    for i, p in enumerate(content["paragraphs"]):
        if p.get("caption"):
            lines.append(p["caption"])
        node(content["title"] if i == 0 else p["label"], p)
    if not content["paragraphs"] and content.get("title"):
        lines.append(content["title"])
    return lines

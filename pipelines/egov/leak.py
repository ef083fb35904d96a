"""Independent leak checker for e-Gov questions: does a question or a choice give away where the answer is?

A row leaks when its question or any choice names the source law (title, title without a trailing
法/令/規則, abbreviations, reading) or contains a provision number in any spelling: 第○条 / 第○項 /
第○号 (kanji, arabic, full-width digits, with spaces), branch numbers (条の二), bare ``三条``/``２項``,
``Article 3``, or an e-Gov law / revision id. It shares no code with the generators on purpose: it is
run over the final rows, and the count it reports must be 0.

    from tansaku.pipelines.egov.leak import find_leaks
    find_leaks({"question": "民法第三条の二によれば…", "choices": [...]}, law_titles=["民法"])
    # -> [("law_title", "民法"), ("provision_number", "第三条"), ("branch_number", "条の二")]

    python -m tansaku.pipelines.egov.leak OUT_DIR     # audit a built dataset; exits 1 when anything leaks
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable

from tansaku.core import jsontext
from tansaku.core.store import iter_rows

_NUM = r"[0-9〇一二三四五六七八九十百千万零壱弐参]+"
_SP = r"[\s\u3000]*"
PATTERNS: dict[str, re.Pattern] = {
    # 第三条, 第 3 条, 第三項, 第十二号, 第一編/章/節/款/目 (structure numbers point at the article too)
    "provision_number": re.compile(rf"第{_SP}{_NUM}{_SP}(?:条|項|号|編|章|節|款|目)"),
    # 条の二, 条の十五: branch article numbers even without 第
    "branch_number": re.compile(rf"(?:条|号){_SP}の{_SP}{_NUM}"),
    # 三条, 12項, ２号 written without 第
    "bare_number": re.compile(rf"(?<![第0-9〇一二三四五六七八九十百千万]){_NUM}{_SP}(?:条|項)(?![件約例文理"
                              rf"目])"),
    "english_article": re.compile(r"\b(?:Art(?:icle)?|Para(?:graph)?|Item|Sec(?:tion)?)\.?\s*[0-9]+", re.I),
    # e-Gov law ids (129AC0000000089) and revision ids (…_20230614_505AC0000000053)
    "egov_id": re.compile(r"(?<![0-9A-Za-z])[0-9]{3}[A-Z]{2}[0-9A-Z]{10}(?![0-9A-Za-z])"),
    "law_number": re.compile(rf"(?:明治|大正|昭和|平成|令和){_SP}{_NUM}{_SP}年{_SP}(?:法律|政令|省令|勅令|規"
                             rf"則|告示)"),
}


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def law_name_forms(law_titles: Iterable[str] = (), abbrevs: Iterable[str] = (),
                   kana: Iterable[str] = ()) -> list[str]:
    """Every spelling of the law's name to look for: title, title without its last 法/令/規則, abbreviations.

    >>> law_name_forms(["行政手続法"], ["行手法"])
    ['行手法', '行政手続', '行政手続法']
    """
    forms = set()
    for title in law_titles:
        title = _nfkc(title).strip()
        if not title:
            continue
        forms.add(title)
        stem = re.sub(r"(?:法律|法|令|規則|規程)$", "", title)
        # A stem of one or two characters (民法 → 民) would match ordinary words; keep only real names.
        if len(stem) >= 3:
            forms.add(stem)
    forms.update(_nfkc(a).strip() for a in abbrevs if a and len(_nfkc(a).strip()) >= 2)
    forms.update(_nfkc(k).strip() for k in kana if k and len(k.strip()) >= 4)
    return sorted(forms)


def find_leaks_in_text(text: str, names: Iterable[str] = (),
                       ids: Iterable[str] = ()) -> list[tuple[str, str]]:
    """``[(kind, matched text)]`` for one string.

    >>> find_leaks_in_text("第３条の２第一項に定める期間は？")
    [('provision_number', '第3条'), ('provision_number', '第一項'), ('branch_number', '条の2')]
    """
    # NFKC first: full-width digits and ideographic spaces become the ASCII forms the patterns expect.
    norm = _nfkc(text)
    found = [(kind, m.group(0)) for kind, pattern in PATTERNS.items() for m in pattern.finditer(norm)]
    for name in names:
        if name and name in norm:
            found.append(("law_title", name))
    for i in ids:
        if i and i in norm:
            found.append(("article_id", i))
    return found


def find_leaks(row: dict, law_titles: Iterable[str] = (), abbrevs: Iterable[str] = (),
               kana: Iterable[str] = (), ids: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Leaks in a row's ``question`` and ``choices`` (the parts a model sees before searching)."""
    names = law_name_forms(law_titles, abbrevs, kana)
    texts = [row.get("question") or "", *(row.get("choices") or [])]
    out: list[tuple[str, str]] = []
    for text in texts:
        out += find_leaks_in_text(str(text), names, ids)
    return out


def row_leaks(row: dict) -> list[tuple[str, str]]:
    """Leaks of a dataset row, taking the law's names and ids from the row's own columns
    (``law_title``, ``law_abbrev`` comma-separated, ``law_kana``, ``law_id``, ``article_id``)."""
    abbrevs = [a for a in str(row.get("law_abbrev") or "").split(",") if a]
    ids = [row.get("article_id") or "", row.get("law_id") or ""]
    return find_leaks(row, [row.get("law_title") or ""], abbrevs, [row.get("law_kana") or ""], ids)


def audit(rows: Iterable[dict]) -> Counter:
    """Count leaking rows by kind over a whole dataset."""
    counts: Counter = Counter()
    for row in rows:
        for kind in sorted({k for k, _ in row_leaks(row)}):  # the report's key order, every run
            counts[kind] += 1
    return counts


if __name__ == "__main__":
    result = audit(iter_rows(sys.argv[1]))
    print(jsontext.dumps({"leaking_rows_by_kind": dict(result)}))
    sys.exit(1 if result else 0)

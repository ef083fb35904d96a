"""What both search backends return, plus the piece they share: snippets (what to mark, and the window). The
embedded backend's per-query timeout is workers.py; OpenSearch enforces its own.

    >>> make_snippet("鎌倉幕府の御家人。足利貞氏の次男。", ["御家人"], 40)
    '鎌倉幕府の【御家人】。足利貞氏の次男。'
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass, field

MARK_OPEN, MARK_CLOSE = "【", "】"


@dataclass
class Hit:
    doc_id: str
    title: str
    score: float
    snippet: str
    chunk: int = 0      # passage position inside the document
    offset: int = 0     # character offset of that passage in the document text

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchResult:
    hits: list[Hit] = field(default_factory=list)
    took_ms: float = 0.0
    total: int | None = None  # matching passages, when the backend counts them

    def to_dict(self) -> dict:
        return {"hits": [{k: h.to_dict()[k] for k in ("doc_id", "title", "score", "snippet")}
                         for h in self.hits],
                "took_ms": round(self.took_ms, 3)}


def highlight_texts(q: dict) -> list[str]:
    """Texts worth marking in snippets: the positive match/phrase texts of a canonical query."""
    (kind, body), = q.items()
    if kind in ("match", "match_phrase"):
        return [spec["query"] for spec in body.values()]
    if kind == "multi_match":
        return [body["query"]]
    if kind == "bool":
        out = []
        for occ in ("must", "should", "filter"):
            for c in body[occ]:
                out += highlight_texts(c)
        return out
    return []


def _needles(texts: list[str]) -> list[str]:
    out = []
    for t in texts:
        for w in unicodedata.normalize("NFKC", t).lower().split():
            if w not in out:
                out.append(w)
    return sorted(out, key=len, reverse=True)


def _pieces(needle: str, low: str) -> list[str]:
    """Greedy left-to-right longest substrings (2+ chars) of ``needle`` that occur in ``low``."""
    out, i = [], 0
    while i < len(needle) - 1:
        j = len(needle)
        while j > i + 1 and needle[i:j] not in low:
            j -= 1
        if j > i + 1:
            out.append(needle[i:j])
            i = j
        else:
            i += 1
    return out


def make_snippet(text: str, highlight: list[str], max_chars: int) -> str:
    """A window of at most ``max_chars`` characters around the first good match, matches in 【】.

    Whole query words are preferred; when none occurs (a char-level ``match`` hits scattered
    characters) their longest pieces that occur are marked instead, so the snippet still shows why.
    """
    low = text.lower()
    needles = _needles(highlight)
    found = [n for n in needles if n in low]
    if not found:
        # longest first, ties by text: a set's own order follows PYTHONHASHSEED, and where two pieces
        # overlap the first one marked wins, so the snippet (and every prompt that quotes it) would vary
        found = sorted({p for n in needles for p in _pieces(n[:40], low)}, key=lambda p: (-len(p), p))
    start = 0
    if found:
        first = min(low.find(n) for n in found)
        start = max(0, first - max_chars // 4)
    end = min(len(text), start + max_chars)
    start = max(0, min(start, end - max_chars))
    window, wlow = text[start:end], low[start:end]
    marks: list[tuple[int, int]] = []
    for n in found:
        i = wlow.find(n)
        while i != -1:
            if not any(a < i + len(n) and i < b for a, b in marks):
                marks.append((i, i + len(n)))
            i = wlow.find(n, i + len(n))
    out, last = [], 0
    for a, b in sorted(marks):
        out += [window[last:a], MARK_OPEN, window[a:b], MARK_CLOSE]
        last = b
    out.append(window[last:])
    return ("…" if start > 0 else "") + "".join(out) + ("…" if end < len(text) else "")


"""Deterministic four-choice cloze questions from article records; needs no LLM.

Targets (``kind`` ``term`` or ``number``), at most one per sentence:
  * defined terms: ``「館長」とは…をいう`` / ``（以下「計画」という。）`` / definition lists
    (term　definition), distractors = other terms defined in the same law;
  * periods: ``十五日``, ``六月``, ``二十年``, ``三週間`` (not dates such as ``十月一日``);
  * counts, amounts and measures: ``十冊``, ``五人``, ``二十万円``, ``三回``, ``五十メートル``, ``三割``.
Period and count distractors come from sibling articles of the same law with the same unit (nearest
articles first), then from nearby numbers (×2, ÷2, ±1 …) when the law has too few.

    from tansaku.pipelines.egov.cloze import law_pools, cloze_questions
    pools = law_pools(article_records)
    rows = cloze_questions(article, pools[article["law_id"]], seed=0, per_article=2)
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from tansaku.core.engine import rng_for
from tansaku.pipelines.egov.lawindex import ByPosition, LawText
from tansaku.pipelines.egov.parse import article_meta
from tansaku.pipelines.egov.quote import ELIDED, elide

_K = "〇一二三四五六七八九十百千万"
PERIOD = re.compile(rf"(?<![{_K}年月])(?<!令和)(?<!平成)(?<!昭和)(?<!大正)(?<!明治)([{_K}]+)(年|箇月|か"
                    rf"月|月|週間|日|時間)(?![{_K}])(?!曜)")
COUNT = re.compile(rf"(?<![{_K}第])([{_K}]+)(万円|円|人|冊|回|歳|名|個|倍|件|"
                   r"キロメートル|センチメートル|ミリメートル|平方メートル|メートル|ヘクタール|キログラム|グ"
                   r"ラム|トン|ミリリットル|リットル|パーセント|割)")
DEFINED = re.compile(r"「([^「」]{2,15})」とは")
DEFINED_LATER = re.compile(r"以下(?:この[章節款条項]において)?「([^「」]{2,15})」という")
# The generator's own guard; the independent check over the final rows is tansaku.pipelines.egov.leak.
_REFERENCE = re.compile(rf"第[{_K}0-9０-９]+[条項号編章節款目]|条の[{_K}0-9０-９]+|[{_K}]+[条項](?!件)")
# Sentences that lean on the one before them (its exception, its case): quoted together with it.
LEANS = re.compile(r"ただし|この場合")
BLANK = "【　　】"
RARE_KINDS = ("term", "number", "body")  # few articles have them: asked first
# Words (kanji pairs) a quote with elisions must keep besides its answer:
# 「（略）の規定にかかわらず、（略）の期間は
# 【　】とする」 says too little of what it is about to be asked.
MIN_QUOTED_WORDS = 4
HIRAGANA = re.compile(r"[ぁ-ん]")
MIN_SENTENCE, MAX_SENTENCE = 15, 220
MIN_OLD_SENTENCE = 10
KANJI_PAIR = re.compile(r"[一-龥々]{2}")


def kanji_pairs(text: str) -> set[str]:
    """Adjacent kanji pairs: the words two phrases share (返還の請求 / その給付したものの返還を請求: 返還,
    請求)."""
    return {text[i:i + 2] for i in range(len(text) - 1) if KANJI_PAIR.fullmatch(text[i:i + 2])}


def kanji_number(text: str) -> int | None:
    """``二十万`` → 200000, ``十五`` → 15; None for anything that is not a kanji numeral.

    >>> kanji_number("二十万"), kanji_number("百二十"), kanji_number("三千五百")
    (200000, 120, 3500)
    """
    total, section, current = 0, 0, None
    digits = {c: i for i, c in enumerate("〇一二三四五六七八九")}
    for ch in text:
        if ch in digits:
            current = digits[ch] if current is None else current * 10 + digits[ch]
        elif ch in "十百千":
            section += (1 if current is None else current) * {"十": 10, "百": 100, "千": 1000}[ch]
            current = None
        elif ch == "万":
            total += (section + (current or 0) or 1) * 10_000
            section, current = 0, None
        else:
            return None
    return total + section + (current or 0) if text else None


def kanji_numeral(n: int) -> str:
    """Positive int → kanji numeral as written in laws.

    >>> kanji_numeral(15), kanji_numeral(120), kanji_numeral(200000), kanji_numeral(1)
    ('十五', '百二十', '二十万', '一')
    """
    if n <= 0:
        raise ValueError("only positive numbers")
    digits = "〇一二三四五六七八九"
    if n >= 10_000:
        high, low = divmod(n, 10_000)
        return kanji_numeral(high) + "万" + (kanji_numeral(low) if low else "")
    out = ""
    for value, unit in ((1000, "千"), (100, "百"), (10, "十")):
        d, n = divmod(n, value)
        if d:
            out += ("" if d == 1 else digits[d]) + unit
    return out + (digits[n] if n else "")


def outside_brackets(text: str, mark: str) -> list[int]:
    """Positions of ``mark`` outside brackets (「」 （） 『』 hold their own 、 and 。).

    >>> outside_brackets("甲（乙、丙）は、丁をする。", "、")
    [7]
    """
    out, depth = [], 0
    for i, ch in enumerate(text):
        if ch in "（「『(":
            depth += 1
        elif ch in "）」』)":
            depth = max(0, depth - 1)
        elif ch == mark and depth == 0:
            out.append(i)
    return out


def split_sentences(text: str) -> list[str]:
    """Split at 。 outside brackets: ``（以下「X」という。）`` stays inside its sentence. A text without 。
    (old laws, in katakana, write none) is split where extract.py kept its sentences apart, at an ideographic
    space.

    >>> split_sentences("者（以下「甲」という。）は、届け出る。ただし、この限りでない。")
    ['者（以下「甲」という。）は、届け出る。', 'ただし、この限りでない。']
    >>> split_sentences("組合長ハ総会ヲ招集スヘシ\u3000但シ急施ヲ要スルトキハ此ノ限ニ在ラス")
    ['組合長ハ総会ヲ招集スヘシ', '但シ急施ヲ要スルトキハ此ノ限ニ在ラス']
    """
    if "。" not in text and not HIRAGANA.search(text):  # (a modern item's columns stay one text)
        return [s for s in text.split("\u3000") if s]
    out, start = [], 0
    for i in outside_brackets(text, "。"):
        out.append(text[start:i + 1].strip())
        start = i + 1
    if text[start:].strip():
        out.append(text[start:].strip())
    return [s for s in out if s]


def sentences_of(article: dict) -> list[str]:
    """Sentences of the article's paragraphs and items (not tables), split at 。, each with its references to
    other provisions elided (quote.py)."""
    out: list[str] = []

    def walk(node: dict) -> None:
        out.extend(elide(s) for s in split_sentences(node.get("text") or ""))
        for item in node.get("items", []):
            walk(item)

    for p in json.loads(article["paragraphs"]):
        walk(p)
    return out


def definition_items(article: dict) -> list[tuple[str, str]]:
    """(term, definition) pairs from definition lists: items written ``用語　意義``."""
    pairs = []
    for p in json.loads(article["paragraphs"]):
        if "意義" not in (p.get("text") or "") and "定義" not in (article.get("caption") or ""):
            continue
        for item in p.get("items", []):
            term, sep, definition = (item.get("text") or "").partition("\u3000")
            if sep and 1 < len(term) <= 15 and len(definition) >= MIN_SENTENCE:
                pairs.append((term, definition))
    return pairs


def _usable(article: dict) -> bool:
    meta = article_meta(article)
    return not meta.get("is_deleted") and bool(article.get("text"))


def law_pools(articles: list[dict]) -> dict[str, dict]:
    """Per law: ordered article ids, (position, value) lists per unit and for defined terms, and the law's
    text."""
    pools: dict[str, dict] = defaultdict(lambda: {"units": defaultdict(list), "terms": [], "texts": []})
    for pos, article in enumerate(articles):
        if not _usable(article):
            continue
        pool = pools[article["law_id"]]
        pool["texts"].append(article["text"])
        for sentence in sentences_of(article):
            for pattern in (PERIOD, COUNT):
                for m in pattern.finditer(sentence):
                    pool["units"][m.group(2)].append((pos, m.group(0)))
            for pattern in (DEFINED, DEFINED_LATER):
                pool["terms"] += [(pos, t) for t in pattern.findall(sentence)]
        pool["terms"] += [(pos, term) for term, _ in definition_items(article)]
        pool.setdefault("position", {})[article["id"]] = pos
    for pool in pools.values():  # sorted once: nearest_values walks them from each article
        pool["text"] = LawText("\n".join(pool.pop("texts")))
        pool["terms"] = ByPosition(pool["terms"])
        pool["units"] = {unit: ByPosition(pairs) for unit, pairs in pool["units"].items()}
    return dict(pools)


def nearest_values(pool: list[tuple[int, str]] | ByPosition, pos: int, keep, n: int) -> list[str]:
    """Up to ``n`` distinct values of ``pool`` ((position, value) pairs) that ``keep`` accepts, the nearest
    articles to ``pos`` first (the distractors of every rule-based kind). The pools of a law are
    :class:`ByPosition` (walked outward from ``pos``, sorted once per law; each value offered once, so
    ``keep`` must reject a value again once it has — every caller's does); a plain list is sorted here. A
    value holding an elision (quote.py) is never offered."""
    out: list[str] = []
    ordered = (pool.nearest(pos) if isinstance(pool, ByPosition)
               else sorted(pool, key=lambda pv: (abs(pv[0] - pos), pv[0], pv[1])))
    for _, value in ordered:
        # a pool's value: the text a choice would show
        shown = value[0] if isinstance(value, tuple) else value
        if ELIDED in shown:  # part of a quote with an omission: no choice
            continue
        if value not in out and keep(value):
            out.append(value)
            if len(out) == n:
                break
    return out


def _number_neighbours(value: str, unit: str) -> list[str]:
    n = kanji_number(value[: -len(unit)])
    if not n:
        return []
    if unit == "歳":  # ages: nearby values, never ×3
        candidates = [n + 2, n - 2, n + 5, n - 5, n + 10, n - 10]
    else:
        candidates = [n * 2, n // 2, n * 3, n + 1, n * 5, n - 1, n * 10]
    return [kanji_numeral(c) + unit for c in candidates if c > 0 and c != n]


def _said_with(text, sentence: str, answer: str, value: str) -> bool:
    """Whether ``text`` (the law: ``str`` or a :class:`LawText`) says the sentence holding ``answer`` with
    ``value`` in its place: the part of that sentence around the number (up to an elision) occurs there, not
    right after another numeral (十年間 is no part of 二十年間)."""
    at = sentence.index(answer)
    start = max(sentence.rfind("。", 0, at) + 1, sentence.rfind(ELIDED, 0, at) + len(ELIDED), 0)
    ends = [i for i in (sentence.find("。", at), sentence.find(ELIDED, at)) if i >= 0]
    piece = sentence[start:at] + value + sentence[at + len(answer):min(ends) if ends else None]
    if piece not in text:  # the law's index answers most at once
        return False
    return re.search(rf"(?<![{_K}]){re.escape(piece)}", str(text)) is not None


def _distractors(kind: str, answer: str, unit: str, pool: dict, pos: int, sentence: str) -> list[str]:
    """Three distractors for a term or number; a number the law says in the same words elsewhere
    (施行日から起算 して三年を経過する日 beside …五年…; その期間は、二箇月を下ることができない) is none."""
    exclude = {answer} | ({answer} if kind == "term" else {v for v in re.findall(
        rf"[{_K}]+{re.escape(unit)}", sentence)})
    if kind == "term":
        return nearest_values(pool["terms"], pos, lambda v: v not in exclude, 3)

    def fits(v: str) -> bool:
        return v not in exclude and not ("text" in pool and _said_with(pool["text"], sentence, answer, v))

    picks = nearest_values(pool["units"].get(unit, []), pos, fits, 3)
    for extra in _number_neighbours(answer, unit):
        if len(picks) == 3:
            break
        if extra not in picks and fits(extra):
            picks.append(extra)
    return picks


def _targets(article: dict) -> list[dict]:
    """Every candidate (kind, sentence with a blank, answer, unit), at most one per sentence."""
    found = []
    for term, definition in definition_items(article):
        found.append({"kind": "term", "answer": term, "unit": "", "context": definition,
                      "stem": f"次の説明に当てはまる、"
                              f"法令上の用語として正しいものはどれか。\n「{definition}」"})
    sentences = sentences_of(article)
    for i, sentence in enumerate(sentences):
        # an old law's sentence (katakana, no 。) says as much in fewer characters (免許ノ有効期間ハ五年トス)
        shortest = MIN_SENTENCE if HIRAGANA.search(sentence) else MIN_OLD_SENTENCE
        if not shortest <= len(sentence) <= MAX_SENTENCE or _REFERENCE.search(sentence):
            continue
        # ただし…, この場合… lean on the sentence before: it is quoted with them, so the blank can be
        # answered.
        before = (sentences[i - 1] if i and LEANS.match(sentence) and not _REFERENCE.search(sentences[i - 1])
                  else "")
        if LEANS.match(sentence) and not before:
            continue
        match, kind, answer = None, None, ""
        for k, pattern in (("term", DEFINED), ("term", DEFINED_LATER), ("period", PERIOD), ("count", COUNT)):
            for m in pattern.finditer(sentence):
                value = m.group(1) if k == "term" else m.group(0)
                # 一人の…, 一回に限り: "one" is rarely the point; a value written twice gives itself away.
                if (k == "count" and kanji_number(m.group(1)) == 1) or sentence.count(value) > 1:
                    continue
                match, kind, answer = m, k, value
                break
            if match:
                break
        if not match:
            continue
        unit = "" if kind == "term" else match.group(2)
        start = match.start(1) if kind == "term" else match.start()
        blanked = before + sentence[:start] + BLANK + sentence[start + len(answer):]
        if before and before.count(answer):  # the sentence before gives the value away
            continue
        found.append({"kind": "term" if kind == "term" else "number", "answer": answer, "unit": unit,
                      "context": before + sentence,
                      "stem": f"次の法令の規定の空欄{BLANK}に入るものとして正しいものはどれか"
                              f"。\n「{blanked}」"})
    return found


def cloze_targets(article: dict, pool: dict) -> list[dict]:
    """The article's cloze candidates that found three distractors (``kind``, ``answer``, ``distractors``,
    ``context``, ``stem``)."""
    if not _usable(article):
        return []
    pos = pool.get("position", {}).get(article["id"], 0)
    targets = [{**t, "distractors": _distractors(t["kind"], t["answer"], t["unit"], pool, pos, t["context"])}
               for t in _targets(article)]
    return [t for t in targets if len(t["distractors"]) == 3]


def _says_enough(target: dict) -> bool:
    """Whether a quote with elisions keeps :data:`MIN_QUOTED_WORDS` words besides its answer (one without any
    does)."""
    if ELIDED not in target["stem"]:
        return True
    quoted = target["stem"].split("「", 1)[-1]
    return len(kanji_pairs(quoted) - kanji_pairs(target["answer"])) >= MIN_QUOTED_WORDS


def questions_from_targets(article: dict, targets: list[dict], seed: int = 0,
                           per_article: int = 2) -> list[dict]:
    """Up to ``per_article`` question rows from an article's candidates of any kind (answer first in
    ``choices``; balancing comes later): different kinds first — the rare ones (:data:`RARE_KINDS`: few
    articles have them) before the rest, which come in an order drawn from the seed and the article id — so
    every kind an article allows gets its share."""
    caption = article.get("caption") or ""
    hint = f"（見出し：{caption.strip('（）')}）\n" if caption else ""
    rows = []
    for t in targets:
        if any(ELIDED in c for c in (t["answer"], *t["distractors"])):  # a choice is whole, never elided
            continue
        if not _says_enough(t):
            continue
        question = t["stem"].replace("\n", "\n" + hint, 1) if "\n" in t["stem"] else t["stem"] + "\n" + hint
        rows.append({
            "question": question.rstrip("\n"), "choices": [t["answer"], *t["distractors"]], "answer_index": 0,
            "answer": t["answer"], "kind": t["kind"], "generator": "rules",
            "explanation": f"{article['law_title']}{article['article_title']}の規定による。"
                           f"原文は「{t['context']}」。",
        })
    rng_for(seed, "cloze", article["id"]).shuffle(rows)
    rows.sort(key=lambda r: r["kind"] not in RARE_KINDS)  # stable: the drawn order within each group
    picked, seen_kinds = [], set()
    for row in rows:
        if row["kind"] not in seen_kinds:
            picked.append(row)
            seen_kinds.add(row["kind"])
    picked += [row for row in rows if row not in picked]
    return picked[:per_article]


def cloze_questions(article: dict, pool: dict, seed: int = 0, per_article: int = 2) -> list[dict]:
    """Up to ``per_article`` cloze questions for one article."""
    return questions_from_targets(article, cloze_targets(article, pool), seed, per_article)

"""Rule-based kinds for laws in the old written style (文語体: katakana, no 、 or 。); needs no LLM.

Laws of the Meiji to early Showa eras that were never rewritten (手形法, 供託法 and the like) say the same
things
as modern ones in another grammar:
「組合員ハ…使用スルコトヲ得」「組合長ハ…招集スヘシ」「…譲渡シタルトキハ譲受人 ハ…承継ス」. The modern kinds
find nothing there — they look for は、 ときは、 …できる。 — so an old law got almost no question. The same
three questions, by the old grammar (sentences are the XML's ``Sentence`` elements, which extract.py keeps
apart):

  * ``actor``        「【　　】ハ…ス」: the person or organ a provision speaks of (the last 「Xハ」 whose X is
                     a run of kanji ending in a person's suffix: 組合長, 地方長官, 譲受人), distractors = the
                     law's other such actors (in a small law also the persons it names elsewhere: 未成年者,
                     当該官吏), never one the sentence names or one the law says the same of;
  * ``permission``   「組合員ハ【　　】」: what follows the topic, with its modal ending (…スルコトヲ得 /
                     …コトヲ得ス / …スヘシ / …ヲ要ス / …ヲ要セス / …効力ヲ生ス / …ヲ生セス, with or without
                     dakuten: スベシ, 得ズ);
                     choices: the clause as written, the clause
                     with the contradicting ending (:data:`FLIPS`; only when the law says it nowhere) and two
                     clauses of other actors' provisions that grant or impose something;
  * ``requirement``  「…【　　】トキハ…」: the condition before 「トキハ」「場合ニ於テハ」「ニ非サレハ」,
                     distractors = the law's other conditions with another effect.

Sentences pointing elsewhere are quoted with the pointer elided (quote.py); a list's lead (左ノ事項) and a
proviso (但シ…) are not quoted alone.

    from tansaku.pipelines.egov.classic import classic_targets, law_classic_pools
    pools = law_classic_pools(article_records)
    targets = classic_targets(article, pools[article["law_id"]])
"""

from __future__ import annotations

import re
from collections import defaultdict

from tansaku.pipelines.egov.cloze import BLANK, _usable, kanji_pairs, nearest_values, sentences_of
from tansaku.pipelines.egov.lawindex import ByPosition, LawText
from tansaku.pipelines.egov.quote import ELIDED, says
from tansaku.pipelines.egov.statements import GENERIC_ACTORS, PERSON

# Old style: katakana particles after kanji, and not one hiragana.
CLASSIC = re.compile(r"[一-龥々][ハヲニノヘト]")
HIRAGANA = re.compile(r"[ぁ-ん]")
# A topic: a run of kanji (with ノ between nouns) before ハ, not right after another kanji (組合ノ組合長ハ
# whole).
TOPIC = re.compile(r"(?<![一-龥々ノ])((?:[一-龥々]{1,12}ノ)?[一-龥々]{2,12})ハ")
# Sentences that say nothing of their own, and the leads of lists and provisos, are not quoted.
GENERIC = re.compile(r"準用ス|此ノ限ニ在ラス|此限ニ在ラス|同シ|適用セス|左ノ|左ニ|^但")
MIN_CLASSIC, MAX_CLASSIC = 8, 200
# (ending, contradicting ending, the same in a law that writes dakuten: 得ズ, 要セズ, 生ゼズ); endings are
# matched on the sentence without dakuten (:func:`plain`), so スベシ and スヘシ are one.
FLIPS = (("コトヲ得ス", "コトヲ得", "コトヲ得"), ("コトヲ得", "コトヲ得ス", "コトヲ得ズ"),
         ("ヲ要セス", "ヲ要ス", "ヲ要ス"),
         ("ヲ要ス", "ヲ要セス", "ヲ要セズ"), ("スヘシ", "スルコトヲ要セス", "スルコトヲ要セズ"),
         ("効力ヲ生セス", "効力ヲ生ス", "効力ヲ生ズ"), ("効力ヲ生ス", "効力ヲ生セス", "効力ヲ生ゼズ"),
         ("義務ヲ負フ", "義務ヲ負ハス", "義務ヲ負ハズ"))
DAKUTEN = "ガギグゲゴザジズゼゾダヂヅデドバビブベボ"
_PLAIN = str.maketrans(DAKUTEN, "カキクケコサシスセソタチツテトハヒフヘホ")


def plain(text: str) -> str:
    """``text`` with its katakana's dakuten dropped, character for character (positions stay): old laws write
    スベシ or スヘシ, 得ズ or 得ス, 非ザレバ or 非サレハ.

    >>> plain("地方長官ノ認可ヲ受クルニ非ザレバ其ノ効力ヲ生ゼズ")
    '地方長官ノ認可ヲ受クルニ非サレハ其ノ効力ヲ生セス'
    """
    return text.translate(_PLAIN)
# grant or impose something (never "cannot" of another act)
POSITIVE = ("コトヲ得", "スヘシ", "ヲ要ス", "義務ヲ負フ")
MARKER = re.compile(r"(トキハ|場合ニ於テハ|ニ非サレハ)")
# a noun of an old law (未成年者, 当該官吏)
KANJI_RUN = re.compile(r"(?<![一-龥々])[一-龥々]{2,8}(?![一-龥々])")
MIN_CONDITION, MAX_CONDITION = 4, 60


def is_classic(sentence: str) -> bool:
    return bool(CLASSIC.search(sentence)) and not HIRAGANA.search(sentence)


def _quotable(sentence: str) -> bool:
    return (is_classic(sentence) and MIN_CLASSIC <= len(sentence) <= MAX_CLASSIC
            and not GENERIC.search(plain(sentence)))


def _actor(sentence: str) -> tuple[int, str] | None:
    """The last topic that is a person or an organ, and where it starts."""
    found = None
    for match in TOPIC.finditer(plain(sentence)):
        name = sentence[match.start(1):match.end(1)]
        if PERSON.search(name) and name not in GENERIC_ACTORS and sentence.count(name) == 1:
            found = (match.start(1), name)
    return found


def _clause(sentence: str) -> tuple[int, str, str, tuple[str, str]] | None:
    """(start, clause, ending as written, (contradicting ending, the same with dakuten)) after the sentence's
    last topic, when it ends in a modal ending."""
    flat = plain(sentence)
    flip = next((f for f in FLIPS if flat.endswith(f[0])), None)
    topics = list(TOPIC.finditer(flat))
    if not flip or not topics:
        return None
    start, end = topics[-1].end(), len(sentence) - len(flip[0])
    clause = sentence[start:end]
    if not 4 <= len(clause) <= 80 or MARKER.search(plain(clause)):
        return None
    return start, clause, sentence[end:], flip[1:]


def _condition(sentence: str) -> tuple[int, str, str] | None:
    """(start, condition, effect): the text from the sentence's start (or its first topic) to its marker."""
    flat = plain(sentence)
    match = MARKER.search(flat)
    if not match:
        return None
    first = TOPIC.match(flat)
    start = first.end() if first and first.end() < match.start() else 0
    condition, effect = sentence[start:match.start()], sentence[match.end():]
    if not MIN_CONDITION <= len(condition) <= MAX_CONDITION or len(effect) < 4 or ELIDED in condition:
        return None
    return start, condition, effect


def law_classic_pools(articles: list[dict]) -> dict[str, dict]:
    """Per law (old-style articles only): actors, positive clauses (with their topic), conditions (with their
    effect), the words of each actor's provisions, and the law's text."""
    pools: dict[str,
                dict] = defaultdict(lambda: {"actors": [], "persons": [], "clauses": [], "conditions": [],
                                             "texts": [], "acts": defaultdict(list), "position": {}})
    for pos, article in enumerate(articles):
        if not _usable(article):
            continue
        sentences = [s for s in sentences_of(article) if _quotable(s)]
        if not sentences:
            continue
        pool = pools[article["law_id"]]
        pool["position"][article["id"]] = pos
        pool["texts"].append(article["text"])
        for sentence in sentences:
            pool["persons"] += [(pos, w) for w in KANJI_RUN.findall(sentence)
                                if PERSON.search(w) and w not in GENERIC_ACTORS]
            if found := _actor(sentence):
                pool["actors"].append((pos, found[1]))
                pool["acts"][found[1]].append(kanji_pairs(sentence.replace(found[1], "・")))
            if (clause := _clause(sentence)) and plain(clause[2]) in POSITIVE:
                topic = TOPIC.findall(plain(sentence))[-1]
                pool["clauses"].append((pos, (clause[1] + clause[2], topic)))
            if condition := _condition(sentence):
                pool["conditions"].append((pos, (condition[1], condition[2])))
    for pool in pools.values():
        pool["dakuten"] = any(c in DAKUTEN for text in pool["texts"] for c in text)  # the law's own spelling
        pool["text"] = LawText("\n".join(pool.pop("texts")))
        for key in ("actors", "persons", "clauses", "conditions"):
            pool[key] = ByPosition(pool[key])
    return dict(pools)


def _stem(sentence: str, start: int, end: int) -> str:
    return (f"次の法令の規定の空欄{BLANK}に入るものとして正しいものはどれか"
            f"。\n「{sentence[:start]}{BLANK}{sentence[end:]}」")


def _actor_target(sentence: str, article: dict, pool: dict, pos: int) -> dict | None:
    found = _actor(sentence)
    if not found:
        return None
    start, actor = found
    mine = kanji_pairs(sentence.replace(actor, "・"))

    def keep(v: str) -> bool:
        substituted = sentence[:start] + v + sentence[start + len(actor):]
        parallel = any(len(mine & words) * 2 >= len(mine) for words in pool["acts"].get(v, ()))
        return (v not in sentence and actor not in v and v not in actor and not parallel
                and not says(pool["text"], substituted))

    others = nearest_values(pool["actors"], pos, keep, 3)
    if len(others) < 3:  # a small law has few actors: the persons it names elsewhere (未成年者, 当該官吏)
        others += nearest_values(pool["persons"], pos, lambda v, seen=set(others): v not in seen and keep(v),
                                 3 - len(others))
    return {"kind": "actor", "answer": actor, "distractors": others,
            "context": sentence, "stem": _stem(sentence, start, start + len(actor))}


def _permission_target(sentence: str, article: dict, pool: dict, pos: int) -> dict | None:
    found = _clause(sentence)
    if not found:
        return None
    start, clause, ending, flips = found
    flipped = flips[1] if pool.get("dakuten") else flips[0]
    if says(pool["text"], clause + flipped) or says(pool["text"], clause + flips[0]):
        return None
    topic, mine = TOPIC.findall(plain(sentence))[-1], kanji_pairs(clause)
    seen: set[str] = set()

    def keep(value) -> bool:
        text, other_topic = value
        ok = (text not in seen and other_topic != topic and text not in article["text"]
              and not kanji_pairs(text) & mine)
        seen.add(text)
        return ok

    others = [v[0] for v in nearest_values(pool["clauses"], pos, keep, 2)]
    return {"kind": "permission", "answer": clause + ending, "distractors": [clause + flipped, *others],
            "context": sentence, "stem": _stem(sentence, start, len(sentence))}


def _requirement_target(sentence: str, article: dict, pool: dict, pos: int) -> dict | None:
    found = _condition(sentence)
    if not found:
        return None
    start, condition, effect = found
    words, seen = kanji_pairs(condition), set()

    def keep(value) -> bool:
        other, other_effect = value
        ok = (other not in seen and other != condition and other not in article["text"]
              and other_effect != effect and len(words & kanji_pairs(other)) < 2)
        seen.add(other)
        return ok

    others = [v[0] for v in nearest_values(pool["conditions"], pos, keep, 3)]
    return {"kind": "requirement", "answer": condition, "distractors": others, "context": sentence,
            "stem": _stem(sentence, start, start + len(condition))}


def classic_targets(article: dict, pool: dict) -> list[dict]:
    """Every old-style candidate of ``article`` with three distractors; none for supplementary provisions."""
    if not pool or not _usable(article) or article.get("is_suppl"):
        return []
    pos = pool.get("position", {}).get(article["id"], 0)
    found = []
    for sentence in sentences_of(article):
        if not _quotable(sentence):
            continue
        made = [make(sentence, article, pool, pos) for make in (_actor_target, _permission_target,
                                                                 _requirement_target)]
        found += [t for t in made if t]
    return [t for t in found if len(t["distractors"]) == 3 and len(set(t["distractors"])) == 3]

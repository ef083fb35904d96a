"""Deterministic question kinds beyond the cloze of terms and numbers; needs no LLM.

  * ``actor``           who holds a duty or power or does what a provision says:
                        「【　】は、…しなければならない。」 「【　】は、…を代表する。」, distractors = the
                        other actors the same law names that way (債権者, 家庭裁判所, 行政庁 …; in a small law
                        also the persons it names elsewhere), never one the law says the same of;
  * ``effect``          what follows a condition: 「…ときは、【　】。」, distractors = the effects of other
                        conditional sentences of the same law;
  * ``true_statement``  「正しいものはどれか」: one sentence of the article as written and three perturbed
                        sentences of the same article (duty ↔ none, can ↔ cannot, 又は ↔ 及び, 以上 ↔ 以下,
                        another number, another actor); a perturbation is used only when its text occurs
                        nowhere in the law, so it contradicts the article rather than restating another one.

Every kind keeps to sentences without article references (the leak checker's rule) and records its ``kind``.

    from tansaku.pipelines.egov.statements import law_statement_pools, statement_questions
    pools = law_statement_pools(article_records)
    rows = statement_questions(article, pools[article["law_id"]])
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

from tansaku.pipelines.egov.cloze import (
    _K,
    _REFERENCE,
    BLANK,
    COUNT,
    LEANS,
    MIN_SENTENCE,
    PERIOD,
    _number_neighbours,
    _usable,
    kanji_number,
    kanji_pairs,
    nearest_values,
    sentences_of,
)
from tansaku.pipelines.egov.lawindex import ByPosition, LawText
from tansaku.pipelines.egov.quote import ELIDED, says

MAX_STATEMENT = 150  # characters of one choice of 「正しいものはどれか」
MAX_STEM = 300  # characters of the provision an actor or effect question quotes (行政手続法's run long)
# The subject of the main clause: at the start, or right after a leading condition (「…ときは、債権者は、」).
ACTOR = (re.compile(r"^([^、。「」（）()\s]{2,20}?)は、"),
         re.compile(r"^[^。]*?(?:ときは|場合には|場合においては)、([^、。「」（）()\s]{2,20}?)は、"))
# An actor is a person or an organ; "当事者" and its kin cover the others, so they are never swapped in or
# out.
PERSON = re.compile(r"(者|人|庁|裁判所|大臣|知事|長|機関|官|員|主|政府|法人|会社|組合|委員会|理事|監事|幹"
                    r"事|取締役|執行役)$")
NOUN_RUN = re.compile(r"(?<![一-龥ァ-ヶー々])[一-龥ァ-ヶー々]{2,10}(?![一-龥ァ-ヶー々])")  # 操縦者, 警察署長
GENERIC_ACTORS = {"当事者", "各当事者", "第三者", "相手方", "何人", "本人", "者", "その者", "他人"}
# A statement must stand alone: no pointer to another provision or to the sentence before.
NOT_STANDALONE = re.compile(r"前[項条号段各]|次[項条号]|同[項条号]|後段|^前[二三四五六七八九]|次に掲げる|次の"
                            r"とおり|各号")
FRAGMENT = ("とき。", "こと。", "もの。", "者。", "場合。")  # the items (号) of a list, not statements
COLUMN = "\u3000"  # an item written in columns (用語　意義, 区分　期間): a table's row, not a sentence
TRAILING_NOTE = re.compile(r"（[^（）]*(?:（[^（）]*）[^（）]*)*）。$")  # …とき（前号に掲げる場合を除く。）。
DUTY = re.compile(r"(なければならない|てはならない|ことができる|ことができない|ものとする|を要する|を要しな"
                  r"い|義務を負う|責任を負う|責任を負わない)。$")
# What a person does or has, said plainly (後見人は、…被後見人を代表する / 所有者は、…権利を有する): a verb's
# end.
DECLARATIVE = re.compile(r"(?:[るうくすつぬむぶぐ]|ない)。$")
PARALLEL = 2  # another provision of the same actor sharing half this one's words says the same of that actor
# Subjects that are no actor: references to other provisions, conditions, pronouns.
NOT_ACTOR = re.compile(rf"前|次|同|この|その|当該|これ|場合|とき|ただし|において|[{_K}]+")
CONDITION = re.compile(r"^(.{6,80}?(?:ときは|場合には|場合においては))、(.{8,100})。$")
GENERIC_EFFECT = re.compile(r"この限りでない|同様とする|準用する|前[項条各]|次[項条に]|同[項条号]|適用しない")
# (pattern, replacement, what it flips): each applied at one place; the result must occur nowhere in the law.
FLIPS = (
    (re.compile(r"なければならない。$"), "なくてもよい。", "duty"),
    (re.compile(r"てはならない。$"), "てもよい。", "duty"),
    (re.compile(r"ことができる。$"), "ことができない。", "power"),
    (re.compile(r"ことができない。$"), "ことができる。", "power"),
    (re.compile(r"を要する。$"), "を要しない。", "duty"),
    (re.compile(r"を要しない。$"), "を要する。", "duty"),
    (re.compile(r"効力を生ずる。$"), "効力を生じない。", "effect"),
    (re.compile(r"効力を生じない。$"), "効力を生ずる。", "effect"),
    (re.compile(r"を負う。$"), "を負わない。", "effect"),
    (re.compile(r"を負わない。$"), "を負う。", "effect"),
    (re.compile(r"に属する。$"), "に属しない。", "effect"),
    (re.compile(r"に属しない。$"), "に属する。", "effect"),
    (re.compile(r"を妨げない。$"), "を妨げる。", "effect"),
    (re.compile(r"無効とする。$"), "有効とする。", "effect"),
    (re.compile(r"消滅する。$"), "消滅しない。", "effect"),
    (re.compile(r"完成しない。$"), "完成する。", "effect"),
    (re.compile(r"を失う。$"), "を失わない。", "effect"),
    (re.compile(rf"(?<=[{_K}])以上"), "以下", "bound"),
    (re.compile(rf"(?<=[{_K}])以下"), "以上", "bound"),
)


def _actor(sentence: str) -> tuple[int, str] | None:
    """Where the actor of a duty, power or plain act starts, and who it is."""
    if (not DUTY.search(sentence)
            and not (DECLARATIVE.search(sentence) and not GENERIC_EFFECT.search(sentence))):
        return None
    for pattern in ACTOR:
        if match := pattern.match(sentence):
            actor = match.group(1)
            if not NOT_ACTOR.search(actor) and PERSON.search(actor) and actor not in GENERIC_ACTORS:
                return match.start(1), actor
    return None


def _clean(sentence: str, longest: int = MAX_STEM, leaning: bool = False) -> bool:
    """A standalone provision sentence without article references, ``longest`` characters at most (a stem
    may quote :data:`MAX_STEM`, a choice of 「正しいものはどれか」 only :data:`MAX_STATEMENT`); ``leaning``: a
    ただし/この場合 sentence is allowed (its stem quotes the sentence before it too)."""
    return (MIN_SENTENCE <= len(sentence) <= longest and not _REFERENCE.search(sentence)
            and COLUMN not in sentence
            and not NOT_STANDALONE.search(sentence) and not TRAILING_NOTE.sub("。", sentence)
            .endswith(FRAGMENT) and (leaning or not LEANS.match(sentence)))


def law_statement_pools(articles: list[dict]) -> dict[str, dict]:
    """Per law: (position, actor) and (position, effect) pools, the persons it names anywhere (a small law's
    actors are few), the words of each actor's provisions, and the law's whole text (the contradiction check's
    reference, a :class:`~tansaku.pipelines.egov.lawindex.LawText`)."""
    pools: dict[str, dict] = defaultdict(lambda: {"actors": [], "persons": [], "effects": [], "texts": [],
                                                  "acts": defaultdict(list)})
    for pos, article in enumerate(articles):
        if not _usable(article):
            continue
        pool = pools[article["law_id"]]
        pool["texts"].append(article["text"])
        pool.setdefault("position", {})[article["id"]] = pos
        for sentence in sentences_of(article):
            pool["persons"] += [(pos, w) for w in NOUN_RUN.findall(sentence) if PERSON.search(w)
                                and not NOT_ACTOR.search(w) and w not in GENERIC_ACTORS]
            if not _clean(sentence):
                continue
            if found := _actor(sentence):
                pool["actors"].append((pos, found[1]))
                pool["acts"][found[1]].append(kanji_pairs(sentence.replace(found[1], "、")))
            if (match := CONDITION.match(sentence)) and not GENERIC_EFFECT.search(match.group(2)):
                pool["effects"].append((pos, match.group(2)))
    for pool in pools.values():  # indexed once per law: each article's checks then cost their own length
        pool["text"] = LawText("\n".join(pool.pop("texts")))
        pool["actors"], pool["effects"] = ByPosition(pool["actors"]), ByPosition(pool["effects"])
        pool["persons"] = ByPosition(pool["persons"])
    return dict(pools)


def _unrelated(answer: str, sentence: str):
    """A distractor that is not the answer, not part of it (債権者 / 組合の債権者) and not in the sentence."""
    return lambda v: v not in answer and answer not in v and v not in sentence


def _stem_words(name: str) -> set[str]:
    """The words (kanji pairs) of a person's name but its last, the kind of person (権者, 務者, 人): 弁済,
    相続."""
    return kanji_pairs(name) - kanji_pairs(name[-2:])


def _described(name: str) -> bool:
    """A person named by what they do (弁済をする者, 区画の利用を希望する者), not by a title
    (灯台の所有者)."""
    return bool(re.search(r"[ぁ-ん]", name.replace("の", "")))


def _other_actor(actor: str, sentence: str):
    """:func:`_unrelated`, and not the same head noun either (各所有者 / 土地の所有者, 各組合員 /
    脱退した組合員: often the same person in context, so the "wrong" actor would be arguable), nor, where one
    of them is named by what they do, one sharing another word (弁済をする者 / 債務者のために弁済をした者,
    相続の放棄をした者 / 相続の 放棄をしようとする者; 灯台の所有者 and 灯台管理人 are two persons)."""
    unrelated, mine = _unrelated(actor, sentence), _stem_words(actor)
    return lambda v: (unrelated(v) and len(os.path.commonprefix([v[::-1], actor[::-1]])) < 2
                      and not ((_described(actor) or _described(v)) and mine & _stem_words(v)))


def _fitting_actor(actor: str, sentence: str, start: int, pool: dict):
    """:func:`_other_actor`, and not one the law says the same of: the sentence with it in the actor's place
    (貸主は、いつでも契約の解除をすることができる), or a provision of its own sharing half this one's words
    (公証人 who, like the person here, reads a will through an interpreter)."""
    other_person = _other_actor(actor, sentence)
    mine = kanji_pairs(sentence.replace(actor, "、"))

    def keep(v: str) -> bool:
        substituted = sentence[:start] + v + sentence[start + len(actor):]
        parallel = any(len(mine & words) * PARALLEL >= len(mine) for words in pool.get("acts", {}).get(v, ()))
        return other_person(v) and not parallel and not says(pool["text"], substituted.rstrip("。"))

    return keep


def perturbations(sentence: str, pool: dict, pos: int) -> list[tuple[str, str]]:
    """``(flip, perturbed sentence)`` for each change that makes ``sentence`` say something the law does
    not: the perturbed text must occur nowhere in the law's text.

    >>> pool = {"text": "行政庁は、申請をした者に通知しなければならない。", "actors": [(0, "審査庁")]}
    >>> perturbations("行政庁は、申請をした者に通知しなければならない。", pool, 0)[:2]
    [('duty', '行政庁は、申請をした者に通知しなくてもよい。'), ('actor',
    '審査庁は、申請をした者に通知しなければならない。')]
    """
    out = []
    for pattern, replacement, flip in FLIPS:
        if match := pattern.search(sentence):
            out.append((flip, sentence[:match.start()] + replacement + sentence[match.end():]))
    if found := _actor(sentence):
        start, actor = found
        for other in nearest_values(pool.get("actors", []), pos, _other_actor(actor, sentence), 2):
            out.append(("actor", sentence[:start] + other + sentence[start + len(actor):]))
    for pattern in (PERIOD, COUNT):
        for match in pattern.finditer(sentence):
            # 一人 / 同一人 / その一人 are "one of", not a count: changing them makes nonsense, not a
            # falsehood.
            one = (kanji_number(match.group(1)) == 1
                   or sentence[max(0, match.start() - 1):match.start()] == "同")
            if pattern is COUNT and one:
                continue
            for other in _number_neighbours(match.group(0), match.group(2))[:2]:
                out.append(("number", sentence[:match.start()] + other + sentence[match.end():]))
    seen, unique = {sentence}, []
    for flip, text in out:
        if text not in seen and text[:-1] not in pool["text"]:  # contradicts the law, not another article
            seen.add(text)
            unique.append((flip, text))
    return unique


def _true_statement(article: dict, sentences: list[str], pool: dict, pos: int) -> dict | None:
    """The article's first clean sentence that can be paired with three perturbations of its sentences
    (at most one per kind of change where the article allows it)."""
    clean = [s for s in sentences if _clean(s, MAX_STATEMENT) and ELIDED not in s]  # a choice is whole
    candidates = [(flip, text) for s in clean for flip, text in perturbations(s, pool, pos)]
    if not clean or len(candidates) < 3:
        return None
    picked, flips = [], set()
    for flip, text in candidates:  # one per kind of change first, then any
        if flip not in flips:
            picked.append(text)
            flips.add(flip)
    picked += [text for _, text in candidates if text not in picked]
    truth = clean[0]
    return {"kind": "true_statement", "answer": truth, "distractors": picked[:3], "context": truth,
            "stem": "次の記述のうち、法令の規定の内容として正しいものはどれか。"}


def statement_targets(article: dict, pool: dict) -> list[dict]:
    """Every candidate of the three kinds for one article, with its three distractors. Supplementary
    provisions get none: their sentences (施行期日, 経過措置) are alike from law to law."""
    if not _usable(article) or article.get("is_suppl"):
        return []
    pos = pool.get("position", {}).get(article["id"], 0)
    sentences = sentences_of(article)
    found = []
    for i, sentence in enumerate(sentences):
        # ただし…, この場合… are quoted after the sentence they lean on (the blank stays in theirs).
        leans = bool(LEANS.match(sentence))
        before = sentences[i - 1] if leans and i and _clean(sentences[i - 1]) else ""
        if not _clean(sentence, leaning=bool(before)):
            continue
        if at := _actor(sentence):
            start, actor = at
            fits = _fitting_actor(actor, sentence, start, pool)
            others = nearest_values(pool["actors"], pos, fits, 3)
            # a small law has few actors: the persons it names elsewhere (操縦者, 警察署長)
            if len(others) < 3:
                others += nearest_values(pool.get("persons", []), pos,
                                         lambda v, seen=set(others), f=fits: v not in seen and f(v),
                                         3 - len(others))
            found.append({"kind": "actor", "answer": actor, "distractors": others, "context": sentence,
                          "stem": f"次の法令の規定の空欄{BLANK}に入るものとして正しいものはどれか。\n"
                                  f"「{before}{sentence[:start]}{BLANK}{sentence[start + len(actor):]}」"})
        if (match := CONDITION.match(sentence)) and not GENERIC_EFFECT.search(match.group(2)):
            effect, unrelated = match.group(2), _unrelated(match.group(2), sentence)
            # …ときは、X, said of the same condition elsewhere in the law, is no wrong choice
            # (遺言執行者がある場合には)
            said = lambda v, c=match.group(1): says(pool["text"], f"{c}、{v}")  # noqa: E731
            others = nearest_values(pool["effects"], pos,
                                    lambda v, u=unrelated,
                                    s=said: u(v) and v not in article["text"] and not s(v), 3)
            found.append({"kind": "effect", "answer": effect, "distractors": others, "context": sentence,
                          "stem": f"次の法令の規定の空欄{BLANK}に入るものとして正しいものはどれか。\n"
                                  f"「{before}{match.group(1)}、{BLANK}。」"})
    if statement := _true_statement(article, sentences, pool, pos):
        found.append(statement)
    return [t for t in found if len(t["distractors"]) == 3]

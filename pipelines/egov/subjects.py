"""Rule-based question kinds about who or what a provision is about; needs no LLM and no word list of any law.

  * ``subject``  what thing, act or right a provision is about: 「【　】は、…。」 (相続は、…において開始する /
                 雇用は、…によって、その効力を生ずる / 不法な条件を付した法律行為は、無効とする); distractors
                 = the law's other such topics and its defined terms, never a person, one the article names,
                 one whose substitution the law itself says, one with all the answer's words, a short word
                 with its head (物権 for 占有権: may name its kind) or one echoing the provision where the
                 answer does not;
  * ``body``     to whom a notice, application or claim goes:
                 「…【　】に届け出／申請／通知／報告／申し出／提出 ／通報／請求／催告…」 — the addressee is
                 the noun before 「に」 (行政庁, 家庭裁判所, 都道府県知事 … found by grammar, not listed);
                 distractors = the law's other addressees and actors;
  * ``value``    what a provision sets a thing to be: 「…は、【　】とする。」
                 (補助の対象となる費用は、…に要する費用 とする / 事務は、自治事務とする) — the ordinances' way
                 of saying things; distractors = what the law's other such provisions set (then its topics and
                 defined terms), never one the law sets for this thing, one the article names or one sharing a
                 word with the answer. Numbers are the ``number`` kind's, 「…ものとする」 is a duty.

Persons are left to statements.py's ``actor`` kind: another person of the same law is too often right as well
(土地の所有者 for 相隣者の一人, 親権を行う父又は母 for 親権を行う者).
provisions.py builds the pools (:func:`law_subject_pools`) and calls :func:`subject_targets` per sentence.
"""

from __future__ import annotations

import re
from collections import defaultdict

from tansaku.pipelines.egov.cloze import (
    BLANK,
    COUNT,
    DEFINED,
    DEFINED_LATER,
    PERIOD,
    _usable,
    kanji_pairs,
    nearest_values,
    sentences_of,
)
from tansaku.pipelines.egov.lawindex import ByPosition
from tansaku.pipelines.egov.quote import ELIDED, says
from tansaku.pipelines.egov.statements import (
    GENERIC_ACTORS,
    GENERIC_EFFECT,
    NOT_ACTOR,
    PERSON,
    _actor,
    _clean,
    _other_actor,
)

# The topic of a sentence: a noun phrase (no comma, bracket or space) before the first 「は、」.
TOPIC = re.compile(r"^([^、。「」（）()\s]{2,25}?)は、(.{5,})。$")
# Not a thing a provision is about: demonstratives and pointers (この法律, 当該…, 同…), frames (…の場合,
# …について).
NOT_TOPIC = re.compile(r"この|その|当該|これ|それ|同|前|次|場合|とき|ただし|において|について|もっとも|ほか|"
                       r"[ぁ-ん]間$|時$|後$|まで$")  # …しない間は, …の時は: a time, not a topic
# Persons the statements' PERSON suffixes miss: kinship and professions (夫婦, 子, 父又は母, 医師).
PEOPLE = re.compile(r"(?:夫|妻|婦|子|父|母|親|師|士|一方|各自)$")
MAX_HYPERNYM = 3  # characters of a word that, sharing the answer's last character, may name its kind
WORD_SPLIT = re.compile(r"の|及び|又は|並びに|若しくは|、")
# 「…は、…とする。」: what a provision sets a thing to be (the thing may hold an elision: （略）の費用は、).
VALUE = re.compile(r"^(.{2,60}?)は、(.{2,60})とする。$")
# a topic ends in a noun; 「…には、」「…では、」 are frames
NOUN_END = re.compile(r"(?:[一-龥ァ-ヶー々]|こと|もの)$")
# The addressee: a run of nouns (with の) right before 「に」 or 「に対し、」, then a verb of notice or claim.
# It starts after a comma or a particle (not inside 「主たる債務者」) and 「に」 is followed by the verb
# itself or by 「対し、」 and the verb's object (「…において」「…について」 are no addressee).
ADDRESSEE = re.compile(r"(?:^|(?<=[、をはがもでてく]))((?:[一-龥ァ-ヶー々]{1,10}の)?[一-龥ァ-ヶー々]{2,12})"
                       r"(?:に対し(?:て)?、[^、。]{0,30}?|に)"
                       r"(?:届け出|届出|申請|通知|報告|申し出|申出|提出|申し込|通報|請求|催告|申し立て|申立"
                       r"て)")


def _topic(sentence: str) -> tuple[str, str] | None:
    """``(topic, rest)`` of 「Xは、….」 where X is a noun phrase and the rest says something of its own."""
    match = TOPIC.match(sentence)
    if not match:
        return None
    topic, rest = match.groups()
    if (NOT_TOPIC.search(topic) or not NOUN_END.search(topic) or topic in GENERIC_ACTORS or topic in rest
            or GENERIC_EFFECT.search(rest)):
        return None
    return topic, rest


def _is_person(name: str) -> bool:
    """A person or an organ: statements.py's PERSON suffixes (者, 人, 庁, 裁判所 …) or :data:`PEOPLE`."""
    return bool(PERSON.search(name) or PEOPLE.search(name))


def _entangled(other: str, topic: str, rest: str) -> bool:
    """A distractor that is part of the answer or holds all its words (遺贈の放棄 / 遺贈の承認及び放棄) or
    echoes the provision where the answer does not (婚姻によって氏を改めた夫又は妻 for 夫婦 in
    「…は、婚姻の際に 定めるところに従い、夫又は妻の氏を称する」): either may be right as well."""
    words = lambda t: {w for w in WORD_SPLIT.split(t) if w}  # noqa: E731
    mine, theirs = words(topic), words(other)
    # 代理権を有しない者がした契約 / 代理権を有しない者が他人の代理人としてした契約: all the answer's words.
    pairs, other_pairs = kanji_pairs(topic), kanji_pairs(other)
    same_words = bool(pairs and other_pairs) and (pairs <= other_pairs or other_pairs <= pairs)
    return mine <= theirs or theirs <= mine or same_words or bool((other_pairs & kanji_pairs(rest)) - pairs)


def _addressee(sentence: str) -> tuple[int, str] | None:
    """Where the addressee of a notice or claim starts, and who it is (a person or an organ)."""
    for match in ADDRESSEE.finditer(sentence):
        name = match.group(1)
        if (PERSON.search(name) and not NOT_ACTOR.search(name) and name not in GENERIC_ACTORS
                and sentence.count(name) == 1):
            return match.start(1), name
    return None


def _value(sentence: str) -> tuple[int, str, str] | None:
    """``(start, thing, value)`` of 「thing は、value とする。」 where the value is a noun phrase and no
    number."""
    match = VALUE.match(sentence)
    if not match:
        return None
    thing, value = match.groups()
    if (len(value) < 3 or "は、" in value or value.endswith("もの") or not NOUN_END.search(value)
            or ELIDED in value
            or GENERIC_EFFECT.search(value) or PERIOD.search(value) or COUNT.search(value)
            or NOT_TOPIC.match(value)):
        return None
    return match.start(2), thing, value


def law_subject_pools(articles: list[dict]) -> dict[str, dict]:
    """Per law: (position, (topic, rest, is a person)) of its topic sentences, its defined terms, the
    (position, name) of its addressees and actors, and (position, (value, thing)) of what it sets things to
    be."""
    pools: dict[str, dict] = defaultdict(lambda: {"topics": [], "people": [], "values": []})
    for pos, article in enumerate(articles):
        if not _usable(article):
            continue
        pool = pools[article["law_id"]]
        for sentence in sentences_of(article):
            for pattern in (DEFINED, DEFINED_LATER):  # things the law names: a thing's distractors too
                pool["topics"] += [(pos, (term, "", _is_person(term))) for term in pattern.findall(sentence)]
            if not _clean(sentence, leaning=True):
                continue
            if found := _topic(sentence):
                pool["topics"].append((pos, (*found, _is_person(found[0]))))
            if setting := _value(sentence):
                pool["values"].append((pos, (setting[2], setting[1])))
            for person in (_actor(sentence), _addressee(sentence)):
                if person:
                    pool["people"].append((pos, person[1]))
    for pool in pools.values():  # sorted once: nearest_values walks them from each article
        pool["topics"], pool["people"] = ByPosition(pool["topics"]), ByPosition(pool["people"])
        pool["values"] = ByPosition(pool["values"])
    return dict(pools)


def _stem(before: str, sentence: str, start: int, answer: str) -> str:
    return (f"次の法令の規定の空欄{BLANK}に入るものとして正しいものはどれか。\n"
            f"「{before}{sentence[:start]}{BLANK}{sentence[start + len(answer):]}」")


def _subject(sentence: str, before: str, article: dict, pool: dict, pos: int) -> dict | None:
    """「【　】は、…。」 with three other things, acts or rights of the law (see the module docstring)."""
    found = _topic(sentence)
    # Persons are the actor kind's: another person is too often right as well (土地の所有者 for 相隣者の一人).
    if not found or _is_person(found[0]):
        return None
    topic, rest = found
    seen: set[str] = set()

    def keep(value) -> bool:
        other, other_rest, other_is_person = value
        # A short word with the answer's head may name its kind (物権 for 占有権): right as well.
        hypernym = min(len(other), len(topic)) <= MAX_HYPERNYM and other[-1] == topic[-1]
        ok = (not other_is_person and other not in seen and other not in article["text"]
              and other not in topic and topic not in other and other_rest != rest and not hypernym
              and not says(pool["text"], f"{other}は、{rest}") and not _entangled(other, topic, rest)
              # 取り消された行為 (…無効…) for 無効な行為
              and not kanji_pairs(other_rest) & kanji_pairs(topic))
        if ok:
            seen.add(other)
        return ok

    others = [o[0] for o in nearest_values(pool.get("topics", []), pos, keep, 3)]
    return {"kind": "subject", "answer": topic, "distractors": others, "context": before + sentence,
            "stem": _stem(before, sentence, 0, topic)}


def _body(sentence: str, before: str, article: dict, pool: dict, pos: int) -> dict | None:
    """「…【　】に届け出…」 with three other persons or organs of the law, never one the article names."""
    found = _addressee(sentence)
    if not found:
        return None
    start, name = found
    other_person = _other_actor(name, sentence)

    def keep(other: str) -> bool:
        substituted = sentence[:start] + other + sentence[start + len(name):]
        return (other_person(other) and other not in article["text"]
                and not says(pool["text"], substituted[:-1]))

    others = nearest_values(pool.get("people", []), pos, keep, 3)
    return {"kind": "body", "answer": name, "distractors": others, "context": before + sentence,
            "stem": _stem(before, sentence, start, name)}


def _setting(sentence: str, before: str, article: dict, pool: dict, pos: int) -> dict | None:
    """「…は、【　】とする。」 with three values the law sets other things to (see the module docstring)."""
    found = _value(sentence)
    if not found:
        return None
    start, thing, value = found
    mine = kanji_pairs(value)

    def keep(other: str) -> bool:
        return (other != value and other not in article["text"] and not kanji_pairs(other) & mine
                and 0.3 <= len(other) / len(value) <= 3
                and not says(pool["text"], f"{thing}は、{other}とする"))

    others = [v[0] for v in nearest_values(pool.get("values", []), pos, lambda v: keep(v[0]), 3)]
    if len(others) < 3:  # few such provisions: the things the law names (its topics and defined terms)
        more = nearest_values(pool.get("topics", []), pos,
                              lambda v, seen=set(others): not v[2] and v[0] not in seen and keep(v[0]),
                              3 - len(others))
        others += [v[0] for v in more]
    return {"kind": "value", "answer": value, "distractors": others, "context": before + sentence,
            "stem": _stem(before, sentence, start, value)}


def subject_targets(sentence: str, before: str, article: dict, pool: dict, pos: int) -> list[dict]:
    """The ``subject``, ``body`` and ``value`` candidates of one clean sentence of ``article`` (``before``:
    the sentence it leans on, quoted first)."""
    return [t for make in (_subject, _body, _setting) if (t := make(sentence, before, article, pool, pos))]

"""Rule-based question kinds from the general grammar of provisions (法令用語 used by every statute), beyond
statements.py's three; needs no LLM and no word list of any one law.

  * ``permission``   what the provision permits, forbids or requires: its last clause with the modal ending
                     (…することができる / …することができない / …しなければならない / …してはならない /
                     …を要する / …を要しない) is blanked. Choices: the clause as written; the clause with the
                     contradicting ending (:data:`MODAL_FLIPS`: できる ↔ できない, なければならない →
                     なくてもよい, てはならない → てもよい, を要する ↔ を要しない; the verb form before the
                     ending stays, so no conjugation), used only when the law says it nowhere; and the two
                     nearest clauses of other provisions that grant, impose or forbid something
                     (:data:`POSITIVE`) — never a negated one: "X cannot (need not) do Y" of an unrelated Y
                     would be vacuously true — and never one given to the same actor unless both provisions
                     are conditional, one sharing a third of its words with the answer (the same act said
                     otherwise) or two with the quoted provision, a ただし clause (its actor is the sentence
                     before's), or a person's act for a provision about no person;
  * ``requirement``  the condition or requirement a provision attaches to its effect:
                     「…ときは、」「…場合には、」
                     「…場合において、」「…がなければ、」「…をしなければ、」「…に限り、」; distractors = the
                     conditions of the law's other sentences with the same marker whose effect differs (and
                     does not include this effect's words), which share at most one word with the answer and
                     not its predicate (…歳に達している), and which are no stock exception of the law
                     (別段の意思を表示した).

``subject`` and ``body`` (what a provision is about; to whom a notice goes) are in subjects.py. Every kind
quotes only statements.py's clean sentences (no pointer to another provision, no list item) and drops a
distractor the article itself says (its text occurs in the article) or whose substitution the law says.

    from tansaku.pipelines.egov.provisions import law_provision_pools, provision_targets
    pools = law_provision_pools(article_records)
    rows = provision_targets(article, pools[article["law_id"]])
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict

from tansaku.pipelines.egov.cloze import BLANK, LEANS, _usable, nearest_values, outside_brackets, sentences_of
from tansaku.pipelines.egov.lawindex import ByPosition, LawText
from tansaku.pipelines.egov.quote import says
from tansaku.pipelines.egov.statements import _clean
from tansaku.pipelines.egov.subjects import _is_person, kanji_pairs, law_subject_pools, subject_targets

# (ending, contradicting ending): the form before both is the same (終止形, 未然形, て形, a noun).
MODAL_FLIPS = (("ことができる", "ことができない"), ("ことができない", "ことができる"),
               ("なければならない", "なくてもよい"), ("てはならない", "てもよい"),
               ("ではならない", "でもよい"), ("を要する", "を要しない"), ("を要しない", "を要する"))
# say something of anyone
POSITIVE = ("ことができる", "なければならない", "てはならない", "ではならない", "を要する")
# A comma after these ends the frame of the sentence (its topic, condition, ただし): a clause never reaches
# back past one.
BOUNDARY = re.compile(r"(?:は|において|ただし|ても|でも|ば|もっとも|この場合)$")
COORDINATOR = re.compile(r"^(?:又は|及び|若しくは|並びに|かつ|ただし)")
NOUN_END = re.compile(r"[一-龥ァ-ヶー々）」]$")  # 「自筆証書、公正証書又は…」: a comma inside a list of nouns
MIN_CLAUSE, MAX_CLAUSE = 4, 80  # characters of a permission clause (without its ending)
MIN_OTHER_CLAUSE = 6  # a distractor clause names its act (「辞任する」「提起する」 alone say too little)
# A distractor clause starting with one (その権利を行使する, これを取り立てる) points into its own provision.
DEMONSTRATIVE = re.compile(r"^(?:その|これ|それ|当該|同)")
# characters of the sentence left before the blank (「遺言は、」): the stem says what it is about
MIN_FRAME = 3
# Condition markers (法令用語): the case (とき / 場合) and the requirement (なければ / に限り) forms.
MARKER = re.compile(r"(ときは|ときには|場合には|場合においては|場合は|場合において|がなければ|でなければ|をし"
                    r"なければ|に限り)、")
CASE_MARKERS = {"ときは", "ときには", "場合には", "場合においては", "場合は", "場合において"}
MIN_CONDITION, MAX_CONDITION = 4, 80
STOCK_CONDITION = 3  # sentences of a law with the same condition: a stock exception (別段の意思を表示した …)
SAME_PREDICATE = 5  # final characters two conditions share when they differ only in a value (…歳に達している)
BACK_REFERENCE = re.compile(r"これ|それ|同様")
# 「…場合も、同様とする」 says nothing without the sentence before
SAME_AS_BEFORE = re.compile(r"同様とする。$")
LEAD = re.compile(r"^(?:ただし|この場合において|この場合においては|この場合には)、")
# the persons a topic names
ACTOR_SPLIT = re.compile(r"、|の|及び|又は|並びに|若しくは|その他|これら|その|各")
CASE_FRAME = re.compile(r"(?:とき|場合)(?:に|において)?$")
# a clause sharing a third of its words (kanji pairs) with the answer may describe the same act
SHARED_WORDS = 3
MAX_ECHO = 2  # words of the quoted provision another clause may repeat (経過, 期間 …) before it restates it


def top_commas(text: str) -> list[int]:
    """Positions of 、 outside brackets (「」 （） hold their own commas).

    >>> top_commas("甲（乙、丙）は、丁をする。")
    [7]
    """
    return outside_brackets(text, "、")


def topics_of(sentence: str, end: int | None = None) -> tuple[str, ...]:
    """Who or what the clause ending at ``end`` is about: every 「Xは、」 before it that is no case frame
    (…ときは, …場合には), each reaching back to the one before it (「子、その直系卑属…は、」 is one topic).

    >>> topics_of("遺産の分割について、協議が調わないときは、各共同相続人は、分割を請求することができる。")
    ('各共同相続人',)
    >>> topics_of("行政庁は、審査基準を定めるに当たっては、具体的なものとしなければならない。")
    ('行政庁', '審査基準を定めるに当たって')
    """
    topics, begin = [], 0
    for comma in top_commas(sentence[:end]):
        segment = sentence[begin:comma]
        if segment.endswith("は"):
            if not CASE_FRAME.search(segment[:-1]):
                topics.append(segment[:-1])
            begin = comma + 1
    return tuple(topics)


def final_clause(sentence: str) -> tuple[int, str, str, str] | None:
    """``(start, clause, ending, flipped ending)`` of a sentence ending in a modal ending: the clause is the
    part after the last comma, reaching back over coordinated clauses (…し、又は…) and lists of nouns and
    while shorter than :data:`MIN_CLAUSE`, but never past the frame (topic, condition, ただし).

    >>> final_clause("町長は、放置自転車を発見したときは、当該自転車を売却し、又は廃棄することができる。")
    (18, '当該自転車を売却し、又は廃棄する', 'ことができる', 'ことができない')
    """
    body = sentence.rstrip("。")
    if not (pair := next(((e, f) for e, f in MODAL_FLIPS if body.endswith(e)), None)):
        return None
    ending, flipped = pair
    body = body[: -len(ending)]
    commas = top_commas(body)
    start = commas.pop() + 1 if commas else 0
    while commas and (len(body) - start < MIN_CLAUSE or COORDINATOR.match(body[start:])
                      or NOUN_END.search(body[:start - 1])) and not BOUNDARY.search(body[:start - 1]):
        start = commas.pop() + 1
    clause = body[start:]
    if not MIN_CLAUSE <= len(clause) <= MAX_CLAUSE or start < MIN_FRAME or COORDINATOR.match(clause):
        return None
    return start, clause, ending, flipped


def condition_of(sentence: str) -> tuple[int, str, str, str] | None:
    """``(start, condition, marker, effect)`` of the sentence's first condition: from the end of its frame
    (the topic 「…は、」 or ただし) to the marker.

    >>> condition_of("管理者は、利用者が七十歳以上の者であるときは、利用料の半額を免除することができる。")
    (5, '利用者が七十歳以上の者である', 'ときは', '利用料の半額を免除することができる')
    """
    lead = LEAD.match(sentence)
    begin = lead.end() if lead else 0
    commas = set(top_commas(sentence))
    for match in MARKER.finditer(sentence, begin):
        if match.end() - 1 not in commas:  # a marker inside brackets
            continue
        start = begin
        for comma in sorted(c for c in commas if begin <= c < match.start()):
            if BOUNDARY.search(sentence[:comma]) and not sentence[:comma].endswith("ば"):
                start = comma + 1
        condition, effect = sentence[start:match.start()], sentence[match.end():].rstrip("。")
        # 「…転貸の場合には」: a noun condition would stand out among clauses (「…ものに限り」 is none).
        noun = condition.endswith("の") and not condition.endswith("もの")
        if MIN_CONDITION <= len(condition) <= MAX_CONDITION and len(effect) >= MIN_CLAUSE and not noun:
            return start, condition, match.group(1), effect
        return None
    return None


def _family(marker: str) -> str:
    """Conditions that can stand for each other: とき and 場合 both follow the 連体形; the rest keep their
    marker."""
    return "case" if marker in CASE_MARKERS else marker


def law_provision_pools(articles: list[dict]) -> dict[str, dict]:
    """Per law: clauses with a positive ending (:data:`POSITIVE`, with every topic of their article: a
    sentence without one is about its article's) and conditions per marker family (with their effect), by
    position; the law's whole text; and the subject/body pools of subjects.py."""
    pools: dict[str, dict] = defaultdict(lambda: {"positive": [], "conditions": defaultdict(list),
                                                  "texts": [], "position": {}, "stock": Counter()})
    for pos, article in enumerate(articles):
        if not _usable(article):
            continue
        pool = pools[article["law_id"]]
        pool["texts"].append(article["text"])
        pool["position"][article["id"]] = pos
        stock = pool["stock"]
        sentences = sentences_of(article)
        topics = tuple(sorted({t for s in sentences for t in topics_of(s)}))
        for sentence in sentences:
            if not _clean(sentence, leaning=True):
                continue
            conditional = condition_of(sentence)
            clause = final_clause(sentence)
            # A ただし/この場合 clause is the sentence before's actor's
            # (「一年ごとにその償金を支払うことができる」).
            if (clause and clause[2] in POSITIVE and len(clause[1]) >= MIN_OTHER_CLAUSE
                    and not DEMONSTRATIVE.match(clause[1]) and not LEANS.match(sentence)):
                # Without a 「…は、」 the actor hides in the frame
                # (「灯台管理人が修繕をしたときは、…請求することが できる」): the frame stands for it, and
                # counts as a person's.
                own = topics_of(sentence, clause[0])
                personal = not own or any(_is_person(t) for t in own)
                pool["positive"].append((pos, (clause[1] + clause[2], clause[1],
                                               tuple(sorted({*topics, *(own or (sentence[:clause[0]],))})),
                                               bool(conditional), personal)))
            if conditional:
                pool["conditions"][_family(conditional[2])].append((pos, (conditional[1], conditional[3])))
                stock[conditional[1]] += 1
    subject_pools = law_subject_pools(articles)
    for law_id, pool in pools.items():
        pool["text"] = LawText("\n".join(pool.pop("texts")))  # indexed once: see lawindex.py
        pool["positive"] = ByPosition(pool["positive"])
        pool["conditions"] = {family: ByPosition(pairs) for family, pairs in pool["conditions"].items()}
        pool["stock"] = {c for c, n in pool.pop("stock").items() if n >= STOCK_CONDITION}
        pool.update(subject_pools.get(law_id, {}))
    return dict(pools)


def _stem(before: str, sentence: str, start: int, end: int) -> str:
    return (f"次の法令の規定の空欄{BLANK}に入るものとして正しいものはどれか。\n"
            f"「{before}{sentence[:start]}{BLANK}{sentence[end:]}」")


def _same_actor(topic: str, other: str) -> bool:
    """共同相続人 / 各共同相続人, 特別養子縁組の成立に / 特別養子縁組を成立させるに, 子その他の利害関係人 /
    子、その 直系卑属…: the same person or act (any shared word), so what is given or required elsewhere may
    hold here too."""
    words = lambda t: {w for w in ACTOR_SPLIT.split(t) if w}  # noqa: E731
    return bool(topic and other) and (topic in other or other in topic
                                      or bool(kanji_pairs(topic) & kanji_pairs(other))
                                      or bool(words(topic) & words(other))
                                      or len(os.path.commonprefix([topic[::-1], other[::-1]])) >= 2)


def _shares(words: set[str], others: set[str], most: int = 1) -> bool:
    """Whether a clause shares a third of its own or the other side's words (契約の解除 /
    各当事者がいつでもその解除: the same act said weaker), or ``most`` words at all."""
    shared = len(words & others)
    return bool(shared) and (shared >= most or shared * SHARED_WORDS >= min(len(words), len(others)))


def _permission(sentence: str, before: str, article: dict, pool: dict, pos: int) -> dict | None:
    """The clause as written, with the contradicting ending, and two other grants or duties of the law (see
    the module docstring); None when the flip is said somewhere in the law or no two other clauses fit."""
    found = final_clause(sentence)
    if not found:
        return None
    start, clause, ending, flipped = found
    if says(pool["text"], clause + flipped):  # the law says the flipped clause somewhere: not plainly false
        return None
    topics, conditional, seen = topics_of(sentence, start), bool(condition_of(sentence)), set()
    mine, frame_words = kanji_pairs(clause), kanji_pairs(before + sentence[:start])
    personal = any(_is_person(t) for t in topics)

    def keep(value) -> bool:
        text, other, other_topics, other_conditional, other_personal = value
        # The same actor given (or bound to) another clause elsewhere is wrong here only when both provisions
        # say under which condition; without one, "A can X" would not make "A can Y" false.
        same_actor = (any(_same_actor(t, u) for t in topics for u in other_topics)
                      and not (conditional and other_conditional))
        # A clause sharing a word with the answer may describe the same act (返還の請求 / 給付したものの返還を
        # 請求する); one echoing the quoted provision may be what it means (認知をするには… /
        # 父又は母が認知する).
        words = kanji_pairs(other)
        # Of a provision about no person (「…については、」, 「占有権は、」), a person's power may be loosely
        # true.
        impersonal = other_personal and not personal
        if (text in seen or same_actor or impersonal or other in clause or clause in other
                or other in sentence
                or text in article["text"] or _shares(words, mine) or _shares(words, frame_words, MAX_ECHO)):
            return False
        seen.add(text)
        return True

    others = nearest_values(pool["positive"], pos, keep, 2)
    if len(others) < 2:
        return None
    return {"kind": "permission", "answer": clause + ending,
            "distractors": [clause + flipped, others[0][0], others[1][0]], "context": before + sentence,
            "stem": _stem(before, sentence, start, len(sentence) - 1)}


def _requirement(sentence: str, before: str, article: dict, pool: dict, pos: int) -> dict | None:
    """The sentence's condition with three conditions of other provisions (see the module docstring)."""
    found = condition_of(sentence)
    if not found:
        return None
    start, condition, marker, effect = found
    last, seen = effect.rsplit("、", 1)[-1], set()
    consequence, words = kanji_pairs(last), kanji_pairs(condition)

    def keep(value) -> bool:
        other, other_effect = value
        # Another condition with the same effect, the same final clause or one that includes its words
        # (「無効とす る」 in 「…停止条件であるときはその法律行為は無効とし…」) would be right too.
        ok = (other not in seen and other not in condition and condition not in other
              and other not in article["text"] and other_effect != effect and other_effect.rsplit("、", 1)[-1]
              != last and not (consequence and consequence <= kanji_pairs(other_effect))
              # 父母による虐待… may be the 特別の事情 asked for
              and len(words & kanji_pairs(other)) < MAX_ECHO
              # 二十歳に達している ⊂ 十五歳に達している
              and other[-SAME_PREDICATE:] != condition[-SAME_PREDICATE:]
              and other not in pool["stock"])  # 「別段の意思を表示した」 may be any provision's exception
        if ok:
            seen.add(other)
        return ok

    others = nearest_values(pool["conditions"].get(_family(marker), []), pos, keep, 3)
    return {"kind": "requirement", "answer": condition, "distractors": [o[0] for o in others],
            "context": before + sentence, "stem": _stem(before, sentence, start, start + len(condition))}


def provision_targets(article: dict, pool: dict) -> list[dict]:
    """Every candidate of ``permission``, ``requirement`` (and subjects.py's ``subject``, ``body``) for one
    article, with three distractors; none for supplementary provisions (施行期日, 経過措置: alike in every
    law)."""
    if not _usable(article) or article.get("is_suppl"):
        return []
    pos = pool.get("position", {}).get(article["id"], 0)
    sentences = sentences_of(article)
    found = []
    for i, sentence in enumerate(sentences):
        # ただし…, この場合…, …も、同様とする are quoted after the sentence they lean on (the blank stays in
        # theirs).
        leans = bool(LEANS.match(sentence) or SAME_AS_BEFORE.search(sentence))
        before = sentences[i - 1] if leans and i and _clean(sentences[i - 1]) else ""
        # 「協議が調わないときは、裁判所が、これを指定する」 after a sentence that points elsewhere: its これ
        # is there.
        refers_back = bool(i and BACK_REFERENCE.search(sentence)
                           and not _clean(sentences[i - 1], leaning=True))
        if not _clean(sentence, leaning=bool(before)) or (leans and not before) or refers_back:
            continue
        made = [make(sentence, before, article, pool, pos) for make in (_permission, _requirement)]
        made += subject_targets(sentence, before, article, pool, pos)
        found += [t for t in made if t and t["answer"] not in before]  # the sentence before must not tell it
    return [t for t in found if len(t["distractors"]) == 3 and len(set(t["distractors"])) == 3]

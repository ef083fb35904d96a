"""Quoting a provision without its pointers: references to other provisions become an elision mark.

Statutes point at each other all the time (第九百二十七条第一項の期間, 前条の規定により,
同項第三号に掲げる事項); a question may not show an article number (the leak checker's rule), and a bare
「前項」 says nothing to a reader who has not found the article yet. So a sentence is quoted with each
reference — a chain of numbered or relative provisions (第N条第M項第K号, 前条, 前二項, 同項, 次条, …ただし書,
joined by から…まで, 及び, 又は, 、), and another law's number after its name (（昭和二十二年法律第百二十号）)
— replaced by :data:`ELIDED`, the mark a quotation uses for an omission. The rest of the sentence is the law's
own text, so a blank elsewhere in it is answered by the article as before; an answer or a distractor never
holds the mark (``cloze.questions_from_targets``, ``cloze.nearest_values``), and a true statement is never an
elided sentence.

    >>> elide("第九百二十七条第一項の期間が満了した後は、限定承認者は、弁済をしなければならない。")
    '（略）の期間が満了した後は、限定承認者は、弁済をしなければならない。'
    >>> elide("前条第二項の規定は、第二百四十二条から前条までの場合及び同項第三号について準用する。")
    '（略）の規定は、（略）の場合及び（略）について準用する。'
    >>> elide("法第十七条の補助の対象となる費用は、新法第六章の規定による費用とする。")
    '（略）の補助の対象となる費用は、新法（略）の規定による費用とする。'
    >>> elide("国家公務員法（昭和二十二年法律第百二十号）第二条第一項に規定する国家公務員")
    '国家公務員法（略）に規定する国家公務員'
    >>> elide("一の債権者は、次に掲げる事項を届け出なければならない。")  # a list's lead: no reference
    '一の債権者は、次に掲げる事項を届け出なければならない。'

:func:`says` asks whether the law says a text that may hold elisions: each of its pieces must occur in the
law.
"""

from __future__ import annotations

import re

ELIDED = "（略）"
_N = "〇一二三四五六七八九十百千"
_BRANCH = rf"(?:の[{_N}]+)*"
# One provision: numbered (第三条の二, 第二項, 第十二号, 第一編…第一目) or relative (前条, 前二項, 前各項,
# 同項, 次章, 後段).
_UNIT = (rf"(?:第[{_N}]+(?:編|章|節|款|目|条|項|号){_BRANCH}|(?:前|次|同)[{_N}]*(?:編|章|節|款|目|条|項|"
         rf"号){_BRANCH}|前各(?:項|号)|(?:前|後)段|附則第[{_N}]+(?:条|項){_BRANCH})")
# A chain of them naming one place (第九百二十七条第一項, 同条第三項後段, 第十三条第一項第一号ハ).
# (The subitem letter only before hiragana or punctuation: in old laws ハ, ニ, ヲ … after 前条 are particles.)
_PLACE = (rf"{_UNIT}(?:{_UNIT}|各号|ただし書|本文|前段|後段|[イロハニホヘトチリヌルヲワカヨタレソツネナラ"
          rf"ム](?=[ぁ-ん、。）]))*")
# Places joined into one reference: 第二百四十二条から前条まで, 第五条、第九条及び第十三条, 第十九条乃至前条.
# (An ordinance's 「法第四条」「令第二条」 names its parent law by one word: elided with the number.)
REFERENCE = re.compile(rf"(?:(?<![一-龥々ァ-ヶ])(?:法|令|規則)(?=第))?{_PLACE}"
                       rf"(?:(?:から|及び|並びに|又は|若しくは|、|乃至|及|又ハ|若ハ|並ニ){_PLACE}|まで)*")
# Another law's number after its name (国家公務員法（昭和二十二年法律第百二十号）): the leak checker's
# law_number.
LAW_NUMBER = re.compile(rf"（(?:明治|大正|昭和|平成|令和)[{_N}]+年[^（）。]{{0,30}}第[{_N}]+号）")
_REPEATED = re.compile(rf"(?:{re.escape(ELIDED)})+")


def elide(sentence: str) -> str:
    """``sentence`` with every reference to another provision replaced by :data:`ELIDED` (see the module
    docstring)."""
    if not any(c in sentence for c in "第前次同附"):  # most sentences: nothing to look for
        return sentence
    return _REPEATED.sub(ELIDED, REFERENCE.sub(ELIDED, LAW_NUMBER.sub(ELIDED, sentence)))


def says(law_text, text: str) -> bool:
    """Whether the law (``str`` or a :class:`~tansaku.pipelines.egov.lawindex.LawText`) says ``text``: when it
    holds elisions, whether each piece between them (of 4 characters or more) does — a distractor the law may
    say is refused rather than kept (the pieces need not be adjacent there)."""
    if ELIDED not in text:
        return text in law_text
    pieces = [p for p in text.split(ELIDED) if len(p) >= 4]
    return bool(pieces) and all(p in law_text for p in pieces)

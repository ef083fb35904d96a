"""The ``list`` kind: a provision's list (号, イロハ, （１）…) quoted with one of its items blanked; needs no
LLM.

Statutes put much of what they say into lists: what an application states (次に掲げる事項を記載した申請書),
when a permit may be revoked (次の各号のいずれかに該当するとき), who sits on a council
(次に掲げる者をもって構成する), and old laws the same (左ノ事項ヲ記載スヘシ). Their items are fragments that
no other kind quotes, so an article of such lists had no question. Here the lead sentence and its items are
quoted as the law lays them out, one item blanked::

    「…次に掲げる事項を記載した申請書を知事に提出しなければならない。
    一　氏名又は名称及び住所
    二　【　　】
    三　掘削を行う土地の所在地及び掘削の深さ」

A lead is any paragraph or item whose text announces a list (:data:`LEAD`) and has two items or more; a nested
list (号→イ→（１）) is quoted under its lead's own lead. The blanked item is a leaf of 4 to 60 characters
without an elision (quote.py); items written as term and meaning (定義の号) are the ``term`` kind's.
Distractors are items of the law's other lists (nearest articles first) of the same shape — a clause ending in
。 for a clause, a person for a person, a noun phrase for a noun phrase — that the article nowhere says and
that share at most a third of their words with any item of this list (a near restatement of one would be
arguable); a law with few lists lends what its sentences name in that shape (a case 「…とき。」 from its
conditions, a thing from its topics and defined terms, a person from its actors and addressees). Long lists
are quoted around the blank, the items left out marked as elided.

    from tansaku.pipelines.egov.lists import law_list_pools, list_targets
    pools = law_list_pools(article_records)
    targets = list_targets(article, pools[article["law_id"]])
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from tansaku.pipelines.egov.classic import TOPIC as CLASSIC_TOPIC
from tansaku.pipelines.egov.classic import is_classic
from tansaku.pipelines.egov.cloze import (
    BLANK,
    DEFINED,
    DEFINED_LATER,
    _usable,
    nearest_values,
    sentences_of,
    split_sentences,
)
from tansaku.pipelines.egov.lawindex import ByPosition
from tansaku.pipelines.egov.provisions import CASE_MARKERS, condition_of
from tansaku.pipelines.egov.quote import ELIDED, elide
from tansaku.pipelines.egov.statements import _actor, _clean
from tansaku.pipelines.egov.subjects import _addressee, _is_person, _topic, kanji_pairs

LEAD = re.compile(r"次に掲げる|次の各号|次のいずれか|次のとおり|左ノ|左ニ掲ク|左に掲げる|左の各号")
CELL_SEP = "\u3000"  # extract.py's column separator: a definition item (用語　意義)
MIN_ITEM, MAX_ITEM = 4, 60  # characters of the blanked item
MAX_LEAD = 300  # characters of each lead line quoted
SHOWN = 3  # items shown on each side of the blank in a longer list
LONG_LIST = 2 * SHOWN + 2
SHARED = 3  # a distractor sharing a third of its words with an item of the list may restate it


def _line(node: dict) -> str:
    title = node.get("title") or ""
    text = elide(node.get("text") or "")
    return f"{title}{CELL_SEP}{text}" if title else text


def _leaf_text(item: dict) -> str | None:
    """An item's text when it can be a choice: a leaf, no definition columns, no elision, 4–60 characters."""
    text = elide(item.get("text") or "")
    if item.get("items") or CELL_SEP in text or ELIDED in text or not MIN_ITEM <= len(text) <= MAX_ITEM:
        return None
    return text


def _lists(article: dict):
    """(lead chain lines, lead node) of every list in the article: a node announcing a list with ≥ 2 items."""
    def walk(node: dict, chain: list[str]):
        line = _line(node)
        if LEAD.search(node.get("text") or "") and len(node.get("items", [])) >= 2:
            yield chain, node
        for k, child in enumerate(node.get("items", [])):
            # an item's own list is quoted under its lead, the items between them elided
            yield from walk(child, chain + [line] + ([ELIDED] if k else []))

    for paragraph in json.loads(article["paragraphs"]):
        yield from walk(paragraph, [])


def law_list_pools(articles: list[dict]) -> dict[str, dict]:
    """Per law: (position, item text) of every list item that can be a choice; and, for a law with few lists,
    what its sentences name in the shape of an item: cases (…とき。), things (its topics and defined terms)
    and persons (actors, addressees), in an old law its topics (…ハ)."""
    pools: dict[str, dict] = defaultdict(lambda: {"items": [], "position": {}, "clause": [], "noun": [],
                                                  "person": []})
    for pos, article in enumerate(articles):
        if not _usable(article) or article.get("is_suppl"):
            continue
        pool = pools[article["law_id"]]
        pool["position"][article["id"]] = pos
        for _, lead in _lists(article):
            pool["items"] += [(pos, t) for t in map(_leaf_text, lead["items"]) if t]
        for sentence in sentences_of(article):
            for pattern in (DEFINED, DEFINED_LATER):
                pool["noun"] += [(pos, t) for t in pattern.findall(sentence)]
            if is_classic(sentence):  # an old law's topics (溜池ノ改修ハ, 組合長ハ)
                for topic in CLASSIC_TOPIC.findall(sentence):
                    pool["person" if _is_person(topic) else "noun"].append((pos, topic))
                continue
            if not _clean(sentence, leaning=True):
                continue
            if (found := condition_of(sentence)) and found[2] in CASE_MARKERS and found[2].startswith("とき"):
                pool["clause"].append((pos, found[1] + "とき。"))
            if (topic := _topic(sentence)) and not _is_person(topic[0]):
                pool["noun"].append((pos, topic[0]))
            pool["person"] += [(pos, p[1]) for p in (_actor(sentence), _addressee(sentence)) if p]
    for pool in pools.values():
        for key in ("items", "clause", "noun", "person"):
            pool[key] = ByPosition(pool[key])
    return dict(pools)


def _shape(text: str) -> tuple:
    """What a distractor must share with the answer: a clause (…とき。) ends the same way; a person is one."""
    if text.endswith("。"):
        return ("clause", split_sentences(text)[-1][-3:])
    return ("person" if _is_person(text) else "noun",)


def _quote(chain: list[str], lead: dict, blank: int) -> str:
    items = lead["items"]
    shown = range(len(items))
    if len(items) > LONG_LIST:  # the items around the blank, the others elided
        shown = range(max(0, blank - SHOWN), min(len(items), blank + SHOWN + 1))
    lines = [*chain, _line(lead)]
    if shown[0] > 0:
        lines.append(ELIDED)
    for k in shown:
        item = items[k]
        lines.append(f"{item.get('title') or ''}{CELL_SEP}{BLANK}" if k == blank else _line(item))
        if k != blank and item.get("items"):
            lines.append(ELIDED)  # its own list, not quoted
    if shown[-1] < len(items) - 1:
        lines.append(ELIDED)
    return "\n".join(lines)


def _keeper(text: str, answer: str, shape: tuple, siblings: list[str]):
    """Whether a value may stand beside ``answer`` (see the module docstring): not in the article's ``text``,
    of the answer's shape, no restatement of an item of the list, of a comparable length."""
    sibling_words = [kanji_pairs(s) for s in siblings]

    def keep(value: str) -> bool:
        words = kanji_pairs(value)
        return (value not in text and _shape(value) == shape
                and not any(value in s or s in value for s in siblings)
                and not any(words & w and len(words & w) * SHARED >= min(len(words), len(w))
                            for w in sibling_words)
                and 0.3 <= len(value) / len(answer) <= 3)

    return keep


def list_targets(article: dict, pool: dict) -> list[dict]:
    """One ``list`` target per list of ``article`` that finds three distractors (see the module docstring);
    none for supplementary provisions."""
    if not _usable(article) or article.get("is_suppl") or not pool:
        return []
    pos = pool.get("position", {}).get(article["id"], 0)
    found = []
    for chain, lead in _lists(article):
        if any(len(line) > MAX_LEAD for line in [*chain, _line(lead)]):
            continue
        leaves = [(k, t) for k, item in enumerate(lead["items"]) if (t := _leaf_text(item))]
        siblings = [elide(item.get("text") or "") for item in lead["items"]]
        # a list of persons (欠格事由: 未成年者, 破産者 …) takes persons, whatever its item's own last word
        persons = sum(_is_person(s) for s in siblings) * 2 >= len(siblings)
        for k, answer in sorted(leaves, key=lambda kt: -len(kt[1])):
            shape = ("person",) if persons and not answer.endswith("。") else _shape(answer)
            keep = _keeper(article["text"], answer, shape, siblings)
            others = nearest_values(pool["items"], pos, keep, 3)
            if len(others) < 3:  # few lists in the law: what it names elsewhere in the same shape
                more = nearest_values(pool.get(shape[0], []), pos,
                                      lambda v, chosen=set(others), fits=keep: v not in chosen and fits(v), 3)
                others += more[:3 - len(others)]
            if len(others) == 3:
                found.append({"kind": "list", "answer": answer, "distractors": others,
                              "context": "\n".join([_line(lead), *siblings]),
                              "stem": f"次の法令の規定の空欄{BLANK}に入るものとして正しいものはどれか。\n"
                                      f"「{_quote(chain, lead, k)}」"})
                break
    return found

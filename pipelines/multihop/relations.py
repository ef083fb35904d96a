"""Infobox relation names: one canonical name for each spelling (出身地 / 出生地 / 生誕地 → 出生地), and how
Japanese says each relation, so template questions read like Japanese (``questions.py``).

The table is ``relations.json`` beside this file; a user file of the same shape (``--relations FILE``)
is merged over it. A relation the table does not know keeps its name and gets plain noun phrasing.

    >>> table = Relations.load()
    >>> table.canonical("出身地"), table.canonical("生誕地"), table.canonical("好きな食べ物")
    ('出生地', '出生地', '好きな食べ物')
    >>> table.phrase("出生地").of.format(S="村上春樹")
    '村上春樹が生まれた場所'
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from tansaku.core import jsontext
from tansaku.core.errors import InputError

TABLE = Path(__file__).with_name("relations.json")
KINDS = ("person", "place", "time", "org", "work", "thing")
WH = {"person": "誰ですか？", "place": "どこですか？", "time": "いつですか？", "org": "どこですか？",
      "work": "何ですか？", "thing": "何ですか？"}
KIND_NOUN = {"person": "人物", "place": "場所", "time": "時期", "org": "組織", "work": "作品",
             "thing": "もの"}
# Shapes of relation names the table does not list (the fallback's question word).
_SHAPES = (("place",
            ("地", "所在地", "出身", "本社", "本拠地", "場所", "国", "国籍", "都道府県", "県", "都市", "州")),
           ("time", ("年", "年月日", "日", "時期", "時代", "設立", "開業", "開館", "創業", "開通", "開港")),
           ("person",
            ("者", "人", "長", "知事", "監督", "妻", "夫", "配偶者", "師匠", "父", "母", "主宰", "選手")))


@dataclass(frozen=True)
class Phrase:
    """How one relation is said: ``of`` describes the value from its subject ``{S}``; ``ask`` asks for it."""

    name: str
    kind: str
    of: str
    ask: str
    verbal: bool  # ``of`` is a clause (「{S}を書いた人物」), not a bare 「{S}の…」


def guess_kind(relation: str) -> str:
    """The kind of a relation the table does not list, from the shape of its name.

    >>> [guess_kind(r) for r in ("出身地", "設立年", "監督", "血液型")]
    ['place', 'time', 'person', 'thing']
    """
    for kind, endings in _SHAPES:
        if relation.endswith(endings):
            return kind
    return "thing"


def _well_formed(entry) -> bool:
    """One table entry: a dict with a known kind, two phrasings carrying {S}, string variants."""
    if not isinstance(entry, dict):
        return False
    of, ask, variants = entry.get("of"), entry.get("ask"), entry.get("variants", [])
    return (entry.get("kind") in KINDS and isinstance(of, str) and "{S}" in of and isinstance(ask, str)
            and "{S}" in ask and isinstance(variants, list) and all(isinstance(v, str) for v in variants)
            and isinstance(entry.get("set_valued", False), bool))


class Relations:
    """The canonical names and phrasings of a table (the package's, or merged with a user's file)."""

    def __init__(self, table: dict):
        self.table = {k: v for k, v in table.items() if not k.startswith("_")}
        self.canonical_of: dict[str, str] = {}
        for name, entry in self.table.items():
            if not _well_formed(entry):
                raise InputError(f"relation table: {name!r} needs kind (one of {', '.join(KINDS)}), 'of' / "
                                 "'ask' phrasings that contain {S}, variants as a list of strings, and "
                                 "set_valued (if given) true or false")
            for spelling in (name, *entry.get("variants", [])):
                self.canonical_of[spelling] = name
        self.version = hashlib.sha256(jsontext.dumps(self.table, sort_keys=True).encode()).hexdigest()[:12]

    @classmethod
    def load(cls, extra: Path | None = None) -> Relations:
        table = json.loads(TABLE.read_text(encoding="utf-8"))
        if extra is not None:
            try:
                more = jsontext.loads(Path(extra).read_bytes())  # nesting bounded, lone surrogates → U+FFFD
            except (OSError, ValueError) as e:  # ValueError: bad JSON or UTF-8, nested too deeply
                raise InputError(f"--relations {extra}: not a readable JSON table of relations "
                                 f"({e})") from None
            if not isinstance(more, dict):
                raise InputError(f"--relations {extra}: the table must be a JSON object of relation name -> "
                                 f"entry")
            table |= more
        return cls(table)

    def canonical(self, relation: str) -> str:
        return self.canonical_of.get(relation, relation)

    def set_valued(self) -> frozenset[str]:
        """Canonical names of the relations marked ``set_valued`` (their hops never have a unique answer)."""
        return frozenset(name for name, entry in self.table.items() if entry.get("set_valued"))

    def phrase(self, relation: str) -> Phrase:
        entry = self.table.get(self.canonical(relation))
        if entry is None:
            kind = guess_kind(relation)
            return Phrase(relation, kind, f"{{S}}の{relation}", f"{{S}}の{relation}は{WH[kind]}", False)
        return Phrase(self.canonical(relation), entry["kind"], entry["of"], entry["ask"],
                      not re.fullmatch(r"\{S\}の[^{}]*", entry["of"]))


DEFAULT = Relations.load()

"""The two per-law lookups of the rule-based question kinds, built once per law so that generating questions
for a law costs time linear in its articles (it was quadratic: for 10k one-sentence articles 164 CPU s before,
6.7 s now — ``python bench/egov_parse.py --generation``).

  * :class:`LawText` — the law's whole text with ``needle in law_text`` (the contradiction checks: a
    perturbed statement must occur nowhere in the law) answered through an index of its 4-character
    grams: the needle's rarest gram gives the few places to compare, instead of a scan of the whole law
    for every perturbation. The same answers as ``needle in str(law_text)``.
  * :class:`ByPosition` — (article position, value) pairs sorted once, walked outward from a position:
    ``cloze.nearest_values`` (every kind's distractors, nearest articles first) no longer sorts the whole
    law's pool for every article, nor reads all of it when a law has few distinct values (a unit with two
    numbers in 10k articles). The order of ``sorted(pairs, key=(|position - pos|, position, value))``, each
    value at its first place.

    >>> text = LawText("甲は、乙に通知しなければならない。\\n丙は、届け出ることができる。", small=0)
    >>> "乙に通知しなければ" in text, "乙に通知しなくてもよい" in text
    (True, False)
    >>> [v for _, v in ByPosition([(0, "a"), (3, "b"), (1, "c"), (5, "d"), (4, "c")]).nearest(2)]
    ['c', 'b', 'a', 'd']
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

GRAM = 4  # characters per indexed gram: rare enough in law text that a needle's rarest one has few places
SMALL = 20_000  # characters: a shorter law is scanned (a scan of it takes microseconds)


class LawText:
    """A law's text; ``needle in law_text`` costs about the needle's length, not the law's."""

    def __init__(self, text: str, small: int | None = None):
        self.text, self.small = text, SMALL if small is None else small
        self._grams: dict[str, list[int]] | None = None

    def __str__(self) -> str:
        return self.text

    def __len__(self) -> int:
        return len(self.text)

    def _index(self) -> dict[str, list[int]]:
        if self._grams is None:  # on first use: a law whose checks never come needs no index
            grams: dict[str, list[int]] = {}
            text = self.text
            for i in range(len(text) - GRAM + 1):
                grams.setdefault(text[i:i + GRAM], []).append(i)
            self._grams = grams
        return self._grams

    def __contains__(self, needle: str) -> bool:
        text = self.text
        if len(text) <= self.small or len(needle) < GRAM:
            return needle in text
        grams, offset, places = self._index(), 0, None
        for i in range(len(needle) - GRAM + 1):
            found = grams.get(needle[i:i + GRAM])
            if found is None:
                return False  # a gram the law never has: most perturbations end here
            if places is None or len(found) < len(places):
                offset, places = i, found
        if len(places) * len(needle) > len(text):  # every gram common (a repetitive text): a scan is cheaper
            return needle in text
        return any(p >= offset and text.startswith(needle, p - offset) for p in places)


class ByPosition:
    """(position, value) pairs sorted once (values hashable), for nearest-first walks."""

    def __init__(self, pairs: Iterable[tuple[int, object]]):
        self.pairs = sorted(pairs)
        self.positions = [p for p, _ in self.pairs]
        self.where: dict[object, list[int]] = {}  # value → its positions, ascending
        for p, value in self.pairs:
            self.where.setdefault(value, []).append(p)

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[tuple[int, object]]:
        return iter(self.pairs)

    def nearest(self, pos: int) -> Iterator[tuple[int, object]]:
        """Each distinct value once, at its nearest position, by distance to ``pos``, then position, then
        value (the order of the sort it replaces; a value's later places change nothing for
        ``nearest_values``, whose filters reject a value again once they have). Lazy: a walk that finds its
        distractors in the next articles reads only those."""
        pairs, positions, n = self.pairs, self.positions, len(self.pairs)
        right = bisect_left(positions, pos)
        left, seen, read = right - 1, set(), 0
        while left >= 0 or right < n:
            # At equal distance the earlier article comes first, as in the sort it replaces.
            if right >= n or (left >= 0 and pos - positions[left] <= positions[right] - pos):
                start = bisect_left(positions, positions[left], 0, left + 1)
                group, left = pairs[start:left + 1], start - 1
            else:
                end = bisect_right(positions, positions[right], right)
                group, right = pairs[right:end], end
            for pair in group:
                if pair[1] not in seen:
                    seen.add(pair[1])
                    yield pair
            read += len(group)
            if read > 32 + 4 * len(seen):  # mostly values met before: go by value instead (few of them)
                yield from self._by_value(pos, seen)
                return

    def _by_value(self, pos: int, seen: set) -> Iterator[tuple[int, object]]:
        """The values not in ``seen`` at their nearest positions, in the walk's order: each is past the part
        of the law the walk has read, since none of its places was in it."""
        rest = []
        for value, places in self.where.items():
            if value in seen:
                continue
            i = bisect_left(places, pos)
            p = (places[i - 1] if i == len(places) or (i and pos - places[i - 1] <= places[i] - pos)
                 else places[i])
            rest.append((abs(p - pos), p, value))
        rest.sort()  # distance, position, value
        return ((p, value) for _, p, value in rest)

"""Entity names: normalization to a join key, and linking surface names to article titles.

Two spellings of one entity must meet in the chain join ("『ノルウェイの森』", "ノルウェイの森 (小説)",
"ノルウェイの森（小説）" are one article), so every triple carries ``subject_key`` / ``object_key`` made
by :func:`entity_key`. Linking (:class:`ArticleIndex`) maps a surface name to an article of the corpus
by, in this order: the exact title, a redirect, an outgoing link of the article the triple came from
(which resolves a bare name to its disambiguated title), then the title with its disambiguation
suffix removed when only one article carries that base name.

    >>> entity_key("『ノルウェイの森』")
    'ノルウェイの森'
    >>> entity_key("ノルウェイの森（小説）") == entity_key("ノルウェイの森 (小説)") == 'ノルウェイの森'
    True
    >>> entity_key("Ｇｏｏｇｌｅ 検索")
    'google検索'
    >>> display_name("  『ノルウェイの森』 ")
    'ノルウェイの森'
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

# Quotes that mark titles in Japanese text; never part of the entity itself.
_QUOTES = str.maketrans("", "", "「」『』【】〈〉《》〔〕\"“”")
# A trailing disambiguation group: "(小説)", "（曖昧さ回避）", "(1987年の映画)". Applied after NFKC.
_DISAMBIGUATION = re.compile(r"\s*\([^()]{1,30}\)\s*$")
_SPACES = re.compile(r"\s+")


def display_name(name: str) -> str:
    """A clean surface form for records and questions: NFKC, quotes removed, spaces collapsed."""
    text = unicodedata.normalize("NFKC", str(name)).translate(_QUOTES)
    return _SPACES.sub(" ", text).strip()


def strip_disambiguation(title: str) -> str:
    """Drop one trailing parenthesized disambiguation suffix.

    >>> strip_disambiguation("ノルウェイの森 (小説)")
    'ノルウェイの森'
    >>> strip_disambiguation("(株)")
    '(株)'
    """
    stripped = _DISAMBIGUATION.sub("", title)
    return stripped if stripped else title


def entity_key(name: str) -> str:
    """The join key of an entity name: display form, disambiguation removed, no spaces, casefolded."""
    return strip_disambiguation(display_name(name)).replace(" ", "").casefold()


def exact_key(name: str) -> str:
    """Like :func:`entity_key` but keeps the disambiguation suffix (tells two articles apart)."""
    return display_name(name).replace(" ", "").casefold()


@dataclass
class ArticleIndex:
    """Titles, redirects and outgoing links of a corpus, for linking names to articles.

    ``add(doc_id, title, redirects, outgoing)`` once per article, then ``link(name, from_doc)``.
    """

    by_exact: dict[str, tuple[str, str]] = field(default_factory=dict)  # exact key -> (doc id, title)
    by_base: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # entity key -> articles
    redirects: dict[str, str] = field(default_factory=dict)  # exact key of a redirect -> exact key of title
    outgoing: dict[str, dict[str, str]] = field(default_factory=dict)  # doc id -> entity key -> exact key

    def add(self, doc_id: str, title: str, redirects: Iterable[str] = (),
            outgoing: Iterable[str] = ()) -> None:
        key = exact_key(title)
        if not key:
            return
        self.by_exact.setdefault(key, (str(doc_id), display_name(title)))
        self.by_base.setdefault(entity_key(title), []).append((str(doc_id), display_name(title)))
        for r in redirects or ():
            self.redirects.setdefault(exact_key(r), key)
        links = {}
        for target in outgoing or ():
            links.setdefault(entity_key(target), exact_key(target))
            links.setdefault(exact_key(target), exact_key(target))
        if links:
            self.outgoing[str(doc_id)] = links

    def __len__(self) -> int:
        return len(self.by_exact)

    def _resolve(self, key: str) -> tuple[str, str] | None:
        if key in self.by_exact:
            return self.by_exact[key]
        if key in self.redirects:
            return self.by_exact.get(self.redirects[key])
        return None

    def link(self, name: str, from_doc: str | None = None) -> tuple[str, str, str] | None:
        """``(doc_id, title, how)`` for the article ``name`` refers to, or None. ``how`` is one of
        ``title``, ``redirect``, ``outgoing_link``, ``base_title``."""
        key = exact_key(name)
        if key in self.by_exact:
            return (*self.by_exact[key], "title")
        if (hit := self._resolve(key)) is not None:
            return (*hit, "redirect")
        links = self.outgoing.get(str(from_doc), {}) if from_doc is not None else {}
        target = links.get(key) or links.get(entity_key(name))
        if target is not None and (hit := self._resolve(target)) is not None:
            return (*hit, "outgoing_link")
        candidates = self.by_base.get(entity_key(name), [])
        if len(candidates) == 1:  # a unique article once "(小説)" etc. is ignored
            return (*candidates[0], "base_title")
        return None

"""Japanese text analysis shared by indexing, querying, snippets and the brute-force test oracle.

Two analyzers, chosen per index and recorded in its metadata:

* ``char`` (default): the text is indexed twice.
  - ``title``/``text``: one token per non-space character, lowercased, with real positions
    (tantivy's ``Tokenizer.regex(r"\\S")``, registered as ``ja_char``). ``match_phrase`` runs here, so
    phrases are exact (tantivy's n-gram tokenizer puts every gram at position 0; phrases over-match).
  - ``title_bi``/``text_bi``: character bigrams of the text with whitespace removed, term frequencies
    only, no positions (tantivy's ``Tokenizer.ngram(2, 2)`` + lowercase, registered as ``ja_bigram``).
    ``match``/``multi_match`` score here: a bigram's posting list is far shorter than that of a
    particle like の or は, so an OR over a query's bigrams is cheap, and bigrams rank better than single
    characters (JaQuAD dev MRR@10 0.79 → 0.89, bench/search.py). ``match_phrase`` with slop 0 also
    requires the phrase's bigrams, at score 0: same hits, but tantivy walks the rarest bigram instead
    of the char posting lists (a two-character phrase is just its bigram term, scored on the bigram
    field).
  **Match terms** (``Analyzer.match_terms``): the query is NFKC-normalized and lowercased and split on
  whitespace; a word of two or more characters contributes its overlapping bigrams (東京都 → 東京, 京都),
  a one-character word contributes that character, looked up in the character field. Duplicates are
  dropped. ``operator: and`` requires every match term, ``minimum_should_match`` counts match terms
  (``"白砂 博物館"`` has the 3 terms 白砂, 博物, 物館; ``"75%"`` of them is 2). A document has a bigram term
  when the two characters are adjacent char tokens of the field, i.e. next to each other once
  whitespace is removed (the adjacency phrases use); query bigrams never span the query's whitespace.
* ``sudachi``: SudachiPy mode C (keeps 株式会社, 損害賠償 whole), normalized form, punctuation
  dropped; fed to tantivy as pre-tokenized text, so queries must be analyzed here in Python too.

``Analyzer.tokens(text)`` returns the token strings in position order; the position of a token is its
index in that list, for both analyzers. Both backends and the tests analyze through this module.

    >>> char_analyzer().tokens("東京 都Ab")
    ['東', '京', '都', 'a', 'b']
    >>> char_analyzer().match_terms("東京都の 港 東京")
    [('東京', True), ('京都', True), ('都の', True), ('港', False)]
"""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import tantivy
from sudachipy import Dictionary, SplitMode

from tansaku.core.errors import InputError

ANALYZERS = ("char", "sudachi")
CHAR_TOKENIZER = "ja_char"  # name registered on every opened tantivy index
BIGRAM_TOKENIZER = "ja_bigram"
SUDACHI_TOKENIZER = "ja_sudachi"  # whitespace tokenizer; tokens arrive pre-tokenized

# Sudachi POS classes that carry no searchable content (punctuation, spaces).
_SKIP_POS = {"補助記号", "空白"}


def _tantivy_char_analyzer():
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(r"\S"))
            .filter(tantivy.Filter.lowercase()).build())


def _tantivy_bigram_analyzer():
    # Indexing feeds it text with whitespace removed (embedded.py), so grams are adjacent char tokens.
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.ngram(2, 2))
            .filter(tantivy.Filter.lowercase()).build())


@dataclass
class Analyzer:
    """One analysis chain; ``name`` is ``char`` or ``sudachi``."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in ANALYZERS:
            raise InputError(f"unknown analyzer {self.name!r}; choose one of {', '.join(ANALYZERS)}")
        self._local = threading.local()  # sudachipy tokenizers are not shared across threads
        self._char = _tantivy_char_analyzer() if self.name == "char" else None

    @property
    def tokenizer_name(self) -> str:
        return CHAR_TOKENIZER if self.name == "char" else SUDACHI_TOKENIZER

    @property
    def has_bigrams(self) -> bool:
        """Whether indexes of this analyzer carry the bigram fields that ``match`` scores on."""
        return self.name == "char"

    def _sudachi(self):
        tok = getattr(self._local, "tok", None)
        if tok is None:
            tok = _sudachi_dictionary().create(SplitMode.C)  # cheap: the dictionary is shared
            self._local.tok = tok
        return tok

    def spans(self, text: str) -> list[tuple[str, int, int]]:
        """(token, char_start, char_end) in position order."""
        if self.name == "char":
            # Python's isspace and Rust's \s differ only on ASCII control chars 0x1c-0x1f; the index
            # never sees those (documents are whitespace-normalized), and tokens() uses tantivy itself.
            return [(c.lower(), i, i + 1) for i, c in enumerate(text) if not c.isspace()]
        out = []
        # Sudachi refuses inputs over ~49k bytes; analyze long texts in slices cut at line or sentence ends.
        for base, piece in _slices(text, 12_000):
            for m in self._sudachi().tokenize(piece):
                if m.part_of_speech()[0] in _SKIP_POS or not m.surface().strip():
                    continue
                out.append((m.normalized_form().lower(), base + m.begin(), base + m.end()))
        return out

    def tokens(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text)
        if self.name == "char":
            return self._char.analyze(text)
        return [t for t, _, _ in self.spans(text)]

    def match_terms(self, text: str) -> list[tuple[str, bool]]:
        """The terms a ``match`` query looks up: ``(term, is_bigram)`` in query order, no duplicates.

        ``char``: bigrams of each whitespace-separated word, a one-character word as itself (looked
        up in the positional character field). ``sudachi``: its tokens (one field holds them all).
        """
        if not self.has_bigrams:
            return [(t, False) for t in dict.fromkeys(self.tokens(text))]
        out: dict[tuple[str, bool], None] = {}
        for word in unicodedata.normalize("NFKC", text).split():
            chars = self._char.analyze(word)  # tantivy's lowercase, the same as the indexed grams
            if len(chars) == 1:
                out[(chars[0], False)] = None
            for a, b in zip(chars, chars[1:]):
                out[(a + b, True)] = None
        return list(out)

    def pre_tokenized(self, text: str):
        """A tantivy ``PreTokenizedString`` for the sudachi analyzer (char fields use the tokenizer)."""

        toks = [tantivy.Token(t, i, s, e) for i, (t, s, e) in enumerate(self.spans(text))]
        return tantivy.PreTokenizedString(text, toks)

    def register(self, index) -> None:
        """Register this analyzer's tokenizer on a tantivy Index (needed after every ``Index.open``)."""

        if self.name == "char":
            index.register_tokenizer(CHAR_TOKENIZER, _tantivy_char_analyzer())
            index.register_tokenizer(BIGRAM_TOKENIZER, _tantivy_bigram_analyzer())
        else:
            index.register_tokenizer(
                SUDACHI_TOKENIZER, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
            )


_dict_lock = threading.Lock()
_dictionary = None


def _sudachi_dictionary():
    global _dictionary
    with _dict_lock:
        if _dictionary is None:
            _dictionary = Dictionary(dict="core")
    return _dictionary


def bigrams(text: str) -> list[str]:
    """The grams the ``char`` analyzer indexes in a bigram field (whitespace removed first)."""
    return _bigram_analyzer().analyze("".join(unicodedata.normalize("NFKC", text).split()))


@lru_cache(maxsize=1)
def _bigram_analyzer():
    return _tantivy_bigram_analyzer()


def _slices(text: str, size: int):
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            cut = max(text.rfind("\n", start, end), text.rfind("。", start, end))
            end = cut + 1 if cut > start else end
        yield start, text[start:end]
        start = end


_cache: dict[str, Analyzer] = {}


def get_analyzer(name: str) -> Analyzer:
    if name not in _cache:
        _cache[name] = Analyzer(name)
    return _cache[name]


def char_analyzer() -> Analyzer:
    return get_analyzer("char")

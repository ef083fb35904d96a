"""Japanese text analysis shared by indexing, querying, snippets and the brute-force test oracle.

Two analyzers, chosen per index and recorded in its metadata:

* ``char`` (default): one token per non-space character, lowercased, with real positions. It is
  tantivy's ``Tokenizer.regex(r"\\S")`` (registered on the index as ``ja_char``) so phrases are exact
  (tantivy's n-gram tokenizer would put every gram at position 0 and phrases would over-match).
* ``sudachi``: SudachiPy mode C (keeps 株式会社, 損害賠償 whole), normalized form, punctuation
  dropped; fed to tantivy as pre-tokenized text, so queries must be analyzed here in Python too.

``Analyzer.tokens(text)`` returns the token strings in position order; the position of a token is its
index in that list, for both analyzers. Both backends and the tests analyze through this module.

    >>> char_analyzer().tokens("東京 都Ab")
    ['東', '京', '都', 'a', 'b']
"""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass

ANALYZERS = ("char", "sudachi")
CHAR_TOKENIZER = "ja_char"  # name registered on every opened tantivy index
SUDACHI_TOKENIZER = "ja_sudachi"  # whitespace tokenizer; tokens arrive pre-tokenized

# Sudachi POS classes that carry no searchable content (punctuation, spaces).
_SKIP_POS = {"補助記号", "空白"}


def _tantivy_char_analyzer():
    import tantivy

    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(r"\S")).filter(tantivy.Filter.lowercase()).build()


@dataclass
class Analyzer:
    """One analysis chain; ``name`` is ``char`` or ``sudachi``."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in ANALYZERS:
            raise ValueError(f"unknown analyzer {self.name!r}; choose one of {', '.join(ANALYZERS)}")
        self._local = threading.local()  # sudachipy tokenizers are not shared across threads
        self._char = _tantivy_char_analyzer() if self.name == "char" else None

    @property
    def tokenizer_name(self) -> str:
        return CHAR_TOKENIZER if self.name == "char" else SUDACHI_TOKENIZER

    def _sudachi(self):
        tok = getattr(self._local, "tok", None)
        if tok is None:
            from sudachipy import SplitMode

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

    def pre_tokenized(self, text: str):
        """A tantivy ``PreTokenizedString`` for the sudachi analyzer (char fields use the tokenizer)."""
        import tantivy

        toks = [tantivy.Token(t, i, s, e) for i, (t, s, e) in enumerate(self.spans(text))]
        return tantivy.PreTokenizedString(text, toks)

    def register(self, index) -> None:
        """Register this analyzer's tokenizer on a tantivy Index (needed after every ``Index.open``)."""
        import tantivy

        if self.name == "char":
            index.register_tokenizer(CHAR_TOKENIZER, _tantivy_char_analyzer())
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
            from sudachipy import Dictionary

            _dictionary = Dictionary(dict="core")
    return _dictionary


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

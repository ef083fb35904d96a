"""Japanese answer normalizers: small composable callables used by exact-match rewards.

Each normalizer is a plain ``str -> str`` function; ``normalize_answer`` chains them in the order the
multihop reward uses. Compose your own with ``compose(nfkc, strip_quotes, ...)``.

Run the examples: ``pytest tests/test_doctests.py -k normalize``.

>>> normalize_answer("『あまちゃん』。")
'あまちゃん'
>>> normalize_answer("蛹化（ようか）") == normalize_answer("蛹化")
True
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

Normalizer = Callable[[str], str]

# Brackets/quotes that only mark a title or quotation in Japanese answers and never carry meaning.
# Applied after NFKC, so full-width ＂＇ are already ASCII; 「」『』【】〈〉《》 survive NFKC unchanged.
_QUOTE_CHARS = "「」『』【】〈〉《》〔〕\"'“”‘’`«»"
_QUOTE_TABLE = str.maketrans("", "", _QUOTE_CHARS)

# Sentence-final punctuation a model tends to append ("東京都。", "answer.") plus a trailing です/だ copula
# is *not* removed: that would be guessing; aliases cover such cases.
_TRAILING_PUNCT = "。．.、,，!！?？…‥・:：;；~〜"

# A parenthesis group holding only a kana reading, e.g. 蛹化(ようか), 石見(いわみ)銀山, 日本(ニッポン).
# Runs after NFKC, so （）become ().
# One character class under one quantifier, never nested: linear even on "(" followed by 1 MB of kana.
_READING_PARENS = re.compile(r"\([\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ffー・\s]+\)")


def nfkc(text: str) -> str:
    """Unicode NFKC: full-width ASCII and digits to half-width, half-width kana to full-width.

    >>> nfkc("ＡＢＣ１２３ ｶﾀｶﾅ")
    'ABC123 カタカナ'
    """
    return unicodedata.normalize("NFKC", text)


def remove_whitespace(text: str) -> str:
    """Drop every whitespace character (Japanese answers are compared without spaces).

    >>> remove_whitespace(" 東京 都\\u3000港区\\n")
    '東京都港区'
    """
    return "".join(text.split())


def strip_quotes(text: str) -> str:
    """Remove 「」『』【】〈〉《》 and straight/curly quotes anywhere in the answer.

    >>> strip_quotes("『仮面ライダー電王』")
    '仮面ライダー電王'
    >>> strip_quotes('"Tokyo"')
    'Tokyo'
    """
    return text.translate(_QUOTE_TABLE)


def strip_trailing_punct(text: str) -> str:
    """Remove trailing (and leading) sentence punctuation.

    >>> strip_trailing_punct("大阪府。")
    '大阪府'
    >>> strip_trailing_punct("1999年!?")
    '1999年'
    """
    return text.strip(_TRAILING_PUNCT + " ")


def strip_reading_parens(text: str) -> str:
    """Remove a parenthesized kana reading (run after NFKC so （）are ASCII).

    >>> strip_reading_parens("蛹化(ようか)")
    '蛹化'
    >>> strip_reading_parens("石見(いわみ)銀山")
    '石見銀山'
    >>> strip_reading_parens("第2次(1945年)")
    '第2次(1945年)'
    """
    return _READING_PARENS.sub("", text)


def casefold(text: str) -> str:
    """Case-insensitive comparison for Latin letters in answers.

    >>> casefold("NHK Osaka")
    'nhk osaka'
    """
    return text.casefold()


def compose(*steps: Normalizer) -> Normalizer:
    """Chain normalizers left to right.

    >>> compose(nfkc, remove_whitespace)("Ｔｏｋｙｏ　Ｔｏｗｅｒ")
    'TokyoTower'
    """

    def normalized(text: str) -> str:
        for step in steps:
            text = step(text)
        return text

    normalized.__name__ = "+".join(step.__name__ for step in steps)
    return normalized


# The order matters: NFKC first (turns （）into () for the reading rule and ＂ into "), readings before
# whitespace removal is irrelevant, trailing punctuation last so "『東京』。" loses both.
normalize_answer: Normalizer = compose(
    nfkc, strip_reading_parens, strip_quotes, remove_whitespace, strip_trailing_punct, casefold
)


def answers_match(prediction: str, gold: str, aliases: list[str] | tuple[str, ...] = ()) -> bool:
    """True when the normalized prediction equals the normalized gold answer or one of its aliases.

    >>> answers_match("「あまちゃん」", "あまちゃん")
    True
    >>> answers_match("東京", "東京都", aliases=["東京"])
    True
    >>> answers_match("", "")
    False
    """
    pred = normalize_answer(prediction)
    if not pred:
        return False
    return any(pred == normalize_answer(g) for g in (gold, *aliases) if g)

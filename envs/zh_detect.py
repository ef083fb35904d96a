"""Detect Chinese mixed into Japanese model reasoning (for ``tansaku.envs.rewards.zh_mix_penalty``).

Japanese sentences are broken up by kana (particles, okurigana); Chinese clauses are long runs of Han
characters with no kana at all. The detector looks only at kana-free runs and scores each one with three
signals, all derived from the character sets themselves rather than a hand list of "Chinese characters":

- a Han character that Shift_JIS (cp932) cannot encode is not used in Japanese text (这, 们, 说, 为 …);
- a Han character in cp932 but in neither GB2312 nor Big5 is a Japanese-only form (対, 経, 駅, 込 …): evidence
  *for* Japanese;
- Chinese function words (的, 是, 了, 我们, 這個, 因为 …) that Japanese compounds rarely contain.

文語体 law text (「公正証書ナルトキハ其日付ヲ以テ確定日付トス」) is kanji broken up by katakana, so its runs are short
and carry no Chinese signals: it is not flagged.

Runs are scored all at once, with numpy over the text's code points (a per-character flag table, word
bigrams/trigrams looked up in small tables, per-run sums by ``np.bincount``): 1 MB of any text, even 500 000
one-character runs, takes tens of milliseconds. numpy comes with torch/transformers/datasets.

Run the examples: ``pytest tests/test_doctests.py -k zh_detect``.

>>> contains_chinese("まず民法第九十条を検索します。")
False
>>> contains_chinese("公正証書ナルトキハ其日付ヲ以テ確定日付トス")
False
>>> contains_chinese("検索結果を確認します。我们需要进一步确认这个条件。")
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# A run is everything between kana (and line breaks); Japanese punctuation 、。 does not end a run, so a
# Chinese sentence with ， and 。 stays one run.
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")

# Multi-character Chinese function words (Simplified and Traditional). Each hit counts 2.
_ZH_WORDS = (
    "我们", "我們", "你们", "你們", "他们", "他們", "这个", "這個", "那个", "那個", "这是", "這是", "什么", "什麼",
    "怎么", "怎麼", "为什么", "為什麼", "因为", "因為", "所以", "但是", "如果", "可以", "应该", "應該", "已经",
    "已經", "然后", "然後", "没有", "沒有", "还是", "還是", "就是", "不是", "那么", "那麼", "一下", "看看",
    "需要", "首先", "接下来", "接下來", "后来", "後來", "提到", "到了", "根据", "根據", "关于", "關於", "问题", "問題是", "我想", "我认为", "我認為",
)
# Single characters that are grammatical in Chinese and rare inside Japanese kana-free runs. Each counts 1.
# (在, 和, 被, 会, 都, 也 are left out: 存在, 平和, 被告, 会社, 都市, … are everyday Japanese.)
_ZH_CHARS = set("的了是我你他她們这這個吗嗎呢吧很把讓給從說對還沒麼哪啊些該著们么个於裡")

_HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))
_KANA_RANGES = ((0x3041, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))
_TOP = 0x31350  # past the last Han code point: every higher code point shares the flag-free slot _TOP
# Bits of the per-code-point flag table.
_SPLIT, _IS_HAN, _CP932, _JA_ONLY, _ZH_CHAR, _END_PUNCT, _SPACE = 1, 2, 4, 8, 16, 32, 64


@lru_cache(maxsize=65536)
def _char_class(ch: str) -> str:
    """'zh' (no cp932 code), 'ja' (Japanese-only form), or 'any'."""

    def encodes(codec: str) -> bool:
        try:
            ch.encode(codec)
            return True
        except UnicodeEncodeError:
            return False

    if not encodes("cp932"):
        return "zh"
    if not encodes("gb2312") and not encodes("big5"):
        return "ja"
    return "any"


@dataclass(frozen=True)
class _Tables:
    flags: np.ndarray  # uint8 per code point (0.._TOP), the bits above
    word_char: np.ndarray  # uint8 per code point: 1 + index of the character among the words' characters, else 0
    bigram: np.ndarray  # [a, b] → index in _ZH_WORDS of the two-character word, else -1
    trigram: np.ndarray  # [a, b, c] → index of the three-character word, else -1


@lru_cache(maxsize=1)
def _tables() -> _Tables:
    """Built once (~50 ms): _char_class's split for every cp932 Han character, found by decoding every
    two-byte cp932 code (a Han character cp932 cannot encode is 'zh')."""
    flags = np.zeros(_TOP + 1, dtype=np.uint8)
    for lo, hi in _HAN_RANGES:
        flags[lo:hi + 1] |= _IS_HAN
    for lo, hi in _KANA_RANGES:
        flags[lo:hi + 1] |= _SPLIT
    flags[ord("\n")] |= _SPLIT
    for lead in [*range(0x81, 0xA0), *range(0xE0, 0xFD)]:
        for trail in [*range(0x40, 0x7F), *range(0x80, 0xFD)]:
            try:
                ch = bytes((lead, trail)).decode("cp932")
            except UnicodeDecodeError:
                continue
            if _HAN.fullmatch(ch):
                flags[ord(ch)] |= _CP932 | (_JA_ONLY if _char_class(ch) == "ja" else 0)
    for ch in _ZH_CHARS:
        flags[ord(ch)] |= _ZH_CHAR
    for ch in "。？！?!":
        flags[ord(ch)] |= _END_PUNCT
    for point in range(0x3001):  # every str.isspace() character is below U+3001
        if chr(point).isspace():
            flags[point] |= _SPACE
    letters = sorted(set("".join(_ZH_WORDS)))
    word_char = np.zeros(_TOP + 1, dtype=np.uint8)
    for i, ch in enumerate(letters, 1):
        word_char[ord(ch)] = i
    size = len(letters) + 1
    bigram = np.full((size, size), -1, dtype=np.int16)
    trigram = np.full((size, size, size), -1, dtype=np.int16)
    for index, word in enumerate(_ZH_WORDS):
        ids = tuple(int(word_char[ord(ch)]) for ch in word)
        (bigram if len(word) == 2 else trigram)[ids] = index
    return _Tables(flags, word_char, bigram, trigram)


@dataclass(frozen=True)
class _Runs:
    """Every kana-free run of a text: start/end indices and the per-run counts ``RunScore`` holds."""

    starts: np.ndarray
    ends: np.ndarray
    han: np.ndarray
    zh_only: np.ndarray
    ja_only: np.ndarray
    function_hits: np.ndarray
    long_sentence: np.ndarray

    @property
    def chinese(self) -> np.ndarray:
        score = 2 * self.zh_only + self.function_hits - 2 * self.ja_only + self.long_sentence
        return (self.han >= 4) & (score >= 3)


def _runs(text: str, split: bool = True) -> _Runs:
    """Score every run of ``text`` (``split=False``: the whole text is one run) in a few vectorized passes."""
    tables = _tables()
    if not text:
        empty = np.zeros(0, dtype=np.int64)
        return _Runs(empty, empty, empty, empty, empty, empty, empty)
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    index = np.minimum(points, _TOP)
    flags = tables.flags[index]
    in_run = (flags & _SPLIT) == 0 if split else np.ones(len(flags), dtype=bool)
    edges = np.diff(in_run.astype(np.int8), prepend=0, append=0)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(starts):
        empty = np.zeros(0, dtype=np.int64)
        return _Runs(empty, empty, empty, empty, empty, empty, empty)

    def per_run(bit: int) -> np.ndarray:
        # Sums from one run's start to the next's: the split characters between runs carry none of these bits.
        return np.add.reduceat((flags & bit) > 0, starts, dtype=np.int64)

    han = per_run(_IS_HAN)
    # Distinct Chinese words per run: bigram/trigram codes of consecutive word characters, one per (run, word).
    # Word characters are Han, never split, so a word found here lies inside one run.
    ids = tables.word_char[index]
    first = np.flatnonzero(ids[:-1])
    first = first[ids[first + 1] > 0]
    two = tables.bigram[ids[first], ids[first + 1]]
    first3 = first[first + 2 < len(ids)]
    three = tables.trigram[ids[first3], ids[first3 + 1], ids[first3 + 2]]
    found = np.concatenate((first[two >= 0], first3[three >= 0]))
    word = np.concatenate((two[two >= 0], three[three >= 0])).astype(np.int64)
    run_of_word = np.searchsorted(starts, found, side="right") - 1
    distinct_words = np.bincount(np.unique(run_of_word * len(_ZH_WORDS) + word) // len(_ZH_WORDS),
                                 minlength=len(starts))
    # Last non-space character of each run, for the "ends like a sentence" signal.
    solid = np.flatnonzero((flags & _SPACE) == 0)
    last = np.searchsorted(solid, ends, side="left") - 1
    last_solid = np.where(last >= 0, solid[np.maximum(last, 0)] if len(solid) else 0, -1)
    ends_sentence = (last_solid >= starts) & ((flags[np.maximum(last_solid, 0)] & _END_PUNCT) > 0)
    return _Runs(starts, ends, han, han - per_run(_CP932), per_run(_JA_ONLY),
                 2 * distinct_words + per_run(_ZH_CHAR), ((han >= 10) & ends_sentence).astype(np.int64))


@dataclass(frozen=True)
class RunScore:
    """Scores of one kana-free run; ``is_chinese`` is the decision."""

    text: str
    han: int
    zh_only: int
    ja_only: int
    function_hits: int

    long_sentence: bool = False

    @property
    def score(self) -> int:
        # A whole sentence of >= 10 Han characters with no kana is Chinese-like (Japanese needs particles).
        return 2 * self.zh_only + self.function_hits - 2 * self.ja_only + int(self.long_sentence)

    @property
    def is_chinese(self) -> bool:
        # Short runs are Japanese compounds or quoted words (「你好」): never flag below 4 Han characters.
        return self.han >= 4 and self.score >= 3


def score_run(run: str) -> RunScore:
    """Score one kana-free run of text.

    >>> score_run("我们需要检查这个条件").is_chinese
    True
    >>> score_run("独立行政法人国立病院機構").is_chinese
    False
    """
    if not run:
        return RunScore(run, 0, 0, 0, 0)
    r = _runs(run, split=False)
    return RunScore(run, int(r.han[0]), int(r.zh_only[0]), int(r.ja_only[0]), int(r.function_hits[0]),
                    bool(r.long_sentence[0]))


def chinese_spans(text: str) -> list[str]:
    """The kana-free runs judged Chinese, in order (useful in sample dumps).

    >>> chinese_spans("条文を読みます。所以我們應該先查詢這個問題。では検索します")
    ['。所以我們應該先查詢這個問題。']
    """
    r = _runs(text)
    return [text[s:e] for s, e in zip(r.starts[r.chinese].tolist(), r.ends[r.chinese].tolist())]


def chinese_char_count(text: str) -> int:
    """Number of Han characters inside runs judged Chinese."""
    r = _runs(text)
    return int(r.han[r.chinese].sum())


def contains_chinese(text: str) -> bool:
    """True when some kana-free run of ``text`` reads as Chinese."""
    return bool(_runs(text).chinese.any())

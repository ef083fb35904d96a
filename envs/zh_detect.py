"""Detect Chinese mixed into Japanese model reasoning (for ``tansaku.envs.rewards.make_zh_mix_penalty``).

Japanese sentences are broken up by kana (particles, okurigana); Chinese clauses are long runs of Han
characters with no kana at all. The detector looks only at kana-free runs and scores each one with signals
derived from the character sets themselves (the codecs Python ships) rather than a hand list of "Chinese
characters", plus a short list of Chinese grammar words:

- a Han character Shift_JIS (cp932) cannot encode is not used in Japanese text; when it is also a common
  Chinese character (GB2312 level 1 or Big5 level 1: 这, 们, 说, 为 …) it counts 2. A rare one (鱮, a name's
  variant)
  counts nothing: Japanese articles quote those too;
- a traditional form that Japanese replaced (條, 權, 對, 會, 應 …: in cp932 only among the rarely used JIS
  level-2 and extension characters, but a common Chinese character) counts 1;
- a Han character in cp932 but in neither GB2312 nor Big5 is a Japanese-only form (対, 経, 駅, 込 …): evidence
  *for* Japanese, −2 for the run however many it has (Chinese reasoning quotes Japanese names:
  「没有写鷺巻栞的事情」 is still Chinese);
- Chinese function words (我们, 這個, 因为, 虽然 … count 2) and characters (的, 是, 了, 之 … count 1), each
  distinct
  one once per run: 「物理的、政治的、法的」 is one 的;
- a clause comma between Han characters (``违反…规定，违反…``, "，" or "；": Japanese writes 、 after a kana),
  1;
- a whole sentence of ten or more Han characters without kana (Japanese needs particles), 1.

A run of four or more Han characters scoring 3 or more is Chinese. 文語体 law text
(「公正証書ナルトキハ其日付ヲ以テ 確定日付トス」) is kanji broken up by katakana, so its runs are short and
carry no Chinese signals: it is not flagged. The false-positive rate on correct Japanese (e-Gov articles and
choices, JaQuAD, MT-Bench answers) and the recall on a labelled Chinese-reasoning set:
``bench/zh_detect_fp.py`` (docs/benchmarks.md).

Runs are scored all at once, with numpy over the text's code points (a per-character flag table, word
bigrams/trigrams looked up in small tables, per-run sums by ``np.add.reduceat``/``np.bincount``): 1 MB of any
text, even 500 000 one-character runs, takes tens of milliseconds. numpy comes with
torch/transformers/datasets.

Run the examples: ``pytest tests/test_doctests.py -k zh_detect``.

>>> contains_chinese("まず民法第九十条を検索します。")
False
>>> contains_chinese("公正証書ナルトキハ其日付ヲ以テ確定日付トス")
False
>>> contains_chinese("検索結果を確認します。我们需要进一步确认这个条件。")
True
>>> contains_chinese("債務人未依債務本旨履行時，債權人得請求損害賠償。")
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

# Multi-character Chinese function words (Simplified and Traditional) that Japanese compounds do not contain.
# Each distinct one in a run counts 2. (Left out as everyday Japanese: 可能, 以後, 最後, 不要, 不用, 不能,
# 一点.)
_ZH_WORDS = (
    "我们", "我們", "你们", "你們", "他们", "他們", "这个", "這個", "那个", "那個", "这是", "這是", "什么",
    "什麼",
    "怎么", "怎麼", "为什么", "為什麼", "因为", "因為", "所以", "但是", "如果", "可以", "应该", "應該",
    "已经",
    "已經", "然后", "然後", "没有", "沒有", "还是", "還是", "就是", "不是", "那么", "那麼", "一下", "看看",
    "需要", "首先", "接下来", "接下來", "后来", "後來", "提到", "到了", "根据", "根據", "关于", "關於",
    "问题", "問題是", "我想", "我认为", "我認為",
    "虽然", "雖然", "而且", "或者", "并且", "並且", "因此", "然而", "不过", "不過", "可是", "只是", "还有",
    "還有",
    "这样", "這樣", "那样", "那樣", "怎样", "怎樣", "这些", "這些", "那些", "一些", "有点", "有點", "好像",
    "觉得", "覺得", "认为", "認為", "知道", "是否", "不会", "不會", "为了", "為了", "其实", "其實", "之前",
    "之后", "之後", "是指",
)
# Single characters that are grammatical in Chinese and rare inside Japanese kana-free runs. Each distinct one
# counts 1. (在, 和, 被, 会, 都, 也, 其, 得, 或 are left out: 存在, 平和, 被告, 会社, 都市, 其日付, 取得 … are
# everyday Japanese.)
_ZH_CHARS = set("的了是我你他她們这這個吗嗎呢吧很把讓給從說對還沒麼哪啊些該著们么个於裡之而")

_HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))
_KANA_RANGES = ((0x3041, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))
_TOP = 0x31350  # past the last Han code point: every higher code point shares the flag-free slot _TOP
# Bits of the per-code-point flag table.
_SPLIT, _IS_HAN, _CP932, _JA_ONLY, _END_PUNCT, _SPACE, _COMMON_ZH, _CP932_RARE, _CLAUSE = (
    1, 2, 4, 8, 16, 32, 64, 128, 256)
# Shift_JIS codes from here on: JIS X 0208 level 2 and the NEC/IBM extensions (rarely used kanji)
_JIS_LEVEL2 = 0x989F
_GB2312_LEVEL1 = (0xB0A1, 0xD7FE)  # the 3 755 most common Simplified characters
_BIG5_LEVEL1 = (0xA440, 0xC67E)  # the 5 401 most common Traditional characters


def _code(ch: str, codec: str) -> int | None:
    try:
        return int.from_bytes(ch.encode(codec), "big")
    except UnicodeEncodeError:
        return None


@lru_cache(maxsize=65536)
def _char_class(ch: str) -> str:
    """'zh' (no cp932 code, a common Chinese character), 'rare' (no cp932 code, not a common Chinese
    character), 'trad' (a rarely used cp932 character that is a common Chinese one: a traditional form), 'ja'
    (a Japanese-only form), or 'any'."""
    sjis, gb, big5 = _code(ch, "cp932"), _code(ch, "gb2312"), _code(ch, "big5")
    common = (gb is not None and _GB2312_LEVEL1[0] <= gb <= _GB2312_LEVEL1[1]) or (
        big5 is not None and _BIG5_LEVEL1[0] <= big5 <= _BIG5_LEVEL1[1])
    if sjis is None:
        return "zh" if common else "rare"
    if gb is None and big5 is None:
        return "ja"
    if sjis >= _JIS_LEVEL2 and common:
        return "trad"
    return "any"



@dataclass(frozen=True)
class _Tables:
    flags: np.ndarray  # uint16 per code point (0.._TOP), the bits above
    # uint8 per code point: 1 + index of the character among the words' characters, else 0
    word_char: np.ndarray
    bigram: np.ndarray  # [a, b] → index in _ZH_WORDS of the two-character word, else -1
    trigram: np.ndarray  # [a, b, c] → index of the three-character word, else -1
    char_token: np.ndarray  # int16 per code point: index of the character in _CHAR_LIST, else -1


_CHAR_LIST = sorted(_ZH_CHARS)


@lru_cache(maxsize=1)
def _tables() -> _Tables:
    """Built once (~100 ms): _char_class's split for every cp932 Han character and every common Chinese one,
    found by decoding every two-byte code of cp932, GB2312 level 1 and Big5 level 1."""
    flags = np.zeros(_TOP + 1, dtype=np.uint16)
    for lo, hi in _HAN_RANGES:
        flags[lo:hi + 1] |= _IS_HAN
    for lo, hi in _KANA_RANGES:
        flags[lo:hi + 1] |= _SPLIT
    flags[ord("\n")] |= _SPLIT

    def two_byte(codec: str, leads, trails):
        for lead in leads:
            for trail in trails:
                try:
                    ch = bytes((lead, trail)).decode(codec)
                except UnicodeDecodeError:
                    continue
                if _HAN.fullmatch(ch):
                    yield (lead << 8) | trail, ch

    for code, ch in two_byte("cp932", [*range(0x81, 0xA0), *range(0xE0, 0xFD)],
                             [*range(0x40, 0x7F), *range(0x80, 0xFD)]):
        flags[ord(ch)] |= _CP932 | (_CP932_RARE if code >= _JIS_LEVEL2 else 0)
    for codec, (lo, hi), trails in (("gb2312", _GB2312_LEVEL1, range(0xA1, 0xFF)),
                                    ("big5", _BIG5_LEVEL1, [*range(0x40, 0x7F), *range(0xA1, 0xFF)])):
        for code, ch in two_byte(codec, range(lo >> 8, (hi >> 8) + 1), trails):
            if lo <= code <= hi:
                flags[ord(ch)] |= _COMMON_ZH
    # Japanese-only: in cp932, in neither GB2312 nor Big5 (each checked once, for cp932's ~7 000 Han
    # characters).
    for point in np.flatnonzero(flags & _CP932).tolist():
        if _char_class(chr(point)) == "ja":
            flags[point] |= _JA_ONLY
    for ch in "。？！?!":
        flags[ord(ch)] |= _END_PUNCT
    for ch in "，；":
        flags[ord(ch)] |= _CLAUSE
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
    char_token = np.full(_TOP + 1, -1, dtype=np.int16)
    for i, ch in enumerate(_CHAR_LIST):
        char_token[ord(ch)] = i
    return _Tables(flags, word_char, bigram, trigram, char_token)


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
    trad_forms: np.ndarray
    clause_comma: np.ndarray

    @property
    def chinese(self) -> np.ndarray:
        score = (2 * self.zh_only + self.function_hits - 2 * np.minimum(self.ja_only, 1) + self.long_sentence
                 + self.trad_forms + self.clause_comma)
        return (self.han >= 4) & (score >= 3)


def _empty() -> _Runs:
    empty = np.zeros(0, dtype=np.int64)
    return _Runs(*[empty] * 9)


def _runs(text: str, split: bool = True) -> _Runs:
    """Score every run of ``text`` (``split=False``: the whole text is one run) in a few vectorized passes."""
    tables = _tables()
    if not text:
        return _empty()
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    index = np.minimum(points, _TOP)
    flags = tables.flags[index]
    in_run = (flags & _SPLIT) == 0 if split else np.ones(len(flags), dtype=bool)
    edges = np.diff(in_run.astype(np.int8), prepend=0, append=0)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(starts):
        return _empty()

    def has(bit: int) -> np.ndarray:
        return (flags & bit) > 0

    han_mask = has(_IS_HAN)
    # A clause comma with a Han character on each side (inside one run: neither is a split character).
    comma = np.zeros(len(flags), dtype=bool)
    if len(flags) > 2:
        comma[1:-1] = has(_CLAUSE)[1:-1] & han_mask[:-2] & han_mask[2:]

    def per_run(mask: np.ndarray) -> np.ndarray:
        # Sums from one run's start to the next's: the split characters between runs carry none of these bits.
        return np.add.reduceat(mask, starts, dtype=np.int64)

    han = per_run(han_mask)
    common_zh = has(_COMMON_ZH)
    zh_only = per_run(han_mask & common_zh & ~has(_CP932))
    ja_only = per_run(has(_JA_ONLY))
    trad = per_run(has(_CP932_RARE) & common_zh & ~has(_JA_ONLY))
    # Distinct Chinese words (bigram/trigram codes of consecutive word characters) and function characters per
    # run: one token per (run, word or character). Word characters are Han, never split: a word lies inside a
    # run.
    ids = tables.word_char[index]
    first = np.flatnonzero(ids[:-1])
    first = first[ids[first + 1] > 0]
    two = tables.bigram[ids[first], ids[first + 1]]
    first3 = first[first + 2 < len(ids)]
    three = tables.trigram[ids[first3], ids[first3 + 1], ids[first3 + 2]]
    chars = tables.char_token[index]
    char_at = np.flatnonzero(chars >= 0)
    n_words = len(_ZH_WORDS)
    found = np.concatenate((first[two >= 0], first3[three >= 0], char_at))
    token = np.concatenate((two[two >= 0], three[three >= 0], n_words + chars[char_at])).astype(np.int64)
    run_of_token = np.searchsorted(starts, found, side="right") - 1
    tokens = len(_ZH_WORDS) + len(_CHAR_LIST)
    # sort + neighbour compare: np.unique hashes, 10x slower here
    keys = np.sort(run_of_token * tokens + token)
    distinct = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys
    weight = np.where(distinct % tokens < n_words, 2, 1)
    function_hits = np.bincount(distinct // tokens, weights=weight, minlength=len(starts)).astype(np.int64)
    # Last non-space character of each run, for the "ends like a sentence" signal.
    solid = np.flatnonzero((flags & _SPACE) == 0)
    last = np.searchsorted(solid, ends, side="left") - 1
    last_solid = np.where(last >= 0, solid[np.maximum(last, 0)] if len(solid) else 0, -1)
    ends_sentence = (last_solid >= starts) & ((flags[np.maximum(last_solid, 0)] & _END_PUNCT) > 0)
    return _Runs(starts, ends, han, zh_only, ja_only, function_hits,
                 ((han >= 10) & ends_sentence).astype(np.int64), trad, (per_run(comma) > 0).astype(np.int64))


@dataclass(frozen=True)
class RunScore:
    """Scores of one kana-free run; ``is_chinese`` is the decision."""

    text: str
    han: int
    zh_only: int  # common Chinese characters cp932 cannot encode
    ja_only: int
    function_hits: int  # 2 per distinct Chinese word, 1 per distinct function character

    long_sentence: bool = False
    trad_forms: int = 0  # traditional forms Japanese replaced (rare cp932 characters, common in Chinese)
    clause_comma: bool = False

    @property
    def score(self) -> int:
        # A whole sentence of >= 10 Han characters with no kana is Chinese-like (Japanese needs particles).
        return (2 * self.zh_only + self.function_hits - 2 * min(self.ja_only, 1) + int(self.long_sentence)
                + self.trad_forms + int(self.clause_comma))

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
    >>> score_run("物理的、政治的、法的、文化的").function_hits
    1
    """
    if not run:
        return RunScore(run, 0, 0, 0, 0)
    r = _runs(run, split=False)
    return RunScore(run, int(r.han[0]), int(r.zh_only[0]), int(r.ja_only[0]), int(r.function_hits[0]),
                    bool(r.long_sentence[0]), int(r.trad_forms[0]), bool(r.clause_comma[0]))


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

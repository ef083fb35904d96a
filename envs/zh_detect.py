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

# A run is everything between kana (and line breaks); Japanese punctuation 、。 does not end a run, so a
# Chinese sentence with ， and 。 stays one run.
_KANA = "\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f"
_RUN_SPLIT = re.compile(rf"[{_KANA}\n]+")
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
    han_chars = _HAN.findall(run)
    classes = [_char_class(c) for c in han_chars]
    hits = sum(2 for word in _ZH_WORDS if word in run)
    hits += sum(1 for c in han_chars if c in _ZH_CHARS)
    long_sentence = len(han_chars) >= 10 and run.rstrip().endswith(("。", "？", "！", "?", "!"))
    return RunScore(run, len(han_chars), classes.count("zh"), classes.count("ja"), hits, long_sentence)


def chinese_spans(text: str) -> list[str]:
    """The kana-free runs judged Chinese, in order (useful in sample dumps).

    >>> chinese_spans("条文を読みます。所以我們應該先查詢這個問題。では検索します")
    ['。所以我們應該先查詢這個問題。']
    """
    return [run for run in _RUN_SPLIT.split(text) if run and score_run(run).is_chinese]


def chinese_char_count(text: str) -> int:
    """Number of Han characters inside runs judged Chinese."""
    return sum(len(_HAN.findall(span)) for span in chinese_spans(text))


def contains_chinese(text: str) -> bool:
    """True when some kana-free run of ``text`` reads as Chinese."""
    return bool(chinese_spans(text))

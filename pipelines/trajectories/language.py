"""Is a rewritten reasoning step Japanese? The language check every rewrite stage runs on every step.

An LLM asked to write the teacher's reasoning in Japanese can answer in Chinese (中国語混ざり, the failure the
e-Gov RL run fought with a reward penalty) or leave the teacher's English; the tool calls and results stay
byte-identical either way, so only the reasoning tells. ``rewrite.rewrite_stage`` checks each assistant step's
``reasoning_content`` (the only place a rewrite writes) after ``translate``, ``refine`` and ``scenario``:

- ``reasoning_has_chinese``: ``tansaku.envs.zh_detect`` reads at least ``min_chinese_chars`` Han characters as
  Chinese (文語体 law text such as 「公正証書ナルトキハ其日付ヲ以テ確定日付トス」 is Japanese to it);
- ``reasoning_not_japanese``: the Japanese share of the step's letters (``japanese_share``) is below
  ``min_japanese_share``.

(A blank step is already ``empty_reasoning`` in ``rewrite.apply_rewrite``.) Both thresholds are config fields
(``--min-japanese-share``, ``--min-chinese-chars``) and the rewrite stages' params, so they are in the
manifest and the resume fingerprint.

>>> language_problem("白砂県の県庁所在地は白砂市。「白砂市」を検索する。") is None
True
>>> language_problem("The capital of 白砂県 is 白砂市. Now I need its mayor.")[0]
'reasoning_not_japanese'
>>> language_problem("我们需要先搜索这个城市的市长。")[0]
'reasoning_has_chinese'
"""

from __future__ import annotations

import re

from tansaku.envs.zh_detect import chinese_char_count, chinese_spans
from tansaku.pipelines.trajectories.config import MIN_CHINESE_CHARS, MIN_JAPANESE_SHARE

# MIN_JAPANESE_SHARE and MIN_CHINESE_CHARS (the config's defaults) are argued in japanese_share and zh_detect.
EXCERPT_CHARS = 60

# Quoted or bracketed text copies a query, a title or a tool result (「…」『…』, a JSON bool query {…}, a
# gloss （…）): it is not the model's own words. Innermost pairs first, so nesting is removed too.
_QUOTED = re.compile(r"「[^「」]*」|『[^『』]*』|【[^【】]*】|〔[^〔〕]*〕|《[^《》]*》|〈[^〈〉]*〉|（[^（"
                     r"）]*）|\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}|“[^“”]*”|‘[^‘’]*’|\"[^\"\n]*\"|`[^`\n]*`")
_ASCII_TOKEN = re.compile(r"[!-~]+")
# An ASCII token with a digit or one of these inside is an identifier (doc ids, URLs, open_doc, v1.2), not a
# word.
_IDENTIFIER = re.compile(r"[\d_/:#@=.%&+]")
_JAPANESE = re.compile(r"[\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f\u3005\u3006\u3400-\u4dbf"
                       r"\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+")
_HIRAGANA = re.compile(r"[\u3041-\u309f]")
_FOREIGN_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")  # letters; Japanese ones are removed first


def own_words(text: str) -> str:
    """``text`` without quoted/bracketed spans and identifier tokens (each replaced by a space).

    >>> own_words('文書 doc_0042 を開き、「Tokyo Tower」と {"bool": {"must": []}} で検索する。')
    '文書   を開き、 と   で検索する。'
    """
    for _ in range(16):  # each pass removes one level of nesting; deeper text is left as it is
        text, n = _QUOTED.subn(" ", text)
        if not n:
            break

    def word(match: re.Match) -> str:
        core = match.group().strip(".,;:!?'\"-")
        return " " if _IDENTIFIER.search(core) else match.group()

    return _ASCII_TOKEN.sub(word, text)


def _letters(text: str) -> tuple[int, int]:
    """(Japanese letters, other letters) of ``text``."""
    japanese = sum(len(run) for run in _JAPANESE.findall(text))
    return japanese, sum(1 for ch in _JAPANESE.sub(" ", text) if ch.isalpha())


def japanese_share(text: str) -> float:
    """The share of Japanese among the letters of the model's own words in ``text``, 0…1.

    Digits, punctuation, whitespace, quoted/bracketed text and identifiers do not count (``own_words``). Nor
    do names, whichever script they are in, because both languages embed the other's: a kana/kanji run
    without hiragana (白砂県, ソフトウェア開発, a Chinese clause — zh_detect's business) and a Latin word with
    a capital (iPhone, OpenSearch, Guido). What counts is the grammar: kana/kanji runs holding hiragana
    (particles, okurigana) for Japanese, lowercase words of any other script for the rest. So Japanese
    reasoning naming English products, ASCII queries or doc ids scores ~1, English reasoning naming Japanese
    entities ~0, and a step half English scores under 0.5 (an English word spends ~2.5 letters per Japanese
    character, so even "search ツールで「X」を検索する" — one English word to nine Japanese letters — keeps
    0.6). A step with no grammar at all (a bare name, unquoted 文語体) is judged by its script; no letters:
    1.0.

    >>> japanese_share("Visual Studio Code の拡張機能について調べる。")
    1.0
    >>> japanese_share("The 県庁所在地 of 白砂県 is 白砂市.")
    0.0
    >>> round(japanese_share("The title is ノルウェイの森 and the author is unknown."), 2)
    0.2
    """
    own = own_words(text)
    grammar = sum(len(run) for run in _JAPANESE.findall(own) if _HIRAGANA.search(run))
    foreign = sum(len(w) for w in _FOREIGN_WORD.findall(_JAPANESE.sub(" ", own))
                  if not any(c.isupper() for c in w))
    if grammar + foreign:
        return grammar / (grammar + foreign)
    for source in (own, text):
        japanese, other = _letters(source)
        if japanese + other:
            return japanese / (japanese + other)
    return 1.0


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


def language_problem(reasoning: str, min_japanese_share: float = MIN_JAPANESE_SHARE,
                     min_chinese_chars: int = MIN_CHINESE_CHARS) -> tuple[str, str] | None:
    """``(reason, detail)`` when one step's reasoning is Chinese or not Japanese; None when it passes.
    Chinese is looked for in the model's own words only (a quoted tool result is the source's language)."""
    own = own_words(reasoning)
    if (count := chinese_char_count(own)) >= min_chinese_chars:
        span = chinese_spans(own)[0].strip(" 。、，,.\n")  # the run's boundary punctuation says nothing
        return "reasoning_has_chinese", f"{count} Chinese characters: 「{_excerpt(span)}」"
    share = japanese_share(reasoning)
    if share < min_japanese_share:
        return ("reasoning_not_japanese",
                f"Japanese share {share:.2f} < {min_japanese_share}: 「{_excerpt(reasoning)}」")
    return None


def language_violation(messages: list[dict], stage: str, min_japanese_share: float = MIN_JAPANESE_SHARE,
                       min_chinese_chars: int = MIN_CHINESE_CHARS) -> tuple[str, str] | None:
    """The first assistant step of ``messages`` whose reasoning fails ``language_problem``, as
    ``(reason, "STAGE step N: …")`` (N counts assistant steps from 1, as the rewrite prompt does); else None.

    >>> language_violation([{"role": "user", "content": "q"},
    ...                     {"role": "assistant", "reasoning_content": "Let me search for it."}], "refine")
    ('reasoning_not_japanese', 'refine step 1: Japanese share 0.00 < 0.5: 「Let me search for it.」')
    """
    steps = (m for m in messages if m.get("role") == "assistant")
    for n, message in enumerate(steps, 1):
        problem = language_problem(str(message.get("reasoning_content") or ""), min_japanese_share,
                                   min_chinese_chars)
        if problem:
            return problem[0], f"{stage} step {n}: {problem[1]}"
    return None

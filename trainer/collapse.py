"""Collapse watch for RL runs: is the reasoning dying while the reward still rises?

Search-R1-style runs have been reported to reach high reward while the model's reasoning shrinks to nothing,
repeats itself or drifts out of Japanese, and tool use fades. Per step, from the stored completions, this
reads what the reward does not show:

- ``reasoning_chars``: characters of reasoning per episode (``<think>`` or ``reasoning_content``);
- ``repetition``: the share of repeated 8-character shingles in an episode's reasoning (0 = none, → 1 = a loop);
- ``non_japanese_share``: the share of episodes whose reasoning is not Japanese (Chinese mixed in, or more
  Latin letters than kana and kanji);
- ``tool_calls``: tool calls per episode.

``collapse_warnings`` compares the first steps with the last (``window`` steps each): a warning names each
signal that collapsed — reasoning shorter by ``max_drop`` or more, repetition or non-Japanese share up by
``max_rise`` or more, tool calls down by ``max_drop`` or more — while the mean total reward rose. The run
report (``tansaku.trainer.report``) includes the series and the warnings.

    from tansaku.trainer.collapse import collapse_series, collapse_warnings
    series = collapse_series(completion_rows, total_reward)   # one dict per step
    collapse_warnings(series)                                 # [] or ["reasoning collapsed: …"]
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

from tansaku.envs.rewards import episode_stats
from tansaku.envs.zh_detect import contains_chinese

SHINGLE = 8
_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
_LATIN = re.compile(r"[A-Za-z]")


def repetition(text: str, k: int = SHINGLE) -> float:
    """Share of ``k``-character shingles of ``text`` that repeat an earlier one.

    >>> repetition("検索結果を読んで答えを決める。"), round(repetition("同じ文。" * 20), 2)
    (0.0, 0.95)
    """
    shingles = [text[i:i + k] for i in range(len(text) - k + 1)]
    return 1 - len(set(shingles)) / len(shingles) if shingles else 0.0


def is_japanese(text: str) -> bool:
    """Japanese reasoning: no Chinese run, and no more Latin letters than kana and kanji (empty text counts).

    >>> is_japanese("白砂市を検索する。"), is_japanese("Let me search for the city."), is_japanese("")
    (True, False, True)
    """
    if not text.strip():
        return True
    return not contains_chinese(text) and len(_LATIN.findall(text)) <= len(_JAPANESE.findall(text))


def episode_signals(completion) -> dict:
    """The four signals of one episode."""
    stats = episode_stats(completion)
    reasoning = "\n".join(stats.reasoning)
    return {"reasoning_chars": len(reasoning), "repetition": repetition(reasoning),
            "non_japanese": 0.0 if is_japanese(reasoning) else 1.0, "tool_calls": stats.calls}


def collapse_series(rows: list[dict], total: Callable[[dict], float]) -> list[dict]:
    """Per step: mean total reward (``total(row)``) and the means of the episode signals."""
    by_step: dict[int, list[dict]] = {}
    for row in rows:
        by_step.setdefault(int(row.get("step") or 0), []).append(row)
    series = []
    for step in sorted(by_step):
        signals = [episode_signals(row["completion"]) for row in by_step[step]]
        means = {key: statistics.fmean(s[key] for s in signals) for key in signals[0]}
        series.append({"step": step, "episodes": len(signals),
                       "reward": statistics.fmean(total(row) for row in by_step[step]),
                       "reasoning_chars": means["reasoning_chars"], "repetition": means["repetition"],
                       "non_japanese_share": means["non_japanese"], "tool_calls": means["tool_calls"]})
    return series


def collapse_warnings(series: list[dict], window: int = 3, max_drop: float = 0.5, max_rise: float = 0.2) -> list[str]:
    """Signals that collapsed between the first and the last ``window`` steps while the reward rose."""
    if len(series) < 2 * window:
        return []
    first, last = series[:window], series[-window:]
    avg = lambda part, key: statistics.fmean(s[key] for s in part)  # noqa: E731
    if avg(last, "reward") <= avg(first, "reward"):
        return []
    reward = f"while the reward rose {avg(first, 'reward'):.3f} → {avg(last, 'reward'):.3f}"
    found = []
    for key, what in (("reasoning_chars", "reasoning length"), ("tool_calls", "tool calls per episode")):
        before, after = avg(first, key), avg(last, key)
        if before > 0 and after <= before * (1 - max_drop):
            found.append(f"{what} collapsed {before:.1f} → {after:.1f} {reward}")
    for key, what in (("repetition", "reasoning repetition"), ("non_japanese_share", "non-Japanese reasoning")):
        before, after = avg(first, key), avg(last, key)
        if after - before >= max_rise:
            found.append(f"{what} rose {before:.2f} → {after:.2f} {reward}")
    return found

"""Collapse watch for RL runs: is the reasoning dying while the reward still rises?

Search-R1-style runs have been reported to reach high reward while the model's reasoning shrinks to nothing,
repeats itself or drifts out of Japanese, and tool use fades. Per step, from the stored completions, this
reads what the reward does not show:

- ``reasoning_chars``: characters of reasoning per episode (``<think>`` or ``reasoning_content``);
- ``repetition``: the share of repeated 8-character shingles in an episode's reasoning (0 = none, → 1 = a
  loop);
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

``collapse_onsets`` finds the steps where one signal collapses suddenly (the reward, the policy entropy,
reasoning length, tool calls: signals that are positive while healthy); ``train report --runs`` uses it to
see whether several seeds collapse at the same step (``tansaku.trainer.seeds``).
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


def collapse_warnings(series: list[dict], window: int = 3, max_drop: float = 0.5,
                      max_rise: float = 0.2) -> list[str]:
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
    for key, what in (("repetition", "reasoning repetition"),
                      ("non_japanese_share", "non-Japanese reasoning")):
        before, after = avg(first, key), avg(last, key)
        if after - before >= max_rise:
            found.append(f"{what} rose {before:.2f} → {after:.2f} {reward}")
    return found


def collapse_onsets(points: list[tuple[int, float]], lookback: int = 5, drop: float = 0.5) -> list[int]:
    """The steps where a signal collapses, from its ``(step, value)`` points in step order (None values
    skipped).

    A signal is *collapsed at step s* when the peak of the ``lookback`` values logged before s is positive
    and its value at s is at most ``(1 - drop)`` × that peak (``drop=0.5``: half of its recent peak or less).
    A *collapse onset* is a collapsed step whose previous logged step was not collapsed, so a signal that
    stays down counts once, and one that recovers and falls again counts twice. A peak ≤ 0 is never a collapse
    (the signals watched are positive while healthy). Nothing is smoothed: with few prompts per step, a noisy
    reward can cross the threshold by chance; raise ``drop`` or ``lookback`` for such runs.

    >>> collapse_onsets([(1, 1.0), (2, 1.1), (3, 0.4), (4, 0.3), (5, 1.0), (6, 0.2)], lookback=3)
    [3, 6]
    >>> collapse_onsets([(1, 1.0), (2, 0.6), (3, 0.4)], lookback=1), collapse_onsets([(1, 0.0), (2, -1.0)])
    ([], [])
    """
    values = [(step, float(value)) for step, value in points if value is not None]
    onsets, before = [], False
    for i, (step, value) in enumerate(values):
        recent = [v for _, v in values[max(0, i - lookback):i]]
        peak = max(recent) if recent else 0.0
        collapsed = peak > 0 and value <= (1 - drop) * peak
        if collapsed and not before:
            onsets.append(step)
        before = collapsed
    return onsets

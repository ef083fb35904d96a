"""``grounded_answer_reward``: the answer reward, paid only when the episode's retrieved text supports it.

A correct guess from memory and a correct answer read off a retrieved document score the same under
``answer_reward``; this reward tells them apart. 1.0 when the final ``{{…}}`` answer matches ``answer`` or an
alias (``tansaku.envs.normalize.answers_match``, as ``answer_reward``) *and* the answer, the gold answer or
one of its aliases (normalized the same way) appears in a tool result the episode received (a search hit or an
opened page: ``tansaku.envs.search_health.episode_health``); 0.0 otherwise. Optional: a task weighs it by
naming it in its ``reward_weights`` (a recipe's ``tasks[].reward_weights: {grounded_answer_reward: 0.5}``).

>>> guess = [{"role": "assistant", "content": "{{白砂港}}"}]
>>> read = [{"role": "assistant", "content": "",
...          "tool_calls": [{"name": "search", "arguments": {"query": "港"}}]},
...         {"role": "tool", "content": "1. [d1] 白砂港 — 白砂市の港"},
...         {"role": "assistant", "content": "{{白砂港}}"}]
>>> grounded_answer_reward([guess, read], answer=["白砂港"] * 2)
[0.0, 1.0]
"""

from __future__ import annotations

from tansaku.envs.answer_text import per_row, row_aliases
from tansaku.envs.normalize import answers_match
from tansaku.envs.search_health import episode_health, supported


def grounded_answer_reward(completions, answer, aliases=None, **_columns) -> list[float]:
    """1.0 for a correct final answer (``answer_reward``'s match) supported by retrieved text, else 0.0."""
    n = len(completions)
    scores = []
    for completion, gold, alias in zip(completions, per_row(answer, n), per_row(aliases, n), strict=True):
        health = episode_health(completion)
        gold = gold if isinstance(gold, str) else "" if gold is None else str(gold)
        names = row_aliases(alias)
        correct = health.answer is not None and answers_match(health.answer, gold, names)
        evidenced = any(supported(text, health.evidence) for text in (health.answer, gold, *names) if text)
        scores.append(float(correct and evidenced))
    return scores

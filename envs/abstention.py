"""The optional abstention reward: credit for 「分かりません」 when the gold answer cannot be found.

Search agents trained only on correctness learn to answer confidently whatever they found; a row marked
``answerable: false`` (its answer is not in the index) rewards saying so instead. Opt-in per task and run
(``Task.with_abstention(weight)``, the RL recipe's ``tasks.N.abstention_weight``), with the weight capped at
the answer's: abstaining never earns more than answering correctly, so always abstaining cannot beat answering
(``tests/test_abstention.py``).

    from tansaku.envs.tasks import TASKS
    task = TASKS["multihop_qa"].with_abstention(0.5)   # reward_weights gains "abstention_reward": 0.5
"""

from __future__ import annotations

from tansaku.envs.answer_text import per_row
from tansaku.envs.normalize import normalize_answer
from tansaku.envs.rewards import final_answer

# Final answers that say "I could not find it" (after normalize_answer). Matched whole, never as a substring:
# 「不明な点」 is an answer, not an abstention.
ABSTENTIONS = frozenset(normalize_answer(a) for a in (
    "分かりません", "わかりません", "分からない", "わからない", "不明", "不明です", "答えられません",
    "見つかりませんでした", "見つかりません", "該当なし", "回答できません"))


def is_abstention(answer: str | None) -> bool:
    """A final answer that declines to answer.

    >>> is_abstention("分かりません。"), is_abstention("不明な点が多い"), is_abstention(None)
    (True, False, False)
    """
    return answer is not None and normalize_answer(answer).rstrip("。.!！") in ABSTENTIONS


def abstention_reward(completions, answerable=None, **_columns) -> list[float]:
    """1.0 for an abstention (``{{分かりません}}``) on a row whose gold cannot be found (``answerable``
    false); 0.0 for everything else — an abstention on a findable row earns nothing, and a row without the
    column is findable. Opt-in (``Task.with_abstention``): its weight is capped at the answer's, so abstaining
    never earns more than answering.

    >>> abstention_reward(["{{分かりません}}", "{{分かりません}}", "{{東京}}"],
    ...                   answerable=[False, True, False])
    [1.0, 0.0, 0.0]
    """
    n = len(completions)
    return [float(flag in (False, "false", "False", 0) and is_abstention(final_answer(completion)))
            for completion, flag in zip(completions, per_row(answerable, n), strict=True)]

"""The reward registry: every reward component a task may weigh, by name, in one dict (``REWARDS``).

A reward is a plain TRL reward function ``f(completions, **columns) -> list[float | None]``; its entry here
is a factory ``(task, judge) -> f``, so a reward that needs the task's settings (the format reward's answer
style, the tool-call cap) or a judge is made for the task that weighs it. A reward that needs neither is one
line ``"name": plain(module.function)``; adding one is its module plus that line (docs/extending.md, "Adding
a reward"). A task names the rewards it weighs in ``reward_weights``.

    from tansaku.envs.reward_registry import REWARDS, make_reward
    make_reward(TASKS["multihop_qa"], "answer_reward")([[{"role": "assistant", "content": "{{東京}}"}]],
                                                       answer=["東京"])   # [1.0]

>>> sorted(REWARDS)[:3]
['abstention_reward', 'answer_reward', 'format_reward']
>>> make_reward(None, "nope")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: unknown reward 'nope': choose one of format_reward, tool_call_reward, \
zh_mix_penalty, abstention_reward, answer_reward, mcq_reward, rubric_reward, grounded_answer_reward
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tansaku.core.errors import InputError
from tansaku.envs import abstention, grounding, rewards, rubric_reward

RewardFactory = Callable[[Any, Any], Callable]  # (task, judge) -> TRL reward function


def plain(function: Callable) -> RewardFactory:
    """The entry of a reward that needs no settings and no judge: ``function`` itself, for every task."""
    return lambda task, judge: function


def _rubric(task, judge) -> Callable:
    if judge is None:
        raise InputError(f"task {getattr(task, 'name', None)!r} scores reports with an LLM judge: give one "
                         "(--judge SPEC, or `judge: SPEC` in a train rl recipe)")
    return rubric_reward.make_rubric_reward(judge)


# Every reward component by name; a task's ``reward_weights`` chooses and weighs among them.
REWARDS: dict[str, RewardFactory] = {
    "format_reward": lambda task, judge: rewards.make_format_reward(task.answer_style,
                                                                    task.require_reasoning),
    "tool_call_reward": lambda task, judge: rewards.make_tool_call_reward(task.tool_call_cap),
    "zh_mix_penalty": lambda task, judge: task.zh_mix_penalty_function(metric=f"zh_mix/{task.name}"),
    "abstention_reward": plain(abstention.abstention_reward),
    "answer_reward": plain(rewards.answer_reward),
    "mcq_reward": plain(rewards.mcq_reward),
    "rubric_reward": _rubric,
    "grounded_answer_reward": plain(grounding.grounded_answer_reward),
}


def reward_names() -> tuple[str, ...]:
    """The registered rewards' names, in registration order (help texts, docs, errors)."""
    return tuple(REWARDS)


def make_reward(task, name: str, judge=None) -> Callable:
    """The TRL reward function of component ``name`` for ``task`` (``judge``: the rubric judge's client); one
    ``InputError`` line naming the registered rewards for an unknown name."""
    if name not in REWARDS:
        raise InputError(f"unknown reward {name!r}: choose one of {', '.join(REWARDS)}")
    return REWARDS[name](task, judge)


def reward_factories(task) -> dict[str, Callable[[Any], Callable]]:
    """Every registered reward as ``Task.reward_factories`` returns them for ``task``: name → ``judge`` → the
    reward function."""
    return {name: (lambda judge, name=name: make_reward(task, name, judge)) for name in REWARDS}

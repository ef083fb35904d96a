"""Correct-only: keep trajectories whose final answer scores at least ``min_reward`` (``--min-reward``, default
1.0: the gold answer) under the task's own answer reward.

Everything else is dropped (kept in the ``rejected`` split, never a positive example):
``wrong_answer`` (the answer reward is below ``min_reward``), ``malformed_tool_call`` (the teacher wrote a tool
call the runner could not parse), ``no_tool_calls`` (answered without searching: it does not teach
the loop). Teacher episodes that ended without an answer were already dropped by the teacher stage.

    stage = correct_only_stage(MultihopQA(), min_reward=1.0)
"""

from __future__ import annotations

from tansaku.core.engine import Drop, map_stage
from tansaku.core.errors import InputError
from tansaku.pipelines.trajectories.records import fail


def answer_score(task, record: dict) -> float:
    """The task's answer reward for the record's completion (messages after the prompt)."""
    reward = task.answer_reward()
    if reward is None:
        raise InputError(f"task {task.name!r} has no automatic answer reward; trajectories need one")
    completion = record["messages"][record["n_prompt"]:]
    columns = {key: [value] for key, value in record["row"].items()}
    score = reward([completion], **columns)[0]
    return float(score or 0.0)


def correct_only(task, record: dict, min_reward: float) -> dict | Drop:
    completion = record["messages"][record["n_prompt"]:]
    if record.get("parse_failures"):
        return fail(record, "malformed_tool_call", f"{record['parse_failures']} malformed")
    score = answer_score(task, record)
    record = {**record, "reward": score}
    if score < min_reward:
        return fail(record, "wrong_answer", completion[-1].get("content", "") if completion else "")
    if not any(m.get("role") == "tool" for m in completion):
        return fail(record, "no_tool_calls")
    return record


def correct_only_stage(task, *, min_reward: float):
    return map_stage("correct_only", lambda record: correct_only(task, record, min_reward),
                     params={"task": task.name, "task_version": task.version, "min_reward": min_reward})

"""Correct-only: keep trajectories whose final answer scores at least ``min_reward`` (``--min-reward``,
default
1.0: the gold answer) under the task's own answer reward (``deepresearch``: its rubric, scored by ``judge``,
``--judge``; a judge that gives no score drops the trajectory as ``judge_error``).

Everything else is dropped (kept in the ``rejected`` split, never a positive example):
``wrong_answer`` (the answer reward is below ``min_reward``), ``malformed_tool_call`` (the teacher wrote a
tool call the runner could not parse), ``no_tool_calls`` (answered without searching: it does not teach
the loop). Teacher episodes that ended without an answer were already dropped by the teacher stage.

    stage = correct_only_stage(MultihopQA(), min_reward=1.0)
    stage = correct_only_stage(DeepResearch(), min_reward=0.5, judge=judge_client)
"""

from __future__ import annotations

from tansaku.core.engine import Drop, map_stage
from tansaku.core.errors import InputError
from tansaku.pipelines.trajectories.records import fail


def answer_score(task, record: dict, judge=None) -> float | None:
    """The task's answer reward for the record's completion (messages after the prompt); None when a judge
    gave no score."""
    reward = task.answer_reward(judge)
    if reward is None:
        raise InputError(f"task {task.name!r} has no automatic answer reward; trajectories need one")
    completion = record["messages"][record["n_prompt"]:]
    columns = {key: [value] for key, value in record["row"].items()}
    score = reward([completion], **columns)[0]
    if score is None and judge is not None:
        return None
    return float(score or 0.0)


def correct_only(task, record: dict, min_reward: float, judge=None) -> dict | Drop:
    completion = record["messages"][record["n_prompt"]:]
    if record.get("parse_failures"):
        return fail(record, "malformed_tool_call", f"{record['parse_failures']} malformed")
    score = answer_score(task, record, judge)
    if score is None:
        return fail(record, "judge_error", "the judge gave no score")
    record = {**record, "reward": score}
    if score < min_reward:
        return fail(record, "wrong_answer", completion[-1].get("content", "") if completion else "")
    if not any(m.get("role") == "tool" for m in completion):
        return fail(record, "no_tool_calls")
    return record


def correct_only_stage(task, *, min_reward: float, judge=None):
    """``judge``: the LLM client a judged answer reward asks (its identity is the stage's ``llm``)."""
    return map_stage("correct_only", lambda record: correct_only(task, record, min_reward, judge),
                     params={"task": task.name, "task_version": task.version, "min_reward": min_reward},
                     llm=judge)

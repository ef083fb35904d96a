"""Task definitions: one class per task (``MultihopQA``, ``EgovMCQ``, ``DeepResearch``) owning its dataset
schema, prompt, gold completion and gold check, tool config, reward functions and weights, and a version.

``base.py`` holds ``Task`` (with ``configured``, the task a recipe means, and ``score``, the one scoring
path); each task is a module of its own, registered here by one line of ``TASKS``, which also holds
``multihop_qa_compact`` (``Task.compact``: the same task with a short prompt, terse tool descriptions, two
short hits and a 4-turn budget, for the 135M tiny model; its datasets are the multihop ones, chosen by name).
Bump a task's ``version`` whenever its scoring changes, so results of two versions are never compared. A
question pipeline is given its task object and ends with ``task.finalize(rows)``: the ``task`` and ``prompt``
columns, and the gold check (the gold answer must score 1.0 under the task's own answer reward;
``task.gold_failures(rows)`` lists the rows that do not). Code outside this package never branches on a task's
name: what differs between tasks is a field (``pass_threshold``, ``source_pipelines`` …) or a method a
subclass overrides (``user_message``, ``build_prompt``, ``gold_completion``, ``gold_problem``,
``reward_factories`` — the task's rewards by name, which ``reward_weights`` chooses and weighs). The prompts'
texts are in ``task_prompts``.

    from tansaku.envs.tasks import TASKS
    task = TASKS["multihop_qa"]
    task.build_prompt({"question": "雪村製菓の創業者の出身地は？"})   # [system, user] messages
    task.reward_functions()                              # TRL reward_funcs, weighed by task.reward_weights
    task = task.configured({"reward_weights": {"format_reward": 0.5}})   # a recipe's overrides, one Task
    task.score(completions, rows)                        # [Score(components, total)]
    task.gold_failures(rows)                             # [(row index, why its gold does not score 1.0)]

>>> sorted(TASKS), type(TASKS["egov_mcq"]).__name__
(['deepresearch', 'egov_mcq', 'multihop_qa', 'multihop_qa_compact'], 'EgovMCQ')
>>> TASKS["multihop_qa_compact"].tools_config["top_k"], TASKS["multihop_qa_compact"].max_turns
(2, 4)
>>> TASKS["egov_mcq"].gold_completion({"answer_index": 1})[0]["content"]
'{{2}}'
"""

from __future__ import annotations

from tansaku.core.errors import InputError
from tansaku.envs.task_prompts import COMPACT_TOOLS_CONFIG, MULTIHOP_COMPACT_SYSTEM
from tansaku.envs.tasks.base import OVERRIDES, Score, Task, override_values
from tansaku.envs.tasks.deepresearch import DeepResearch
from tansaku.envs.tasks.egov_mcq import EgovMCQ
from tansaku.envs.tasks.multihop_qa import MultihopQA

__all__ = ["COMPACT_TOOLS_CONFIG", "OVERRIDES", "TASKS", "DeepResearch", "EgovMCQ", "MultihopQA", "Score",
           "Task", "override_values", "task_for_dataset", "task_named"]

TASKS: dict[str, Task] = {task.name: task for task in (
    MultihopQA(),
    EgovMCQ(),
    DeepResearch(),
    MultihopQA().compact(MULTIHOP_COMPACT_SYSTEM),
)}


def task_named(name: str) -> Task:
    """The task a user named (``--task``), or one ``InputError`` line listing the known names.

    >>> task_named("egov_mcq").name
    'egov_mcq'
    """
    if name not in TASKS:
        raise InputError(f"unknown task {name!r}; known: {sorted(TASKS)}")
    return TASKS[name]


def task_for_dataset(pipeline: str | None, row: dict | None) -> Task | None:
    """The task a question dataset is for: the one its pipeline builds rows for, else the most specific task
    whose columns the row has (egov rows also have ``question``/``answer``); None when nothing fits.

    >>> task_for_dataset("egov_mcq", None).name, task_for_dataset(None, {"question": "q", "answer": "a"}).name
    ('egov_mcq', 'multihop_qa')
    """
    for task in TASKS.values():
        if pipeline and pipeline in task.source_pipelines:
            return task
    fitting = [task for task in TASKS.values() if row and task.fits(row)]
    return max(fitting, key=lambda t: len(t.columns), default=None)

"""Teacher rollouts: n tries per question with a configured teacher, through ``tansaku.envs.rollout``.

Each question row (a multihop or egov dataset row) becomes ``n`` trajectory records::

    {"id": "q7-t0", "question_id": "q7", "try_index": 0, "task": "multihop_qa", "question": …,
     "row": {question row, for the answer reward}, "messages": [system, user, assistant, tool, …],
     "teacher_messages": (the same, frozen for the byte-identity check), "n_prompt": 2,
     "tools": [tool schemas], "tool_variant": 2, "tool_interface": 0, "stop_reason": "answer",
     "scenario": None}

``tools`` are the JSON schemas the teacher was shown in *that* episode: each episode is a fresh
``tansaku.envs.environments.SearchEnvironment`` (the RL environment class) whose ``reset`` draws a
description variant (``tool_variant``) and, when the task draws them, a tool interface (``tool_interface``),
so SFT rows carry the same schemas RL shows, varied per question. An episode that called another interface's
tools (a teacher that speaks only ``search``/``open_doc`` on a ``find``/``read`` episode) is dropped as
``wrong_interface``.

Tool-call arguments are stored as JSON text (one spelling, fixed here), so every later comparison of
tool calls is a plain string comparison.

A teacher is any ``tansaku.core.llm`` client or spec (``tansaku.core.llm.as_client``), ``scripted:FILE.py`` (a
Python file defining ``respond(request)``), used by the laptop demo (``examples/teacher_script.py``).
"""

from __future__ import annotations

import copy

from tansaku.core.engine import batch_stage
from tansaku.core.errors import InputError
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.tasks import TASKS, task_for_dataset
from tansaku.envs.tool_interfaces import INTERFACES
from tansaku.pipelines.trajectories.records import fail
from tansaku.pipelines.trajectories.verify import arguments_text


def guess_task(dataset_manifest: dict, first_row: dict | None) -> str:
    """The task a question dataset is for: from the pipeline that built it, else from its columns
    (each task class says which pipelines and columns are its own: ``tasks.task_for_dataset``)."""
    task = task_for_dataset(str(dataset_manifest.get("pipeline", "")), first_row)
    if task is None:
        raise InputError("cannot tell the task of this dataset (no task's pipeline in its manifest, no "
                         f"task's columns in its rows); pass --task with one of {', '.join(TASKS)}")
    return task.name


def make_tools(task, index, seed: int = 0):
    """The task's environment factory over ``index`` (a folder/URL or an opened backend); ``.config`` is its
    ``ToolsConfig``. ``seed`` shifts which description variant each question draws."""
    return make_environment_factory(task, index, seed=seed)


def stored_messages(messages: list[dict]) -> list[dict]:
    """Messages with tool-call arguments as JSON text (the stored, byte-compared spelling)."""
    out = copy.deepcopy(messages)
    for message in out:
        for call in message.get("tool_calls") or []:
            fn = call.setdefault("function", {})
            fn["arguments"] = arguments_text(fn.get("arguments", {}))
    return out


def wrong_interface_calls(trajectory) -> list[str]:
    """Tool names the episode called that belong to another tool interface than the one it was shown
    (``tansaku.envs.tool_interfaces``): such a teacher does not speak the drawn interface (the scripted demo
    teacher reads the schemas it is shown and speaks either), so its episode teaches nothing and is dropped as
    ``wrong_interface``."""
    shown = {s.get("function", s).get("name") for s in trajectory.tools or []}
    others = {name for names in INTERFACES for name in names} - shown
    called = [c.get("function", c).get("name") for m in trajectory.completion if m.get("role") == "assistant"
              for c in m.get("tool_calls") or []]
    return list(dict.fromkeys(name for name in called if name in others))


def trajectory_records(question: dict, trajectories, task_name: str) -> list[dict]:
    """One record per trajectory of ``question`` (a failed teacher episode is a ``Drop`` named by its stop
    reason)."""
    records = []
    for t in trajectories:
        messages = stored_messages(t.messages)
        record = {
            "id": f"{question['question_id']}-t{t.sample_index}",
            "question_id": question["question_id"],
            "try_index": t.sample_index,
            "task": task_name,
            "question": str(question["row"].get("question") or question["row"].get("instruction") or ""),
            "row": question["row"],
            "messages": messages,
            "teacher_messages": copy.deepcopy(messages),
            "n_prompt": len(t.prompt),
            "tools": t.tools,
            "tool_variant": t.tool_variant,
            "tool_interface": t.tool_interface,
            "stop_reason": t.stop_reason,
            "parse_failures": t.parse_failures,
            "scenario": None,
        }
        wrong = wrong_interface_calls(t)
        if wrong:
            record = fail(record, "wrong_interface", f"called {', '.join(wrong)}; this episode's tools are "
                                                     f"{', '.join(INTERFACES[t.tool_interface or 0])}")
        elif t.stop_reason != "answer":
            record = fail(record, t.stop_reason, t.error or "")
        records.append(record)
    return records


def teacher_stage(client, task, tools, *, n: int, temperature: float, max_tokens: int, seed: int,
                  batch_size: int = 8):
    """A batch stage: question records ``{"question_id", "row"}`` → ``n`` trajectory records each, sampled at
    ``temperature`` with ``max_tokens`` per turn (the stage's params, with the task's name).

    ``tools``: an environment factory (``make_tools``); every episode gets its own environment."""

    def run(batch: list[dict]) -> list:
        rows = [q["row"] for q in batch]
        # Same seed for every batch; sample_index tells the n tries apart (and names them in the LLM cache).
        trajectories = run_rollouts(client, task, rows, tools, k=n, max_tokens=max_tokens,
                                    temperature=temperature, seed=seed, score=False)
        by_row: dict[int, list] = {}
        for t in trajectories:
            by_row.setdefault(t.row_index, []).append(t)
        return [trajectory_records(q, by_row.get(i, []), task.name) for i, q in enumerate(batch)]

    return batch_stage("teacher", run, batch_size=batch_size, llm=client,
                       params={"n": n, "temperature": temperature, "max_tokens": max_tokens,
                               "task": task.name})

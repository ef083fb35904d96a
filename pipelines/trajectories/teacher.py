"""Teacher rollouts: n tries per question with a configured teacher, through ``tansaku.envs.rollout``.

Each question row (a multihop or egov dataset row) becomes ``n`` trajectory records::

    {"id": "q7-t0", "question_id": "q7", "try_index": 0, "task": "multihop_qa", "question": …,
     "row": {question row, for the answer reward}, "messages": [system, user, assistant, tool, …],
     "teacher_messages": (the same, frozen for the byte-identity check), "n_prompt": 2,
     "tools": [tool schemas], "stop_reason": "answer", "scenario": None, "failure": None}

Tool-call arguments are stored as JSON text (one spelling, fixed here), so every later comparison of
tool calls is a plain string comparison.

A teacher is any ``tansaku.core.llm`` client or spec. ``load_client`` also takes ``scripted:FILE.py`` (a
Python file defining ``respond(request)``), used by the laptop demo (``examples/teacher_script.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path

from tansaku.core.engine import batch_stage
from tansaku.core.llm import from_spec
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.search import open_index
from tansaku.envs.tools import SearchTools, ToolsConfig
from tansaku.pipelines.trajectories.records import fail
from tansaku.pipelines.trajectories.verify import arguments_text

TASK_OF_PIPELINE = {"multihop": "multihop_qa", "egov": "egov_mcq"}


def load_client(spec_or_client, cache="default"):
    """A ``tansaku.core.llm`` client from a client or a spec string (``scripted:FILE.py[:FUNCTION]`` included)."""
    if not isinstance(spec_or_client, str):
        return spec_or_client

    return from_spec(spec_or_client, cache=cache)


def guess_task(dataset_manifest: dict, first_row: dict | None) -> str:
    """The task a question dataset is for: from the pipeline that built it, else from its columns."""
    task = TASK_OF_PIPELINE.get(str(dataset_manifest.get("pipeline", "")))
    if task:
        return task
    if first_row and "answer_index" in first_row:
        return "egov_mcq"
    if first_row and "answer" in first_row:
        return "multihop_qa"
    raise ValueError("cannot tell the task of this dataset (no multihop/egov pipeline in its manifest, no "
                     "answer/answer_index column); pass task='multihop_qa' or 'egov_mcq'")


def make_tools(task, index, seed: int = 0):
    """The task's search tools over ``index`` (a folder/URL or an opened backend)."""

    backend = open_index(index) if isinstance(index, (str, Path)) else index
    return SearchTools(backend, ToolsConfig(**task.tools_config), seed=seed)


def stored_messages(messages: list[dict]) -> list[dict]:
    """Messages with tool-call arguments as JSON text (the stored, byte-compared spelling)."""
    out = copy.deepcopy(messages)
    for message in out:
        for call in message.get("tool_calls") or []:
            fn = call.setdefault("function", {})
            fn["arguments"] = arguments_text(fn.get("arguments", {}))
    return out


def trajectory_records(question: dict, trajectories, task_name: str, tools_schema: list[dict]) -> list[dict]:
    """One record per trajectory of ``question`` (failed teacher episodes tagged with their stop reason)."""
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
            "tools": tools_schema,
            "stop_reason": t.stop_reason,
            "parse_failures": t.parse_failures,
            "scenario": None,
            "failure": None,
        }
        if t.stop_reason != "answer":
            record = fail(record, "teacher", t.stop_reason, t.error or "")
        records.append(record)
    return records


def teacher_stage(client, task, tools, *, n: int = 4, temperature: float = 0.7, max_tokens: int = 1024,
                  seed: int = 0, batch_size: int = 8):
    """A batch stage: question records ``{"question_id", "row"}`` → ``n`` trajectory records each."""

    schemas = tools.schemas()

    def run(batch: list[dict]) -> list:
        rows = [q["row"] for q in batch]
        # Same seed for every batch; sample_index tells the n tries apart (and names them in the LLM cache).
        trajectories = run_rollouts(client, task, rows, tools, k=n, max_tokens=max_tokens,
                                    temperature=temperature, seed=seed, score=False)
        by_row: dict[int, list] = {}
        for t in trajectories:
            by_row.setdefault(t.row_index, []).append(t)
        return [trajectory_records(q, by_row.get(i, []), task.name, schemas) for i, q in enumerate(batch)]

    return batch_stage("teacher", run, batch_size=batch_size)

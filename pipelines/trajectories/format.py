"""HF chat rows for ``train sft``: ``messages`` (assistant ``reasoning_content`` per step, ``tool_calls``,
``tool`` results) and ``tools``, plus provenance columns.

Arrow would merge every dict's keys into one struct (tool-call arguments of ``search`` and ``open_doc``,
the two tool schemas) and fill gaps with nulls, so tool-call ``arguments`` and ``tools`` are stored as
JSON text — the chat template and ``tansaku.trainer.data`` take both as strings. Each agentic row opens with
its task's system prompt for its question (``Task.system_prompt``): the very text ``train rl`` and
``train eval`` put before the same question, which is what makes the system prompt the switch.

Row columns of the ``train`` split: ``id, kind (agentic|general), messages, tools, tool_variant,
tool_interface, task, question_id, try_index, scenario, answer,
reward`` (failed trajectories are in the ``rejected`` split). ``tools`` are the schemas the teacher episode
was shown (the RL environment's, in the description variant ``tool_variant`` and tool interface
``tool_interface`` drawn for that episode; 0 = ``search``/``open_doc``).

``answer`` is the question's gold as one declared struct (``GOLD``) for every task, so its type never depends
on
which task or rows a build holds and datasets of two tasks concatenate: ``{answer, aliases}`` filled for
multihop_qa, ``{answer, answer_index, choices}`` for egov_mcq, the other fields null; general rows: null.
deepresearch rows (correct-only with ``--judge``) have no gold answer: their ``answer`` is all nulls (the
rubric stays in the source dataset), and their ``messages`` open with the row's clarifying exchange when it
has one:
``[system, user initial request, assistant clarifying question, user answer, assistant step, tool, …]`` (the
question, an assistant turn without reasoning, is trained on like every assistant turn; the answer, a user
turn, is not).
"""

from __future__ import annotations

import pyarrow as pa

from tansaku.core import jsontext
from tansaku.core.engine import map_stage
from tansaku.envs.answer_text import choice_index
from tansaku.envs.rewards import as_list
from tansaku.envs.tool_interfaces import interface_text
from tansaku.pipelines.trajectories.verify import arguments_text

MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "name", "tool_call_id")
ROW_KEYS = ("id", "kind", "messages", "tools", "tool_variant", "tool_interface", "task", "question_id",
            "try_index", "scenario", "answer", "reward")
# The gold of every task that can build trajectories (the question row's answer columns, typed as its task
# does).
GOLD = pa.struct([("answer", pa.string()), ("aliases", pa.list_(pa.string())), ("answer_index", pa.int64()),
                  ("choices", pa.list_(pa.string()))])
# Declared so no type depends on the rows: a build whose trajectories all failed holds general rows only.
COLUMN_TYPES = {"answer": GOLD, "reward": pa.float64(), "try_index": pa.int64(), "tool_variant": pa.int64(),
                "tool_interface": pa.int64()}


def clean_messages(messages: list[dict], drop_system: bool = True) -> list[dict]:
    """Messages with only the chat keys, no None values, arguments as JSON text, no leading system."""
    out = []
    for message in messages:
        if drop_system and message.get("role") == "system" and not out:
            continue
        clean = {k: message[k] for k in MESSAGE_KEYS if message.get(k) is not None}
        clean.setdefault("content", "")
        if clean.get("tool_calls"):
            clean["tool_calls"] = [
                {**({"id": c["id"]} if c.get("id") else {}), "type": "function",
                 "function": {"name": c.get("function", c).get("name", ""),
                              "arguments": arguments_text(c.get("function", c).get("arguments", {}))}}
                for c in clean["tool_calls"]]
        else:
            clean.pop("tool_calls", None)
        out.append(clean)
    return out


def tools_text(tools) -> str | None:
    if not tools:
        return None
    return tools if isinstance(tools, str) else jsontext.dumps(tools)


def gold_of(row: dict) -> dict:
    """The gold of a question row as a ``GOLD`` struct; a field the row lacks is None.

    >>> gold_of({"answer": "楠沼栞", "aliases": ["楠沼"], "question": "…"})
    {'answer': '楠沼栞', 'aliases': ['楠沼'], 'answer_index': None, 'choices': None}
    """
    def strings(value):
        return None if value is None else [str(v) for v in as_list(value)]  # a JSON-text list reads as a list

    answer, index = row.get("answer"), row.get("answer_index")
    return {"answer": None if answer is None else str(answer), "aliases": strings(row.get("aliases")),
            "answer_index": None if index is None else choice_index(index),
            "choices": strings(row.get("choices"))}


def chat_row(record: dict, task) -> dict:
    """The dataset row of a trajectory record, under ``task``'s system prompt for the record's question."""
    # Named for the episode's tool interface, as its rollout showed it (tool_interfaces.interface_text).
    system = {"role": "system",
              "content": interface_text(task.system_prompt(record.get("row") or {}),
                                        record.get("tool_interface") or 0)}
    return {
        "id": record["id"],
        "kind": "agentic",
        "messages": [system, *clean_messages(record["messages"])],
        "tools": tools_text(record.get("tools")),
        "tool_variant": record.get("tool_variant"),
        "tool_interface": record.get("tool_interface") or 0,
        "task": record.get("task"),
        "question_id": record.get("question_id"),
        "try_index": record.get("try_index"),
        "scenario": record.get("scenario"),
        "answer": gold_of(record.get("row") or {}),
        "reward": record.get("reward"),
    }


def general_row(row: dict, index: int) -> dict:
    """A general chat row in the same columns (no system prompt, no trajectory fields)."""
    messages = row.get("messages")
    if isinstance(messages, str):
        messages = jsontext.loads(messages)
    return {**dict.fromkeys(ROW_KEYS), "id": str(row.get("id") or f"general-{index}"), "kind": "general",
            "messages": clean_messages(messages), "tools": tools_text(row.get("tools"))}


def format_stage(task):
    """Stage ``format``: chat rows under ``task``'s system prompts (their texts are the stage's params)."""
    return map_stage("format", lambda record: chat_row(record, task),
                     params={"system_prompts": list(task.system_prompts)})

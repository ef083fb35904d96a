"""HF chat rows for ``train sft``: ``messages`` (assistant ``reasoning_content`` per step, ``tool_calls``,
``tool`` results) and ``tools``, plus provenance columns.

Arrow would merge every dict's keys into one struct (tool-call arguments of ``search`` and ``open_doc``,
the two tool schemas) and fill gaps with nulls, so tool-call ``arguments`` and ``tools`` are stored as
JSON text — the chat template and ``tansaku.trainer.data`` take both as strings. The teacher's system prompt is
dropped here; the mix stage puts the agentic system prompt in its place.

Row columns of the ``train`` split: ``id, kind (agentic|general), messages, tools, tool_variant, task,
question_id, try_index, scenario, answer, reward`` (failed trajectories are in the ``rejected`` split). ``tools`` are the schemas the teacher episode was shown (the RL environment's, in the
description variant ``tool_variant`` drawn for that episode).
"""

from __future__ import annotations

import json

from tansaku.core.engine import map_stage
from tansaku.pipelines.trajectories.verify import arguments_text

MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "name", "tool_call_id")
ROW_KEYS = ("id", "kind", "messages", "tools", "tool_variant", "task", "question_id", "try_index", "scenario",
            "answer", "reward")


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
    return tools if isinstance(tools, str) else json.dumps(tools, ensure_ascii=False)


def gold_of(row: dict) -> str:
    """The gold answer columns of a question row as JSON text (answer/aliases or answer_index/choices)."""
    keys = ("answer", "aliases", "answer_index", "choices")
    return json.dumps({k: row[k] for k in keys if row.get(k) is not None}, ensure_ascii=False, default=str)


def chat_row(record: dict) -> dict:
    """The dataset row of a trajectory record."""
    return {
        "id": record["id"],
        "kind": "agentic",
        "messages": clean_messages(record["messages"]),
        "tools": tools_text(record.get("tools")),
        "tool_variant": record.get("tool_variant"),
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
        messages = json.loads(messages)
    return {**dict.fromkeys(ROW_KEYS), "id": str(row.get("id") or f"general-{index}"), "kind": "general",
            "messages": clean_messages(messages), "tools": tools_text(row.get("tools"))}


def format_stage():
    return map_stage("format", chat_row)

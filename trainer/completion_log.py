"""Completions as TRL's ``completions/*.parquet`` can hold them, whatever the policy wrote.

    # before TRL's log:
    trainer._logs["completion"] = deque(parquet_safe(trainer._logs["completion"]), maxlen=…)

TRL writes each logged completion (a list of messages) with pandas' ``to_parquet``, and pyarrow refuses a
column whose rows mix a mapping and a string in one field: a tool call whose ``arguments`` an early policy did
not write as JSON stays a string, the others are objects, and the write raised ``ArrowInvalid: cannot mix
struct and non-struct`` at the log step, ending the run (seen in the small demo's GSPO round); a batch whose
only tool calls have ``arguments: {}`` builds, but parquet refuses its empty struct. Such a batch is
rewritten in the wire form (``arguments`` as JSON text, as the OpenAI API sends them;
``tansaku.trainer.report`` reads both forms); if pyarrow still refuses it, each completion becomes its JSON
text. A batch pyarrow takes is left as it is.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq


def _arguments_as_text(message):
    if not isinstance(message, dict) or not message.get("tool_calls"):
        return message
    calls = []
    for call in message["tool_calls"]:
        function = dict(call.get("function") or {}) if isinstance(call, dict) else {}
        if "arguments" in function and not isinstance(function["arguments"], str):
            function["arguments"] = json.dumps(function["arguments"], ensure_ascii=False, default=str)
        calls.append({**call, "function": function} if isinstance(call, dict) else call)
    return {**message, "tool_calls": calls}


def _writable(rows: list) -> bool:
    """Whether pyarrow builds the column and parquet writes it (a tool call whose ``arguments`` are ``{}`` in
    every row builds a struct with no field, which only the parquet write refuses)."""
    try:
        pq.write_table(pa.table({"completion": pa.array(rows)}), pa.BufferOutputStream())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    return True


def parquet_safe(completions) -> list:
    """``completions`` (TRL's logged messages lists) in a form pyarrow can write as one column.

    >>> good = [{"role": "assistant",
    ...          "tool_calls": [{"function": {"name": "search", "arguments": {"q": "a"}}}]}]
    >>> bad = [{"role": "assistant", "tool_calls": [{"function": {"name": "search", "arguments": "q=a"}}]}]
    >>> parquet_safe([good])[0] is good or parquet_safe([good])[0] == good
    True
    >>> parquet_safe([good, bad])[0][0]["tool_calls"][0]["function"]["arguments"]
    '{"q": "a"}'
    >>> empty = [{"role": "assistant", "tool_calls": [{"function": {"name": "search", "arguments": {}}}]}]
    >>> parquet_safe([empty])[0][0]["tool_calls"][0]["function"]["arguments"]  # parquet has no empty struct
    '{}'
    """
    rows = list(completions)
    if _writable(rows):
        return rows
    wire = [[_arguments_as_text(m) for m in c] if isinstance(c, list) else c for c in rows]
    if _writable(wire):
        return wire
    return [json.dumps(c, ensure_ascii=False, default=str) for c in rows]

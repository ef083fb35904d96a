"""General chat rows from the columns common chat sets use: ``messages``, ``conversations`` (ShareGPT
``from``/``value``), ``prompt`` + ``response``/``completion``, ``instruction`` + ``input``/``context`` +
``output``/``response``, tried in that order (``chat_messages``). A row none of them fits raises
``UnusableRow`` with its reason. Used by ``tansaku.core.chat_sources`` for local files and Hub sets alike.
"""

from __future__ import annotations

import json

from tansaku.core import jsontext

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                  "system": "system"}
FORMATS = "'messages', 'conversations' (ShareGPT from/value), 'prompt' [+ 'response'/'completion'] or " \
          "'instruction' [+ 'input'] [+ 'output']"


class UnusableRow(ValueError):
    """A row no chat could be made of; ``reason``: ``unmappable`` (no known column) or ``malformed``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _present(row: dict, *keys: str):
    """The first of ``keys`` the row holds a value for, and that value; (None, None) when none."""
    for key in keys:
        if row.get(key) is not None:
            return key, row[key]
    return None, None


def _as_list(key: str, value) -> list:
    if isinstance(value, str):
        try:
            value = jsontext.loads(value)
        except json.JSONDecodeError:
            raise UnusableRow("malformed", f"'{key}' is a string that is not JSON") from None
    if not isinstance(value, list):
        raise UnusableRow("malformed", f"'{key}' must be a list of messages, not {type(value).__name__}")
    return value


def _sharegpt(value) -> list:
    out = []
    for i, turn in enumerate(_as_list("conversations", value)):
        if isinstance(turn, dict) and "from" in turn:
            role = SHAREGPT_ROLES.get(str(turn.get("from")).lower())
            text = turn.get("value")
            if role is None or not isinstance(text, str):
                raise UnusableRow("malformed", f"conversations turn {i}: needs 'from' in "
                                               f"{sorted(SHAREGPT_ROLES)} and text 'value', got "
                                               f"{str(turn)[:80]!r}")
            if not (role == "system" and not text.strip()):  # an empty system turn says nothing
                out.append({"role": role, "content": text})
        else:
            out.append(turn)  # {role, content} items: as they are (the consumer checks them)
    return out


def _turns(key: str, value, role: str) -> list:
    """A text column as one ``role`` message, or a list of messages as it is."""
    return [{"role": role, "content": value}] if isinstance(value, str) else _as_list(key, value)


def chat_messages(row) -> tuple[str, list]:
    """``(column, messages)`` of one row of a typical chat set (see the module docstring for the columns
    read and in what order); the messages may end in the row's answer. Raises ``UnusableRow``."""
    if not isinstance(row, dict):
        raise UnusableRow("malformed", f"not a JSON object ({type(row).__name__})")
    if row.get("messages") is not None:
        return "messages", _as_list("messages", row["messages"])
    if row.get("conversations") is not None:
        return "conversations", _sharegpt(row["conversations"])
    if row.get("prompt") is not None:
        key, answer = _present(row, "response", "completion")
        return "prompt", _turns("prompt", row["prompt"], "user") + (
            _turns(key, answer, "assistant") if key else [])
    if isinstance(row.get("instruction"), str):
        text = row["instruction"]
        key, extra = _present(row, "input", "context")
        if isinstance(extra, str) and extra.strip():
            text = f"{text}\n\n{extra}"
        key, answer = _present(row, "output", "response")
        if key is not None and not isinstance(answer, str):
            raise UnusableRow("malformed", f"'{key}' must be text, not {type(answer).__name__}")
        return "instruction", [{"role": "user", "content": text}] + (
            [{"role": "assistant", "content": answer}] if key else [])
    keys = ", ".join(str(k) for k, v in row.items() if v is not None)  # a Hub set's null columns are no keys
    raise UnusableRow("unmappable", f"none of {FORMATS} (keys: {keys or 'none'})")

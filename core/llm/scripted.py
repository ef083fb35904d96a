"""Scripted LLM for tests and demos: answers from a function or from a JSONL file of responses.

Spec: ``scripted:PATH.jsonl``. Each JSONL line is a response: ``{"content": ..., "reasoning": ...,
"tool_calls": [...], "error": ...}`` plus an optional ``"match"``: a substring of the last user
message. Lines with ``match`` answer the requests that contain it (first match wins); the other
lines are handed out in order, cycling. A function gets the ``ChatRequest`` and returns a str, a
dict of ``ChatResult`` fields or a ``ChatResult``; an exception it raises becomes that request's error.
Never the only test of a real backend.

A str is the raw generated text (``ChatResult.content``), exactly what a local backend returns. A dict
answers like an OpenAI server's message: its ``reasoning`` / ``tool_calls`` (also accepted under their
``ChatResult`` names ``server_reasoning`` / ``server_tool_calls``) are what a server's parsers took out
of the text; they are passed on as given, never normalized or repaired (``tansaku.core.parsing`` validates them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.jsonl import iter_jsonl

from .base import ChatRequest, ChatResult, LLMClient

_FIELDS = {"content", "server_reasoning", "server_tool_calls", "error", "finish_reason"}
# A dict response is an OpenAI-style message: these keys are what a server's parsers would have split off.
_MESSAGE_KEYS = {"reasoning": "server_reasoning", "reasoning_content": "server_reasoning",
                 "tool_calls": "server_tool_calls"}


class ScriptedLLM(LLMClient):
    backend = "scripted"

    def __init__(self, responder: Callable[[ChatRequest], object] | str | Path, cache=None, model: str | None = None):
        if callable(responder):
            self._fn, self._matched, self._ordered = responder, [], []
            name = model or f"scripted:{getattr(responder, '__name__', 'function')}"
        else:
            path = Path(responder)
            lines = _read_jsonl(path)
            self._fn = None
            self._matched = [line for line in lines if "match" in line]
            self._ordered = [line for line in lines if "match" not in line]
            name = model or f"scripted:{path.name}"
        super().__init__(name, cache)
        self.calls = 0  # requests that reached the script (cache misses)
        self._next = 0
        self._count_lock = threading.Lock()

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        with self._count_lock:
            self.calls += len(requests)
        return [self._answer(r) for r in requests]

    def _answer(self, req: ChatRequest) -> ChatResult:
        if self._fn is not None:
            try:
                return _as_result(self._fn(req))
            except Exception as exc:
                return ChatResult(error=f"{type(exc).__name__}: {exc}")
        last_user = next((m.get("content") or "" for m in reversed(req.messages) if m.get("role") == "user"), "")
        for line in self._matched:
            if line["match"] in str(last_user):
                return _as_result(line)
        if not self._ordered:
            return ChatResult(error=f"no scripted response matches: {str(last_user)[:80]!r}")
        with self._count_lock:
            line = self._ordered[self._next % len(self._ordered)]
            self._next += 1
        return _as_result(line)


def _as_result(value: object) -> ChatResult:
    if isinstance(value, ChatResult):
        return value
    if isinstance(value, str):
        return ChatResult(content=value, finish_reason="stop")
    if isinstance(value, dict):
        fields = {_MESSAGE_KEYS.get(k, k): v for k, v in value.items() if _MESSAGE_KEYS.get(k, k) in _FIELDS}
        # Passed on as given, of whatever type (a line may say "content": 5): the parser counts what is wrong.
        calls = fields.get("server_tool_calls")
        fields["server_tool_calls"] = [] if calls is None else list(calls) if isinstance(calls, list) else [calls]
        fields["content"] = "" if fields.get("content") is None else fields["content"]
        if fields.get("error") is not None:
            fields["error"] = str(fields["error"])
        return ChatResult(**fields)
    raise TypeError(f"scripted response must be str, dict or ChatResult, not {type(value).__name__}")


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise MissingInputError(f"scripted responses file not found: {path}")
    lines = [line for _, line in iter_jsonl(path)]  # a non-JSON or non-object line: InputError at file:line
    if not lines:
        raise InputError(f"{path}: no scripted responses")
    return lines

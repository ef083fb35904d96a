"""Scripted responders for tests and demos: an LLM that answers from a function or a JSONL file of responses.

Specs (:func:`parse_scripted_spec`, the one grammar every ``--llm`` / ``--teacher`` / ``--model`` / recipe
``judge:`` goes through): ``scripted:FILE.jsonl`` reads responses; ``scripted:FILE.py`` and
``scripted:FILE.py:FUNCTION`` (``FUNCTION`` a Python identifier, default ``respond``) **execute that Python
file's code** when the client is built, like a plugin: name only files you trust. Anything else is refused
(``scripted:answers.py.jsonl`` is a JSONL file, never the ``answers.py`` beside it).

>>> parse_scripted_spec("scripted:a/answers.py.jsonl")
ScriptedSpec(path=PosixPath('a/answers.py.jsonl'), function=None)
>>> parse_scripted_spec("scripted:teacher.py:rewrite").function
'rewrite'
>>> parse_scripted_spec("scripted:teacher.py:not-a-name")
Traceback (most recent call last):
...
tansaku.core.errors.InputError: scripted spec 'scripted:teacher.py:not-a-name': FUNCTION must be a Python
identifier, got 'not-a-name'

Each JSONL line is a response: ``{"content": ..., "reasoning": ...,
"tool_calls": [...], "error": ...}`` plus an optional ``"match"``: a substring of the last user
message. Lines with ``match`` answer the requests that contain it (first match wins); the other
lines are handed out in order, cycling. A function gets the ``ChatRequest`` and returns a str, a
dict of ``ChatResult`` fields or a ``ChatResult``; an exception it raises becomes that request's error.
Never the only test of a real backend.

A str is the raw generated text (``ChatResult.content``), exactly what a local backend returns. A dict
answers like an OpenAI server's message: its ``reasoning`` / ``tool_calls`` (also accepted under their
``ChatResult`` names ``server_reasoning`` / ``server_tool_calls``) are what a server's parsers took out
of the text; they are passed on as given, never normalized or repaired (``tansaku.core.parsing`` validates
them).
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tansaku.core.errors import InputError, MissingInputError
from tansaku.core.jsonl import iter_jsonl

from .base import ChatRequest, ChatResult, LLMClient

_FIELDS = {"content", "server_reasoning", "server_tool_calls", "error", "finish_reason"}
# A dict response is an OpenAI-style message: these keys are what a server's parsers would have split off.
_MESSAGE_KEYS = {"reasoning": "server_reasoning", "reasoning_content": "server_reasoning",
                 "tool_calls": "server_tool_calls"}
# FILE.py:FUNCTION — the file part ends in ".py" and the last ':' starts the function name.
_PY_FUNCTION = re.compile(r"(?P<file>.+\.py):(?P<function>[^:]*)", re.DOTALL)
_GRAMMAR = "use scripted:FILE.jsonl, scripted:FILE.py or scripted:FILE.py:FUNCTION"


@dataclass(frozen=True)
class ScriptedSpec:
    """What a ``scripted:`` spec names: a JSONL file of responses (``function`` None) or a Python file and the
    function in it that answers."""

    path: Path
    function: str | None = None


def parse_scripted_spec(spec: str) -> ScriptedSpec:
    """The file (and function) a ``scripted:`` spec names; an ``InputError`` for any other form.

    Decided on the text alone, before any file is read, so that no spec runs a file it does not end in."""
    rest = spec.removeprefix("scripted:")
    if rest.endswith(".jsonl") and Path(rest).name != ".jsonl":
        return ScriptedSpec(Path(rest))
    if rest.endswith(".py") and Path(rest).name != ".py":
        return ScriptedSpec(Path(rest), "respond")
    match = _PY_FUNCTION.fullmatch(rest)
    if match is None or Path(match["file"]).name == ".py":
        raise InputError(f"scripted spec {spec!r}: {_GRAMMAR}")
    name = match["function"]
    if not name.isidentifier() or keyword.iskeyword(name):
        raise InputError(f"scripted spec {spec!r}: FUNCTION must be a Python identifier, got {name!r}")
    return ScriptedSpec(Path(match["file"]), name)


def load_scripted(spec: str, cache=None, **options) -> ScriptedLLM:
    """The client of a ``scripted:`` spec: a JSONL file's responses, or ``FUNCTION(request)`` of a Python file
    (the file is executed here, as an import would)."""
    target = parse_scripted_spec(spec)
    if target.function is None:
        return ScriptedLLM(target.path, cache=cache, **options)
    file, name = target.path, target.function
    if not file.is_file():
        raise MissingInputError(f"scripted LLM file not found: {file}")
    loader_spec = importlib.util.spec_from_file_location(f"tansaku_script_{file.stem}", file)
    module = importlib.util.module_from_spec(loader_spec)
    loader_spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise InputError(f"{file} defines no function {name}(request) for a scripted LLM")
    return ScriptedLLM(getattr(module, name), cache=cache, model=f"scripted:{file.name}:{name}", **options)


class ScriptedLLM(LLMClient):
    backend = "scripted"

    def __init__(self, responder: Callable[[ChatRequest], object] | str | Path, cache=None,
                 model: str | None = None):
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
        last_user = next((m.get("content") or "" for m in reversed(req.messages) if m.get("role") == "user"),
                         "")
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
        fields["server_tool_calls"] = ([] if calls is None else list(calls) if isinstance(calls, list)
                                       else [calls])
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

"""Request/result types, the client base class (cache + error accounting) and JSON parsing.

A backend implements ``_generate(requests) -> list[ChatResult]``; ``LLMClient.chat`` adds the
response cache, turns any backend exception into per-request errors and keeps the counters.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import json_repair

from tansaku.core.errors import InputError


class LLMBadJSON(InputError):
    """The model's text holds no usable JSON object (or misses required keys). Stages drop with ``llm_bad_json``."""

    reason = "llm_bad_json"


@dataclass
class ChatRequest:
    """One chat completion. ``sample_index`` tells repeated samples of the same prompt apart.

    Caching rule: a greedy request (temperature 0) is always cached. A sampled one (temperature > 0)
    is cached only when it names itself with ``seed`` or ``sample_index``; otherwise asking twice is a
    request for two different draws, and a cache would wrongly return the same text both times.
    """

    messages: list[dict]
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    json_schema: dict | None = None
    tools: list[dict] | None = None
    sample_index: int | None = None

    @property
    def cacheable(self) -> bool:
        return self.temperature == 0 or self.seed is not None or self.sample_index is not None

    def cache_key(self, model: str) -> str:
        """sha256 of a canonical JSON of everything that determines the answer; no backend in it."""
        payload = {
            "model": model,
            "messages": self.messages,
            "params": {
                "max_tokens": self.max_tokens,
                "temperature": self.temperature,
                "top_p": self.top_p,
                "seed": self.seed,
                "sample_index": self.sample_index,
            },
            "json_schema": self.json_schema,
            "tools": self.tools,
        }
        canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass
class ChatResult:
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[dict] = field(default_factory=list)
    error: str | None = None
    cached: bool = False
    finish_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("cached")
        data.pop("error")
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, cached: bool = False) -> ChatResult:
        return cls(**json.loads(text), cached=cached)


class LLMClient:
    """Base class: cache lookup, error capture and counters around a backend's ``_generate``."""

    backend = "base"

    def __init__(self, model: str, cache=None, params: dict | None = None):
        self.model = model
        self.cache = cache  # a ResponseCache or None
        self.params = dict(params or {})
        self._lock = threading.Lock()
        self._stats = {"hits": 0, "misses": 0, "errors": 0, "requests": 0}

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        raise NotImplementedError

    def chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """Answer every request, in order. Never raises for a model/server problem: see ``ChatResult.error``."""
        results: list[ChatResult | None] = [None] * len(requests)
        keys: list[str | None] = [r.cache_key(self.model) if self.cache is not None and r.cacheable else None
                                  for r in requests]
        if self.cache is not None:
            found = self.cache.get_many([k for k in keys if k is not None])
            for i, key in enumerate(keys):
                if key is not None and key in found:
                    results[i] = ChatResult.from_json(found[key], cached=True)
        todo = [i for i, r in enumerate(results) if r is None]
        if todo:
            try:
                fresh = self._generate([requests[i] for i in todo])
                if len(fresh) != len(todo):
                    raise RuntimeError(f"backend returned {len(fresh)} results for {len(todo)} requests")
            except Exception as exc:  # a crashed batch becomes per-request errors, never an aborted build
                fresh = [ChatResult(error=f"{type(exc).__name__}: {exc}") for _ in todo]
            for i, result in zip(todo, fresh):
                results[i] = result
            if self.cache is not None:
                self.cache.put_many(
                    [(keys[i], results[i].to_json()) for i in todo if keys[i] is not None and results[i].ok]
                )
        with self._lock:
            self._stats["requests"] += len(requests)
            self._stats["hits"] += len(requests) - len(todo)
            self._stats["misses"] += len(todo)
            self._stats["errors"] += sum(1 for i in todo if not results[i].ok)
        return results  # type: ignore[return-value]

    def cache_stats(self) -> dict:
        with self._lock:
            return dict(self._stats)

    def describe(self) -> dict:
        return {"backend": self.backend, "model": self.model, "params": self.params,
                "cache": str(self.cache.path) if self.cache is not None else None}

    def close(self) -> None:
        """Release connections/threads; the client is unusable afterwards."""


_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def normalize_tool_call(call: dict) -> dict:
    """``{"type": "function", "function": {"name", "arguments": dict}}``; string arguments are JSON-decoded."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = parse_json(args) if args.strip() else {}
        except LLMBadJSON:
            pass  # keep the raw text so a reward/validator can judge it
    return {"type": "function", "function": {"name": fn.get("name", ""), "arguments": args}}


def split_assistant_text(text: str) -> tuple[str, str | None, list[dict]]:
    """Split generated text into (content, reasoning, tool_calls) for ``<think>``/``<tool_call>`` models."""
    reasoning = None
    match = _THINK.match(text)
    if match:
        reasoning, text = match.group(1).strip(), text[match.end():]
    tool_calls = []
    for raw in _TOOL_CALL.findall(text):
        try:
            tool_calls.append(normalize_tool_call(parse_json(raw)))
        except LLMBadJSON:
            tool_calls.append({"type": "function", "function": {"name": "", "arguments": raw}})
    if tool_calls:
        text = _TOOL_CALL.sub("", text)
    return text.strip(), reasoning, tool_calls


def parse_json(text: str, schema: dict | None = None) -> dict:
    """The JSON object in a model's text, repaired with json-repair (fences, trailing commas, cut-offs).

    Raises ``LLMBadJSON`` (with an excerpt of the text) when there is no object, or when ``schema``
    lists ``required`` keys that are missing.
    """

    if not isinstance(text, str):
        raise LLMBadJSON(f"expected model text, got {type(text).__name__}")
    body = _THINK.sub("", text, count=1)
    start = body.find("{")
    if start < 0:
        raise LLMBadJSON(f"no JSON object in model output: {_excerpt(text)!r}")
    try:  # valid JSON first: fast, and the first object wins when chatter or a second object follows
        value: Any = json.JSONDecoder().raw_decode(body, start)[0]
    except json.JSONDecodeError:
        try:
            value = json_repair.repair_json(body[start:], return_objects=True)
        except Exception as exc:  # json-repair gives up on some inputs by raising
            raise LLMBadJSON(f"unrepairable JSON ({exc}): {_excerpt(text)!r}") from exc
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]  # several objects in a row: the first is the answer, the rest is chatter
    if not isinstance(value, dict):
        raise LLMBadJSON(f"model output is not a JSON object: {_excerpt(text)!r}")
    missing = [k for k in (schema or {}).get("required", []) if k not in value]
    if missing:
        raise LLMBadJSON(f"JSON misses required keys {missing}: {_excerpt(text)!r}")
    return value


def _excerpt(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"…(+{len(text) - limit} chars)"

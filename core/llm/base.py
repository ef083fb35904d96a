"""Request/result types and the client base class (cache + error accounting).

A backend implements ``_generate(requests) -> list[ChatResult]``; ``LLMClient.chat`` adds the
response cache, turns any backend exception into per-request errors and keeps the counters.
A backend returns the text the model generated as it is: it parses and repairs nothing. Reading that
text (reasoning, tool calls, JSON answers) is ``tansaku.core.parsing``'s job, the one parser.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass, field

# Re-exported: code that reads JSON answers imports them from the LLM layer (tansaku.core.llm).
from tansaku.core.parsing import LLMBadJSON, parse_json  # noqa: F401


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
        """sha256 of a canonical JSON of everything that determines the answer. ``model``: the client's
        ``cache_identity()`` (weights, server identity, backend settings) as text."""
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
    """One completion.

    ``content``: the text the model generated, as generated (``<think>`` and ``<tool_call>`` blocks
    included, nothing repaired); ``tansaku.core.parsing`` reads it. ``server_reasoning`` /
    ``server_tool_calls``: what an OpenAI-compatible server's own reasoning / tool-call parser already took
    out of that text (vLLM ``--reasoning-parser`` / ``--tool-call-parser``), as the server sent it (tool
    calls in wire form, arguments as JSON text); empty for backends that generate locally.
    """

    content: str = ""
    server_reasoning: str | None = None
    server_tool_calls: list[dict] = field(default_factory=list)
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
    def from_json(cls, text: str, cached: bool = False) -> ChatResult | None:
        """A cached result; None for an entry that must not be reused (the request is generated again).

        Entries written before backends returned raw text (keys ``reasoning``/``tool_calls``) may hold tool
        calls a backend repaired: one with tool calls is not reused; one without keeps its text, and its
        reasoning counts as split off by the server.
        """
        data = json.loads(text)
        if "tool_calls" in data or "reasoning" in data:
            if data.pop("tool_calls", None):
                return None
            data["server_reasoning"] = data.pop("reasoning", None)
        return cls(**data, cached=cached)


class LLMClient:
    """Base class: cache lookup, error capture and counters around a backend's ``_generate``."""

    backend = "base"

    def __init__(self, model: str, cache=None, params: dict | None = None):
        self.model = model
        self.cache = cache  # a ResponseCache or None
        self.params = dict(params or {})
        self._lock = threading.Lock()
        self._stats = {"hits": 0, "misses": 0, "errors": 0, "requests": 0}
        self._identity: str | None = None

    def cache_identity(self) -> dict | str | None:
        """What, besides the request, determines the answer: the cache keys on it. None: unknown right now
        (e.g. no server answered), so this call neither reads nor writes the cache. Backends override it."""
        return self.model

    def _cache_model(self) -> str | None:
        if self._identity is None:
            identity = self.cache_identity()
            if identity is None:
                return None
            self._identity = identity if isinstance(identity, str) else json.dumps(
                identity, sort_keys=True, ensure_ascii=False, default=str)
        return self._identity

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        raise NotImplementedError

    def chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """Answer every request, in order. Never raises for a model/server problem: see ``ChatResult.error``."""
        results: list[ChatResult | None] = [None] * len(requests)
        identity = self._cache_model() if self.cache is not None else None
        keys: list[str | None] = [r.cache_key(identity) if identity is not None and r.cacheable else None
                                  for r in requests]
        if identity is not None:
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
            if identity is not None:
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

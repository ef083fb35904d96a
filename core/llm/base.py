"""Request/result types and the client base class (cache + error accounting).

A backend implements ``_generate(requests) -> list[ChatResult]``; ``LLMClient.chat`` adds the
response cache, turns any backend exception into per-request errors and keeps the counters.
A backend returns the text the model generated as it is: it parses and repairs nothing. Reading that
text (reasoning, tool calls, JSON answers) is ``tansaku.core.parsing``'s job, the one parser. The one
change ``chat`` makes: a lone surrogate in a result (an HTTP server's ``"\\ud800"``, a scripted answer)
becomes U+FFFD (``tansaku.core.jsontext``), so no cache, file or tokenizer downstream refuses the text.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

from tansaku.core import jsontext

# Re-exported: code that reads JSON answers imports them from the LLM layer (tansaku.core.llm).
from tansaku.core.parsing import LLMBadJSON, parse_json  # noqa: F401
from tansaku.core.redact import redact_mapping, redact_text

_STAGE = threading.local()


@contextmanager
def _thread_setting(name: str, value) -> Iterator[None]:
    """``value`` as this thread's ``name`` setting inside the block; the one before it afterwards."""
    before = getattr(_STAGE, name, None)
    setattr(_STAGE, name, value)
    try:
        yield
    finally:
        setattr(_STAGE, name, before)


def llm_stage(name: str | None):
    """Calls made by this thread inside the block are counted for pipeline stage ``name`` too
    (``LLMClient.stage_stats``: the build's progress line per LLM stage)."""
    return _thread_setting("name", name)


def current_stage() -> str | None:
    return getattr(_STAGE, "name", None)


def llm_priority(priority):
    """Requests this thread makes inside the block wait for a server slot by ``priority`` (smaller first), not
    by arrival (``tansaku.core.llm.gate``). A streaming stage sets :func:`record_rank`, so that a record's
    earlier calls, those with the most calls still to come after them, go first. None: unranked."""
    return _thread_setting("priority", priority)


def current_priority():
    return getattr(_STAGE, "priority", None)


def record_rank(stage: int, chunk: int, key: tuple) -> tuple:
    """The priority of a record's requests in the ``stage``-th stage of a streaming segment: (stage, turn,
    chunk, key), earlier stages first, then earlier turns (:func:`llm_turn`), then input order."""
    return (stage, 0, chunk, key)


@contextmanager
def llm_turn(turn: int) -> Iterator[None]:
    """Requests this thread makes inside the block rank as the ``turn``-th call of the record's current stage
    (an agent episode's turn): ``record_rank``'s turn replaced. Unranked requests stay unranked."""
    rank = current_priority()
    with llm_priority(None if rank is None else (rank[0], turn, *rank[2:])):
        yield


def in_callers_priority(fn):
    """``fn`` wrapped to run, on whatever thread calls it, under this thread's ``llm_priority``: for work a
    record's call hands to a thread pool (an agent's episodes)."""
    priority = current_priority()

    def wrapped(*args, **kwargs):
        with llm_priority(priority):
            return fn(*args, **kwargs)

    return wrapped


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
        canonical = jsontext.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
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
    tokens: int | None = None  # completion tokens, when the backend says (the progress line's tokens/s)
    prompt_tokens: int | None = None  # prompt tokens, when the backend says (a judge's cost)
    # Mean per-token entropy (nats) of the model's next-token distribution over the generated tokens, at
    # temperature 1 — what TRL logs as ``entropy``; local backends only (None elsewhere).
    entropy: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("cached")
        data.pop("error")
        return jsontext.dumps(data)

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


def _without_lone_surrogates(result: ChatResult) -> ChatResult:
    """``result`` with each lone surrogate in its texts and tool calls replaced by U+FFFD (itself when none).
    Values of the wrong type stay as they are: the parser counts them as the model's mistakes."""
    if not isinstance(result, ChatResult):
        return result
    fields = {name: jsontext.clean_text(value) for name in ("content", "server_reasoning", "error")
              if isinstance(value := getattr(result, name), str) and jsontext.LONE_SURROGATE.search(value)}
    calls, changed = jsontext.scrub(result.server_tool_calls) if result.server_tool_calls else (None, 0)
    if changed:
        fields["server_tool_calls"] = calls
    return replace(result, **fields) if fields else result


def _with_redacted_error(result: ChatResult) -> ChatResult:
    """``result`` with its error text redacted: errors name the endpoint (``http://user:pass@host``), and they
    end up in rejected rows, trajectories and logs."""
    if not isinstance(result, ChatResult) or not isinstance(result.error, str):
        return result
    error = redact_text(result.error)
    return result if error == result.error else replace(result, error=error)


class LLMClient:
    """Base class: cache lookup, error capture and counters around a backend's ``_generate``.

    ``slots``: how many requests the backend serves at once when they arrive one by one (an HTTP server pool);
    a streaming runner keeps that many records in flight (``tansaku.core.streaming``). None: it answers
    batch by batch, in call order (local engines, scripted answers). ``large_batches``: give it as many
    requests per call as there are (vLLM offline schedules them itself).
    """

    backend = "base"
    slots: int | None = None
    large_batches = False
    counts_in_flight_itself = False  # True: the backend counts what is really on the wire (HTTP slots)

    def __init__(self, model: str, cache=None, params: dict | None = None):
        self.model = model
        self.cache = cache  # a ResponseCache or None
        self.params = dict(params or {})
        self._lock = threading.Lock()
        self._stats = {"hits": 0, "misses": 0, "errors": 0, "requests": 0, "tokens": 0, "in_flight": 0}
        self._identity: str | None = None
        self._by_stage: dict[str, dict] = {}  # the same counters per pipeline stage (llm_stage)

    def cache_identity(self) -> dict | str | None:
        """What, besides the request, determines the answer: the cache keys on it. None: unknown right now
        (e.g. no server answered), so this call neither reads nor writes the cache. Backends override it."""
        return self.model

    def _cache_model(self) -> str | None:
        if self._identity is None:
            identity = self.cache_identity()
            if identity is None:
                return None
            self._identity = identity if isinstance(identity, str) else jsontext.dumps(
                identity, sort_keys=True, default=str)
        return self._identity

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        raise NotImplementedError

    def chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        """Answer every request, in order. Never raises for a model/server problem: see
        ``ChatResult.error``."""
        results: list[ChatResult | None] = [None] * len(requests)
        stage = current_stage()
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
            if not self.counts_in_flight_itself:
                self._count_in_flight(len(todo), stage)
            try:
                fresh = self._generate([requests[i] for i in todo])
                if len(fresh) != len(todo):
                    raise RuntimeError(f"backend returned {len(fresh)} results for {len(todo)} requests")
            except Exception as exc:  # a crashed batch becomes per-request errors, never an aborted build
                fresh = [ChatResult(error=f"{type(exc).__name__}: {exc}") for _ in todo]
            finally:
                if not self.counts_in_flight_itself:
                    self._count_in_flight(-len(todo), stage)
            for i, result in zip(todo, fresh):
                results[i] = _with_redacted_error(_without_lone_surrogates(result))
            # tool calls a callable nested past the bound stay out (json would recurse)
            if identity is not None:
                self.cache.put_many(
                    [(keys[i], results[i].to_json()) for i in todo if keys[i] is not None and results[i].ok
                     and not jsontext.depth_exceeds(results[i].server_tool_calls, jsontext.MAX_DEPTH)]
                )
        counts = {"requests": len(requests), "hits": len(requests) - len(todo), "misses": len(todo),
                  "errors": sum(1 for i in todo if not results[i].ok),
                  "tokens": sum(results[i].tokens or 0 for i in todo)}
        with self._lock:
            for table in self._tables(stage):
                for key, n in counts.items():
                    table[key] += n
        return results  # type: ignore[return-value]

    def _tables(self, stage: str | None) -> list[dict]:
        """The counters a call updates: the client's, and its stage's (call with the lock held)."""
        if stage is None:
            return [self._stats]
        if stage not in self._by_stage:
            self._by_stage[stage] = dict.fromkeys(self._stats, 0)
        return [self._stats, self._by_stage[stage]]

    def _count_in_flight(self, n: int, stage: str | None = None) -> None:
        """Requests handed to the backend (+n) or answered (-n): the progress line's in-flight count."""
        with self._lock:
            for table in self._tables(stage):
                table["in_flight"] += n

    def stage_stats(self, stage: str) -> dict:
        """Requests, cache hits, tokens and requests in flight of the calls made inside
        ``llm_stage(stage)``."""
        with self._lock:
            return dict(self._by_stage.get(stage) or dict.fromkeys(self._stats, 0))

    def cache_stats(self) -> dict:
        with self._lock:
            return dict(self._stats)

    def describe(self) -> dict:
        """The client as manifests and reports record it (no URL password, key or query:
        ``tansaku.core.redact``)."""
        return redact_mapping({"backend": self.backend, "model": self.model, "params": self.params,
                               "cache": str(self.cache.path) if self.cache is not None else None})

    def close(self) -> None:
        """Release connections/threads; the client is unusable afterwards."""

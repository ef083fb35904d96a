"""OpenAI-compatible HTTP backend (vLLM / SGLang / ``transformers serve`` / any endpoint).

Spec: ``http:MODEL@URL[,URL…]`` (URL is the server root or its ``/v1``; ``user:pass@host`` URLs work) or
``http:MODEL`` (the server is ``OPENAI_BASE_URL``). Keys: ``api_key`` (one key, or one per base URL) or
``--api-key`` as given; else ``OPENAI_API_KEY``, but only to the endpoint it pairs with in the ``openai``
client (``OPENAI_BASE_URL``, default api.openai.com); any other endpoint gets ``EMPTY``
(``settings.key_for``). Requests go out concurrently through ``openai.AsyncOpenAI`` on a private event loop in
a background thread, so the sync ``chat()`` also works when called from code that already runs an event loop.

The client's CPU per request is what caps a synthesis build at hundreds of slots (``bench/llm_http.py``), so:
the transport is the client's ``DefaultAioHttpClient`` (the ``openai[aiohttp]`` extra, which the openai
README recommends for concurrency; ``DefaultAsyncHttpxClient`` where aiohttp is missing) with one kept-alive
connection per slot, and the body goes out through the client's own ``post("/chat/completions")`` (its
documented way to send a body as it is) instead of ``chat.completions.create``, whose per-request type walk
over the messages cost ~3 ms of CPU per agent turn and changes nothing in a body of plain JSON values. The
JSON answer is read as it came (no pydantic models): ``tests/test_llm_http.py`` checks that the body on the
wire is the one ``create`` sends and the result the one it gave.

- at most ``max_concurrency`` requests in flight *per endpoint* (its slots: a gate per base URL; the
  default is ``--concurrency`` or 64), so the client's ``slots`` are that times the endpoints; a request goes
  to the open endpoint with the fewest requests assigned (round-robin among equals), so a slow server is
  not handed more than its share; when the slots are full, the request with the most calls still after it
  (an earlier stage or agent turn) gets the next one (``llm_priority``, set by a streaming stage;
  ``tansaku.core.llm.gate``), not the first to arrive;
- retries on 408/429/5xx, timeouts and connection errors, with exponential backoff and full jitter;
  a retry goes to the next base URL, so a dead server is skipped; a server's ``Retry-After`` (as the
  ``openai`` client reads it) keeps requests off that server for that long, and they fail over meanwhile;
- ``extra_body`` goes into every request body (vLLM's ``chat_template_kwargs``, ``guided_json``, ``top_k``…);
- the cache keys on the model id plus what the servers say they serve (``GET /v1/models``: vLLM's ``root``
  is the weights path), or on the endpoints when they say nothing, plus ``extra_body``: a new checkpoint
  served under the same ``--served-model-name`` is never answered from the old one's cache;
- base URLs are used round-robin, which is how synthesis scales out over several GPU servers;
- ``json_schema`` is sent as ``response_format={"type": "json_schema", …}`` (vLLM/SGLang guided
  decoding); pass ``structured_output=False`` for servers that reject it (``transformers serve``);
- the result keeps what the server sent: ``content`` as it is, and what the server's own reasoning /
  tool-call parsers took out of the text in ``server_reasoning`` / ``server_tool_calls`` (wire form).
  Nothing is parsed or repaired here: a server without those parsers hands back the raw text, which
  ``tansaku.core.parsing`` reads.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib.util
import itertools
import random
import threading
import time
import urllib.parse
import weakref

from tansaku.core.errors import InputError
from tansaku.core.redact import redact_text

from .base import ChatRequest, ChatResult, LLMClient, current_priority, current_stage
from .gate import PriorityGate
from .settings import api_base, key_for

RETRY_STATUS = {408, 429}
DEFAULT_SLOTS = 64  # requests in flight per endpoint unless --concurrency / max_concurrency says otherwise
MAX_RETRY_AFTER = 120.0  # a server asking for longer than this is treated as down for that long, no more


def retry_after_seconds(headers) -> float | None:
    """Seconds a response asks the client to wait (``retry-after-ms``, ``retry-after`` seconds or date)."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            return max(0.0, float(headers.get(name)) / divisor)
        except (TypeError, ValueError):
            continue
    parsed = email.utils.parsedate_tz(headers.get("retry-after") or "")
    return max(0.0, email.utils.mktime_tz(parsed) - time.time()) if parsed else None


class HTTPClient(LLMClient):
    backend = "http"
    counts_in_flight_itself = True  # in flight = holding an endpoint slot, not waiting for one

    def __init__(
        self,
        model: str,
        base_urls: list[str] | str,
        cache=None,
        max_concurrency: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        api_key: str | dict[str, str] | None = None,
        structured_output: bool = True,
        extra_body: dict | None = None,
    ):
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise InputError("HTTP backend needs at least one base URL")
        self.base_urls = [api_base(u) for u in urls]
        max_concurrency = max_concurrency or DEFAULT_SLOTS
        if max_concurrency < 1:
            raise InputError(f"max_concurrency must be at least 1, got {max_concurrency}")
        super().__init__(model, cache, params={
            "base_urls": [redact_text(u) for u in self.base_urls], "max_concurrency": max_concurrency,
            "timeout": timeout, "max_retries": max_retries, "structured_output": structured_output,
            "extra_body": extra_body,
        })
        self.max_concurrency = max_concurrency
        self.slots = max_concurrency * len(self.base_urls)  # records a streaming stage keeps in flight
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.api_keys = [key_for(u, api_key) for u in self.base_urls]
        self.structured_output = structured_output
        self.extra_body = extra_body
        self.retries = 0  # total retried attempts, for reports
        self._rr = itertools.count()
        self._not_before = [0.0] * len(self.base_urls)  # monotonic time each server's Retry-After ends
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._clients: list = []  # filled on the loop, once; closed with it
        self._finalizer: weakref.finalize | None = None
        self._gates: list[PriorityGate] = []  # one per endpoint: its slots, earliest stage first
        self._assigned = [0] * len(self.base_urls)  # requests handed to each endpoint and not answered yet
        self._start_lock = threading.Lock()

    # --- event loop in a background thread -------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="tansaku-llm-http", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                # Also at exit for a client nobody closed: aiohttp warns about each session left open.
                self._finalizer = weakref.finalize(self, _shut_down, loop, thread, self._clients)
        return self._loop

    def _generate(self, requests: list[ChatRequest]) -> list[ChatResult]:
        future = asyncio.run_coroutine_threadsafe(
            self.achat_uncached(requests, current_stage(), current_priority()), self._ensure_loop())
        return future.result()

    def _ensure_clients(self) -> None:
        if not self._clients:
            import openai  # openai: not at --help

            # Created inside the loop that uses them: async pools belong to one loop. max_retries=0: retrying
            # is done here, across servers (the openai client would retry the same one). A connection per
            # slot stays open: the default keeps 100, so at more slots each answer would close one.
            # type(...): the client's own Limits class (httpx's or httpx2's, by openai version).
            limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
                max_connections=max(self.max_concurrency, openai.DEFAULT_CONNECTION_LIMITS.max_connections),
                max_keepalive_connections=self.max_concurrency)
            has_aiohttp = importlib.util.find_spec("aiohttp") is not None
            for url, key in zip(self.base_urls, self.api_keys):
                transport = _transport(openai, url, has_aiohttp)
                self._clients.append(openai.AsyncOpenAI(
                    base_url=url, api_key=key, timeout=self.timeout, max_retries=0,
                    http_client=transport(limits=limits, timeout=self.timeout)))
            self._gates = [PriorityGate(self.max_concurrency) for _ in self.base_urls]

    async def achat_uncached(self, requests: list[ChatRequest], stage: str | None = None,
                             priority=None) -> list[ChatResult]:
        """Async entry (no cache): must run on this client's loop, as ``chat`` arranges. ``stage``: whose
        requests these are (``llm_stage``), for the in-flight counts; ``priority``: their rank for a slot
        (``llm_priority``)."""
        self._ensure_clients()
        return list(await asyncio.gather(*(self._one(r, stage, priority) for r in requests)))

    # --- cache identity ---------------------------------------------------------------------------
    async def _served_roots(self) -> tuple[int, list[str]]:
        """(servers that answered ``/v1/models``, the ``root`` each reports for this model id)."""
        self._ensure_clients()
        answered, roots = 0, set()
        for client in self._clients:
            try:
                listing = await client.with_options(timeout=min(self.timeout, 10.0)).models.list()
            except Exception:  # noqa: BLE001 - a server without /v1/models or down: it reports nothing
                continue
            answered += 1
            for entry in listing.data:
                root = getattr(entry, "root", None) or (entry.model_extra or {}).get("root")
                if entry.id == self.model and root:
                    roots.add(str(root))
        return answered, sorted(roots)

    def cache_identity(self) -> dict | None:
        answered, roots = asyncio.run_coroutine_threadsafe(self._served_roots(), self._ensure_loop()).result()
        if not answered:
            return None  # nobody to ask what is served: neither read nor write the cache this time
        served = {"roots": roots} if roots else {"endpoints": sorted(redact_text(u) for u in self.base_urls)}
        return {"backend": self.backend, "model": self.model, **served, "extra_body": self.extra_body,
                "structured_output": self.structured_output}

    def _body(self, req: ChatRequest) -> dict:
        """The request body, as ``chat.completions.create(**fields, extra_body=…)`` would send it."""
        body = {"model": self.model, "messages": req.messages, "max_tokens": req.max_tokens,
                "temperature": req.temperature, "top_p": req.top_p}
        if req.seed is not None:
            body["seed"] = req.seed
        if req.tools:
            body["tools"] = req.tools
        if req.json_schema is not None and self.structured_output:
            body["response_format"] = {
                "type": "json_schema", "json_schema": {"name": "response", "schema": req.json_schema},
            }
        return {**body, **self.extra_body} if self.extra_body else body

    async def _one(self, req: ChatRequest, stage: str | None = None, priority=None) -> ChatResult:
        import openai  # openai: not at --help

        body = self._body(req)
        last_error = ""
        index = next(self._rr)  # round-robin start; each retry moves to the following URL
        for attempt in range(self.max_retries + 1):
            index = await self._next_open(index if attempt == 0 else index + 1, least_busy=attempt == 0)
            client = self._clients[index]
            self._assigned[index] += 1
            try:
                async with self._gates[index].held(priority):
                    self._count_in_flight(+1, stage)
                    try:
                        # cast_to=object: the parsed JSON as it came (the text when the server sent no JSON)
                        response = await client.post("/chat/completions", body=body, cast_to=object)
                    finally:
                        self._count_in_flight(-1, stage)
                return _to_result(response)
            except openai.APIStatusError as exc:
                last_error = f"HTTP {exc.status_code} from {client.base_url}: {_short(exc.message)}"
                if exc.status_code not in RETRY_STATUS and exc.status_code < 500:
                    return ChatResult(error=last_error)  # a bad request stays bad: do not retry
                wait = retry_after_seconds(getattr(exc.response, "headers", None))
                if wait:
                    slot = index % len(self._clients)
                    self._not_before[slot] = max(self._not_before[slot],
                                                 time.monotonic() + min(wait, MAX_RETRY_AFTER))
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                last_error = f"{type(exc).__name__} at {client.base_url}: {_short(str(exc))}"
            except Exception as exc:  # malformed response body and the like
                return ChatResult(error=f"{type(exc).__name__}: {_short(str(exc))}")
            finally:
                self._assigned[index] -= 1
            if attempt < self.max_retries:
                self.retries += 1
                # full jitter: spreads the retries of many concurrent requests over the window
                await asyncio.sleep(random.uniform(0,
                                                   min(self.backoff_max, self.backoff_base * 2 ** attempt)))
        return ChatResult(error=f"gave up after {self.max_retries + 1} attempts: {last_error}")

    async def _next_open(self, start: int, least_busy: bool = False) -> int:
        """The first server from ``start`` on whose Retry-After has ended (with ``least_busy``: of those, the
        one with the fewest requests assigned); when none has, wait for the earliest one (the server asked
        for it) rather than hammer it."""
        count = len(self._not_before)
        now = time.monotonic()
        open_ = [(start + step) % count for step in range(count)
                 if self._not_before[(start + step) % count] <= now]
        if open_:
            return min(open_, key=lambda i: self._assigned[i]) if least_busy else open_[0]
        soonest = min(range(count), key=lambda i: self._not_before[i])
        await asyncio.sleep(max(0.0, self._not_before[soonest] - now))
        return soonest

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._loop = self._thread = self._finalizer = None
        self._clients = []

    def describe(self) -> dict:
        out = super().describe()
        out["retries"] = self.retries
        return out


def _to_result(response) -> ChatResult:
    """A chat completion's JSON as a result; values keep their types (the parser judges odd ones)."""
    if not isinstance(response, dict):
        return ChatResult(error=f"server sent no JSON object: {_short(str(response))}")
    choices = response.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        return ChatResult(error="server returned no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        return ChatResult(error=f"server sent a choice without a message: {_short(str(choice))}")
    # vLLM/transformers send `reasoning_content`; newer vLLM `reasoning` (both are extra fields).
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    tokens, prompt_tokens = usage.get("completion_tokens"), usage.get("prompt_tokens")
    return ChatResult(content=message.get("content") or "", server_reasoning=reasoning,
                      server_tool_calls=message.get("tool_calls") or [],
                      finish_reason=choice.get("finish_reason"), tokens=tokens if isinstance(tokens, int)
                      else None, prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None)


def _shut_down(loop: asyncio.AbstractEventLoop, thread: threading.Thread, clients: list) -> None:
    """Close the clients' connections on their loop, then stop the loop and its thread."""
    async def close_all():
        for client in clients:
            await client.close()

    if clients and loop.is_running():
        asyncio.run_coroutine_threadsafe(close_all(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def _transport(openai, url: str, aiohttp: bool):
    """The client's aiohttp transport, or its httpx one where aiohttp is missing or the URL carries
    ``user:pass@``: httpx sends those as basic auth in place of the key, aiohttp refuses the pair."""
    credentials = urllib.parse.urlsplit(url).username is not None
    return openai.DefaultAioHttpClient if aiohttp and not credentials else openai.DefaultAsyncHttpxClient


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"

"""A fast OpenAI-compatible server with canned answers, for client tests and the HTTP benchmark.

It is a real HTTP server (FastAPI + uvicorn), so clients are exercised over real sockets. The last
user message steers it, which makes failure injection deterministic per request:

- ``fail=N`` : the first N attempts at this exact message get HTTP 500 (``status=429`` changes the code);
- ``sleep=S``: wait S seconds before answering (for concurrency and timeout tests);
- ``retry_after=S``: injected failures carry ``Retry-After: S``; ``only=NAME``: only server NAME injects them;
- otherwise it answers at once. The answer is ``"<server name>: <message>"``, or
  ``{"server": …, "echo": …}`` when ``response_format`` asks for JSON.

A served model instead (the throughput benchmark and the streaming tests): ``responder`` answers each
request like a ``scripted:`` function (it gets a ``ChatRequest``, returns text or a message dict), after a
``latency`` drawn from a seeded distribution keyed by the request (``fixed:0.5``, ``lognormal:0.5,0.8``,
``lognormal:0.5,0.8,tail:0.01,20``: 1% of requests 20× slower), at most ``slots`` at a time (vLLM's
``--max-num-seqs``: the rest wait in a queue).

``GET /stats`` returns the request count, the highest number of requests in flight at once, the number
of failures served, the summed latency served (``busy_seconds``), the time of the first and last answer,
``repeated``: requests whose exact body the server had received before, and ``repeated_answered_at``: for
each, ``[when it came again, when the server had answered it]`` (the latter is the time of the repeat when it
never had: it was still in flight); ``GET /stats/last`` the last chat request's headers and body (auth and
``extra_body`` tests), where a credential header (``Authorization``, ``Cookie``, any name with ``key``,
``token``, ``secret``…) shows only :func:`secret_fingerprint` of its value: any local user can read that
route, so it never echoes a key. ``GET /v1/models`` lists the server's model with ``root`` (vLLM reports the
weights path there) when the server was started with one.
Run: ``python -m tansaku.testing.canned_server --port 8001 --name a``.

It lives in ``tansaku.testing``, not ``tansaku.core``: it is scaffolding that stands in for a served model,
and no product code may import it. It still ships in the wheel, since installed users run it: the judge of the
``rl-tiny-mixed`` recipe and ``examples/stand_in_llm.py`` (``--responder``) are served by it.
"""


import argparse
import asyncio
import hashlib
import importlib
import importlib.util
import math
import random
import re
import socket
import threading
import time
import urllib.request

from tansaku.core import jsontext

_DIRECTIVE = re.compile(r"\b(fail|sleep|status|retry_after)=([0-9.]+)")
_ONLY = re.compile(r"\bonly=(\w+)")
# Header names that carry credentials: /stats/last shows a fingerprint of their values, never the values.
_SECRET_HEADER = re.compile(r"auth|cookie|key|token|secret|passw|session|credential", re.IGNORECASE)


def secret_fingerprint(value: str) -> str:
    """What ``/stats/last`` shows of a credential header: enough for a test to tell which key came, not the
    key.

    >>> empty = secret_fingerprint("Bearer EMPTY")
    >>> empty == secret_fingerprint("Bearer EMPTY") != secret_fingerprint("Bearer sk")
    True
    """
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def recorded_headers(headers) -> dict[str, str]:
    """A request's headers as ``/stats/last`` returns them: credential values replaced by their fingerprint.

    >>> headers = {"Authorization": "Bearer sk-secret", "content-type": "application/json"}
    >>> recorded_headers(headers)["content-type"]
    'application/json'
    >>> "sk-secret" in str(recorded_headers({"Authorization": "Bearer sk-secret", "X-Api-Key": "sk-secret"}))
    False
    """
    return {name: secret_fingerprint(value) if _SECRET_HEADER.search(name) else value
            for name, value in dict(headers).items()}


def parse_latency(spec: str | None):
    """``fixed:S`` | ``lognormal:MEDIAN,SIGMA[,tail:SHARE,FACTOR]`` → ``seconds(key)``, the same for the
    same key.

    >>> parse_latency("fixed:0.25")("any")
    0.25
    >>> f = parse_latency("lognormal:0.5,0.8"); f("a") == f("a") and f("a") != f("b")
    True
    """
    if not spec:
        return lambda key: 0.0
    kind, _, args = spec.partition(":")
    values = [a for a in args.replace("tail:", "").split(",") if a]
    if kind == "fixed":
        return lambda key: float(values[0])
    if kind != "lognormal" or len(values) not in (2, 4):
        raise ValueError(f"latency {spec!r}: use fixed:S or lognormal:MEDIAN,SIGMA[,tail:SHARE,FACTOR]")
    median, sigma = float(values[0]), float(values[1])
    share, factor = (float(values[2]), float(values[3])) if len(values) == 4 else (0.0, 1.0)

    def seconds(key: str) -> float:
        rng = random.Random(hashlib.sha256(key.encode()).digest())
        draw = median * math.exp(sigma * rng.gauss(0.0, 1.0))
        return draw * factor if rng.random() < share else draw

    return seconds


def load_responder(target: str):
    """``module:function`` (or ``path/file.py:function``) → the function."""
    module, _, name = target.rpartition(":")
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"canned_responder_{abs(hash(module))}", module)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return getattr(loaded, name)
    return getattr(importlib.import_module(module), name)


def _served_message(responder, body: dict) -> dict:
    """The responder's answer to one request body as an OpenAI message."""
    from tansaku.core.llm.base import ChatRequest
    from tansaku.core.llm.scripted import _as_result

    schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema")
    request = ChatRequest(messages=body["messages"], max_tokens=body.get("max_tokens") or 512,
                          temperature=body.get("temperature", 0.0), top_p=body.get("top_p", 1.0),
                          seed=body.get("seed"), json_schema=schema, tools=body.get("tools"))
    result = _as_result(responder(request))
    message = {"role": "assistant", "content": result.content}
    if result.server_reasoning:
        message["reasoning_content"] = result.server_reasoning
    if result.server_tool_calls:  # wire form: arguments as JSON text, every call with an id
        # wire or flat form
        calls = [(call, call.get("function") or call) for call in result.server_tool_calls]
        message["tool_calls"] = [
            {"id": call.get("id") or f"call_{i}", "type": "function",
             "function": {"name": fn.get("name", ""), "arguments": _as_text(fn.get("arguments", "{}"))}}
            for i, (call, fn) in enumerate(calls)]
    return message


def _as_text(arguments) -> str:
    return arguments if isinstance(arguments, str) else jsontext.dumps(arguments)


def _fresh_state() -> dict:
    """The server's counters and records, as ``/stats`` shows them (``/stats/reset`` puts them back)."""
    return {"requests": 0, "in_flight": 0, "max_in_flight": 0, "failures": 0, "attempts": {}, "last": {},
            "busy_seconds": 0.0, "first_at": None, "last_at": None, "repeated": 0, "seen": set(),
            "answered": {}, "repeated_answered_at": [], "served": []}


class _CannedChat:
    """What ``/v1/chat/completions`` does: note the request, then answer it with the ``responder`` (a served
    model) or with the canned echo and its injected failures."""

    def __init__(self, name: str, responder, latency: str | None, slots: int | None):
        self.name, self.responder, self.slots = name, responder, slots
        self.delay = parse_latency(latency)
        self.semaphore: asyncio.Semaphore | None = None
        self.state = _fresh_state()

    async def answer(self, body: dict, headers) -> dict:
        state = self.state
        state["last"] = {"headers": recorded_headers(headers), "body": body}
        state["requests"] += 1
        key = jsontext.dumps(body, sort_keys=True)
        if key in state["seen"]:
            state["repeated"] += 1
            state["repeated_answered_at"].append([time.time(), state["answered"].get(key, time.time())])
        state["seen"].add(key)
        state["first_at"] = state["first_at"] or time.time()
        if self.responder is not None:
            message = await self.served(body, key)
            state["last_at"] = state["answered"][key] = time.time()
            return {"id": f"cmpl-{state['requests']}", "object": "chat.completion",
                    "created": int(time.time()), "model": body.get("model", self.name),
                    "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": max(1, len(message["content"])),
                              "total_tokens": 1 + max(1, len(message["content"]))}}
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        try:
            return await self.canned(body)
        finally:
            state["in_flight"] -= 1

    async def served(self, body: dict, key: str) -> dict:
        """The responder's message after the request's latency, at most ``slots`` requests at a time."""
        if self.slots and self.semaphore is None:  # made inside the server's own event loop
            self.semaphore = asyncio.Semaphore(self.slots)
        if self.semaphore is not None:
            await self.semaphore.acquire()
        state = self.state
        try:
            state["in_flight"] += 1
            state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
            seconds, began = self.delay(key), time.time()
            await asyncio.sleep(seconds)
            state["busy_seconds"] += seconds
            state["served"].append([began, time.time()])
            return _served_message(self.responder, body)
        finally:
            state["in_flight"] -= 1
            if self.semaphore is not None:
                self.semaphore.release()

    async def canned(self, body: dict):
        """The echo of the last user message, or the failure its directives inject (module docstring)."""
        from fastapi.responses import JSONResponse

        state = self.state
        last = next((m.get("content") or "" for m in reversed(body["messages"]) if m["role"] == "user"), "")
        directives = dict(_DIRECTIVE.findall(str(last)))
        if "sleep" in directives:
            await asyncio.sleep(float(directives["sleep"]))
        attempt = state["attempts"].get(last, 0) + 1
        state["attempts"][last] = attempt
        only = _ONLY.search(str(last))
        if attempt <= int(directives.get("fail", 0)) and (only is None or only.group(1) == self.name):
            state["failures"] += 1
            code = int(directives.get("status", 500))
            headers = {"Retry-After": directives["retry_after"]} if "retry_after" in directives else None
            return JSONResponse({"error": {"message": f"injected failure {attempt}"}}, status_code=code,
                                headers=headers)
        if body.get("response_format", {}).get("type") in ("json_schema", "json_object"):
            content = jsontext.dumps({"server": self.name, "echo": last})
        else:
            content = f"{self.name}: {last}"
        return {
            "id": f"cmpl-{state['requests']}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", self.name),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }


def build_app(name: str = "canned", root: str | None = None, served_model: str = "canned", responder=None,
              latency: str | None = None, slots: int | None = None):
    """The FastAPI app of one canned server (see the module docstring for the routes)."""
    from fastapi import FastAPI, Request

    app = FastAPI()
    chats = _CannedChat(name, responder, latency, slots)
    state = chats.state

    @app.get("/health")
    async def health():
        return {"ok": True}

    @app.get("/stats")
    async def stats():
        return {k: v for k, v in state.items() if k not in ("attempts", "last", "seen", "answered", "served")}

    @app.get("/stats/served")
    async def served_spans():
        return state["served"]  # [start, end] of every answer served (the benchmark's in-flight timeline)

    @app.get("/stats/last")
    async def last_request():
        return state["last"]

    @app.get("/v1/models")
    async def models():
        entry = {"id": served_model, "object": "model", "created": int(time.time()), "owned_by": name}
        return {"object": "list", "data": [{**entry, "root": root} if root else entry]}

    @app.post("/stats/reset")
    async def reset():
        state.update(_fresh_state())
        return {"ok": True}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        answer = await chats.answer(body, request.headers)
        return sse_response(answer) if body.get("stream") and isinstance(answer, dict) else answer

    return app


def sse_response(completion: dict):
    """A chat completion as the stream an OpenAI-compatible server sends for ``"stream": true`` (verifiers'
    clients ask for one): the whole message as one delta (tool calls indexed), the finish reason, the usage,
    then ``[DONE]``."""
    from fastapi.responses import StreamingResponse

    [choice] = completion["choices"]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(delta["tool_calls"])]
    head = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"],
            "model": completion["model"]}
    chunks = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
              {**head, "choices": [], "usage": completion["usage"]}]
    events = "".join(f"data: {jsontext.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    return StreamingResponse(iter([events]), media_type="text/event-stream")


def wait_for_health(url: str, timeout: float = 60.0) -> None:
    """Return once ``url/health`` answers (a server started in another process); RuntimeError after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not start within {timeout:.0f} s") from None
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """Run the canned app with uvicorn in a daemon thread (``with ServerThread("a") as url: ...``)."""

    def __init__(self, name: str = "canned", port: int | None = None, root: str | None = None, **served):
        import uvicorn

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(build_app(name, root=root, **served), host="127.0.0.1", port=self.port,
                                log_level="error", backlog=4096)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"canned server on port {self.port} did not start")
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="OpenAI-compatible server with canned answers")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--name", default="canned")
    parser.add_argument("--root", default=None, help="weights path /v1/models reports (as vLLM does)")
    parser.add_argument("--responder", default=None,
                        help="module:function answering each request (scripted style)")
    parser.add_argument("--latency", default=None,
                        help="fixed:S | lognormal:MEDIAN,SIGMA[,tail:SHARE,FACTOR]")
    parser.add_argument("--slots", type=int, default=None, help="requests served at once (the rest queue)")
    args = parser.parse_args()
    responder = load_responder(args.responder) if args.responder else None
    app = build_app(args.name, root=args.root, responder=responder, latency=args.latency, slots=args.slots)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()

"""An OpenAI-compatible latency server of the bench's own, independent of ``tansaku.testing.canned_server``.

``bench/llm_throughput.py`` measures every pipeline against it as well as against the canned server, so a
finding cannot be an artefact of the project's own stand-in. It shares no code with the canned server: stdlib
``asyncio`` streams (HTTP/1.1 keep-alive), no FastAPI, no uvicorn.

- ``POST /v1/chat/completions``: at most ``--slots`` requests are served at once; the rest wait in a FIFO queue
  (as in vLLM). Each request's latency (``--latency-by``):

  - ``arrival`` (the default): drawn from ``random.Random(--seed)`` in arrival order (the i-th request to
    arrive gets the i-th draw, whatever its body), so two clients sending the same number of requests get the
    same latencies;
  - ``content``: a pure function of the request body and the seed (sha256 of both → uniforms in (0, 1) → the
    distribution's quantile), so a request gets the same latency whenever it arrives and whatever the slots:
    two runs that send the same requests in another order have the same workload. Identical bodies get
    identical latencies.

  Once a slot is free the answer is computed by ``tansaku.examples.stand_in_llm.respond``
  and the compute time is taken off the sleep: a slot is held for the drawn latency, not latency + compute.
- ``GET /v1/models``, ``GET /health``.
- ``GET /stats``: requests, failures, ``busy_seconds`` (Σ drawn latency), ``first_at`` (first request received),
  ``last_at`` (last answer sent), ``max_in_flight``; ``GET /stats/served``: ``[start, end]`` of each slot held
  (the canned server's shape); ``GET /stats/records``: ``[arrival, start, end, sent, latency]`` per request.

    python bench/latency_server.py --port 8010 --slots 64 --latency lognormal:0.5,0.8 --seed 0
    python bench/latency_server.py --port 8010 --slots 64 --latency-by content  # same body, same latency
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import statistics
import threading
import time

from tansaku.core.llm.base import ChatRequest
from tansaku.examples.stand_in_llm import respond

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


def parse_latency(spec: str):
    """``fixed:S`` | ``lognormal:MEDIAN,SIGMA[,tail:SHARE,FACTOR]`` → ``draw(rng)``, one latency in seconds.

    The tail coin is tossed only when there is a tail, so a plain lognormal draws one gauss per request, as
    ``llm_throughput.fifo_bound`` does (the bench's ``bound`` then uses the very latencies this server serves).

    >>> draw = parse_latency("lognormal:0.5,0.8"); round(draw(random.Random(0)), 4)
    1.0621
    """
    kind, _, rest = spec.partition(":")
    values = [float(v) for v in rest.replace("tail:", "").split(",") if v]
    if kind == "fixed" and len(values) == 1:
        return lambda rng: values[0]
    if kind != "lognormal" or len(values) not in (2, 4):
        raise ValueError(f"latency {spec!r}: use fixed:S or lognormal:MEDIAN,SIGMA[,tail:SHARE,FACTOR]")
    median, sigma = values[:2]
    share, factor = values[2:] if len(values) == 4 else (0.0, 1.0)

    def draw(rng: random.Random) -> float:
        seconds = median * math.exp(sigma * rng.gauss(0.0, 1.0))
        return seconds * factor if share and rng.random() < share else seconds

    return draw


def parse_quantile(spec: str):
    """The same spec as :func:`parse_latency` → ``seconds(u, v)``: the latency at quantile ``u`` of the
    lognormal, times the tail factor when ``v`` < the tail share (``u``, ``v`` uniform in (0, 1)).

    >>> seconds = parse_quantile("lognormal:0.5,0.8"); seconds(0.5, 0.5)
    0.5
    >>> parse_quantile("lognormal:0.5,0.8,tail:0.01,20")(0.5, 0.001)
    10.0
    """
    kind, _, rest = spec.partition(":")
    values = [float(v) for v in rest.replace("tail:", "").split(",") if v]
    if kind == "fixed" and len(values) == 1:
        return lambda u, v: values[0]
    if kind != "lognormal" or len(values) not in (2, 4):
        raise ValueError(f"latency {spec!r}: use fixed:S or lognormal:MEDIAN,SIGMA[,tail:SHARE,FACTOR]")
    median, sigma = values[:2]
    share, factor = values[2:] if len(values) == 4 else (0.0, 1.0)
    normal = statistics.NormalDist()

    def seconds(u: float, v: float) -> float:
        drawn = median * math.exp(sigma * normal.inv_cdf(u))
        return drawn * factor if v < share else drawn

    return seconds


def content_latency(spec: str, seed: int = 0):
    """``spec`` → ``latency(body)``: a pure function of the request body (its canonical JSON) and ``seed``.

    >>> latency = content_latency("lognormal:0.5,0.8")
    >>> body = {"messages": [{"role": "user", "content": "a"}]}
    >>> latency(body) == latency(json.loads(json.dumps(body))) != latency({"messages": []})
    True
    """
    seconds = parse_quantile(spec)

    def latency(body: dict) -> float:
        text = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{seed}\n{text}".encode()).digest()
        # Two independent uniforms, strictly inside (0, 1): the quantile and the tail coin.
        u, v = ((int.from_bytes(digest[i:i + 8], "big") + 0.5) / 2 ** 64 for i in (0, 8))
        return seconds(u, v)

    return latency


def answer(body: dict) -> dict:
    """The stand-in model's answer to one request body, as an OpenAI assistant message."""
    schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema")
    request = ChatRequest(messages=body["messages"], max_tokens=body.get("max_tokens") or 512,
                          temperature=body.get("temperature", 0.0), top_p=body.get("top_p", 1.0),
                          seed=body.get("seed"), json_schema=schema, tools=body.get("tools"))
    value = respond(request)
    if isinstance(value, str):
        return {"role": "assistant", "content": value}
    message = {"role": "assistant", "content": value.get("content") or ""}
    reasoning = value.get("reasoning") or value.get("reasoning_content")
    if reasoning:
        message["reasoning_content"] = reasoning
    calls = value.get("tool_calls")
    if calls:  # the responder writes them flat ({"name", "arguments"}); the wire wants ids and JSON text
        calls = calls if isinstance(calls, list) else [calls]
        message["tool_calls"] = [
            {"id": call.get("id") or f"call_{i}", "type": "function",
             "function": {"name": fn.get("name", ""),
                          "arguments": args if isinstance(args := fn.get("arguments", "{}"), str)
                          else json.dumps(args, ensure_ascii=False)}}
            for i, (call, fn) in enumerate((c, c.get("function") or c) for c in calls)]
    return message


class LatencyServer:
    """The server's state and handlers; ``await serve(port)`` runs it on the current event loop."""

    def __init__(self, slots: int, latency: str, seed: int = 0, model: str = "canned", by: str = "arrival"):
        if by not in ("arrival", "content"):
            raise ValueError(f"latency by {by!r}: use arrival or content")
        self.slots, self.model, self.by = slots, model, by
        self.draw, self.rng = parse_latency(latency), random.Random(seed)
        self.by_content = content_latency(latency, seed)
        self.gate: asyncio.Semaphore | None = None  # made in the serving loop
        self.records: list[list[float]] = []  # [arrival, start, end, sent, latency], in the order answered
        self.requests = self.failures = self.in_flight = self.max_in_flight = 0
        self.first_at: float | None = None

    def stats(self) -> dict:
        return {"requests": self.requests, "failures": self.failures, "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight, "busy_seconds": sum(r[4] for r in self.records),
                "first_at": self.first_at, "last_at": max((r[3] for r in self.records), default=None)}

    async def chat(self, body: dict) -> tuple[int, dict, list]:
        arrival = time.time()
        self.requests += 1
        self.first_at = self.first_at or arrival
        # Drawn now, so arrival-order draws follow arrival order, not slot order.
        latency = self.by_content(body) if self.by == "content" else self.draw(self.rng)
        async with self.gate:
            start = time.time()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                status, message = 200, answer(body)
            except Exception as exc:  # a prompt the stand-in has no answer for: the client sees a 500
                self.failures += 1
                status, message = 500, {"error": {"message": f"{type(exc).__name__}: {exc}"}}
            # The compute already held the slot: sleep only what is left of the drawn latency.
            await asyncio.sleep(max(0.0, latency - (time.time() - start)))
            self.in_flight -= 1
            end = time.time()
        if status != 200:
            return status, message, [arrival, start, end, end, latency]
        content = message["content"]
        reply = {"id": f"cmpl-{self.requests}", "object": "chat.completion", "created": int(end),
                 "model": body.get("model", self.model),
                 "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": max(1, len(content)),
                           "total_tokens": 1 + max(1, len(content))}}
        return 200, reply, [arrival, start, end, end, latency]

    async def route(self, method: str, path: str, body: bytes) -> tuple[int, object, list | None]:
        if method == "POST" and path == "/v1/chat/completions":
            try:
                parsed = json.loads(body)
            except ValueError:
                return 400, {"error": {"message": "body is not JSON"}}, None
            return await self.chat(parsed)
        if method == "GET" and path == "/health":
            return 200, {"ok": True}, None
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0,
                                                     "owned_by": "latency_server"}]}, None
        if method == "GET" and path == "/stats":
            return 200, self.stats(), None
        if method == "GET" and path == "/stats/served":
            return 200, [[r[1], r[2]] for r in self.records], None
        if method == "GET" and path == "/stats/records":
            return 200, self.records, None
        return 404, {"error": {"message": f"no route {method} {path}"}}, None

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: requests one after another (HTTP/1.1 keep-alive) until it closes."""
        try:
            while True:
                line = await reader.readline()
                if not line.strip():
                    break
                method, target, *_ = line.decode("latin-1").split()
                headers = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    key, _, value = header.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                if "chunked" in headers.get("transfer-encoding", ""):
                    body = b""
                    while size := int((await reader.readline()).split(b";")[0], 16):
                        body += await reader.readexactly(size)
                        await reader.readline()
                    await reader.readline()
                else:
                    body = await reader.readexactly(int(headers.get("content-length", 0)))
                status, payload, record = await self.route(method, target.split("?")[0], body)
                data = json.dumps(payload, ensure_ascii=False).encode()
                close = headers.get("connection", "").lower() == "close"
                writer.write(f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(data)}\r\nConnection: {'close' if close else 'keep-alive'}"
                             "\r\n\r\n".encode() + data)
                await writer.drain()
                if record is not None:
                    record[3] = time.time()  # the answer is sent: the end of the bench's span
                    self.records.append(record)
                if close:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; what it was sent is already recorded
        finally:
            writer.close()

    async def serve(self, port: int, started: threading.Event | None = None) -> None:
        self.gate = asyncio.Semaphore(self.slots)
        server = await asyncio.start_server(self.connection, "127.0.0.1", port, backlog=4096)
        self.port = server.sockets[0].getsockname()[1]
        if started is not None:
            started.set()
        async with server:
            await server.serve_forever()


def serve_in_thread(slots: int, latency: str, seed: int = 0, by: str = "arrival") -> tuple[str, LatencyServer]:
    """Start a server on a free port in a daemon thread (tests); → (its URL, the server)."""
    server, started = LatencyServer(slots, latency, seed, by=by), threading.Event()
    threading.Thread(target=lambda: asyncio.run(server.serve(0, started)), daemon=True).start()
    if not started.wait(20):
        raise RuntimeError("latency server did not start")
    return f"http://127.0.0.1:{server.port}", server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8010)
    parser.add_argument("--slots", type=int, default=64, help="requests served at once (the rest queue)")
    parser.add_argument("--latency", default="lognormal:0.5,0.8", help="fixed:S | lognormal:MEDIAN,SIGMA[,tail:SHARE,FACTOR]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-by", choices=["arrival", "content"], default="arrival",
                        help="arrival: the i-th request gets the i-th draw; content: a function of the body")
    args = parser.parse_args()
    asyncio.run(LatencyServer(args.slots, args.latency, args.seed, by=args.latency_by).serve(args.port))


if __name__ == "__main__":
    main()

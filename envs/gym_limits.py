"""What makes ``synth serve-env`` safe to expose: the size of a request body, the bearer token and who a
client is, and how often ``/verify`` may spend judge calls. ``tansaku.envs.gym_service.build_app`` wires these
in; the episode bounds are ``tansaku.envs.gym_episodes``, the per-field caps ``tansaku.envs.gym_bodies``.

- A request body over ``Limits.max_body_bytes`` is 413, judged from ``Content-Length`` before a byte is read
  and counted while it streams (a chunked body declares no length), so no body over the limit is ever held
  whole.
- With a token (``--token`` or ``$TANSAKU_ENV_TOKEN``; several: repeat ``--token``, or separate them by spaces
  in the variable), every path but ``/health`` needs ``Authorization: Bearer <token>`` (401 otherwise), and
  the token is the client. Without one the client is the remote address, and only a loopback host may be bound
  (``check_exposure``: one line, exit 2).
- With a judge, ``/verify`` takes a token from two buckets (the server's and the client's) and is 429 with
  ``Retry-After`` when either is empty.

    TANSAKU_ENV_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe())') \\
        synth serve-env --task multihop_qa --index out/index --host 0.0.0.0
    curl -H "Authorization: Bearer $TANSAKU_ENV_TOKEN" -c jar -X POST HOST:8010/seed_session -d @row.json

>>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
(True, True, True, False)
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from tansaku.core import jsontext
from tansaku.core.errors import InputError

TOKEN_ENV = "TANSAKU_ENV_TOKEN"
MIN_TOKEN_CHARS = 16  # token_urlsafe() gives 43; anything this short is guessable, not a secret
OPEN_PATHS = frozenset({"/health"})  # what a load balancer probes without a token
CLIENT_KEY = "tansaku.client"  # the ASGI scope key BearerAuth names the client under
MAX_RATE_CLIENTS = 4_096  # per-client judge buckets kept (least recently used dropped: it comes back full)


@dataclass(frozen=True)
class Limits:
    """serve-env's limits beyond ``max_episodes`` / ``idle_seconds`` (``build_app``'s own parameters).

    Sized so that a NeMo Gym rollout (a row of a few KB, a Responses API rollout of a few hundred KB) never
    meets
    them, and so the memory a client can pin is known: each live episode keeps its row as compact JSON, at
    most ``max_row_bytes``."""

    max_body_bytes: int = 4 << 20  # any request body → 413
    max_text_chars: int = 16_384  # one string: a query, a doc id, a keyword, a row's field → 422
    max_row_bytes: int = 64 << 10  # a row as compact JSON: what a live episode keeps → 422
    max_response_bytes: int = 2 << 20  # /verify's ``response`` as JSON → 422
    max_client_episodes: int = 4_096  # live episodes of one client → 429 (all of them: max_episodes → 503)
    judge_rate: float = 20.0  # /verify calls per second that may reach the judge, whole server
    judge_client_rate: float = 10.0  # the same, per client
    judge_burst_s: float = 30.0  # each bucket holds this many seconds of its rate

    def __post_init__(self):
        for f in fields(self):
            if not getattr(self, f.name) > 0:
                raise InputError(f"serve-env limit {f.name} must be positive, not {getattr(self, f.name)!r}")


class Refused(HTTPException):
    """A request a limit refuses: ``status`` with ``{"error": reason}`` and its headers (``Retry-After``
    …)."""


def refused_response(_request: Request, exc: Refused) -> JSONResponse:
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


# ---------------------------------------------------------------- exposure and the bearer token


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` reaches this machine only. A name other than ``localhost`` counts as exposed:
    what it resolves to may change."""
    bare = host.strip().strip("[]").lower()
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def resolve_tokens(given: str | Sequence[str] | None,
                   environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The bearer tokens: ``given``, else ``$TANSAKU_ENV_TOKEN`` split on whitespace. A short one is refused
    without echoing it (the message names only its length rule)."""
    values = [given] if isinstance(given, str) else list(given or [])
    if not any(v.strip() for v in values):
        values = environ.get(TOKEN_ENV, "").split()
    tokens = tuple(dict.fromkeys(v.strip() for v in values if v.strip()))
    if any(len(t) < MIN_TOKEN_CHARS for t in tokens):
        raise InputError(f"a serve-env token must be at least {MIN_TOKEN_CHARS} characters; make one with "
                         "python -c 'import secrets; print(secrets.token_urlsafe())'")
    return tokens


def check_exposure(host: str, tokens: Sequence[str]) -> None:
    """Refuse to serve a non-loopback ``host`` without a token: anyone who reached it could seed, call tools,
    close episodes and spend judge calls."""
    if not tokens and not is_loopback(host):
        raise InputError(f"--host {host} is reachable from other machines: set {TOKEN_ENV} (or --token) to a "
                         f"secret of {MIN_TOKEN_CHARS}+ characters, or serve on 127.0.0.1")


class BearerAuth:
    """ASGI middleware: every path but ``OPEN_PATHS`` needs ``Authorization: Bearer <one of tokens>`` (401
    otherwise, before the body is read); the matching token's number names the client in the scope."""

    def __init__(self, app, tokens: Sequence[str]):
        self.app, self._tokens = app, [t.encode() for t in tokens]

    def _match(self, scope) -> int | None:
        header = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        found = None
        # every token compared: the time says nothing of which matched
        for i, token in enumerate(self._tokens):
            if hmac.compare_digest(given.strip(), token):
                found = i
        return found

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            found = self._match(scope)
            if found is None and scope["path"] not in OPEN_PATHS:
                response = JSONResponse({"error": "this server needs Authorization: Bearer <token>"},
                                        status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
            if found is not None:
                scope[CLIENT_KEY] = f"token {found}"
        await self.app(scope, receive, send)


def client_of(request: Request) -> str:
    """Who sent ``request``: its token's number when the server has tokens, else its remote address (behind a
    proxy: the proxy's, so every client is one)."""
    return request.scope.get(CLIENT_KEY) or (request.client.host if request.client else "unknown")


# ---------------------------------------------------------------- request bodies


async def read_bounded(request: Request, limit: int) -> bytes:
    """The body of ``request``, or 413 as soon as it is known to exceed ``limit`` bytes."""
    too_large = Refused(413, f"request body over {limit} bytes (--max-body-bytes)")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise Refused(400, "Content-Length is not a byte count")
        if int(declared) > limit:
            raise too_large  # nothing read: the client may still be sending, uvicorn drops the rest
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # a chunked body, or one longer than it declared
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


class BoundedJSONRequest(Request):
    """A request whose body is read by :func:`read_bounded` (at most ``max_bytes``) and whose JSON
    ``tansaku.core.jsontext.loads`` reads: nesting over ``jsontext.MAX_DEPTH`` is refused (FastAPI answers
    422, as for any invalid JSON) before ``json`` recurses into it, and a lone surrogate (``"\\ud800"``) reads
    as U+FFFD, so no tool, reward or answer meets text it cannot encode."""

    max_bytes: int = Limits.max_body_bytes

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            self._body = await read_bounded(self, self.max_bytes)
        return self._body

    async def json(self):
        if not hasattr(self, "_json"):
            self._json = jsontext.loads(await self.body())
        return self._json


class BoundedJSONRoute(APIRoute):
    """The routes of the app: each reads its body as a :class:`BoundedJSONRequest` under the app's
    ``state.limits``."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            bounded_request = BoundedJSONRequest(request.scope, request.receive)
            bounded_request.max_bytes = request.app.state.limits.max_body_bytes
            return await handler(bounded_request)

        return bounded


# ---------------------------------------------------------------- the judge's rate


class JudgeRate:
    """Token buckets for ``/verify`` calls that reach the judge: one for the server, one per client. Each
    holds ``rate × burst_s`` (at least 1) and refills at ``rate`` per second; safe across threads.

    >>> rate = JudgeRate(Limits(judge_rate=1.0, judge_client_rate=1.0, judge_burst_s=1.0), clock=lambda: 0.0)
    >>> rate.take("a"), rate.take("a") > 0
    (0.0, True)
    """

    def __init__(self, limits: Limits, clock=time.monotonic):
        self.rate, self.client_rate, self.burst_s, self._clock = (limits.judge_rate, limits.judge_client_rate,
                                                                  limits.judge_burst_s, clock)
        self._overall: tuple[float, float] | None = None  # (tokens, when); None: full
        self._clients: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _level(self, state: tuple[float, float] | None, rate: float, now: float) -> float:
        capacity = max(1.0, rate * self.burst_s)
        return capacity if state is None else min(capacity, state[0] + (now - state[1]) * rate)

    def take(self, client: str) -> float:
        """0.0 when ``client`` may call the judge now (a token taken from both buckets), else the seconds
        until it may (nothing taken)."""
        with self._lock:
            now = self._clock()
            overall = self._level(self._overall, self.rate, now)
            mine = self._level(self._clients.get(client), self.client_rate, now)
            if overall < 1 or mine < 1:
                return max((1 - overall) / self.rate, (1 - mine) / self.client_rate)
            self._overall = (overall - 1, now)
            self._clients[client] = (mine - 1, now)
            self._clients.move_to_end(client)
            if len(self._clients) > MAX_RATE_CLIENTS:
                self._clients.popitem(last=False)
            return 0.0

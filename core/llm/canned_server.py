"""A fast OpenAI-compatible server with canned answers, for client tests and the HTTP benchmark.

It is a real HTTP server (FastAPI + uvicorn), so clients are exercised over real sockets. The last
user message steers it, which makes failure injection deterministic per request:

- ``fail=N`` : the first N attempts at this exact message get HTTP 500 (``status=429`` changes the code);
- ``sleep=S``: wait S seconds before answering (for concurrency and timeout tests);
- ``retry_after=S``: injected failures carry ``Retry-After: S``; ``only=NAME``: only server NAME injects them;
- otherwise it answers at once. The answer is ``"<server name>: <message>"``, or
  ``{"server": …, "echo": …}`` when ``response_format`` asks for JSON.

``GET /stats`` returns the request count, the highest number of requests in flight at once and the
number of failures served; ``GET /stats/last`` the last chat request's headers and body (auth and
``extra_body`` tests). ``GET /v1/models`` lists the server's model with ``root`` (vLLM reports the weights
path there) when the server was started with one. Run: ``python -m tansaku.core.llm.canned_server --port 8001 --name a``.
"""


import argparse
import asyncio
import json
import re
import socket
import threading
import time

_DIRECTIVE = re.compile(r"\b(fail|sleep|status|retry_after)=([0-9.]+)")
_ONLY = re.compile(r"\bonly=(\w+)")


def build_app(name: str = "canned", root: str | None = None, served_model: str = "canned"):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()
    state = {"requests": 0, "in_flight": 0, "max_in_flight": 0, "failures": 0, "attempts": {}, "last": {}}

    @app.get("/health")
    async def health():
        return {"ok": True}

    @app.get("/stats")
    async def stats():
        return {k: v for k, v in state.items() if k not in ("attempts", "last")}

    @app.get("/stats/last")
    async def last_request():
        return state["last"]

    @app.get("/v1/models")
    async def models():
        entry = {"id": served_model, "object": "model", "created": int(time.time()), "owned_by": name}
        return {"object": "list", "data": [{**entry, "root": root} if root else entry]}

    @app.post("/stats/reset")
    async def reset():
        state.update(requests=0, in_flight=0, max_in_flight=0, failures=0, attempts={}, last={})
        return {"ok": True}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        state["last"] = {"headers": dict(request.headers), "body": body}
        state["requests"] += 1
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        try:
            last = next((m.get("content") or "" for m in reversed(body["messages"]) if m["role"] == "user"), "")
            directives = dict(_DIRECTIVE.findall(str(last)))
            if "sleep" in directives:
                await asyncio.sleep(float(directives["sleep"]))
            attempt = state["attempts"].get(last, 0) + 1
            state["attempts"][last] = attempt
            only = _ONLY.search(str(last))
            if attempt <= int(directives.get("fail", 0)) and (only is None or only.group(1) == name):
                state["failures"] += 1
                code = int(directives.get("status", 500))
                headers = {"Retry-After": directives["retry_after"]} if "retry_after" in directives else None
                return JSONResponse({"error": {"message": f"injected failure {attempt}"}}, status_code=code,
                                    headers=headers)
            if body.get("response_format", {}).get("type") in ("json_schema", "json_object"):
                content = json.dumps({"server": name, "echo": last}, ensure_ascii=False)
            else:
                content = f"{name}: {last}"
            return {
                "id": f"cmpl-{state['requests']}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", name),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        finally:
            state["in_flight"] -= 1

    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """Run the canned app with uvicorn in a daemon thread (``with ServerThread("a") as url: ...``)."""

    def __init__(self, name: str = "canned", port: int | None = None, root: str | None = None):
        import uvicorn

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(build_app(name, root=root), host="127.0.0.1", port=self.port, log_level="error")
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
    args = parser.parse_args()
    uvicorn.run(build_app(args.name, root=args.root), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

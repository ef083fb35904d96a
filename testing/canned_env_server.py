"""A canned environment server speaking serve-env's routes, with faults on request, for remote-environment
tests.

``/seed_session`` answers a fresh ``episode_id`` (interface 0, variant 0); a tool call (``/search``,
``/open_doc``) answers ``{"output": "canned: <query>", "failed": false}`` unless its query (or doc_id) asks
for a
fault: ``sleep=S`` waits S seconds first (client timeouts), ``status=N`` answers HTTP N with a JSON error
(4xx, 5xx), ``toolerror`` answers a tool's own failure (``failed: true``), ``die`` closes the connection
without an answer (a server that died mid-episode). ``/verify`` answers ``reward`` 0.5. Standard library only
(it stands in for a server on another machine).

    with CannedEnvServer() as url: RemoteEnvironmentFactory(url)().search("status=503")
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_FAULT = re.compile(r"(sleep=(?P<sleep>[0-9.]+)|status=(?P<status>[0-9]{3})|(?P<toolerror>toolerror)|"
                    r"(?P<die>die))")


class _Handler(BaseHTTPRequestHandler):
    ids = itertools.count(1)

    def log_message(self, *args) -> None:  # quiet: tests read results, not access logs
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        route = self.path.strip("/")
        self.server.requests.append((route, body, self.headers.get("X-Episode-Id")))
        if route == "seed_session":
            return self._answer(200,
                                {"episode_id": f"ep{next(self.ids)}", "tool_variant": 0, "tool_interface": 0})
        if route == "verify":
            return self._answer(200, {"reward": 0.5, "reward_components": {"answer_reward": 1.0}})
        text = str(body.get("query", body.get("doc_id", "")))
        fault = _FAULT.search(text)
        if fault and fault["sleep"]:
            time.sleep(float(fault["sleep"]))
        elif fault and fault["status"]:
            return self._answer(int(fault["status"]), {"error": f"canned status {fault['status']}"})
        elif fault and fault["toolerror"]:
            return self._answer(200, {"output": str({"error": "canned tool error"}), "failed": True})
        elif fault and fault["die"]:
            self.close_connection = True
            self.connection.close()
            return None
        return self._answer(200, {"output": f"canned: {text}", "failed": False})


class CannedEnvServer:
    """The canned server in a daemon thread on a free port; ``requests``: (route, body, episode id)
    received."""

    def __init__(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.requests = []
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def requests(self) -> list:
        return self.server.requests

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

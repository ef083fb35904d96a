"""Killable search workers: the embedded backend runs a query that may take long in a child process that is
killed at the query's deadline, so a timed-out query stops using CPU (a thread running tantivy cannot be
stopped: before, such queries ran on in a thread pool after their caller had given up, and the queries
after them waited behind that work and timed out too).

    workers = QueryWorkers("out/index", identity=index_identity("out/index"))
    hits = workers.search(canonical, limit=40, timeout_ms=2000)  # [(score, DocAddress)], or QueryError
    workers.close()

``EmbeddedBackend`` makes one pool per opened index, on its first query that ``cost.py`` does not let run
inline. A worker is ``python -c … serve(INDEX_DIR)`` (``worker_process``), niced (:data:`WORKER_NICE`, so
the cheap queries the backend answers in the caller's thread keep the CPU while expensive ones run); it opens
the index read-only, says ``{"ready": identity}`` and answers one JSON line per request line. Waiting for a
free worker, and for a new one to be ready, counts against the deadline (a query that waited past it never
runs; a request carries the wall-clock time its query's deadline falls at, so a worker that reads it late
answers ``expired`` without running it). At the deadline the worker running the query is killed and a
fresh one is started in its place.
Workers exit when their pool is closed or collected (an idle one at once, one running a query when its
query ends), or when the parent process ends (end of stdin).
Uses ``select.poll`` on pipes: POSIX only, as the rest of the toolkit.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import tantivy

from tansaku.core import jsontext

from .dsl import QueryError

WORKER_NICE = 10
# One per core but one — that core stays for the cheap queries the backend answers in the caller's thread
# (bench/search_flood.py, 2 cores: normal p99 under a flood 1.35× idle with one worker, 2.0–2.2× with two) —
# and at most this many.
MAX_WORKERS = 8


def index_identity(index_dir: str | Path) -> str:
    """Digest of tantivy's ``meta.json``: it lists the segments, so a rebuilt index has another one."""
    path = Path(index_dir) / "meta.json"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def timeout_error(timeout_ms: int) -> QueryError:
    return QueryError(f"query: took longer than the {timeout_ms} ms timeout; use fewer or more specific "
                      f"clauses")


class _Worker:
    def __init__(self, index_dir: Path):
        code = "import sys; from tansaku.envs.search.worker_process import serve; serve(sys.argv[1])"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)))
        # stderr goes nowhere: errors come back as JSON lines; a killed worker has nothing to say.
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(index_dir)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.buf, self.ready = b"", False

    def send(self, message: dict) -> None:
        self.proc.stdin.write(jsontext.dumps(message).encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def receive(self, deadline: float) -> dict | None:
        """The next message, or None once ``deadline`` (monotonic) has passed; EOFError when it died."""
        fd = self.proc.stdout.fileno()
        poll = select.poll()  # not select.select: it fails on descriptors past 1024
        poll.register(fd, select.POLLIN)
        while b"\n" not in self.buf:
            if not poll.poll(max(0.0, deadline - time.monotonic()) * 1000):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:  # a flush into the dead worker's pipe
                pass


class QueryWorkers:
    """A pool of worker processes for one index; ``search`` is thread-safe."""

    def __init__(self, index_dir: str | Path, identity: str, max_workers: int | None = None):
        self.index_dir, self.identity = Path(index_dir), identity
        self.max_workers = max_workers or max(1, min(MAX_WORKERS, (os.cpu_count() or 2) - 1))
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._slots = 0  # workers started or being started
        self.killed = 0  # workers stopped at a deadline (tests and benchmarks read it)
        self._closed = False
        self.pid = os.getpid()  # a forked copy of this process must not drive (or kill) these workers

    def pids(self) -> set[int]:
        with self._cond:
            return {w.proc.pid for w in self._all}

    def _spawn(self) -> _Worker:
        """A new worker in a slot already counted (started outside the lock: a fork takes a while)."""
        try:
            worker = _Worker(self.index_dir)
        except OSError as e:
            with self._cond:
                self._slots -= 1
                self._cond.notify()
            raise QueryError(f"query: could not start a search worker ({e})") from None
        with self._cond:
            closed = self._closed
            if not closed:
                self._all.add(worker)
        if closed:
            worker.kill()
            raise QueryError("query: the search index was closed")
        return worker

    def _take(self, deadline: float) -> _Worker | None:
        with self._cond:
            while True:
                if self._closed:
                    raise QueryError("query: the search index was closed")
                if self._idle:
                    return self._idle.pop()
                if self._slots < self.max_workers:
                    self._slots += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
        return self._spawn()

    def _give(self, worker: _Worker) -> None:
        """Back to the idle ones; killed instead once the pool is closed (``close`` leaves checked-out
        ones)."""
        with self._cond:
            if worker not in self._all:  # dropped meanwhile
                return
            if not self._closed:
                self._idle.append(worker)
                self._cond.notify()
                return
            self._all.discard(worker)
        worker.kill()

    def _drop(self, worker: _Worker, replace: bool) -> None:
        worker.kill()
        with self._cond:
            self._all.discard(worker)
            if not replace:
                self._slots -= 1
                self._cond.notify()
                return
        try:  # started at once in the same slot, so it is ready (or nearly) when the next query comes
            self._give(self._spawn())
        except QueryError:
            pass

    def start(self, timeout_s: float = 60.0) -> None:
        """Start a worker if there is none, and wait until every idle one is ready (a warm pool)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            waiting, self._idle = self._idle, []
        if not waiting and (worker := self._take(deadline)) is not None:
            waiting = [worker]
        error = None
        try:
            for worker in waiting:
                try:
                    self._await_ready(worker, deadline)
                except QueryError as e:  # _await_ready dropped that one; the others go back all the same
                    error = error or e
                except (EOFError, OSError, json.JSONDecodeError):  # it died before its ready line
                    self._drop(worker, replace=False)  # reaped, its slot freed
                    error = error or QueryError("query: a search worker stopped before it was ready")
        finally:
            for worker in waiting:
                self._give(worker)  # a dropped one is no longer in the pool: skipped
        if error:
            raise error

    def _await_ready(self, worker: _Worker, deadline: float) -> bool:
        """Wait for the worker's ready line; False when the deadline came first."""
        while not worker.ready:
            msg = worker.receive(deadline)
            if msg is None:
                return False
            if "error" in msg:
                self._drop(worker, replace=False)
                raise QueryError(f"query: the search worker could not open the index ({msg['error']})")
            if msg.get("ready") != self.identity:
                self._drop(worker, replace=False)
                raise QueryError(f"query: the index {self.index_dir} changed on disk since it was opened; "
                                 "open it again")
            worker.ready = True
        return True

    def search(self, canonical: dict, limit: int, timeout_ms: int) -> list[tuple[float, tantivy.DocAddress]]:
        """Top ``limit`` (score, address) of a canonical query, or QueryError at ``timeout_ms``."""
        deadline = time.monotonic() + timeout_ms / 1000
        worker = self._take(deadline)
        if worker is None:  # every worker busy until the deadline: the query never ran
            raise timeout_error(timeout_ms)
        try:
            ready = self._await_ready(worker, deadline)
            left = deadline - time.monotonic()
            if not ready or left <= 0:  # still starting, or the wait used the time up: the query never runs
                self._give(worker)  # (a starting one stays for the next query)
                raise timeout_error(timeout_ms)
            # The time actually left, as a wall-clock time (the worker's clock is time.time()).
            worker.send({"query": canonical, "limit": limit, "deadline": time.time() + left})
            msg = worker.receive(deadline)
        except (EOFError, OSError, json.JSONDecodeError):  # it died (or was killed by someone else)
            self._drop(worker, replace=True)
            raise QueryError("query: the search worker stopped unexpectedly; try again") from None
        if msg is None:  # past the deadline: stop the query (a thread could not be stopped)
            self._drop(worker, replace=True)
            with self._cond:
                self.killed += 1
            raise timeout_error(timeout_ms)
        self._give(worker)
        if "error" in msg:
            raise QueryError(f"query: {msg['error']}")
        if "expired" in msg:
            raise timeout_error(timeout_ms)
        return [(score, tantivy.DocAddress(segment, doc)) for score, segment, doc in msg["hits"]]

    def close(self) -> None:
        """Kill the idle workers; one checked out by a ``search`` in another thread is killed when it is given
        back (``_give``): killing it here would close the pipes that thread is reading."""
        if os.getpid() != self.pid:
            return
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._all.difference_update(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()


"""Persistent LLM response cache: one SQLite file (WAL), safe for threads and for several processes.

Keys are ``ChatRequest.cache_key(model)`` (sha256 of model, messages, sampling params, schema, tools),
so an answer computed through vLLM is reused by an HTTP or transformers run of the same model.
Only successful results are stored. Default file: ``$TANSAKU_CACHE/llm-cache.sqlite``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

# SQLite limits host parameters per statement (32766 on modern builds); stay well below it.
_CHUNK = 900


def default_cache_path() -> Path:
    base = Path(os.environ.get("TANSAKU_CACHE") or Path.home() / ".cache" / "tansaku")
    return base / "llm-cache.sqlite"


class ResponseCache:
    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection per thread: sqlite3 connections must not be shared across threads unguarded.
        self._local = threading.local()
        with self._conn() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, result TEXT NOT NULL, created REAL)"
            )

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # timeout: wait for another writer (thread or process) instead of failing with "database is locked"
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(self, keys: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        conn = self._conn()
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            found.update(conn.execute(f"SELECT key, result FROM responses WHERE key IN ({marks})", chunk))
        return found

    def put_many(self, items: list[tuple[str, str]]) -> None:
        if not items:
            return
        now = time.time()
        conn = self._conn()
        with conn:  # one transaction per batch: one fsync, all or nothing
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT OR REPLACE INTO responses (key, result, created) VALUES (?, ?, ?)",
                [(key, result, now) for key, result in items],
            )

    def __len__(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0]

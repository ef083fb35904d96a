"""Persistent LLM response cache: one SQLite file (WAL), safe for threads and for several processes.

Keys are ``ChatRequest.cache_key(identity)``: sha256 of the client's ``cache_identity()`` (what determines
the answer: a local model's resolved path and weights fingerprint, an HTTP server's reported weights or its
endpoints, backend settings, ``extra_body``) plus messages, every sampling parameter, schema and tools.
Only successful results are stored. Default file: ``$TANSAKU_CACHE/llm-cache.sqlite``.

The file is stamped with tansaku's SQLite ``application_id``: :func:`clear_cache` (``synth cache clear``)
empties only a file that carries it (or, for files from before the stamp, has exactly our one table).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from tansaku.core.errors import InputError

# SQLite limits host parameters per statement (32766 on modern builds); stay well below it.
_CHUNK = 900
# "TNSK": PRAGMA application_id marks a SQLite file as ours
# (https://www.sqlite.org/pragma.html#pragma_application_id)
APPLICATION_ID = 0x544E534B
_TABLE_SQL = "CREATE TABLE responses (key TEXT PRIMARY KEY, result TEXT NOT NULL, created REAL)"


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
            conn.execute(_TABLE_SQL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
            if conn.execute("PRAGMA application_id").fetchone()[0] == 0:
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # timeout: wait for another writer (thread or process) instead of failing with "database is
            # locked"
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


def _files(path: Path) -> list[Path]:
    """The cache file and SQLite's WAL/shared-memory companions, those that exist."""
    return [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]


def _owned_connection(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` once it is proven a tansaku cache; InputError otherwise (nothing touched)."""
    if not path.is_file():
        raise InputError(f"{path} is not a file")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=60, isolation_level=None)
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = [row[0] for row in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.DatabaseError:
        raise InputError(f"{path} is not a tansaku LLM cache (not an SQLite file)") from None
    if app_id != APPLICATION_ID and tables != [_TABLE_SQL]:
        conn.close()
        raise InputError(f"{path} is not a tansaku LLM cache: left as it is")
    return conn


def cache_info(path: str | os.PathLike | None = None) -> dict:
    """Path, entries and size on disk of a cache file (no file: 0 entries; nothing is created)."""
    path = Path(path) if path is not None else default_cache_path()
    if not path.exists():
        return {"path": str(path), "exists": False, "entries": 0, "bytes": 0}
    conn = _owned_connection(path)
    try:
        entries = conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    finally:
        conn.close()
    return {"path": str(path), "exists": True, "entries": entries,
            "bytes": sum(p.stat().st_size for p in _files(path))}


def clear_cache(path: str | os.PathLike | None = None) -> dict:
    """Empty a tansaku cache file (entries deleted, file compacted); anything else is refused untouched.
    The file itself stays: other processes may have it open, and deleting it under them would lose writes."""
    before = cache_info(path)
    if not before["exists"]:
        return {**before, "removed": 0}
    conn = _owned_connection(Path(before["path"]))
    try:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM responses")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return {**cache_info(before["path"]), "removed": before["entries"]}

"""The live episodes of ``synth serve-env``: bounded per client and in total, owned by the client that seeded
them, named by ids the server draws.

A full store pushes back instead of evicting: a client at ``max_client_episodes`` is 429, a store at
``max_episodes`` is 503, both with ``Retry-After`` (episodes end when their rollout verifies or closes, or
after ``idle_seconds`` without a request), so no client's seeds can end another's episodes. An episode id is
``secrets.token_urlsafe`` (unguessable), and an id names an episode only to the client that seeded it: to
anyone else it is unknown (404), so it can be neither used nor closed. An episode keeps its row as compact
JSON bytes (``tansaku.envs.gym_bodies.check_row`` bounds them), so the store holds at most ``max_episodes`` ×
(row bytes + one ``SearchEnvironment``).

    episodes = Episodes(factory, max_episodes=10_000, idle_seconds=900.0, max_client_episodes=4_096)
    episode_id, environment = episodes.seed("10.0.0.5", row, row_bytes)
    episode = episodes.get(episode_id, "10.0.0.5")  # None for any other client
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter, OrderedDict

from tansaku.core import jsontext
from tansaku.envs.gym_limits import Refused

RETRY_AFTER_S = 1  # a full store frees up as rollouts verify; the oldest expiry is only the worst case


class Episodes:
    """Per-episode state: environment, row (JSON bytes), owner, last use. Bounded and expiring; safe across
    threads."""

    def __init__(self, factory, max_episodes: int = 10_000, idle_seconds: float = 900.0,
                 max_client_episodes: int | None = None):
        self.factory, self.max_episodes, self.idle_seconds = factory, max_episodes, idle_seconds
        self.max_client_episodes = max_client_episodes or max_episodes
        self._live: OrderedDict[str, dict] = OrderedDict()  # in last-use order: the first is the idlest
        self._owned: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.started = self.expired = self.refused = 0

    def _admit(self, client: str) -> None:
        """Refuse a new episode of ``client`` when it, or the store, is full. Called with the lock held."""
        if self._owned[client] >= self.max_client_episodes:
            self.refused += 1
            raise Refused(429, f"this client has {self._owned[client]} live episodes, the most one may have "
                               "(--max-client-episodes): verify or close some first",
                          headers={"Retry-After": str(RETRY_AFTER_S)})
        if len(self._live) >= self.max_episodes:
            self.refused += 1
            raise Refused(503, f"the server holds {len(self._live)} live episodes, its most "
                               "(--max-episodes): retry later", headers={"Retry-After": str(RETRY_AFTER_S)})

    def seed(self, client: str, row: dict, row_bytes: bytes) -> tuple[str, object]:
        """A new episode of ``client`` for ``row`` (kept as ``row_bytes``): its fresh id and environment;
        429/503 (:class:`Refused`) when the client or the store is full."""
        with self._lock:
            self._sweep()
            self._admit(client)  # before building an environment: a refused flood costs no more than this
        environment = self.factory()
        environment.reset(**row)
        episode_id = secrets.token_urlsafe(24)
        with self._lock:
            self._sweep()
            self._admit(client)  # again: others may have been admitted while the environment was built
            self._live[episode_id] = {"environment": environment, "row": row_bytes, "owner": client,
                                      "used": time.monotonic(), "lock": threading.Lock()}
            self._owned[client] += 1
            self.started += 1
        return episode_id, environment

    def get(self, episode_id: str | None, client: str) -> dict | None:
        """The live episode ``episode_id`` of ``client`` (now its last use), else None."""
        with self._lock:
            self._sweep()
            episode = self._live.get(episode_id) if episode_id else None
            if episode is None or episode["owner"] != client:
                return None
            episode["used"] = time.monotonic()
            self._live.move_to_end(episode_id)
            return episode

    @staticmethod
    def row(episode: dict) -> dict:
        return jsontext.loads(episode["row"])

    def close(self, episode_id: str | None, client: str) -> bool:
        """End ``client``'s episode ``episode_id``; False when it has none of that id (another's included)."""
        with self._lock:
            episode = self._live.get(episode_id) if episode_id else None
            if episode is None or episode["owner"] != client:
                return False
            del self._live[episode_id]
            self._forget(client)
            return True

    def _forget(self, client: str) -> None:
        self._owned[client] -= 1
        # no key per client that ever came: the counter stays as small as the store
        if self._owned[client] <= 0:
            del self._owned[client]

    def _sweep(self) -> None:
        """Drop idle episodes (oldest first: the dict is in last-use order). Called with the lock held."""
        cutoff = time.monotonic() - self.idle_seconds
        while self._live:
            key, episode = next(iter(self._live.items()))
            if episode["used"] >= cutoff:
                break
            del self._live[key]
            self._forget(episode["owner"])
            self.expired += 1

    def stats(self) -> dict:
        with self._lock:
            return {"live": len(self._live), "clients": len(self._owned), "started": self.started,
                    "expired": self.expired, "refused": self.refused}

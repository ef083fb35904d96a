"""A flood of worst-case queries leaves the embedded engine usable (issue 28): the queries that time out stop
using CPU — their worker process is killed — and the normal queries after them are answered as before.

    pytest tests/test_search_flood.py -q

Before, 24 concurrent worst-case queries each reported the timeout but ran on in an 8-thread pool, and the next
queries waited behind that work and timed out too. The index here holds 10,000 short documents written with a
few common characters, where the most expensive legal query (31 ``multi_match`` with ``minimum_should_match``)
takes over a second on 2 cores: several times the 300 ms timeout of this test's backend. Assertions are on
outcomes (answers, timeouts, live processes, CPU used once the flood is over), never on how long a query took.
"""

from __future__ import annotations

import gc
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fixtures.cli_checks import pid_alive

from tansaku.envs.search import Limits, QueryError
from tansaku.envs.search.cost import INLINE_POSTINGS_PER_MS
from tansaku.envs.search.dsl import parse_request
from tansaku.envs.search.embedded import EmbeddedBackend, build_embedded
from tansaku.envs.search.workers import QueryWorkers, _Worker, index_identity

ALPHABET = "のはがをにでとも港町祭市川山"
TIMEOUT_MS = 300


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def _rows(n: int, seed: int = 0):
    rng = random.Random(seed)
    for i in range(n):
        yield {"id": f"d{i:05d}", "title": f"港町{i}", "text": _text(rng, 250) + f"灯台{i}番。", "url": None,
               "source": "flood", "meta": "{}"}


def _worst(rng: random.Random) -> dict:
    return {"bool": {"should": [{"multi_match": {"query": _text(rng, 200), "fields": ["title", "text"],
                                                 "type": "most_fields", "minimum_should_match": "50%"}}
                                for _ in range(31)]}}


def _cpu_seconds(pids) -> float:
    """CPU time of this process and of the live ``pids`` (Linux /proc)."""
    total = sum(os.times()[:2])
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    ix = tmp_path_factory.mktemp("flood") / "ix"
    build_embedded(_rows(10_000), ix, quiet=True)
    return ix


def test_flood_of_worst_case_queries_then_normal_queries_are_answered(index):
    backend = EmbeddedBackend(index, Limits(timeout_ms=TIMEOUT_MS), workers=2)
    reference = EmbeddedBackend(index, Limits(timeout_ms=0))  # no timeout: every query inline, to compare with
    normal = [{"match": {"text": "灯台12番"}}, {"match_phrase": {"text": "灯台345番"}}, "港町77 灯台",
              {"bool": {"must": [{"match_phrase": {"text": "灯台9"}}], "must_not": [{"match_phrase": {"title": "港町99"}}]}}]
    # Quick, but over the inline bound (~100 bigrams, each in most documents): it runs in a worker.
    worker_lane = {"match": {"text": _text(random.Random(1), 120)}}
    budget = INLINE_POSTINGS_PER_MS * TIMEOUT_MS
    assert backend.postings(parse_request(worker_lane, 10, backend.fields)[0]) > budget
    assert all(backend.postings(parse_request(q, 10, backend.fields)[0]) <= budget for q in normal)

    def answer(b, q):
        return [(h.doc_id, round(h.score, 4)) for h in b.search(q, 10).hits]

    want = [answer(reference, q) for q in normal]
    assert all(want)
    backend.workers().start()
    before = backend.workers().pids()

    def flood_one(seed: int):
        try:
            return backend.search(_worst(random.Random(seed)), 10)
        except QueryError as e:
            return e

    with ThreadPoolExecutor(24) as pool:
        outcomes = list(pool.map(flood_one, range(24)))
    timeouts = [o for o in outcomes if isinstance(o, QueryError)]
    assert all("longer than the 300 ms timeout" in str(e) for e in timeouts), {str(e) for e in timeouts}
    assert timeouts and backend.workers().killed >= 1  # some ran past the deadline and were stopped
    for pid in before - backend.workers().pids():
        assert not pid_alive(pid), pid  # killed and reaped, not still working
    # Right after: the normal queries (inline) are answered as before the flood ...
    assert [answer(backend, q) for q in normal] == want
    # ... and once the replacement workers are up, the worker lane answers too.
    backend.workers().start()
    assert answer(backend, worker_lane) == answer(reference, worker_lane)
    # Nothing of the flood runs on: this process and its workers sit idle.
    pids = backend.workers().pids()
    cpu = _cpu_seconds(pids)
    time.sleep(0.5)
    assert _cpu_seconds(pids) - cpu < 0.25
    backend.close()
    assert not any(pid_alive(pid) for pid in pids)


# ---- the worker pool's bookkeeping (small index: each test starts one or two workers) ------------------------

@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    ix = tmp_path_factory.mktemp("small") / "ix"
    build_embedded(_rows(50), ix, quiet=True)
    return ix


def _pool(small_index, n: int = 1) -> QueryWorkers:
    return QueryWorkers(small_index, index_identity(small_index), max_workers=n)


def _canonical(small_index) -> dict:
    return parse_request({"match": {"text": "灯台"}}, 10, EmbeddedBackend(small_index).fields)[0]


def test_request_carries_the_time_left_and_a_query_that_waited_past_it_never_runs(small_index, monkeypatch):
    pool = _pool(small_index)
    pool.start()
    [pid] = pool.pids()
    canonical, sent = _canonical(small_index), []
    send = _Worker.send
    monkeypatch.setattr(_Worker, "send", lambda self, message: (sent.append(message), send(self, message)))
    await_ready = pool._await_ready

    def slow_ready(worker, deadline):  # the wait for a free/ready worker takes 150 ms of the query's time
        time.sleep(0.15)
        return await_ready(worker, deadline)

    monkeypatch.setattr(pool, "_await_ready", slow_ready)
    t0 = time.time()
    assert pool.search(canonical, 10, 2000)  # answered
    assert sent[-1]["deadline"] <= t0 + 2.0 + 0.01  # the caller's deadline, not 2 s from after the wait
    n = len(sent)
    with pytest.raises(QueryError, match="longer than the 100 ms timeout"):
        pool.search(canonical, 10, 100)  # the wait used the 100 ms up: not sent, no worker killed
    assert len(sent) == n and pool.killed == 0 and pool.pids() == {pid}
    pool.close()


def test_start_reaps_a_worker_that_died_before_ready_and_gives_the_others_back(small_index):
    pool = _pool(small_index, 2)
    far = time.monotonic() + 60
    dead, good = pool._take(far), pool._take(far)
    dead.proc.kill()  # dies before its ready line: start reads EOF
    pool._give(dead)  # first in line: before, start stopped at it and the next one was never given back
    pool._give(good)
    with pytest.raises(QueryError, match="stopped before it was ready"):
        pool.start()
    assert dead.proc.returncode is not None  # reaped, not a zombie
    assert pool.pids() == {good.proc.pid} and pool._slots == 1 and pool._idle == [good] and good.ready
    assert pool.search(_canonical(small_index), 10, 2000)  # the pool works on
    pool.close()
    assert good.proc.returncode is not None


def test_close_leaves_a_checked_out_worker_to_its_search_and_kills_it_when_given_back(small_index):
    pool = _pool(small_index, 2)
    pool.start()
    far = time.monotonic() + 60
    busy = pool._take(far)  # as a search in another thread holds it
    idle = pool._take(far)
    pool._await_ready(idle, far)
    pool._give(idle)
    pool.close()
    assert idle.proc.returncode is not None  # the idle one at once
    assert busy.proc.poll() is None and not busy.proc.stdout.closed  # its search still reads its pipe
    assert pool._await_ready(busy, far)
    busy.send({"query": _canonical(small_index), "limit": 10, "deadline": time.time() + 2})
    assert busy.receive(far)["hits"]
    pool._give(busy)  # given back to a closed pool: killed and reaped
    assert busy.proc.returncode is not None and not pool.pids()


def test_workers_end_with_their_backends_last_reference(small_index):
    backend = EmbeddedBackend(small_index, Limits(timeout_ms=TIMEOUT_MS), workers=1)
    backend.workers().start()
    assert backend.get("d00001")["doc_id"] == "d00001" and backend.get("nope") is None
    pids = backend.workers().pids()
    gc.disable()  # no cycle collection: only reference counting may end it
    try:
        del backend
        assert pids and not any(pid_alive(pid) for pid in pids)
    finally:
        gc.enable()

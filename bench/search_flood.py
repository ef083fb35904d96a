"""Search under a flood of worst-case queries (issue 28): normal-query latency idle and while 24 callers send
the most expensive queries, for this code and for the thread-pool timeout it had before, on one index.

    python bench/search_flood.py                          # 100k generated documents (bench/search.py's corpus)
    python bench/search_flood.py --docs 20000 --seconds 10 --note "beside a background job"

Normal queries: bench/search.py's ``make_queries`` mix (match, phrase, bool) from one caller, one after
another, for ``--seconds``. Floods: 24 callers, each sending its next query as soon as the last one is
answered or refused but at most one per ``--every`` seconds (0.1: 240 worst-case queries a second offered),
started a second before the normal queries and stopped after them:

* ``issue 28``: bool.should of 31 match_phrase with slop 10 over 200 common characters (legal before);
* ``worst legal``: what the bounds still allow at the highest cost — 31 multi_match most_fields with
  minimum_should_match 50% over 200 common characters (seconds each at 100k documents on 2 cores).

``before`` is this process's emulation of the code before issue 28, on the same index: no sloppy-phrase
bound, the old inline rule (documents × query characters × 8 for phrases ≤ 1000 per ms of timeout) and the
rest in an 8-thread pool whose timed-out queries ran on (``envs/search/base.run_with_timeout``). ``after``
is ``EmbeddedBackend`` as it is: estimated postings decide inline vs. a killable, niced worker process.
The table — p50/p99 idle, p99 under flood, their ratio (target ≤ 2), normal queries that timed out, what
the flood got, and the CPU seconds spent after the flood stopped (work that ran on; for ``before`` only the
8 queries running then, the queued ones being cancelled) — is printed and written
to bench/results/search_flood.md and .json. Ratios, not absolute times, are what compare across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from search import WAC, generated_rows, make_queries  # noqa: E402 - bench/search.py's corpus and queries

from tansaku.envs.search.dsl import QueryError  # noqa: E402
from tansaku.envs.search.dsl_limits import Limits  # noqa: E402
from tansaku.envs.search.embedded import EmbeddedBackend, build_embedded  # noqa: E402

RESULTS = ROOT / "bench" / "results"
COMMON = "、のはる。とにでをあてーいたれしすンながも"  # the most frequent characters of the corpus


def flood_queries(rng_seed: int = 0) -> dict[str, list]:
    import random

    rng = random.Random(rng_seed)

    def common(n):
        return "".join(rng.choice(COMMON) for _ in range(n))

    return {
        "issue 28": [{"bool": {"should": [{"match_phrase": {"text": {"query": common(200), "slop": 10}}}
                                          for _ in range(31)]}} for _ in range(8)],
        "worst legal": [{"bool": {"should": [{"multi_match": {
            "query": common(200), "fields": ["title", "text"], "type": "most_fields",
            "minimum_should_match": "50%"}} for _ in range(31)]}} for _ in range(8)],
    }


def _old_work_bound(q: dict) -> int:
    """The inline rule before issue 28 (embedded._work_bound): query characters, × 8 in phrases."""
    (kind, body), = q.items()
    if kind in ("match", "match_phrase"):
        (_, s), = body.items()
        return len(s["query"]) * (8 if kind == "match_phrase" else 1)
    if kind == "multi_match":
        return len(body["query"]) * len(body["fields"]) * (8 if body["type"] == "phrase" else 1)
    if kind == "terms":
        return sum(len(v) for k, v in body.items() if k != "boost")
    if kind == "bool":
        return sum(_old_work_bound(c) for occ in ("must", "should", "must_not", "filter") for c in body[occ])
    return 1


class ThreadPoolTimeout:
    """What ``run_with_timeout`` did: wait for a pool thread up to the timeout; the work itself runs on."""

    def __init__(self, backend: EmbeddedBackend):
        self.backend, self.pool = backend, ThreadPoolExecutor(8, thread_name_prefix="search")

    def search(self, canonical, limit, timeout_ms):
        b = self.backend
        future = self.pool.submit(lambda: b.searcher.search(b.translate(canonical), limit, count=False).hits)
        try:
            return future.result(timeout=timeout_ms / 1000)
        except FutureTimeout:
            raise QueryError(f"query: took longer than the {timeout_ms} ms timeout") from None


class BeforeBackend(EmbeddedBackend):
    def __init__(self, index_dir):
        super().__init__(index_dir, Limits(max_sloppy_phrases=10**6, max_slop_work=10**9))
        self.pool = ThreadPoolTimeout(self)

    def postings(self, canonical, budget=None):  # × 2: the old rule allowed 1000 per ms, cost.py 2000
        return 2 * self.searcher.num_docs * _old_work_bound(canonical)

    def workers(self):
        return self.pool


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def normal_latencies(backend, queries: list, seconds: float) -> tuple[list[float], int]:
    """(ms of each answered normal query, timed-out ones) over ``seconds`` of back-to-back calls."""
    lat, timeouts, stop, i = [], 0, time.perf_counter() + seconds, 0
    while time.perf_counter() < stop:
        q = queries[i % len(queries)]
        i += 1
        t0 = time.perf_counter()
        try:
            backend.search(q, 10)
            lat.append((time.perf_counter() - t0) * 1000)
        except QueryError:
            timeouts += 1
    return lat, timeouts


def cpu_seconds(pids=()) -> float:
    total = sum(os.times()[:2])  # this process, every thread
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except FileNotFoundError:
            pass
    return total


def worker_pids(backend) -> set[int]:
    return getattr(backend.workers(), "pids", set)()


def under_flood(backend, normal: list, flood: list, seconds: float, callers: int = 24, every: float = 0.1) -> dict:
    stop, outcomes = threading.Event(), Counter()

    def caller(k: int):
        i = k
        while not stop.is_set():
            sent = time.perf_counter()
            try:
                backend.search(flood[i % len(flood)], 10)
                outcomes["answered"] += 1
            except QueryError as e:
                outcomes["timed out" if "timeout" in str(e) else "refused"] += 1
            i += 1
            # The next one as soon as this one returns, but no sooner than ``every`` after the last: a refusal
            # takes microseconds, and 24 threads refusing in a tight loop measure Python's lock, not search.
            stop.wait(max(0.0, sent + every - time.perf_counter()))

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(callers)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    lat, timeouts = normal_latencies(backend, normal, seconds)
    stop.set()
    for t in threads:
        t.join()
    # Work left running once every caller has its answer: the old pool drains its queue; the workers that ran
    # past a deadline were killed (their replacements' start-up is not counted: measured once they are up).
    if not isinstance(backend, BeforeBackend):
        backend.workers().start()
    c0, t0 = cpu_seconds(worker_pids(backend)), time.perf_counter()
    if isinstance(backend, BeforeBackend):  # the queued ones are dropped: only the 8 running ones finish
        backend.pool.pool.shutdown(wait=True, cancel_futures=True)
        backend.pool = ThreadPoolTimeout(backend)
    else:
        time.sleep(0.5)
    run_on = cpu_seconds(worker_pids(backend)) - c0
    return {"lat": lat, "timeouts": timeouts, "flood": dict(outcomes), "run_on_cpu_s": run_on,
            "run_on_wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=15.0, help="of normal queries per measurement")
    ap.add_argument("--every", type=float, default=0.1, help="seconds between one flooding caller's queries, at least")
    ap.add_argument("--note", default="", help="how the machine was loaded, written with the results")
    args = ap.parse_args()
    if not WAC.exists():
        sys.exit(f"{WAC} is absent: this benchmark needs ../shared/data")
    rows = list(generated_rows(args.docs))
    normal = [q for trio in zip(*make_queries(rows, 300).values()) for q in trio]
    floods = flood_queries()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        build_embedded(iter(rows), Path(tmp) / "ix", ["category"], quiet=True)
        for name, backend in (("before", BeforeBackend(Path(tmp) / "ix")), ("after", EmbeddedBackend(Path(tmp) / "ix"))):
            if name == "after":
                backend.workers().start()
            idle, idle_timeouts = normal_latencies(backend, normal, args.seconds)
            for flood_name, flood in floods.items():
                r = under_flood(backend, normal, flood, args.seconds, every=args.every)
                row = {"code": name, "flood": flood_name, "idle_p50_ms": statistics.median(idle),
                       "idle_p99_ms": percentile(idle, 0.99), "idle_timeouts": idle_timeouts,
                       "flood_p50_ms": statistics.median(r["lat"]) if r["lat"] else None,
                       "flood_p99_ms": percentile(r["lat"] + [backend.limits.timeout_ms] * r["timeouts"], 0.99),
                       "normal_answered": len(r["lat"]), "normal_timeouts": r["timeouts"], "flood_outcomes": r["flood"],
                       "run_on_cpu_s": r["run_on_cpu_s"], "run_on_wall_s": r["run_on_wall_s"]}
                row["ratio"] = row["flood_p99_ms"] / row["idle_p99_ms"]
                results.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)
            if name == "after":
                backend.close()
    lines = [f"# Search under a flood of worst-case queries ({args.docs:,} generated documents, 24 flooding callers "
             f"each sending one every {args.every:g} s at most, {args.seconds:g} s of normal queries each)", "",
             f"{args.note}".strip(), "",
             "| code | flood | idle p50 ms | idle p99 ms | p99 under flood ms | ratio | normal timeouts | "
             "flood got | CPU s after the flood |", "|" + "---|" * 9]
    for r in results:
        got = ", ".join(f"{k} {v}" for k, v in sorted(r["flood_outcomes"].items()))
        lines.append(f"| {r['code']} | {r['flood']} | {r['idle_p50_ms']:.2f} | {r['idle_p99_ms']:.2f} | "
                     f"{r['flood_p99_ms']:.2f} | {r['ratio']:.2f}× | {r['normal_timeouts']} of "
                     f"{r['normal_timeouts'] + r['normal_answered']} | {got} | {r['run_on_cpu_s']:.2f} |")
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "search_flood.md").write_text(table, encoding="utf-8")
    (RESULTS / "search_flood.json").write_text(json.dumps({"docs": args.docs, "note": args.note, "rows": results},
                                                          ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

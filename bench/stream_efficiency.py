"""How close each LLM pipeline comes to the bound of its own workload, against the independent latency server.

For each pipeline (egov, multihop, deepresearch, trajectories) and size, the real ``synth build`` runs
(through ``bench/llm_throughput.py``'s ``run_build``, streaming engine, cache off) against
``bench/latency_server.py`` at each slot count, then once more with slots to spare: as many slots as the build
sent requests (+ ``--margin``), so no request can wait for a slot, and no more (a far larger count only adds
client threads and connections). Every run draws its latencies by content (``--latency-by content``: a pure
function of the request body and the seed), so the same request gets the same latency in every run whatever
its arrival order; the bench checks that the runs sent the same requests (``same_requests``: the same sorted
latencies from ``/stats/records``) and wrote the same dataset (``same_output``: the manifest ``version``).
Identical bodies get identical latencies; they are the same request to a server, so that is the workload.
The inputs are ``bench/llm_throughput.py``'s; a long deepresearch run reads the fictional mini-wiki at
``--research-scale`` seeds instead of the Wikipedia leads, whose keyword groups give 920 requests at most.

The bound of the workload at ``S`` slots is the larger of

- the longest chain of dependent calls: the span (first request received → last answer sent) of the run with
  slots to spare, where every request starts the moment its record is ready, so only the dependencies
  (a record's generate → judge → fix → re-judge, a global stage waiting for every triple) and the client set
  the span. It includes the client's own CPU time on this machine (and the connection set-up of a run with
  everything in flight), so it is an upper estimate of the chain: generous to the build, never below it;
- the summed latency over the slots, Σ latency / S.

``vs_bound`` = bound / span at S: 1.0 is the best any scheduler could do with these dependencies and this
client. That bound is loose where the two terms are close (a greedy scheduler is only promised chain + Σ / S),
so the rows also give a tighter one, ``release_bound``: each request released when it arrived in the run with
slots to spare (the earliest its record was ready), any S-slot schedule ends no earlier than
max over t of t + (Σ latency of the requests released at or after t) / S, nor before the chain;
``vs_release`` = release_bound / span. ``fifo_replay_s`` is no bound but a reference: the same requests, each
released when it arrived in the run with slots to spare, sent first come first served to S slots (what a
client that cannot know the latencies gets, if waiting delayed no release); ``vs_fifo`` = fifo_replay / span;
``longest_first_replay_s`` the same with the longest latency first among the released requests (what knowing
every latency in advance would give); ``vs_longest_first`` = longest_first_replay / span. A run with seed
``--seed`` ≠ 0 works in ``WORK/seedN``, so each seed's server records stay apart for ``--rescore``.
Rows and the conditions go to ``bench/results/stream_efficiency.{json,md}``; ``--rescore`` recomputes the
record-based columns of the rows there from the saved server records.

    python bench/stream_efficiency.py --sizes short                  # ≈ 600 requests per pipeline
    python bench/stream_efficiency.py --sizes short long --slots 64 512
    python bench/stream_efficiency.py --pipelines multihop --slots 64 --results /tmp/ab   # an A/B arm
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import json
import os
import platform
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from llm_throughput import PIPELINES, SHORT_LIMITS, _pairs, prepare, run_build  # noqa: E402

NEEDS = {"egov": {"laws"}, "multihop": {"wiki"}, "deepresearch": {"leads"},
         "trajectories": {"wiki", "questions"}}
# ≥ 5,000 requests: egov 2 law copies (5,536), multihop 10 seeds (5,040; 6 seeds sent 4,056), trajectories at
# most 1,000 questions (6 seeds: 5,050 requests). Deepresearch's long run reads the mini-wiki at
# --research-scale seeds (80: 652 keyword groups), since every keyword group of the leads gives 920 requests.
LONG_LIMITS = {"trajectories": 1000}
RESULTS = BENCH / "results"


def records_of(args, label: str) -> list[list[float]]:
    """The server's records of the run ``label``: [arrival, start, end, sent, latency] per request."""
    return json.loads((args.work / "runs" / f"{label}.records.json").read_text())


def latencies(args, label: str) -> list[float]:
    """The latencies the server gave the run ``label``, sorted: the run's workload, as the server saw it."""
    return sorted(r[4] for r in records_of(args, label))


def releases(records: list[list[float]]) -> list[tuple[float, float]]:
    """(arrival from the first arrival, latency) of each of ``records``, in arrival order."""
    first = min(r[0] for r in records)
    return sorted((r[0] - first, r[4]) for r in records)


def release_bound(records: list[list[float]], slots: int) -> float:
    """The least span of any ``slots``-slot schedule of ``records`` ([arrival, start, end, sent, latency]),
    each request released at its arrival: max over t of t + (latency released at or after t) / slots."""
    released = releases(records)
    best, later = 0.0, 0.0
    for at, latency in reversed(released):
        later += latency
        best = max(best, at + later / slots, at + latency)
    return best


def fifo_replay(records: list[list[float]], slots: int) -> float:
    """The span of ``records``, each released at its arrival, served first come first served on ``slots``."""
    free, end = [0.0] * slots, 0.0
    for at, latency in releases(records):
        done = max(at, heapq.heappop(free)) + latency
        heapq.heappush(free, done)
        end = max(end, done)
    return end


def longest_first_replay(records: list[list[float]], slots: int) -> float:
    """The span of ``records``, each released at its arrival, served longest latency first among those
    released: what a client that knew every latency in advance could do with the same releases."""
    released = releases(records)
    free, ready, i, end = [0.0] * slots, [], 0, 0.0
    while i < len(released) or ready:
        now = heapq.heappop(free)
        if not ready:  # an idle slot waits for the next release
            now = max(now, released[i][0])
        while i < len(released) and released[i][0] <= now:
            heapq.heappush(ready, -released[i][1])
            i += 1
        done = now - heapq.heappop(ready)
        heapq.heappush(free, done)
        end = max(end, done)
    return end


def record_based(row: dict, free_records: list) -> dict:
    """The columns computed from the server's records of the run with slots to spare."""
    span, slots = row["span_s"], row["slots"]
    tighter = max(row["critical_path_s"], release_bound(free_records, slots))
    replay, clairvoyant = fifo_replay(free_records, slots), longest_first_replay(free_records, slots)
    return {"release_bound_s": round(tighter, 2), "vs_release": round(tighter / span, 3) if span else 0.0,
            "fifo_replay_s": round(replay, 2), "vs_fifo": round(replay / span, 3) if span else 0.0,
            "longest_first_replay_s": round(clairvoyant, 2),
            "vs_longest_first": round(clairvoyant / span, 3) if span else 0.0}


def bounded(row: dict, free: dict, slots: int, same_requests: bool, free_records: list) -> dict:
    """The run at ``slots`` against its bound (``free``: the same build with slots to spare)."""
    chain = free["span_s"]
    summed = row["latency_s"] / slots
    bound = max(chain, summed)
    return {"pipeline": row["pipeline"], "size": row["size"], "slots": slots, "requests": row["requests"],
            "span_s": row["span_s"], "critical_path_s": chain, "latency_over_slots_s": round(summed, 2),
            "bound_s": round(bound, 2), "vs_bound": round(bound / row["span_s"], 3) if row["span_s"] else 0.0,
            "slot_efficiency": row["efficiency"], "free_slots": free["slots"],
            "free_max_in_flight": free["max_in_flight"], "same_requests": same_requests,
            "same_output": row["version"] == free["version"], "latency_s": row["latency_s"],
            "cpu_build_s": row["cpu_build_s"], "free_cpu_build_s": free["cpu_build_s"],
            "wall_s": row["wall_s"]}


def measure(name: str, size: str, args, inputs: dict, limit: int | None) -> list[dict]:
    """The bounded runs of one pipeline and size, then the run with slots to spare; → a row per slot count."""
    label = f"{name}-{size}-streaming-independent-"
    runs = {slots: run_build(name, size, "streaming", "independent", slots, args, inputs, limit)
            for slots in args.slots}
    free_slots = max(r["requests"] for r in runs.values()) + args.margin
    free = run_build(name, size, "streaming", "independent", free_slots, args, inputs, limit)
    free_latencies = latencies(args, f"{label}{free_slots}")
    free_records = records_of(args, f"{label}{free_slots}")
    rows = [bounded(row, free, slots, latencies(args, f"{label}{slots}") == free_latencies, free_records)
            for slots, row in runs.items()]
    return [{**row, **record_based(row, free_records)} for row in rows]


def rescore(args) -> None:
    """The record-based columns of the saved rows (``stream_efficiency.json``), from the saved records."""
    saved = json.loads((args.results / "stream_efficiency.json").read_text())
    rows = []
    for row in saved.pop("rows"):
        free_label = f"{row['pipeline']}-{row['size']}-streaming-independent-{row['free_slots']}"
        rows.append({**row, **record_based(row, records_of(args, free_label))})
    write_results(rows, args, saved)


def conditions(args) -> dict:
    """What the rows were measured under: when, where, which latencies, which command."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                 platform.processor())
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": f"{platform.node()}: {os.cpu_count()} cores, {model}, {platform.platform()}",
            "latency": args.latency, "latency_by": "content", "seed": args.seed, "margin": args.margin,
            "command": " ".join(["python", "bench/stream_efficiency.py", *sys.argv[1:]])}


def write_results(rows: list[dict], args, conditions_: dict) -> None:
    args.results.mkdir(parents=True, exist_ok=True)
    payload = {**conditions_, "rows": rows}
    (args.results / "stream_efficiency.json").write_text(json.dumps(payload, indent=1) + "\n")
    columns = ["pipeline", "size", "slots", "requests", "span_s", "critical_path_s", "latency_over_slots_s",
               "bound_s", "vs_bound", "release_bound_s", "vs_release", "fifo_replay_s", "vs_fifo",
               "longest_first_replay_s", "vs_longest_first",
               "slot_efficiency", "free_slots", "free_max_in_flight", "same_requests",
               "same_output", "cpu_build_s", "free_cpu_build_s"]
    if any("note" in r for r in rows):  # rows merged from runs on other inputs say which
        columns.append("note")
    lines = ["# Streaming efficiency against the bound of each workload", "",
             f"{conditions_['date']}, {conditions_['machine']}; `{conditions_['command']}`.", "",
             f"Independent latency server (`bench/latency_server.py`), latency `{args.latency}` by content "
             f"(seed {args.seed}): each request's latency is a function of its body, the same in every run. "
             "bound = max(longest dependent chain = span of the run with slots to spare (`free_slots` = the "
             "build's requests + margin; it includes the client's CPU time), Σ latency / slots); "
             "`vs_bound` = bound / span; `release_bound` = max(chain, max over t of t + Σ latency released "
             "at or after t / slots), each request released when it arrived in the run with slots to spare; "
             "`vs_release` = release_bound / span; `fifo_replay` (a reference, not a bound): the same "
             "requests at the same releases, first come first served on the slots; `vs_fifo` = fifo_replay "
             "/ span; `longest_first_replay` (a reference: it knows every latency in advance) the same, "
             "longest latency first among the released; `vs_longest_first` = longest_first_replay / span. "
             "Both replays keep the releases of the run with slots to spare, so they leave out how a "
             "record's later calls wait for its earlier ones: below the chain, they say nothing. "
             "Written by `bench/stream_efficiency.py`; what the rows say: docs/benchmarks.md (LLM throughput: "
             "streaming synthesis).", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    (args.results / "stream_efficiency.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=PIPELINES)
    parser.add_argument("--sizes", nargs="+", choices=["short", "long"], default=["short"])
    parser.add_argument("--slots", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--margin", type=int, default=16, help="free run's slots above the build's requests")
    parser.add_argument("--latency", default="lognormal:0.5,0.8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=int, default=10, help="mini-wiki seeds of a long run")
    parser.add_argument("--law-copies", type=int, default=2, help="renamed law copies of a long egov run")
    parser.add_argument("--research-scale", type=int, default=80,
                        help="mini-wiki seeds of a long deepresearch run")
    parser.add_argument("--long-limits", nargs="*", default=None, metavar="PIPELINE=N",
                        help="cap a long run (default "
                        + " ".join(f"{k}={v}" for k, v in LONG_LIMITS.items()) + ")")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tansaku-bench-stream"))
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="folder of stream_efficiency.{json,md} (an A/B run: elsewhere than the committed rows)")
    parser.add_argument("--rescore", action="store_true",
                        help="only recompute the record-based columns of the saved rows")
    args = parser.parse_args(argv)
    if args.rescore:
        saved = json.loads((args.results / "stream_efficiency.json").read_text())
        if saved.get("seed"):
            args.work = args.work / f"seed{saved['seed']}"
        return rescore(args)
    args.latency_by = "content"  # run_build's server: the same request, the same latency, in every run
    if args.seed:  # the server records of each seed apart (their file names carry no seed)
        args.work = args.work / f"seed{args.seed}"
    args.work.mkdir(parents=True, exist_ok=True)
    long_limits = LONG_LIMITS if args.long_limits is None else _pairs(args.long_limits)
    limits = {"short": SHORT_LIMITS, "long": long_limits}
    needs = set().union(*(NEEDS[name] for name in args.pipelines))
    rows, started, conditions_ = [], time.monotonic(), conditions(args)
    for size in args.sizes:
        inputs = (prepare(args.work, needs, 1) if size == "short"
                  else prepare(args.work, needs, args.scale, args.law_copies))
        for name in args.pipelines:
            read = inputs
            if size == "long" and name == "deepresearch":  # the leads have too few keyword groups
                read = {**inputs, "leads": prepare(args.work, {"wiki"}, args.research_scale)["wiki"]}
            for row in measure(name, size, args, read, limits[size].get(name)):
                if read is not inputs:
                    row["note"] = f"corpus: the mini-wiki at {args.research_scale} seeds, not the leads"
                rows.append(row)
                print(f"[{time.monotonic() - started:5.0f} s] {json.dumps(row)}", flush=True)
            write_results(rows, args, conditions_)


if __name__ == "__main__":
    main()

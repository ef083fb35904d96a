"""How close each LLM pipeline comes to the bound of its own workload, against the independent latency server.

For each pipeline (egov, multihop, deepresearch, trajectories) and size, the real ``synth build`` runs
(through ``bench/llm_throughput.py``'s ``run_build``, streaming engine, cache off) against
``bench/latency_server.py`` at each slot count, and once more with slots to spare (``--unbounded``, far
above the requests ever in flight: no request waits for a slot). The bound of the workload at ``S`` slots
is the larger of

- the longest chain of dependent calls: the span (first request received → last answer sent) of the run with
  slots to spare, where every request starts the moment its record is ready, so only the dependencies
  (a record's generate → judge → fix → re-judge, a global stage waiting for every triple) set the span;
  it includes the client's own CPU time on this machine, so it is, if anything, generous to the build;
- the summed latency over the slots, Σ latency / S (the same n requests draw the same latencies in arrival
  order on the independent server, whatever the slot count).

``vs_bound`` = bound / span at S: 1.0 is the best any scheduler could do with these dependencies. Rows go to
``bench/results/stream_efficiency.{json,md}``.

    python bench/stream_efficiency.py --sizes short                  # ≈ 600 requests per pipeline
    python bench/stream_efficiency.py --sizes short long --slots 64 512
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from llm_throughput import PIPELINES, SHORT_LIMITS, prepare, run_build  # noqa: E402

NEEDS = {"egov": {"laws"}, "multihop": {"wiki"}, "deepresearch": {"leads"},
         "trajectories": {"wiki", "questions"}}
RESULTS = BENCH / "results"


def bounded(row: dict, free: dict, slots: int) -> dict:
    """The run at ``slots`` against its bound (``free``: the same build with slots to spare)."""
    chain = free["span_s"]
    summed = row["latency_s"] / slots
    bound = max(chain, summed)
    return {"pipeline": row["pipeline"], "size": row["size"], "slots": slots, "requests": row["requests"],
            "span_s": row["span_s"], "critical_path_s": chain, "latency_over_slots_s": round(summed, 2),
            "bound_s": round(bound, 2), "vs_bound": round(bound / row["span_s"], 3) if row["span_s"] else 0.0,
            "slot_efficiency": row["efficiency"], "free_max_in_flight": free["max_in_flight"],
            "same_output": row["version"] == free["version"], "wall_s": row["wall_s"]}


def write_results(rows: list[dict], args) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "stream_efficiency.json").write_text(json.dumps(
        {"latency": args.latency, "unbounded_slots": args.unbounded, "rows": rows}, indent=1) + "\n")
    columns = ["pipeline", "size", "slots", "requests", "span_s", "critical_path_s", "latency_over_slots_s",
               "bound_s", "vs_bound", "slot_efficiency", "free_max_in_flight", "same_output"]
    lines = ["# Streaming efficiency against the bound of each workload", "",
             f"Independent latency server (`bench/latency_server.py`), latency `{args.latency}`; bound = max("
             f"longest dependent chain = span with {args.unbounded} slots, Σ latency / slots); "
             "`vs_bound` = bound / span. Written by `bench/stream_efficiency.py`.", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    (RESULTS / "stream_efficiency.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=PIPELINES)
    parser.add_argument("--sizes", nargs="+", choices=["short", "long"], default=["short"])
    parser.add_argument("--slots", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--unbounded", type=int, default=8192, help="slots to spare (no request waits)")
    parser.add_argument("--latency", default="lognormal:0.5,0.8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=int, default=4, help="mini-wiki seeds of a long run")
    parser.add_argument("--law-copies", type=int, default=20, help="renamed law copies of a long egov run")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tansaku-bench-stream"))
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    needs = set().union(*(NEEDS[name] for name in args.pipelines))
    rows, started = [], time.monotonic()
    for size in args.sizes:
        inputs = (prepare(args.work, needs, 1) if size == "short"
                  else prepare(args.work, needs, args.scale, args.law_copies))
        for name in args.pipelines:
            limit = SHORT_LIMITS[name] if size == "short" else None
            free = run_build(name, size, "streaming", "independent", args.unbounded, args, inputs, limit)
            for slots in args.slots:
                row = bounded(run_build(name, size, "streaming", "independent", slots, args, inputs, limit),
                              free, slots)
                rows.append(row)
                print(f"[{time.monotonic() - started:5.0f} s] {json.dumps(row)}", flush=True)
                write_results(rows, args)


if __name__ == "__main__":
    main()

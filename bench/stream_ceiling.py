"""The most a client that cannot know the latencies can expect of the rows of ``bench/stream_efficiency.py``.

A row's ``vs_bound`` is bound / span with bound = max(chain, Σ latency / S). Take away every dependency and
release every request at time 0: no schedule of the row's requests ends before the best schedule of that
easier batch (dependencies and releases only add waiting). With independent latencies that the client learns
only as answers come (the rows draw theirs by content, a hash of the body), the requests not yet sent are
alike to it, so every order it can choose gives the batch the span distribution of first come, first served.
``llm_throughput.fifo_efficiencies`` draws that batch ``--draws`` times for the row's request count, slots
and latency distribution and gives Σ / S / span per draw. Where Σ / S is the row's bound, vs_bound cannot
exceed that efficiency, so the table gives its mean (``relaxed``), its best draw (``best``) and the share of
draws at or above the 0.95 target (``P(≥ 0.95)``): the most any client that does not know the latencies can
hope for. Where the chain is the bound, this argument limits nothing and the columns say ``—``. The table is
written to ``bench/results/stream_ceiling.md``.

    python bench/stream_ceiling.py                  # the committed rows, 200 draws each
    python bench/stream_ceiling.py --results bench/results/stream_efficiency_standin_fix --draws 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from llm_throughput import fifo_efficiencies  # noqa: E402

RESULTS = BENCH / "results"
TARGET = 0.95


def ceiling(efficiencies: list[float], target: float = TARGET) -> dict:
    """Mean, best and share at or above ``target`` of the relaxed batch's efficiencies.

    >>> ceiling([0.9, 0.94, 0.96, 0.97])
    {'relaxed': 0.943, 'best': 0.97, 'reach': 0.5}
    """
    return {"relaxed": round(statistics.mean(efficiencies), 3), "best": round(max(efficiencies), 3),
            "reach": round(sum(e >= target for e in efficiencies) / len(efficiencies), 3)}


def rows_of(folders: list[Path], draws: int) -> list[dict]:
    """Each row of each folder's ``stream_efficiency.json`` with ``relaxed``, ``best`` and ``reach`` where Σ / S
    is its bound (None where the chain is); a later folder's row replaces an earlier one of the same pipeline,
    size and slots (a rerun), so only the rows kept are simulated."""
    rows: dict[tuple, dict] = {}
    for folder in folders:
        results = json.loads((folder / "stream_efficiency.json").read_text())
        for row in results["rows"]:
            rows[row["pipeline"], row["size"], row["slots"]] = {**row, "source": str(folder),
                                                                "latency": results["latency"]}
    for row in rows.values():
        limited = row["latency_over_slots_s"] >= row["bound_s"]
        row.update(ceiling(fifo_efficiencies(row["requests"], row["slots"], row["latency"], draws)) if limited
                   else dict.fromkeys(("relaxed", "best", "reach")))
    return sorted(rows.values(), key=lambda r: (r["size"] != "short", r["pipeline"], r["slots"]))


def table(rows: list[dict], draws: int) -> list[str]:
    lines = [f"# Stream efficiency: what a client that cannot know the latencies can expect ({draws} draws)", "",
             "Written by `bench/stream_ceiling.py` from the rows of `bench/stream_efficiency.py` named in `source`. "
             "Where Σ latency / slots is the bound: `relaxed` is the mean Σ / S / span of the same number of "
             "requests with no dependencies, all sent at time 0, first come first served, `best` its best draw, "
             "and `P(≥ 0.95)` the share of draws reaching the target; `—` where the chain is the bound.", "",
             "| pipeline | size | slots | requests | bound s | Σ latency / slots s | vs bound | relaxed | best "
             "| P(≥ 0.95) | source |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        relaxed, best, reach = ("—",) * 3 if r["relaxed"] is None else (r["relaxed"], r["best"], r["reach"])
        lines.append(f"| {r['pipeline']} | {r['size']} | {r['slots']} | {r['requests']:,} | {r['bound_s']} | "
                     f"{r['latency_over_slots_s']} | {r['vs_bound']} | {relaxed} | {best} | {reach} | "
                     f"{Path(r['source']).name} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, nargs="+",
                        default=[RESULTS, RESULTS / "stream_efficiency_standin_fix"],
                        help="folders holding stream_efficiency.json; a later folder's rows replace an earlier one's")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "stream_ceiling.md")
    args = parser.parse_args()
    missing = [str(f) for f in args.results if not (f / "stream_efficiency.json").is_file()]
    if missing:
        sys.exit(f"stream_ceiling: no stream_efficiency.json in {', '.join(missing)}")
    lines = table(rows_of(args.results, args.draws), args.draws)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""What a client that cannot know the latencies can expect of a stream-efficiency row (``bench/stream_ceiling.py``):
the dependency-free batch's efficiency per draw, its mean and share at the target, only where Σ / S is the bound.

Run: ``pytest tests/test_stream_ceiling.py`` (a second)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "stream_ceiling.py"
spec = importlib.util.spec_from_file_location("bench_stream_ceiling", BENCH)
stream_ceiling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stream_ceiling)


def test_the_relaxed_batch_loses_only_its_last_wave():
    # fixed latencies: S requests fill S slots once (efficiency 1); one more runs alone in a second wave
    assert stream_ceiling.fifo_efficiencies(4, 4, "fixed:1", draws=3) == [1.0, 1.0, 1.0]
    assert stream_ceiling.fifo_efficiencies(5, 4, "fixed:1", draws=1) == [5 / 4 / 2]


def test_a_short_lognormal_batch_cannot_reach_the_target_but_a_long_one_sometimes_does():
    short = stream_ceiling.ceiling(stream_ceiling.fifo_efficiencies(576, 64, "lognormal:0.5,0.8", draws=40))
    long = stream_ceiling.ceiling(stream_ceiling.fifo_efficiencies(5504, 64, "lognormal:0.5,0.8", draws=40))
    assert short["relaxed"] < 0.75 and short["reach"] == 0.0
    assert 0.9 < long["relaxed"] < 0.97 and 0 < long["reach"] < 1


def _results(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir()
    (folder / "stream_efficiency.json").write_text(json.dumps({"latency": "fixed:1", "rows": rows}))
    return folder


def _row(pipeline: str, slots: int, bound: float, over_slots: float, vs_bound: float) -> dict:
    return {"pipeline": pipeline, "size": "short", "slots": slots, "requests": 5, "bound_s": bound,
            "latency_over_slots_s": over_slots, "vs_bound": vs_bound}


def test_rows_are_judged_only_where_the_summed_latency_is_the_bound_and_reruns_replace(tmp_path):
    first = _results(tmp_path / "a", [_row("egov", 4, 1.25, 1.25, 0.6), _row("multihop", 4, 3.0, 1.25, 0.9)])
    rerun = _results(tmp_path / "b", [_row("egov", 4, 1.25, 1.25, 0.62)])
    rows = {r["pipeline"]: r for r in stream_ceiling.rows_of([first, rerun], draws=2)}
    assert rows["egov"]["vs_bound"] == 0.62 and rows["egov"]["source"] == str(rerun)
    assert rows["egov"]["relaxed"] == 0.625 and rows["egov"]["reach"] == 0.0
    assert rows["multihop"]["relaxed"] is None  # the chain is the bound: the batch says nothing
    lines = stream_ceiling.table(list(rows.values()), draws=2)
    assert any(line.startswith("| multihop |") and "| — | — | — |" in line for line in lines)

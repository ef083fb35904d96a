"""Benchmark: the multihop chain join (polars) against a plain-Python dict join, and the whole pipeline
with an instant scripted LLM.

Run: ``python bench/multihop.py [--triples 1000000] [--items 300]``

1. Chain join: N synthetic linked triples (random subject/relation/object over a vocabulary sized so the
   join fans out about 2×), joined object-of-hop-1 = subject-of-hop-2 with the four drop rules by
   :func:`tansaku.pipelines.multihop.chains.join_chains`, versus a dict-of-lists join in pure Python applying the
   same rules (first broken rule counted, no caps). Every method runs in a fresh subprocess that loads the
   same parquet file; it reports wall seconds of the join alone and the **peak RSS growth** during it:
   the kernel's RSS high-water mark is reset (``/proc/self/clear_refs``) after loading the input and read
   back (``VmHWM``) after the join, minus the RSS right before — one measure for Python's and polars' own
   allocators alike, and it includes the result (a pairs frame / a list of kept pairs). The kept pairs and
   drop counts of every method must be identical (asserted).
2. End to end: ``build_multihop`` on JSONL triples with a ScriptedLLM that answers instantly (questions,
   judge), stopping after ``quality`` (no search): items/s, versus the template generator.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

from tansaku.core.context import BuildContext
from tansaku.pipelines.multihop.config import MultihopConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

JOIN_METHODS = {"polars": "polars join_chains, no caps", "polars_caps": "polars join_chains, default caps",
                "python": "python dict join (peer)"}


def rss_kb(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (high-water mark) of this process, in kB."""
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5 = reset the RSS high-water mark
        return True
    except OSError:
        return False


def synthetic_triples(n: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """Subjects, relations and objects of N random triples; entity names double as keys and ids."""
    rng = random.Random(seed)
    entities = max(10, n // 2)
    relations = [f"関係{i}" for i in range(200)]
    s = [f"E{rng.randrange(entities)}" for _ in range(n)]
    o = [f"E{rng.randrange(entities)}" for _ in range(n)]
    r = [rng.choice(relations) for _ in range(n)]
    return s, r, o


def synthetic_frame(n: int, seed: int = 0):
    import polars as pl

    s, r, o = synthetic_triples(n, seed)
    ids = [f"t{i}" for i in range(n)]
    return pl.DataFrame({"triple_id": ids, "subject": s, "relation": r, "object": o, "subject_key": s,
                         "object_key": o, "subject_id": s, "object_id": o, "subject_title": s, "object_title": o,
                         "doc_id": s, "source": ["bench"] * n, "evidence": [None] * n,
                         "object_aliases": [[] for _ in range(n)]},
                        schema_overrides={"evidence": pl.String, "object_aliases": pl.List(pl.String)})


def python_join(rows: list[tuple]) -> tuple[list[tuple[int, int]], Counter]:
    """The peer. ``rows``: (subject_key, object_key, subject, relation, object, bridge_linked) tuples;
    the same four rules in the same order as the polars join; returns the kept (row 1, row 2) pairs and
    the drop counts."""
    by_subject: dict[str, list[int]] = {}
    for j, t in enumerate(rows):
        by_subject.setdefault(t[0], []).append(j)
    kept, drops = [], Counter()
    for i, (s1_key, b, s1, r1, _, linked) in enumerate(rows):
        for j in by_subject.get(b, ()):
            _, a_key, _, r2, a, _ = rows[j]
            if a_key == s1_key or b == s1_key or a_key == b:
                drops["cycle"] += 1
            elif r1 == r2:
                drops["same_relation"] += 1
            elif a in s1 or a in r1 or a in r2:
                drops["answer_in_question"] += 1
            elif not linked:
                drops["bridge_not_linked"] += 1
            else:
                kept.append((i, j))
    return kept, drops


def join_worker(method: str, n: int, frame_path: str, kept_path: str) -> None:
    """One method in this (fresh) process; prints its measurements as JSON and writes the kept pairs.
    The peer builds its tuples straight from the generator (the same triples as the parquet file), without
    polars in the process, so no freed input-building memory is lying around for the join to reuse."""
    if method == "python":
        s, r, o = synthetic_triples(n)
        rows = [(si, oi, si, ri, oi, True) for si, ri, oi in zip(s, r, o)]  # every bridge has an article
        del s, r, o
    else:
        import polars as pl

        from tansaku.pipelines.multihop.chains import Caps, join_chains

        frame = pl.read_parquet(frame_path)
    gc.collect()
    exact = reset_peak_rss()
    before = rss_kb("VmRSS")
    t0 = time.perf_counter()
    if method == "python":
        kept, drops = python_join(rows)
    else:
        caps = Caps() if method == "polars_caps" else Caps(None, None, None)
        # Row numbers and drop reasons, like the peer's (row 1, row 2) pairs; callers gather the columns
        # they need for the rows they keep (pair_columns), as chain_stage does.
        pairs = join_chains(frame, caps, columns=())
    seconds = time.perf_counter() - t0
    peak_mb = (rss_kb("VmHWM") - before) / 1024 if exact else float("nan")
    traced_mb = None
    if method == "python":
        tracemalloc.start()  # a second, untimed run: tracemalloc slows Python down several times
        python_join(rows)
        traced_mb = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        import polars as pl

        kept_frame = pl.DataFrame(kept, schema={"row_1": pl.UInt32, "row_2": pl.UInt32}, orient="row")
    else:
        kept_frame = pairs.filter(pl.col("drop").is_null()).select("row_1", "row_2")
        drops = Counter(dict(pairs.get_column("drop").drop_nulls().cast(pl.String).value_counts().iter_rows()))
    kept_frame.sort("row_1", "row_2").write_parquet(kept_path)
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "traced_mb": traced_mb, "kept": kept_frame.height,
                      "drops": drops}))


def bench_join(n: int) -> list[tuple]:
    import polars as pl

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        frame_path = str(Path(tmp) / "triples.parquet")
        synthetic_frame(n).write_parquet(frame_path)
        kept = {}
        for method, name in JOIN_METHODS.items():
            kept[method] = str(Path(tmp) / f"kept-{method}.parquet")
            out = subprocess.run([sys.executable, __file__, "--join-worker", method, str(n), frame_path,
                                  kept[method]],
                                 check=True, capture_output=True, text=True).stdout
            m = json.loads(out.strip().splitlines()[-1])
            results.append((name, m["seconds"], n / m["seconds"], m["peak_mb"], m["kept"], m["drops"],
                            m["traced_mb"]))
        # Same rules, same answer: identical kept pairs and drop counts (caps only add cap_* drops).
        assert pl.read_parquet(kept["polars"]).equals(pl.read_parquet(kept["python"])), "kept pairs differ"
        assert results[0][5] == results[2][5], (results[0][5], results[2][5])  # no caps, same counts
        caps_rules = {k: v for k, v in results[1][5].items() if not k.startswith("cap_")}
        assert caps_rules == results[2][5], (caps_rules, results[2][5])
    return results


def bench_end_to_end(items: int) -> list[tuple]:
    from tansaku.core.llm import ScriptedLLM
    from tansaku.pipelines.multihop.build import build_multihop

    def instant(req):
        text = req.messages[-1]["content"]
        if "品質を審査" in text:
            return json.dumps({"ambiguous": False, "natural": 4, "single_answer": True, "time_dependent": False})
        if "クイズ作家" in text:
            subject = text.split("事実1: 「")[1].split("」")[0]
            return json.dumps({"question": f"「{subject}」に関係するものの値は何ですか？"}, ensure_ascii=False)
        return json.dumps({"single_valued": True})

    rows = []
    for i in range(items):
        rows += [{"subject": f"作品{i}", "relation": "著者", "object": f"作家{i}"},
                 {"subject": f"作家{i}", "relation": f"属性{i % 40}", "object": f"町{i % 97}"}]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        build_multihop(MultihopConfig(triples=path, until="quality"), Path(tmp) / "warmup", BuildContext(quiet=True))  # imports, caches
        for name, llm in (("template (no LLM)", None), ("scripted instant LLM", ScriptedLLM(instant))):
            t0 = time.perf_counter()
            manifest = build_multihop(MultihopConfig(triples=path, llm=llm, until="quality"), Path(tmp) / name.split()[0], BuildContext(quiet=True))
            seconds = time.perf_counter() - t0
            n = manifest["splits"]["train"]
            results.append((name, seconds, n / seconds, n))
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--triples", type=int, default=1_000_000)
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--join-worker", nargs=4, metavar=("METHOD", "N", "TRIPLES", "KEPT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.join_worker:
        method, n, frame_path, kept_path = args.join_worker
        join_worker(method, int(n), frame_path, kept_path)
        return
    join = bench_join(args.triples)
    peer = join[-1]
    print(f"\nchain join, {args.triples:,} synthetic triples (each method in a fresh process; "
          "peak MB = RSS high-water growth during the join)")
    print(f"{'method':34} {'seconds':>8} {'triples/s':>11} {'peak MB':>8} {'kept pairs':>11} "
          f"{'speed ×peer':>12} {'memory ×peer':>13}")
    for name, s, rate, mb, kept, *_ in join:
        print(f"{name:34} {s:8.2f} {rate:11,.0f} {mb:8.0f} {kept:11,} {peer[1] / s:12.2f} {mb / peer[3]:13.2f}")
    print(f"python peer, tracemalloc peak of its Python allocations (second run): {peer[6]:.0f} MB")
    print("drops: " + "; ".join(f"{name}: {dict(sorted(d.items()))}" for name, *_, d, _ in join))
    e2e = bench_end_to_end(args.items)
    print(f"\nend to end to 'quality', {args.items} chains")
    print(f"{'generator':28} {'seconds':>9} {'items/s':>10} {'items':>7} {'ratio':>7}")
    for name, s, rate, n in e2e:
        print(f"{name:28} {s:9.2f} {rate:10.1f} {n:7} {rate / e2e[0][2]:7.2f}")


if __name__ == "__main__":
    main()

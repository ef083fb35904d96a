"""Benchmark: the multihop chain join (polars) against a plain-Python dict join, and the whole pipeline
with an instant scripted LLM.

Run: ``python bench/multihop.py [--triples 1000000] [--items 300]``

1. Chain join: N synthetic linked triples (random subject/relation/object over a vocabulary sized so the
   join fans out about 1×), joined object-of-hop-1 = subject-of-hop-2 with the drop rules and caps by
   :func:`pipelines.multihop.chains.join_chains`, versus a dict-of-lists join in pure Python applying
   the same four rules (no caps). Reports seconds, triples/s and peak memory (tracemalloc for the Python
   peer, in a second untimed run; polars allocates outside Python's allocator, so its peak is the growth of
   the process's max RSS).
2. End to end: ``build_multihop`` on JSONL triples with a ScriptedLLM that answers instantly (questions,
   judge), stopping after ``quality`` (no search): items/s, versus the template generator.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_frame(n: int, seed: int = 0):
    import polars as pl

    rng = random.Random(seed)
    entities = max(10, n // 2)
    relations = [f"関係{i}" for i in range(200)]
    s = [f"E{rng.randrange(entities)}" for _ in range(n)]
    o = [f"E{rng.randrange(entities)}" for _ in range(n)]
    r = [rng.choice(relations) for _ in range(n)]
    ids = [f"t{i}" for i in range(n)]
    return pl.DataFrame({"triple_id": ids, "subject": s, "relation": r, "object": o, "subject_key": s,
                         "object_key": o, "subject_id": s, "object_id": o, "subject_title": s, "object_title": o,
                         "doc_id": s, "source": ["bench"] * n, "evidence": [None] * n,
                         "object_aliases": [[] for _ in range(n)]},
                        schema_overrides={"evidence": pl.String, "object_aliases": pl.List(pl.String)})


def python_join(rows: list[tuple]) -> list[tuple]:
    """(subject, relation, object) tuples; the same rules as the polars join; returns the kept pairs."""
    by_subject: dict[str, list[tuple]] = {}
    for t in rows:
        by_subject.setdefault(t[0], []).append(t)
    kept = []
    for s1, r1, b in rows:
        for _, r2, a in by_subject.get(b, ()):
            if a == s1 or b == s1 or a == b or r1 == r2 or a in s1 or a in r1 or a in r2:
                continue
            kept.append((s1, r1, b, r2, a))
    return kept


def bench_join(n: int) -> list[tuple]:
    from pipelines.multihop.chains import Caps, join_chains

    frame = synthetic_frame(n)
    rows = list(zip(frame["subject"].to_list(), frame["relation"].to_list(), frame["object"].to_list()))
    before = rss_mb()
    t0 = time.perf_counter()
    pairs = join_chains(frame, Caps(None, None, None))
    polars_s = time.perf_counter() - t0
    polars_kept = int(pairs["drop"].is_null().sum())
    polars_mb = max(rss_mb() - before, 0.0)
    del pairs
    t0 = time.perf_counter()
    py_kept = len(python_join(rows))
    py_s = time.perf_counter() - t0
    tracemalloc.start()  # a second run for memory: tracemalloc slows Python down several times
    python_join(rows)
    py_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert py_kept == polars_kept, (py_kept, polars_kept)  # same rules, same answer
    return [("polars join_chains", polars_s, n / polars_s, polars_mb, polars_kept),
            ("python dict join (peer)", py_s, n / py_s, py_mb, py_kept)]


def bench_end_to_end(items: int) -> list[tuple]:
    from pipelines.llm import ScriptedLLM
    from pipelines.multihop.build import build_multihop

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
        build_multihop(triples=path, out=Path(tmp) / "warmup", until="quality", quiet=True)  # imports, caches
        for name, llm in (("template (no LLM)", None), ("scripted instant LLM", ScriptedLLM(instant))):
            t0 = time.perf_counter()
            manifest = build_multihop(triples=path, out=Path(tmp) / name.split()[0], llm=llm, until="quality",
                                      quiet=True)
            seconds = time.perf_counter() - t0
            n = manifest["splits"]["train"]
            results.append((name, seconds, n / seconds, n))
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--triples", type=int, default=1_000_000)
    ap.add_argument("--items", type=int, default=300)
    args = ap.parse_args()
    join = bench_join(args.triples)
    print(f"\nchain join, {args.triples:,} synthetic triples")
    print(f"{'method':28} {'seconds':>9} {'triples/s':>12} {'peak MB':>9} {'kept pairs':>11} {'speed ×peer':>12}")
    for name, s, rate, mb, kept in join:
        print(f"{name:28} {s:9.2f} {rate:12,.0f} {mb:9.0f} {kept:11,} {join[1][1] / s:12.2f}")
    e2e = bench_end_to_end(args.items)
    print(f"\nend to end to 'quality', {args.items} chains")
    print(f"{'generator':28} {'seconds':>9} {'items/s':>10} {'items':>7} {'ratio':>7}")
    for name, s, rate, n in e2e:
        print(f"{name:28} {s:9.2f} {rate:10.1f} {n:7} {rate / e2e[0][2]:7.2f}")


if __name__ == "__main__":
    main()

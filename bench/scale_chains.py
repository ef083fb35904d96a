"""The chain stage at 1M → 5M → 20M triples, a plain-Python dict join beside (``python bench/scale.py --triples``).

The triples are infobox-like: entity names of 3–7 kanji/kana (9–21 bytes, longer than the 12 bytes polars
stores inline), 200 relation names, 16-hex triple ids (as ``triples.triple_id``), the object text as evidence,
one bridge in ten without an article. Subjects and objects are drawn uniformly from ``n / 2`` entities, so the
join fans out about 2× (20M triples → ~40M candidate pairs); real infoboxes are skewed (日本 is the object of
hundreds of thousands of triples), which multiplies the pairs of the popular bridges — that is what the
per-bridge cap is for, but the candidates are still formed first.

Each method runs in its own process and reports its whole peak RSS (``VmHWM``, input included) and seconds:

- the two global stages as ``synth build multihop`` runs them, cardinality (``filter_unique_hops``) then
  ``chain_stage`` with the default caps: the triple dicts stream in (from a generator; the build reads them
  from its JSONL checkpoints), each stage spills them to parquet and works on a dictionary-encoded frame, and
  every kept hop and chain becomes a record (consumed and counted);
- the join alone as ``chain_stage`` runs it (spill, ``join_frame``, ``join_chains``) without caps and without
  records: the same rules as the peer, so its kept count must equal the peer's (asserted);
- the peer: the triples as tuples in a list and a dict-of-lists join applying the same four rules
  (``bench/multihop.python_join``), no records.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

POOL = "山川田中村本井上木林森高橋石小大野原松竹梅桜花島岡崎宮北南東西市町郷里浜谷坂池沢あかさたなはまやらわ"


def entity(i: int) -> str:
    """A distinct 3–7 character name per number."""
    chars = [POOL[i % len(POOL)]]
    i //= len(POOL)
    while i or len(chars) < 3:
        chars.append(POOL[i % len(POOL)])
        i //= len(POOL)
    return "".join(chars)


def triples(n: int, seed: int = 0) -> Iterator[dict]:
    """``n`` triple records as the triple stage writes them, generated one at a time."""
    rng = random.Random(seed)
    entities = max(10, n // 2)
    relations = [f"属性{k}" for k in range(200)]
    for i in range(n):
        s, o = rng.randrange(entities), rng.randrange(entities)
        subject, obj, relation = entity(s), entity(o), relations[rng.randrange(200)]
        linked = o % 10 != 0
        yield {"triple_id": hashlib.sha1(f"{i}".encode()).hexdigest()[:16], "subject": subject,
               "relation": relation, "object": obj, "subject_key": subject, "object_key": obj,
               "subject_id": str(s), "object_id": str(o) if linked else None, "subject_title": subject,
               "object_title": obj if linked else None, "doc_id": str(s), "source": "infobox", "evidence": obj}


def chain_child(method: str, n: int) -> dict:
    """One method over ``n`` triples in this process; the clock starts after the imports."""
    from tansaku.pipelines.multihop import spill
    from tansaku.pipelines.multihop.cardinality import filter_unique_hops
    from tansaku.pipelines.multihop.chains import Caps, chain_stage, join_chains, join_frame

    t0 = time.perf_counter()
    if method == "python":
        import sys

        sys.path.insert(0, str(Path(__file__).parent))
        from multihop import python_join

        rows = [(t["subject_key"], t["object_key"], t["subject"], t["relation"], t["object"],
                 t["object_id"] is not None) for t in triples(n)]
        kept, drops = python_join(rows)
        kept, dropped = len(kept), sum(drops.values())
    elif method == "join":
        with tempfile.TemporaryDirectory(prefix="tansaku-bench-") as tmp:
            spill.spill(triples(n), Path(tmp) / "triples.parquet")
            frame, names = join_frame(Path(tmp) / "triples.parquet")
            pairs = join_chains(frame, Caps(None, None, None), columns=(), names=names)
            kept = pairs.get_column("drop").null_count()
            dropped = pairs.height - kept
    else:
        kept = dropped = 0
        for item in chain_stage((t for t in filter_unique_hops(triples(n)) if isinstance(t, dict)), Caps()):
            if isinstance(item, dict):
                kept += 1
            else:
                dropped += 1
    seconds = time.perf_counter() - t0
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM"))
    return {"triples": n, "seconds": seconds, "triples_per_s": n / seconds, "peak_rss_mb": int(line.split()[1]) / 1024,
            "kept": kept, "pairs": kept + dropped}


METHODS = {"stages": "cardinality → chain_stage (default caps)", "join": "spill + join_chains, no caps",
           "python": "python dict join (peer)"}


def table(results: list[dict]) -> str:
    lines = ["| triples | method | s | triples/s | peak RSS MB | candidate pairs | kept | time vs peer | RSS vs peer |",
             "|" + "---|" * 9]
    for r in results:
        peer = r["python"]
        for method, name in METHODS.items():
            m = r[method]
            lines.append(f"| {r['triples']:,} | {name} | {m['seconds']:.1f} | {m['triples_per_s']:,.0f} | "
                         f"{m['peak_rss_mb']:,.0f} | {m['pairs']:,} | {m['kept']:,} | "
                         f"{m['seconds'] / peer['seconds']:.2f}x | {m['peak_rss_mb'] / peer['peak_rss_mb']:.2f}x |")
    return "\n".join(lines)

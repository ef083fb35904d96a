"""Engine overhead per record per stage, against a plain Python loop doing the same work.

    python bench/engine.py [--records 200000]

Peer: the same stage functions called in a bare ``for`` loop (no counting, no drops, no checkpoints).
The engine column includes counting, drop bookkeeping, per-stage timing and writing the JSONL
checkpoints; the LLM stage calls an instant scripted LLM (``tansaku.core.llm.ScriptedLLM``) in batches of 64,
so what is left is the engine's own cost. Target: ≤ 50 µs per record per stage.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from tansaku.core.engine import Drop, batch_stage, global_stage, map_stage
from tansaku.core.llm import ChatRequest, ScriptedLLM
from tansaku.core.runner import run_pipeline


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args()
    n = args.records
    llm = ScriptedLLM(lambda req: '{"ok": true}')

    def normalize(r):
        return {**r, "text": r["text"].strip()}

    def nonempty(r):
        return r if r["text"] else Drop("empty")

    def ask(batch):
        outs = llm.chat([ChatRequest(messages=[{"role": "user", "content": r["text"]}]) for r in batch])
        return [{**r, "judge": o.content} for r, o in zip(batch, outs)]

    def dedup(records):
        seen = set()
        for r in records:
            if r["text"] in seen:
                yield Drop("dup")
            else:
                seen.add(r["text"])
                yield r

    source = [{"id": i, "text": f" 文書{i} " if i % 13 else " "} for i in range(n)]
    stages = [map_stage("normalize", normalize), map_stage("nonempty", nonempty),
              batch_stage("llm", ask, 64), global_stage("dedup", dedup)]

    t = time.perf_counter()
    kept = []
    seen = set()
    batch = []
    for r in source:  # the peer: the same work, no engine
        r = normalize(r)
        if not r["text"]:
            continue
        batch.append(r)
        if len(batch) == 64:
            for r2 in ask(batch):
                if r2["text"] not in seen:
                    seen.add(r2["text"])
                    kept.append(r2)
            batch = []
    for r2 in ask(batch) if batch else []:
        if r2["text"] not in seen:
            seen.add(r2["text"])
            kept.append(r2)
    bare = time.perf_counter() - t

    work = tempfile.mkdtemp()
    try:
        t = time.perf_counter()
        result = run_pipeline(source, stages, work, chunk_size=5000)
        rows = sum(1 for _ in result.rows())
        engine = time.perf_counter() - t
    finally:
        shutil.rmtree(work)
    assert rows == len(kept), (rows, len(kept))
    per = (engine - bare) / (n * len(stages)) * 1e6
    print("| records | stages | bare loop s | engine s (incl. checkpoints) | ratio | overhead µs/record/stage | target |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    print(f"| {n} | {len(stages)} | {bare:.3f} | {engine:.3f} | {engine / bare:.2f}× | {per:.2f} | ≤ 50 |")


if __name__ == "__main__":
    main()

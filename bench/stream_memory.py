"""Memory of a streaming segment when one LLM stage is 100× slower than the one before it.

Two streaming batch stages (``tansaku.core.streaming``) over records of ~1 KB: a fast one (0.1 ms per record)
and a slow one (10 ms per record), 64 slots each, checkpointed by ``run_pipeline`` as a build would. Each size
runs in its own process; the table gives the peak RSS (``VmHWM``) and the most records read from the source
but not yet finished by the slow stage. Flat means the peak does not grow with the input: the fast stage waits
(its window is full) instead of piling records up. The peer is the same input read into a list, which is what
running ahead without backpressure costs at the end.

    python bench/stream_memory.py                    # 20,000 and 200,000 records
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tansaku.core.engine import batch_stage  # noqa: E402
from tansaku.core.runner import run_pipeline  # noqa: E402

PAYLOAD = "検索" * 500  # ~1 KB of UTF-8 per record


class Slots:
    def __init__(self, slots: int):
        self.slots = slots


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def one(n: int, mode: str) -> dict:
    pulled, finished, worst, lock = [0], [0], [0], threading.Lock()

    def source():
        for i in range(n):
            pulled[0] += 1
            with lock:
                worst[0] = max(worst[0], pulled[0] - finished[0])
            yield {"i": i, "text": PAYLOAD}

    def fast(batch):
        time.sleep(0.0001 * len(batch))
        return batch

    def slow(batch):
        time.sleep(0.01 * len(batch))
        with lock:
            finished[0] += len(batch)
        return [{"i": r["i"]} for r in batch]

    started = time.perf_counter()
    if mode == "list (peer)":
        rows = list(source())
        finished[0] = len(rows)
        kept = len(rows)
    else:
        stages = [batch_stage("fast", fast, 16, client=Slots(64)), batch_stage("slow", slow, 16, client=Slots(64))]
        with tempfile.TemporaryDirectory() as work:
            result = run_pipeline(source, stages, Path(work) / "w", chunk_size=1000)
            kept = sum(1 for _ in result.rows())
    return {"mode": mode, "records": n, "kept": kept, "seconds": round(time.perf_counter() - started, 1),
            "peak_rss_mb": round(peak_rss_mb()), "max_records_held": worst[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--one", nargs=2, metavar=("N", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1])))
        return
    rows = []
    for mode in ("streaming", "list (peer)"):
        for n in args.records:
            out = subprocess.run([sys.executable, __file__, "--one", str(n), mode], capture_output=True, text=True,
                                 check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    columns = ["mode", "records", "kept", "seconds", "peak_rss_mb", "max_records_held"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in columns) + " |")


if __name__ == "__main__":
    main()

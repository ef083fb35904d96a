"""A separable batch stage with no LLM client between two LLM stages (multihop's search prefilter before the
agent check) passes each record on as it arrives (issue 53, item 1): the next LLM stage starts on a chunk's
records while a slow answer of the same chunk is still out, and the rows and counts stay those of the
batch-by-batch run (``TANSAKU_STREAMING=0``).

    pytest tests/test_streaming_separable.py -q
"""

from __future__ import annotations

import threading
import time

import pytest

from tansaku.core.engine import Drop, batch_stage
from tansaku.core.runner import run_pipeline


class Slots:
    """What a streaming runner reads from an HTTP client: its slots."""

    def __init__(self, slots: int):
        self.slots = slots


def _stages(order: list, separable: bool) -> list:
    lock = threading.Lock()

    def first(batch):
        for r in batch:
            time.sleep(1.5 if r["i"] == 0 else 0.002)  # record 0's answer is slow
            with lock:
                order.append(("first", r["i"]))
        return [{**r, "a": r["i"] * 2} for r in batch]

    def middle(batch):  # per record: a search, a check
        return [Drop("odd") if r["i"] % 9 == 4 else {**r, "kept": True} for r in batch]

    def second(batch):
        with lock:
            order.extend(("second", r["i"]) for r in batch)
        return [{**r, "b": r["a"] + 1} for r in batch]

    return [batch_stage("first", first, 16, client=Slots(8)),
            batch_stage("middle", middle, 64, separable=separable),
            batch_stage("second", second, 16, client=Slots(8))]


def _run(tmp_path, name: str, separable: bool, order: list | None = None):
    order = [] if order is None else order
    result = run_pipeline([{"i": i} for i in range(80)], _stages(order, separable), tmp_path / name,
                          chunk_size=80, keep_rejected=True)
    return list(result.rows()), list(result.rejected()), [
        {k: v for k, v in s.items() if k != "seconds"} for s in result.stages]


@pytest.mark.parametrize("separable", [True, False])
def test_the_next_llm_stage_waits_for_the_chunk_only_without_separable(tmp_path, separable):
    order: list = []
    _run(tmp_path, "w", separable, order)
    before_slow = order[:order.index(("first", 0))]
    seconds = sum(1 for stage, _ in before_slow if stage == "second")
    assert (seconds >= 40) if separable else (seconds == 0), before_slow


def test_separable_gives_the_rows_rejects_and_counts_of_batch_by_batch(tmp_path, monkeypatch):
    streamed = _run(tmp_path, "streamed", True)
    monkeypatch.setenv("TANSAKU_STREAMING", "0")
    assert _run(tmp_path, "batched", True) == streamed == _run(tmp_path, "plain", False)
    assert [r["i"] for r in streamed[0]] == [i for i in range(80) if i % 9 != 4]

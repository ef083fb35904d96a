"""Run a record-local segment as one stream across its chunks, so LLM stages keep every endpoint busy.

A segment (consecutive ``map_stage``/``batch_stage`` stages, ``tansaku.core.runner``) once ran chunk by chunk,
and each batch stage batch by batch: send 32 requests, wait for the slowest answer, send the next 32. Here
records flow instead:

- every record travels tagged with its chunk, and a :class:`ChunkEnd` marker follows a chunk's last record
  through every stage; records leave every stage in input order;
- a batch stage whose client has ``slots`` (an HTTP server pool: slots per endpoint × endpoints) calls its
  function on one record at a time, in a pool of that many threads: a record's requests go out as soon as
  it arrives and a slot is free, and the next stage gets the record as soon as this one finished it, while
  later records, and later chunks, are still in flight;
- a batch stage whose client has ``large_batches`` (vLLM offline) gets ``LARGE_BATCH`` records per call, across
  chunk boundaries, so the engine's own scheduler fills the GPU;
- every other stage runs as the chunked runner ran it, over each chunk's records.

Backpressure: a streaming stage holds at most ``window`` records (waiting for a slot, in flight, or finished
but not passed on yet), so memory stays bounded however far a fast stage runs ahead of a slow one.
``TANSAKU_STREAMING=0`` turns streaming off (every batch stage runs batch by batch, as before): the rows,
counts and ``version`` are the same either way, which the tests check.

    from tansaku.core.streaming import ChunkEnd, run_stream
    for item in run_stream(segment, tagged, stats_for, drops_for):
        ...  # (chunk, record) in input order, and ChunkEnd(chunk) once a chunk has passed every stage
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from tansaku.core.engine import Drop, Record, Stage, StageStats, batches, emit_for, instrumented
from tansaku.core.llm.base import llm_stage

LARGE_BATCH = 4096  # records per call of an offline engine (vLLM): thousands of prompts for its scheduler
WINDOW_PER_SLOT = 16  # records a streaming stage may hold per slot: room behind a slow answer at the head
MIN_WINDOW = 16


@dataclass(frozen=True)
class ChunkEnd:
    """Every record of ``chunk`` has left the stage that passes this on."""

    chunk: int


Tagged = tuple[int, Record]  # (chunk, record)
StatsFor = Callable[[int], list[StageStats]]  # a chunk's counters, one per stage of the segment
DropsFor = Callable[[int, str, Drop], None]  # (chunk, stage name, drop): a dropped record, when kept


class _Failed:
    """An exception raised upstream, in a feeder thread: re-raised where the stream is read."""

    def __init__(self, error: BaseException):
        self.error = error


_DONE = object()


def streaming_enabled() -> bool:
    return os.environ.get("TANSAKU_STREAMING", "1").lower() not in {"0", "false", "no"}


def slots_of(stage: Stage) -> int | None:
    """Records a stage may have in flight at once: its client's slots when it streams, else None."""
    if stage.batch_fn is None or stage.client is None or not streaming_enabled():
        return None
    slots = getattr(stage.client, "slots", None)
    return int(slots) if slots else None


def run_stream(segment: list[Stage], tagged: Iterator[Tagged | ChunkEnd], stats_for: StatsFor,
               drops_for: DropsFor | None) -> Iterator[Tagged | ChunkEnd]:
    """Chain the segment's stages over ``tagged`` (see the module docstring)."""
    stream: Iterator[Tagged | ChunkEnd] = tagged
    for k, stage in enumerate(segment):
        slots = slots_of(stage)
        if slots is not None:
            stream = _streamed(k, stage, stream, stats_for, drops_for, slots)
        elif stage.batch_fn is not None and getattr(stage.client, "large_batches", False):
            stream = _in_large_batches(k, stage, stream, stats_for, drops_for)
        else:
            stream = _per_chunk(k, stage, stream, stats_for, drops_for)
    return stream


class _Peek:
    def __init__(self, it: Iterator):
        self.it, self.head = it, None

    def peek(self):
        if self.head is None:
            self.head = next(self.it, _DONE)
        return self.head

    def take(self):
        head, self.head = self.peek(), None
        return head


class _ChunkDrops:
    """The RejectSink of one chunk for ``instrumented``."""

    def __init__(self, chunk: int, drops_for: DropsFor):
        self.chunk, self.drops_for = chunk, drops_for

    def write(self, stage: str, drop: Drop) -> None:
        self.drops_for(self.chunk, stage, drop)


def _per_chunk(k: int, stage: Stage, upstream: Iterator, stats_for: StatsFor,
               drops_for: DropsFor | None) -> Iterator[Tagged | ChunkEnd]:
    """The stage over each chunk's records, pulled lazily, counted as the chunked runner counted them."""
    if stage.batch_fn is not None and stage.client is not None:  # its LLM calls counted for it (progress line)
        stage = replace(stage, fn=batches(stage.name, _counted_as(stage), stage.batch_size))
    up = _Peek(upstream)
    while (head := up.peek()) is not _DONE:
        if isinstance(head, ChunkEnd):
            yield up.take()
            continue
        chunk = head[0]

        def records() -> Iterator[Record]:
            while isinstance(up.peek(), tuple):
                yield up.take()[1]

        sink = _ChunkDrops(chunk, drops_for) if drops_for is not None else None
        for out in instrumented(stage, records(), stats_for(chunk)[k], sink):
            yield chunk, out


def _counted_as(stage: Stage) -> Callable[[list[Record]], list]:
    def call(batch: list[Record]) -> list:
        with llm_stage(stage.name):
            return stage.batch_fn(batch)

    return call


def _streamed(k: int, stage: Stage, upstream: Iterator, stats_for: StatsFor, drops_for: DropsFor | None,
              slots: int) -> Iterator[Tagged | ChunkEnd]:
    """The stage's function on one record at a time, ``slots`` at once, results in input order."""
    window = max(MIN_WINDOW, WINDOW_PER_SLOT * slots)
    held: queue.Queue = queue.Queue(maxsize=window)  # the backpressure: the feeder blocks when it is full
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"tansaku-{stage.name}")

    def call(record: Record):
        started = time.perf_counter()
        with llm_stage(stage.name):
            outs = stage.batch_fn([record])
        if len(outs) != 1:
            raise ValueError(f"batch stage {stage.name!r} returned {len(outs)} results for 1 record")
        return outs[0], time.perf_counter() - started

    def put(item) -> bool:
        while not stop.is_set():
            try:
                held.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def feed() -> None:
        try:
            for x in upstream:
                if isinstance(x, tuple):
                    x = (x[0], x[1], pool.submit(call, x[1]))
                if not put(x):
                    return
            put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which re-raises it
            put(_Failed(exc))

    feeder = threading.Thread(target=feed, name=f"tansaku-feed-{stage.name}", daemon=True)
    feeder.start()
    try:
        while (x := held.get()) is not _DONE:
            if isinstance(x, _Failed):
                raise x.error
            if isinstance(x, ChunkEnd):
                yield x
                continue
            chunk, record, future = x
            out, seconds = future.result()  # a bug in the stage function is raised here, with its traceback
            yield from _outputs(k, stage, chunk, record, out, seconds, stats_for, drops_for)
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)


def _outputs(k: int, stage: Stage, chunk: int, record: Record, out, seconds: float, stats_for: StatsFor,
             drops_for: DropsFor | None) -> Iterator[Tagged]:
    """What the stage function returned for ``record``: counted for its chunk, drops kept, records passed on."""
    stats = stats_for(chunk)[k]
    stats.received += 1
    stats.seconds += seconds
    for item in emit_for(out, record):
        if isinstance(item, Drop):
            stats.dropped[item.reason] += 1
            if drops_for is not None:
                drops_for(chunk, stage.name, item)
        elif isinstance(item, dict):
            stats.kept += 1
            yield chunk, item
        else:
            raise TypeError(f"stage {stage.name!r} yielded {type(item).__name__}; expected a dict or Drop")


def _in_large_batches(k: int, stage: Stage, upstream: Iterator, stats_for: StatsFor, drops_for: DropsFor | None,
                      size: int | None = None) -> Iterator[Tagged | ChunkEnd]:
    """The stage's function on ``size`` records at a time across chunk boundaries (an offline engine schedules
    them itself); chunk ends pass on after the batch that holds their chunk's last records."""
    size = size or LARGE_BATCH
    held: list = []
    count = 0

    def flush() -> Iterator[Tagged | ChunkEnd]:
        records = [x[1] for x in held if isinstance(x, tuple)]
        started = time.perf_counter()
        with llm_stage(stage.name):
            outs = stage.batch_fn(records) if records else []
        if len(outs) != len(records):
            raise ValueError(f"batch stage {stage.name!r} returned {len(outs)} results for {len(records)} records")
        share = (time.perf_counter() - started) / max(1, len(records))
        results = iter(outs)
        for x in held:
            if isinstance(x, ChunkEnd):
                yield x
            else:
                yield from _outputs(k, stage, x[0], x[1], next(results), share, stats_for, drops_for)
        held.clear()

    for x in upstream:
        held.append(x)
        count += isinstance(x, tuple)
        if count >= size:
            yield from flush()
            count = 0
    yield from flush()

"""Run a record-local segment as one stream across its chunks, so LLM stages keep every endpoint busy.

A segment (consecutive ``map_stage``/``batch_stage`` stages, ``tansaku.core.runner``) once ran chunk by chunk,
and each batch stage batch by batch: send 32 requests, wait for the slowest answer, send the next 32. Here
records flow instead:

- every record travels tagged with its chunk and a *key*, the path of indexes that places it in the order a
  batch-by-batch run would have made it (its index in the chunk, then its index among what each stage made of
  it); a :class:`ChunkEnd` marker follows a chunk's last record through every stage;
- a batch stage whose client has ``slots`` (an HTTP server pool: slots per endpoint × endpoints) calls its
  function on one record at a time, in a pool of that many threads, and passes each record on **as soon as it
  is finished**, whatever came before it: one slow answer holds back neither the records behind it nor their
  later LLM stages, and the next chunk's requests go out while the last ones drain;
- a map stage, and a batch stage with no LLM client declared ``separable`` (a search prefilter, the task's
  finish), applies its function to each record as it arrives; a batch stage whose client has
  ``large_batches`` (vLLM offline) gets ``LARGE_BATCH`` records per call, across chunk boundaries, so the
  engine's own scheduler fills the GPU;
- any other stage runs over each chunk's records in key order, as the chunked runner ran it.

When a client's slots are all taken, a streaming stage's requests wait ranked by ``record_rank`` (stage in
the segment, agent turn, chunk, key; ``tansaku.core.llm.gate``): an earlier stage, with more calls still to
come after it, goes first ("longest remaining path first"), so that when the queue empties every record is at
its last call and the drain is about one call long, not the last records' whole chains.

The runner sorts a chunk's rows (and each stage's drops) by key before it commits the chunk, so the committed
files are byte for byte those of a batch-by-batch run; chunks commit as they finish, in any order.

Backpressure: a streaming stage holds at most ``window`` records (waiting for a slot, in flight, or finished
but not passed on yet), so memory stays bounded however far a fast stage runs ahead of a slow one.
``TANSAKU_STREAMING=0`` turns streaming off (every batch stage runs batch by batch, as before): the rows,
counts and ``version`` are the same either way, which the tests check.

    from tansaku.core.streaming import ChunkEnd, run_stream
    for item in run_stream(segment, tagged, stats_for, drops_for):
        ...  # (chunk, key, record) as finished, and ChunkEnd(chunk) once a chunk has passed every stage
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

from tansaku.core.engine import Drop, Record, Stage, StageStats, batches, emit_for, instrumented
from tansaku.core.llm.base import llm_priority, llm_stage, record_rank

LARGE_BATCH = 4096  # records per call of an offline engine (vLLM): thousands of prompts for its scheduler
WINDOW_PER_SLOT = 16  # records a streaming stage may hold per slot: room behind slow answers
MIN_WINDOW = 16


@dataclass(frozen=True)
class ChunkEnd:
    """Every record of ``chunk`` has left the stage that passes this on."""

    chunk: int


Key = tuple[int, ...]  # a record's place in batch-by-batch order: sorted keys give that order back
Tagged = tuple[int, Key, Record]  # (chunk, key, record)
StatsFor = Callable[[int], list[StageStats]]  # a chunk's counters, one per stage of the segment
# (chunk, stage name, key, drop): a dropped record, when kept
DropsFor = Callable[[int, str, Key, Drop], None]


def in_key_order(pairs: list[tuple[Key, object]]) -> list:
    """The values of ``(key, value)`` pairs in key order: a chunk's rows or drops as batch by batch made
    them."""
    return [value for _, value in sorted(pairs, key=lambda pair: pair[0])]


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
    in_order = True  # records still arrive in key order, chunk after chunk (nothing streamed before)
    for k, stage in enumerate(segment):
        slots = slots_of(stage)
        if slots is not None:
            stream = _streamed(k, stage, stream, stats_for, drops_for, slots)
            in_order = False
        elif stage.batch_fn is not None and getattr(stage.client, "large_batches", False):
            stream = _in_large_batches(k, stage, stream, stats_for, drops_for)
        elif stage.record_fn is not None and stage.client is None:  # a map stage, a separable batch stage
            stream = _per_record(k, stage, stream, stats_for, drops_for)
        else:
            stream = _per_chunk(k, stage, stream, stats_for, drops_for, in_order)
    return stream


def _outputs(k: int, stage: Stage, chunk: int, key: Key, record: Record, out, seconds: float,
             stats_for: StatsFor, drops_for: DropsFor | None) -> Iterator[Tagged]:
    """What the stage function returned for ``record``: counted for its chunk, drops kept, records passed on,
    each keyed under ``key`` by its place among the outputs."""
    stats = stats_for(chunk)[k]
    stats.received += 1
    stats.seconds += seconds
    for j, item in enumerate(emit_for(out, record)):
        if isinstance(item, Drop):
            stats.dropped[item.reason] += 1
            if drops_for is not None:
                drops_for(chunk, stage.name, (*key, j), item)
        elif isinstance(item, dict):
            stats.kept += 1
            yield chunk, (*key, j), item
        else:
            raise TypeError(f"stage {stage.name!r} yielded {type(item).__name__}; expected a dict or Drop")


def _per_record(k: int, stage: Stage, upstream: Iterator, stats_for: StatsFor,
                drops_for: DropsFor | None) -> Iterator[Tagged | ChunkEnd]:
    """A map stage's function on each record as it arrives."""
    for x in upstream:
        if isinstance(x, ChunkEnd):
            yield x
            continue
        chunk, key, record = x
        started = time.perf_counter()
        out = stage.record_fn(record)
        seconds = time.perf_counter() - started
        yield from _outputs(k, stage, chunk, key, record, out, seconds, stats_for, drops_for)


class _ChunkDrops:
    """The RejectSink of one chunk for ``instrumented``: drops keyed in the order the stage made them."""

    def __init__(self, chunk: int, drops_for: DropsFor):
        self.chunk, self.drops_for, self.count = chunk, drops_for, 0

    def write(self, stage: str, drop: Drop) -> None:
        self.drops_for(self.chunk, stage, (self.count,), drop)
        self.count += 1


def _per_chunk(k: int, stage: Stage, upstream: Iterator, stats_for: StatsFor, drops_for: DropsFor | None,
               in_order: bool) -> Iterator[Tagged | ChunkEnd]:
    """The stage over each chunk's records in key order, counted as the chunked runner counted them; its
    outputs are keyed afresh by their place in the chunk. In order, records are pulled lazily; after a
    streaming stage, a chunk's records are held until its end marker arrives."""
    if stage.batch_fn is not None and stage.client is not None:  # its LLM calls counted (progress line)
        stage = replace(stage, fn=batches(stage.name, _counted_as(stage), stage.batch_size))

    def run(chunk: int, records: Iterator[Record]) -> Iterator[Tagged]:
        sink = _ChunkDrops(chunk, drops_for) if drops_for is not None else None
        for n, out in enumerate(instrumented(stage, records, stats_for(chunk)[k], sink)):
            yield chunk, (n,), out

    if not in_order:
        held: dict[int, list[tuple[Key, Record]]] = defaultdict(list)
        for x in upstream:
            if isinstance(x, ChunkEnd):
                records = in_key_order(held.pop(x.chunk, []))
                # as in order: a chunk with no records left (or committed before) only passes its end
                if records:
                    yield from run(x.chunk, iter(records))
                yield x
            else:
                held[x[0]].append((x[1], x[2]))
        return

    up = _Peek(upstream)
    while (head := up.peek()) is not _DONE:
        if isinstance(head, ChunkEnd):
            yield up.take()
            continue

        def records() -> Iterator[Record]:
            while isinstance(up.peek(), tuple):
                yield up.take()[2]

        yield from run(head[0], records())


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


def _counted_as(stage: Stage) -> Callable[[list[Record]], list]:
    def call(batch: list[Record]) -> list:
        with llm_stage(stage.name):
            return stage.batch_fn(batch)

    return call


def _streamed(k: int, stage: Stage, upstream: Iterator, stats_for: StatsFor, drops_for: DropsFor | None,
              slots: int) -> Iterator[Tagged | ChunkEnd]:
    """The stage's function on one record at a time, ``slots`` at once, each record passed on when finished
    (``_StreamedStage``). A generator, so that nothing starts before the stream is read."""
    yield from _StreamedStage(k, stage, stats_for, drops_for, slots).run(upstream)


class _StreamedStage:
    """One streaming stage. A feeder thread reads upstream and submits each record once the window has room;
    finished calls land in ``finished``. The reader (``run``) passes on each finished record's outputs and a
    chunk's end marker once the chunk's end came from upstream and none of its records is still held."""

    def __init__(self, k: int, stage: Stage, stats_for: StatsFor, drops_for: DropsFor | None, slots: int):
        self.k, self.stage, self.stats_for, self.drops_for = k, stage, stats_for, drops_for
        self.window = threading.Semaphore(max(MIN_WINDOW, WINDOW_PER_SLOT * slots))  # the backpressure
        # (chunk, key, record, future) | ChunkEnd | _Failed | _DONE
        self.finished: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"tansaku-{stage.name}")
        self.held: defaultdict[int, int] = defaultdict(int)  # records of each chunk submitted, not passed on
        self.lock = threading.Lock()
        self.ended: set[int] = set()  # chunks whose end marker came from upstream and was not passed on

    def call(self, record: Record, place: tuple[int, Key]):
        """The stage on one record. Its requests wait for a server slot ranked by ``record_rank``: this
        stage's place in the segment first, then the agent turn, then ``place`` (chunk, key)."""
        started = time.perf_counter()
        with llm_stage(self.stage.name), llm_priority(record_rank(self.k, *place)):
            outs = self.stage.batch_fn([record])
        if len(outs) != 1:
            raise ValueError(f"batch stage {self.stage.name!r} returned {len(outs)} results for 1 record")
        return outs[0], time.perf_counter() - started

    def submit(self, chunk: int, key: Key, record: Record) -> None:
        future: Future = self.pool.submit(self.call, record, (chunk, key))
        future.add_done_callback(lambda f: self.finished.put((chunk, key, record, f)))

    def feed(self, upstream: Iterator) -> None:
        """The feeder thread: every upstream item into the pool (records) or onto ``finished`` (markers)."""
        try:
            for x in upstream:
                if isinstance(x, ChunkEnd):
                    self.finished.put(x)
                    continue
                if not self._wait_for_room():
                    return
                with self.lock:  # counted before submitting: the reader never sees a chunk as drained early
                    self.held[x[0]] += 1
                self.submit(*x)
            self.finished.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which re-raises it
            self.finished.put(_Failed(exc))

    def _wait_for_room(self) -> bool:
        """Take a place in the window, polling so that a stopped reader ends the feeder (False then)."""
        while not self.window.acquire(timeout=0.1):
            if self.stop.is_set():
                return False
        return not self.stop.is_set()

    def run(self, upstream: Iterator) -> Iterator[Tagged | ChunkEnd]:
        """The reader: starts the feeder, passes on what finishes, and stops the pool however it ends."""
        feeder = threading.Thread(target=self.feed, args=(upstream,), name=f"tansaku-feed-{self.stage.name}",
                                  daemon=True)
        feeder.start()
        upstream_done = False
        try:
            # after _DONE only the reader changes held
            while not (upstream_done and not self.held and not self.ended):
                x = self.finished.get()
                if x is _DONE:
                    upstream_done = True
                elif isinstance(x, _Failed):
                    raise x.error
                elif isinstance(x, ChunkEnd):
                    yield from self._chunk_end(x)
                else:
                    yield from self._record_finished(*x)
        finally:
            self.stop.set()
            self.pool.shutdown(wait=False, cancel_futures=True)

    def _chunk_end(self, end: ChunkEnd) -> Iterator[ChunkEnd]:
        """A chunk's end from upstream: passed on now if none of its records is held, else once they are."""
        with self.lock:  # every record of the chunk was counted before its end marker was put
            pending = self.held.get(end.chunk, 0)
        if pending:
            self.ended.add(end.chunk)
        else:
            yield end

    def _record_finished(self, chunk: int, key: Key, record: Record,
                         future: Future) -> Iterator[Tagged | ChunkEnd]:
        """A finished call's outputs, then its chunk's end marker if it was the last record the chunk waited
        on."""
        out, seconds = future.result()  # a bug in the stage function is raised here, with its traceback
        yield from _outputs(self.k, self.stage, chunk, key, record, out, seconds, self.stats_for,
                            self.drops_for)
        self.window.release()
        with self.lock:
            self.held[chunk] -= 1
            drained = not self.held[chunk]
            if drained:
                del self.held[chunk]
        if drained and chunk in self.ended:
            self.ended.discard(chunk)
            yield ChunkEnd(chunk)


def _in_large_batches(k: int, stage: Stage, upstream: Iterator, stats_for: StatsFor,
                      drops_for: DropsFor | None, size: int | None = None) -> Iterator[Tagged | ChunkEnd]:
    """The stage's function on ``size`` records at a time across chunk boundaries (an offline engine schedules
    them itself); chunk ends pass on after the batch that holds their chunk's last records."""
    size = size or LARGE_BATCH
    held: list = []
    count = 0

    def flush() -> Iterator[Tagged | ChunkEnd]:
        records = [x[2] for x in held if isinstance(x, tuple)]
        started = time.perf_counter()
        with llm_stage(stage.name):
            outs = stage.batch_fn(records) if records else []
        if len(outs) != len(records):
            raise ValueError(f"batch stage {stage.name!r} returned {len(outs)} results for "
                             f"{len(records)} records")
        share = (time.perf_counter() - started) / max(1, len(records))
        results = iter(outs)
        for x in held:
            if isinstance(x, ChunkEnd):
                yield x
            else:
                yield from _outputs(k, stage, x[0], x[1], x[2], next(results), share, stats_for, drops_for)
        held.clear()

    for x in upstream:
        held.append(x)
        count += isinstance(x, tuple)
        if count >= size:
            yield from flush()
            count = 0
    yield from flush()

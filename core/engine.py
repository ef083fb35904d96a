"""The pipeline engine: small stages that take and yield records, drop with a named reason, and are
counted for free. ``tansaku.core.runner.run_pipeline`` runs them with checkpoints so a killed run resumes.

A pipeline is a plain list of stages::

    from tansaku.core.engine import Drop, map_stage, global_stage
    from tansaku.core.runner import run_pipeline

    def strip(r):
        text = r["text"].strip()
        return {**r, "text": text} if text else Drop("empty_text")

    def dedup(records):
        seen = set()
        for r in records:
            if r["text"] in seen:
                yield Drop("duplicate")
            else:
                seen.add(r["text"])
                yield r

    result = run_pipeline(source_rows, [map_stage("strip", strip), global_stage("dedup", dedup)],
                          work_dir="out/.work")
    for row in result.rows(): ...
    result.stages  # [{"name": "strip", "seconds": …, "kept": …, "dropped": {"empty_text": 1}}, …]

Parameters. Like datatrove's steps, a stage carries its thresholds and knobs in ``params`` and the identity
of the LLM it calls in ``llm`` (backend + model, from ``client.describe()``)::

    batch_stage("judge", judge_fn, 32, params={"threshold": 0.75}, llm=client)

``tansaku.core.store.build_dataset`` hashes every stage's name, params and llm into the resume fingerprint
and lists them in the manifest, so a rerun with another threshold or model is refused instead of mixed.

Rejected records. ``Drop(reason, record=…, detail=…)`` may carry the dropped record;
``map_stage``/``batch_stage`` attach their input record themselves. With
``tansaku.core.runner.run_pipeline(…, keep_rejected=True)`` every drop is also written, chunk by chunk like
the output (datatrove's exclusion writer), as ``{"stage", "reason", "detail", "record"}`` with ``record`` a
JSON string (None when a global stage dropped without naming one): ``result.rejected()``.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, Protocol

from tansaku.core import jsontext

Record = dict[str, Any]



class RejectSink(Protocol):
    """Where dropped records go when they are kept (``tansaku.core.runner`` writes them per chunk)."""

    def write(self, stage: str, drop: Drop) -> None: ...

@dataclass(frozen=True)
class Drop:
    """Returned (or yielded) by a stage instead of a record: the record is dropped for ``reason``.

    ``record`` (the dropped record) and ``detail`` (free text for humans) only feed the rejected split;
    two drops are equal when their reasons are.

    >>> Drop("too_short") == Drop("too_short", record={"id": 1}, detail="3 chars")
    True
    """

    reason: str
    record: dict | None = field(default=None, compare=False, repr=False)
    detail: str = field(default="", compare=False)


@dataclass
class Stage:
    """A named step. ``fn`` maps an iterator of records to an iterator of records and :class:`Drop`s.

    ``local`` stages treat each record (or batch) on its own, so they can be checkpointed per chunk;
    global stages (dedup, joins, statistics) see the whole stream.
    """

    name: str
    fn: Callable[[Iterator[Record]], Iterable[Record | Drop]]
    local: bool = True
    params: dict = field(default_factory=dict)  # thresholds and knobs: part of the resume fingerprint
    llm: dict | None = None  # identity of the LLM the stage calls (llm_identity), also fingerprinted
    # How the runner may execute it (never fingerprinted: they do not change what a stage answers).
    # A batch stage keeps its per-batch function, so a streaming runner can call it on one record at a time;
    # ``client`` is the LLM client it calls, whose ``slots`` tell how many records may be in flight at once.
    batch_fn: Callable[[list[Record]], list] | None = field(default=None, compare=False, repr=False)
    batch_size: int | None = None
    # A map stage keeps its per-record function too: a stream applies it to each record as it arrives, in
    # whatever order the stages before it finished them.
    record_fn: Callable[[Record], Any] | None = field(default=None, compare=False, repr=False)
    client: Any = field(default=None, compare=False, repr=False)

    def recipe(self) -> dict:
        """What a rerun must match to reuse this stage's checkpoints: name, params, LLM identity."""
        return {"name": self.name, "params": self.params, "llm": self.llm}

    def configured(self, params: dict | None = None, llm: Any = None) -> Stage:
        """This stage with more ``params`` and the LLM it calls recorded (for stages built by a helper
        that does not take them)."""
        return replace(self, params={**self.params, **(params or {})},
                       llm=llm_identity(llm) if llm is not None else self.llm)


def llm_identity(client: Any) -> dict | None:
    """Backend + model of an LLM client (or of its ``describe()`` dict), None for no LLM. Operational
    settings (URLs, concurrency, cache, retry counts) are left out: changing them must not block a resume.

    >>> llm_identity({"backend": "scripted", "model": "scripted:a.jsonl", "cache": "/tmp/c", "retries": 3})
    {'backend': 'scripted', 'model': 'scripted:a.jsonl'}
    >>> llm_identity(None) is None
    True
    """
    if client is None:
        return None
    if isinstance(client, dict):
        info = client
    elif hasattr(client, "describe"):
        info = client.describe()
    else:  # never str(client): an object's default repr holds its address, which changes every run
        info = {"backend": type(client).__name__, "model": getattr(client, "model", type(client).__name__)}
    return {"backend": info.get("backend"), "model": info.get("model")}


def _params(params: dict | None, llm: Any) -> tuple[dict, dict | None]:
    return dict(params or {}), llm_identity(llm)


def _with_record(out: Record | Drop, record: Record) -> Record | Drop:
    """A Drop that names no record drops ``record`` (the stage's input)."""
    if isinstance(out, Drop) and out.record is None:
        return replace(out, record=record)
    return out


def _emit(out: Record | Drop | list | None) -> Iterator[Record | Drop]:
    if out is None:
        raise TypeError("a stage function returned None; return the record, a list of records, or "
                        "Drop(reason)")
    if isinstance(out, list):
        yield from out
    else:
        yield out


def emit_for(out: Record | Drop | list | None, record: Record) -> Iterator[Record | Drop]:
    """What a stage function returned for ``record``, one item at a time (a bare Drop names ``record``)."""
    for item in _emit(out):
        yield _with_record(item, record)


def map_stage(name: str, fn: Callable[[Record], Record | Drop | list[Record]], *, params: dict | None = None,
              llm: Any = None) -> Stage:
    """A record-local stage: ``fn(record)`` returns the record, a list of records (fan-out) or a Drop.
    ``params``/``llm``: see the module docstring."""

    def run(records: Iterator[Record]) -> Iterator[Record | Drop]:
        for record in records:
            yield from emit_for(fn(record), record)

    return Stage(name, run, True, *_params(params, llm), record_fn=fn)


def batch_stage(name: str, fn: Callable[[list[Record]], list], batch_size: int = 64, *,
                params: dict | None = None, llm: Any = None, client: Any = None,
                separable: bool = False) -> Stage:
    """A record-local stage over batches (LLM calls): ``fn(batch)`` returns one result per input record,
    each a record, a list of records or a Drop. ``batch_size`` is recorded in ``params``.

    ``client``: the LLM client ``fn`` calls (default: ``llm`` when that is a client). When the client has
    ``slots`` (an HTTP server pool), the runner streams: it calls ``fn`` on one record at a time, as many at
    once as the client has slots, so ``fn``'s result for a record must not depend on the other records of
    its batch (``tansaku.core.streaming``). A client with ``large_batches`` (vLLM offline) gets a whole
    chunk per call instead.

    ``separable``: ``fn``'s result for a record never depends on the other records of its batch, so a stage
    with no streaming client may run on each record as it arrives (``fn([record])``) instead of holding a
    stream until a chunk's every record reached it (a search prefilter between two LLM stages). Not
    fingerprinted: the outputs are the same either way."""
    if client is None and llm is not None and not isinstance(llm, dict):
        client = llm
    recipe = _params({**(params or {}), "batch_size": batch_size}, llm)
    return Stage(name, batches(name, fn, batch_size), True, *recipe, batch_fn=fn, batch_size=batch_size,
                 client=client,
                 record_fn=_one_record(name, fn) if separable else None)


def _one_record(name: str, fn: Callable[[list[Record]], list]) -> Callable[[Record], Any]:
    """``fn`` of a separable batch stage on one record: its one result."""

    def call(record: Record):
        outs = fn([record])
        if len(outs) != 1:
            raise ValueError(f"batch stage {name!r} returned {len(outs)} results for 1 record")
        return outs[0]

    return call


def batches(name: str, fn: Callable[[list[Record]], list], batch_size: int):
    """``records -> outputs`` by calling ``fn`` on consecutive batches of ``batch_size`` records."""

    def run(records: Iterator[Record]) -> Iterator[Record | Drop]:
        it = iter(records)
        while batch := list(islice(it, batch_size)):
            outs = fn(batch)
            if len(outs) != len(batch):
                raise ValueError(f"batch stage {name!r} returned {len(outs)} results for {len(batch)} "
                                 f"records")
            for record, out in zip(batch, outs):
                yield from emit_for(out, record)

    return run


def global_stage(name: str, fn: Callable[[Iterator[Record]], Iterable[Record | Drop]], *,
                 params: dict | None = None, llm: Any = None) -> Stage:
    """A stage that sees the whole stream (dedup, joins, statistics). Checkpointed as one unit. Its drops
    carry a record only when ``fn`` yields ``Drop(reason, record=…)``."""
    return Stage(name, fn, False, *_params(params, llm))


def rng_for(seed: int, *key: Any) -> random.Random:
    """A random generator that depends only on ``seed`` and ``key``, so a resumed or reordered run draws
    the same numbers for the same record.

    >>> rng_for(0, "q1").random() == rng_for(0, "q1").random()
    True
    """
    digest = hashlib.sha256(jsontext.dumps([seed, *key], default=str).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass
class StageStats:
    name: str
    seconds: float = 0.0
    received: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)

    def add(self, other: dict) -> None:
        self.seconds += other["seconds"]
        self.received += other["received"]
        self.kept += other["kept"]
        self.dropped.update(other["dropped"])

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "seconds": round(self.seconds, 4),
            "received": self.received,
            "kept": self.kept,
            "dropped": dict(sorted(self.dropped.items())),
        }


def instrumented(stage: Stage, upstream: Iterable[Record], stats: StageStats,
                  reject: RejectSink | None = None,
                  tick: Callable[[], None] | None = None) -> Iterator[Record]:
    """Run ``stage`` over ``upstream`` counting records in, kept and dropped by reason, and the seconds
    spent inside the stage itself (time spent pulling from upstream stages is subtracted). Drops go to
    ``reject`` too when rejected records are kept. ``tick()`` is called after each record received
    (progress reporting; it must be cheap)."""
    upstream_seconds = 0.0

    def pull() -> Iterator[Record]:
        nonlocal upstream_seconds
        it = iter(upstream)
        while True:
            t = time.perf_counter()
            try:
                record = next(it)
            except StopIteration:
                upstream_seconds += time.perf_counter() - t
                return
            upstream_seconds += time.perf_counter() - t
            stats.received += 1
            if tick is not None:
                tick()
            yield record

    out = iter(stage.fn(pull()))
    while True:
        t, before = time.perf_counter(), upstream_seconds
        try:
            item = next(out)
        except StopIteration:
            stats.seconds += time.perf_counter() - t - (upstream_seconds - before)
            return
        stats.seconds += time.perf_counter() - t - (upstream_seconds - before)
        if isinstance(item, Drop):
            stats.dropped[item.reason] += 1
            if reject is not None:
                reject.write(stage.name, item)
        elif isinstance(item, dict):
            stats.kept += 1
            yield item
        else:
            raise TypeError(f"stage {stage.name!r} yielded {type(item).__name__}; expected a dict or Drop")

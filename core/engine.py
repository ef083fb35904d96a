"""The pipeline engine: small stages that take and yield records, drop with a named reason, and are
counted for free; work is checkpointed so a killed run resumes where it stopped.

A pipeline is a plain list of stages::

    from tansaku.core.engine import Drop, map_stage, global_stage, run_pipeline

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

Resumability. Consecutive record-local stages (``map_stage``/``batch_stage``) form a *segment* that runs
chunk by chunk: chunk ``i`` holds input records ``[i*chunk_size, (i+1)*chunk_size)``, and its output and
counts are written atomically (temp file + rename) as soon as it finishes. A ``global_stage`` is a segment
of its own: it sees every record, so it is redone whole if it was interrupted, and committed at the end.
On a rerun with the same work dir, committed chunks are read back instead of recomputed, so the final
rows and counts equal those of an uninterrupted run, with nothing duplicated or lost. Stages must be
deterministic for the same input; take randomness from :func:`rng_for`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class Drop:
    """Returned (or yielded) by a stage instead of a record: the record is dropped for ``reason``."""

    reason: str


@dataclass
class Stage:
    """A named step. ``fn`` maps an iterator of records to an iterator of records and :class:`Drop`s.

    ``local`` stages treat each record (or batch) on its own, so they can be checkpointed per chunk;
    global stages (dedup, joins, statistics) see the whole stream.
    """

    name: str
    fn: Callable[[Iterator[Record]], Iterable[Record | Drop]]
    local: bool = True


def _emit(out: Record | Drop | list | None) -> Iterator[Record | Drop]:
    if out is None:
        raise TypeError("a stage function returned None; return the record, a list of records, or Drop(reason)")
    if isinstance(out, list):
        yield from out
    else:
        yield out


def map_stage(name: str, fn: Callable[[Record], Record | Drop | list[Record]]) -> Stage:
    """A record-local stage: ``fn(record)`` returns the record, a list of records (fan-out) or a Drop."""

    def run(records: Iterator[Record]) -> Iterator[Record | Drop]:
        for record in records:
            yield from _emit(fn(record))

    return Stage(name, run, local=True)


def batch_stage(name: str, fn: Callable[[list[Record]], list], batch_size: int = 64) -> Stage:
    """A record-local stage over batches (LLM calls): ``fn(batch)`` returns one result per input record,
    each a record, a list of records or a Drop."""

    def run(records: Iterator[Record]) -> Iterator[Record | Drop]:
        it = iter(records)
        while batch := list(islice(it, batch_size)):
            outs = fn(batch)
            if len(outs) != len(batch):
                raise ValueError(f"batch stage {name!r} returned {len(outs)} results for {len(batch)} records")
            for out in outs:
                yield from _emit(out)

    return Stage(name, run, local=True)


def global_stage(name: str, fn: Callable[[Iterator[Record]], Iterable[Record | Drop]]) -> Stage:
    """A stage that sees the whole stream (dedup, joins, statistics). Checkpointed as one unit."""
    return Stage(name, fn, local=False)


def rng_for(seed: int, *key: Any) -> random.Random:
    """A random generator that depends only on ``seed`` and ``key``, so a resumed or reordered run draws
    the same numbers for the same record.

    >>> rng_for(0, "q1").random() == rng_for(0, "q1").random()
    True
    """
    digest = hashlib.sha256(json.dumps([seed, *key], ensure_ascii=False, default=str).encode()).digest()
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


def _instrumented(stage: Stage, upstream: Iterable[Record], stats: StageStats) -> Iterator[Record]:
    """Run ``stage`` over ``upstream`` counting records in, kept and dropped by reason, and the seconds
    spent inside the stage itself (time spent pulling from upstream stages is subtracted)."""
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
        elif isinstance(item, dict):
            stats.kept += 1
            yield item
        else:
            raise TypeError(f"stage {stage.name!r} yielded {type(item).__name__}; expected a dict or Drop")


def _chain(stages: list[Stage], records: Iterable[Record], stats: list[StageStats]) -> Iterator[Record]:
    stream: Iterable[Record] = records
    for stage, st in zip(stages, stats):
        stream = _instrumented(stage, stream, st)
    return iter(stream)


# ---------------------------------------------------------------- checkpoint files (JSON lines)


def _write_atomic_jsonl(path: Path, records: Iterable[Record]) -> int:
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False))
            f.write("\n")
            n += 1
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return n


def _write_atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _read_jsonl(path: Path) -> Iterator[Record]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


@dataclass
class PipelineResult:
    """What a run produced: the committed output chunks (read lazily) and the per-stage counts."""

    output_files: list[Path]
    stats: list[StageStats]
    resumed_chunks: int = 0

    def rows(self) -> Iterator[Record]:
        for path in self.output_files:
            yield from _read_jsonl(path)

    @property
    def stages(self) -> list[dict]:
        return [s.as_dict() for s in self.stats]


def _segments(stages: list[Stage]) -> list[list[Stage]]:
    segments: list[list[Stage]] = []
    for stage in stages:
        if stage.local and segments and segments[-1][0].local:
            segments[-1].append(stage)
        else:
            segments.append([stage])
    return segments


def run_pipeline(
    source: Iterable[Record] | Callable[[], Iterable[Record]],
    stages: list[Stage],
    work_dir: str | Path,
    *,
    chunk_size: int = 1000,
    progress: Callable[[str, int], None] | None = None,
) -> PipelineResult:
    """Run ``stages`` over ``source``, checkpointing into ``work_dir`` (see the module docstring).

    ``source`` must yield the same records in the same order on every run (files, datasets). It may be
    a zero-argument callable so it is only opened when something must actually be computed.
    ``progress(stage_name, n_records)`` is called after each committed chunk.
    """
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ValueError(f"stage names must be unique, got {names}")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    all_stats = [StageStats(s.name) for s in stages]
    stats_by_name = {s.name: s for s in all_stats}
    resumed = 0
    inputs: Callable[[], Iterable[Record]] = source if callable(source) else (lambda: source)
    files: list[Path] = []

    for k, segment in enumerate(_segments(stages)):
        seg_dir = work / f"segment-{k:02d}-{segment[0].name}"
        done_marker = seg_dir / "done.json"
        if done_marker.exists():
            # A finished segment (local or global): reuse its files and counts as they are.
            done = json.loads(done_marker.read_text(encoding="utf-8"))
            for s in done["stats"]:
                stats_by_name[s["name"]].add(s)
            files = [seg_dir / name for name in done["files"]]
            resumed += len(files)
        elif segment[0].local:
            files, n_resumed = _run_local_segment(segment, inputs(), seg_dir, chunk_size, stats_by_name, progress)
            resumed += n_resumed
        else:
            files = _run_global_segment(segment[0], inputs(), seg_dir, chunk_size, stats_by_name, progress)
        inputs = _reader(list(files))

    return PipelineResult(files, all_stats, resumed)


def _reader(files: list[Path]) -> Callable[[], Iterator[Record]]:
    return lambda: (r for path in files for r in _read_jsonl(path))


def _run_local_segment(segment, records, seg_dir, chunk_size, stats_by_name, progress):
    seg_dir.mkdir(parents=True, exist_ok=True)
    files, resumed = [], 0
    it = iter(records)
    seg_totals = {s.name: StageStats(s.name) for s in segment}
    i = 0
    while True:
        chunk = list(islice(it, chunk_size))
        if not chunk:
            break
        out_path = seg_dir / f"chunk-{i:06d}.jsonl"
        stats_path = seg_dir / f"chunk-{i:06d}.stats.json"
        if stats_path.exists() and out_path.exists():
            chunk_stats = json.loads(stats_path.read_text(encoding="utf-8"))
            resumed += 1
        else:
            local = [StageStats(s.name) for s in segment]
            n = _write_atomic_jsonl(out_path, _chain(segment, chunk, local))
            chunk_stats = [s.as_dict() for s in local]
            # The stats file is the commit marker: written after the data file is in place.
            _write_atomic_json(stats_path, chunk_stats)
            if progress:
                progress(segment[-1].name, n)
        for s in chunk_stats:
            seg_totals[s["name"]].add(s)
            stats_by_name[s["name"]].add(s)
        files.append(out_path)
        i += 1
    _write_atomic_json(
        seg_dir / "done.json",
        {"files": [f.name for f in files], "stats": [s.as_dict() for s in seg_totals.values()]},
    )
    return files, resumed


def _run_global_segment(stage, records, seg_dir, chunk_size, stats_by_name, progress):
    # Redo from scratch: a half-finished global stage cannot be resumed (its state is gone).
    tmp_dir = seg_dir.with_name(seg_dir.name + ".partial")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    st = StageStats(stage.name)
    out = _instrumented(stage, records, st)
    names = []
    i = 0
    while chunk := list(islice(out, chunk_size)):
        name = f"chunk-{i:06d}.jsonl"
        _write_atomic_jsonl(tmp_dir / name, chunk)
        names.append(name)
        if progress:
            progress(stage.name, len(chunk))
        i += 1
    _write_atomic_json(tmp_dir / "done.json", {"files": names, "stats": [st.as_dict()]})
    shutil.rmtree(seg_dir, ignore_errors=True)
    os.replace(tmp_dir, seg_dir)
    stats_by_name[stage.name].add(st.as_dict())
    return [seg_dir / n for n in names]

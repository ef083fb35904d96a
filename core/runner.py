"""Run a list of stages (``tansaku.core.engine``) with chunk checkpoints, so a killed run resumes.

    from tansaku.core.runner import run_pipeline
    result = run_pipeline(source_rows, stages, work_dir="out/.work", chunk_size=512, keep_rejected=True)
    rows, drops = list(result.rows()), list(result.rejected())

Resumability. Consecutive record-local stages (``map_stage``/``batch_stage``) form a *segment*, cut into
chunks: chunk ``i`` holds input records ``[i*chunk_size, (i+1)*chunk_size)``, and its output and counts are
written atomically (temp file + rename) as soon as it finishes. The segment streams across its chunks
(``tansaku.core.streaming``): LLM stages keep their endpoints' slots busy, and each chunk commits, its rows
in input order, as soon as its last record is through. A ``global_stage`` is a segment
of its own: it sees every record, so it is redone whole if it was interrupted, and committed at the end.
On a rerun with the same work dir, committed chunks are read back instead of recomputed, so the final
rows and counts equal those of an uninterrupted run, with nothing duplicated or lost. Stages must be
deterministic for the same input; take randomness from :func:`rng_for`.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from tansaku.core import jsontext, safe_write
from tansaku.core.engine import Drop, Record, Stage, StageStats, instrumented
from tansaku.core.jsonl import iter_jsonl
from tansaku.core.redact import redact_text
from tansaku.core.streaming import ChunkEnd, in_key_order, run_stream

# progress(stats, total, final): a stage's running counts (see ``run_pipeline``)
Progress = Callable[[StageStats, int | None, bool], None]


class _JsonlFile:
    """A JSON-lines file written line by line under a fresh temp name and moved into place by ``commit``
    (after an fsync; ``tansaku.core.safe_write``): a chunk's output, its rejected records, a global stage's
    chunks. Readers never see half a file, and a link planted at the name is replaced, not written through."""

    def __init__(self, path: Path):
        self.path, self.out = path, safe_write.AtomicFile(path)
        self.file = self.out.file

    def write(self, row: Record) -> None:
        self.file.write(jsontext.dumps(row))  # a lone surrogate (from any source) is written as U+FFFD
        self.file.write("\n")

    def commit(self) -> Path:
        return self.out.commit()


class _Rejects:
    """The rejected records of a global stage, written as it drops them and committed before its ``done.json``
    (a chunk's are written whole, before its commit marker), so a resumed build has them all."""

    def __init__(self, path: Path):
        self.file = _JsonlFile(path)

    def write(self, stage: str, drop: Drop) -> None:
        self.file.write(_rejected_row(stage, drop))

    def commit(self) -> Path:
        return self.file.commit()


def _rejected_row(stage: str, drop: Drop) -> Record:
    record = None if drop.record is None else jsontext.dumps(drop.record, default=str)
    # detail is free text, often an error naming an endpoint (user:pass@, ?api-key=): the rejected split is
    # published with the dataset. The record is the stage's input data, kept as it is.
    detail = redact_text(str(drop.detail or ""))
    return {"stage": stage, "reason": drop.reason, "detail": detail, "record": record}


# ---------------------------------------------------------------- checkpoint files (JSON lines)


def _write_atomic_jsonl(path: Path, records: Iterable[Record]) -> int:
    out, n = _JsonlFile(path), 0
    try:
        for r in records:
            out.write(r)
            n += 1
    except BaseException:
        out.out.discard()  # never the final name: a rerun redoes it
        raise
    out.commit()
    return n


def _write_atomic_json(path: Path, obj: Any) -> None:
    safe_write.write_text_atomic(path, jsontext.dumps(obj, indent=1))


def _read_jsonl(path: Path) -> Iterator[Record]:
    return (row for _, row in iter_jsonl(path, objects=False))


@dataclass
class PipelineResult:
    """What a run produced: the committed output chunks (read lazily), the per-stage counts and, with
    ``keep_rejected``, the rejected-record files of every stage."""

    output_files: list[Path]
    stats: list[StageStats]
    resumed_chunks: int = 0
    rejected_files: list[Path] = field(default_factory=list)
    input_chunks: int = 0  # chunks the first segment cut the input into (a shard run reports it)
    first_segment: str = ""  # that segment's folder name under the work dir

    def rows(self) -> Iterator[Record]:
        for path in self.output_files:
            yield from _read_jsonl(path)

    def rejected(self) -> Iterator[Record]:
        """``{"stage", "reason", "detail", "record"}`` per dropped record, in pipeline order."""
        for path in self.rejected_files:
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
    progress: Progress | None = None,
    keep_rejected: bool = False,
    shard: Callable[[int], bool] | None = None,
) -> PipelineResult:
    """Run ``stages`` over ``source``, checkpointing into ``work_dir`` (see the module docstring).

    ``source`` must yield the same records in the same order on every run (files, datasets). It may be
    a zero-argument callable so it is only opened when something must actually be computed.
    ``progress(stats, total, final)`` gets each stage's running counts
    (``tansaku.core.progress.BuildProgress`` shows them) when its segment starts, after each committed chunk
    and, for a global stage, after each record it reads; ``total`` is what the stage will receive when known.
    ``keep_rejected``: also write every dropped record (``result.rejected()``); a work dir must be resumed
    with the same setting. ``shard(chunk) -> bool``: run the stages up to the first record-local segment, and
    of that segment only the chunks ``shard`` accepts (``tansaku.core.shards``); the segment is left
    unfinished for the merge to complete. Global stages before it run whole in every shard (deterministic,
    and cheap next to what is sharded).
    """
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ValueError(f"stage names must be unique, got {names}")
    work = safe_write.ensure_dir(work_dir)
    all_stats = [StageStats(s.name) for s in stages]
    stats_by_name = {s.name: s for s in all_stats}
    resumed = 0
    inputs: Callable[[], Iterable[Record]] = source if callable(source) else (lambda: source)
    files: list[Path] = []
    rejected: list[Path] = []

    # Records the next segment receives: known for a sized source, then the previous segment's output.
    total: int | None = len(source) if isinstance(source, Sized) else None
    segments = _segments(stages)
    if shard is not None and not any(segment[0].local for segment in segments):
        raise ValueError("cannot shard: every stage is global (needs every record)")
    for k, segment in enumerate(segments):
        seg_dir = work / f"segment-{k:02d}-{segment[0].name}"
        report = _Report(progress, total)
        # a shard run: this shard's chunks of the first record-local segment, then stop
        if shard is not None and segment[0].local:
            upto = names.index(segment[-1].name) + 1
            return _run_shard(segment, inputs(), seg_dir, chunk_size, stats_by_name, report, keep_rejected,
                              shard, all_stats[:upto])
        files, seg_rejected, n_resumed = _run_segment(segment, inputs, seg_dir, chunk_size, stats_by_name,
                                                      report, keep_rejected)
        rejected += seg_rejected
        resumed += n_resumed
        report([stats_by_name[s.name] for s in segment], final=True)
        total = stats_by_name[segment[-1].name].kept
        inputs = _reader(list(files))

    return PipelineResult(files, all_stats, resumed, rejected)


def _run_segment(segment, inputs, seg_dir, chunk_size, stats_by_name, report, keep_rejected):
    """One segment of a whole run: its files, rejected files and resumed chunk count. A finished segment
    (``done.json``) is reused as it is; ``inputs()`` is opened only when something must be computed."""
    done_marker = seg_dir / "done.json"
    if done_marker.exists():
        # A finished segment (local or global): reuse its files and counts as they are.
        done = json.loads(done_marker.read_text(encoding="utf-8"))
        for s in done["stats"]:
            stats_by_name[s["name"]].add(s)
        files = [seg_dir / name for name in done["files"]]
        return files, [seg_dir / name for name in done.get("rejected", [])], len(files)
    if segment[0].local:
        files, rejected, n_resumed, _ = _run_local_segment(segment, inputs(), seg_dir, chunk_size,
                                                           stats_by_name, report, keep_rejected)
        return files, rejected, n_resumed
    files, rejected = _run_global_segment(segment[0], inputs(), seg_dir, chunk_size, stats_by_name, report,
                                          keep_rejected)
    return files, rejected, 0


def _run_shard(segment, records, seg_dir, chunk_size, stats_by_name, report, keep_rejected, shard,
               stats) -> PipelineResult:
    """A shard run's end: the chunks ``shard`` accepts of the first record-local segment, left unfinished
    (no ``done.json``) for the merge; ``stats``: the counts of the stages up to that segment's last."""
    files, rejected, resumed, chunks = _run_local_segment(segment, records, seg_dir, chunk_size,
                                                          stats_by_name, report, keep_rejected, shard)
    report([stats_by_name[s.name] for s in segment], final=True)
    return PipelineResult(files, stats, resumed, rejected, chunks, seg_dir.name)


@dataclass
class _Report:
    """Passes a segment's stage counts to ``progress``: the first stage receives the segment's input
    (``total``), later ones what is left of it, unknown until they finish."""

    progress: Progress | None
    total: int | None

    def __call__(self, stats: list[StageStats], final: bool = False) -> None:
        if self.progress is not None:
            for i, st in enumerate(stats):
                self.progress(st, self.total if i == 0 else None, final)


def _reader(files: list[Path]) -> Callable[[], Iterator[Record]]:
    return lambda: (r for path in files for r in _read_jsonl(path))


class _ChunkBook:
    """Counts and dropped records of the chunks in flight, per stage; streaming stages fill it from their
    own threads (``tansaku.core.streaming``), the committing loop empties it chunk by chunk."""

    def __init__(self, segment: list[Stage]):
        self.names = [s.name for s in segment]
        self.counts: dict[int, list[StageStats]] = {}
        self.drops: dict[int, dict[str, list[tuple[tuple, Drop]]]] = {}
        self.lock = threading.Lock()

    def stats(self, chunk: int) -> list[StageStats]:
        with self.lock:
            if chunk not in self.counts:
                self.counts[chunk] = [StageStats(n) for n in self.names]
                self.drops[chunk] = {n: [] for n in self.names}
            return self.counts[chunk]

    def drop(self, chunk: int, stage: str, key: tuple, drop: Drop) -> None:
        self.stats(chunk)
        self.drops[chunk][stage].append((key, drop))  # appended by the one thread that runs ``stage``

    def pop(self, chunk: int) -> tuple[list[StageStats], list[tuple[str, Drop]]]:
        """The chunk's counts and its drops, stage by stage in key order (the same in every run)."""
        counts = self.stats(chunk)
        with self.lock:
            del self.counts[chunk]
            drops = self.drops.pop(chunk)
        return counts, [(name, d) for name in self.names for d in in_key_order(drops[name])]


def _run_local_segment(segment, records, seg_dir, chunk_size, stats_by_name, report, keep_rejected=False,
                       shard=None):
    """The segment's chunks, streamed through its stages (``tansaku.core.streaming``), each committed when its
    last record is through, its rows in input order: output, rejected records, then the counts file, which is
    the commit marker. Committed chunks are read past (their records never enter the stages); ``shard(i)``
    picks the chunks this run makes."""
    safe_write.ensure_dir(seg_dir)
    run = _LocalSegment(segment, seg_dir, stats_by_name, report, keep_rejected)
    report(run.running)
    committed: dict[int, tuple[Path, Path | None]] = {}  # chunk -> (output, rejected file or None)
    rows: dict[int, list[tuple[tuple, Record]]] = {}  # rows of the chunks in flight, keyed (streaming)
    tagged = run.tagged(records, chunk_size, shard)
    for x in run_stream(segment, tagged, run.book.stats, run.book.drop if keep_rejected else None):
        if not isinstance(x, ChunkEnd):
            chunk, key, record = x
            rows.setdefault(chunk, []).append((key, record))
            continue
        committed[x.chunk] = run.commit(x.chunk, rows.pop(x.chunk, []))
    # Chunks commit as they finish; the segment's files are listed in input order.
    files = [committed[i][0] for i in sorted(committed)]
    rejected = [committed[i][1] for i in sorted(committed) if committed[i][1] is not None]
    if shard is None:
        _write_atomic_json(
            seg_dir / "done.json",
            {"files": [f.name for f in files], "stats": [s.as_dict() for s in run.seg_totals.values()],
             "rejected": [f.name for f in rejected]},
        )
    return files, rejected, len(run.done_before), run.chunks_seen


class _LocalSegment:
    """A record-local segment's chunk files and counts: which chunks enter the stream (``tagged``), and each
    chunk's commit once its end marker is through (``commit``)."""

    def __init__(self, segment: list[Stage], seg_dir: Path, stats_by_name: dict[str, StageStats],
                 report: _Report, keep_rejected: bool):
        self.seg_dir, self.stats_by_name, self.report = seg_dir, stats_by_name, report
        self.keep_rejected = keep_rejected
        self.seg_totals = {s.name: StageStats(s.name) for s in segment}
        self.running = [stats_by_name[s.name] for s in segment]
        self.book = _ChunkBook(segment)
        self.done_before: set[int] = set()  # chunks committed by an earlier run
        self.chunks_seen = 0  # chunks the input was cut into, once it is read to its end

    def paths(self, i: int) -> tuple[Path, Path, Path]:
        """Chunk ``i``'s output, counts (the commit marker) and rejected-records files."""
        return (self.seg_dir / f"chunk-{i:06d}.jsonl", self.seg_dir / f"chunk-{i:06d}.stats.json",
                self.seg_dir / f"chunk-{i:06d}.rejected.jsonl")

    def tagged(self, records: Iterable[Record], chunk_size: int, shard) -> Iterator:
        """The records of the chunks to make, tagged (chunk, key, record), each chunk followed by its end."""
        it, i = iter(records), 0
        while chunk := list(islice(it, chunk_size)):
            if shard is None or shard(i):
                out_path, stats_path, _ = self.paths(i)
                if stats_path.exists() and out_path.exists():
                    self.done_before.add(i)  # committed by an earlier run: only its end marker travels
                else:
                    yield from ((i, (n,), r) for n, r in enumerate(chunk))
                yield ChunkEnd(i)
            i += 1
        self.chunks_seen = i

    def commit(self, chunk: int, rows: list[tuple[tuple, Record]]) -> tuple[Path, Path | None]:
        """Chunk ``chunk`` written (or, committed before, read back) and counted: (output, rejected or
        None)."""
        out_path, stats_path, rejected_path = self.paths(chunk)
        if chunk in self.done_before:
            chunk_stats = json.loads(stats_path.read_text(encoding="utf-8"))
        else:
            # Sorted by key: the rows of a batch-by-batch run, in its order, however the stream finished them.
            _write_atomic_jsonl(out_path, in_key_order(rows))
            counts, drops = self.book.pop(chunk)
            if self.keep_rejected:  # a failed write (a full disk) leaves no temp file behind
                _write_atomic_jsonl(rejected_path, (_rejected_row(name, drop) for name, drop in drops))
            chunk_stats = [s.as_dict() for s in counts]
            # The stats file is the commit marker: written after the data (and rejected) files are in place.
            _write_atomic_json(stats_path, chunk_stats)
        for s in chunk_stats:
            self.seg_totals[s["name"]].add(s)
            self.stats_by_name[s["name"]].add(s)
        self.report(self.running)
        return out_path, rejected_path if self.keep_rejected and rejected_path.exists() else None


def _run_global_segment(stage, records, seg_dir, chunk_size, stats_by_name, report, keep_rejected=False):
    # Redo from scratch: a half-finished global stage cannot be resumed (its state is gone). A fresh folder
    # (mkdtemp), never a fixed name that a planted link could redirect.
    safe_write.sweep_partials(seg_dir)
    tmp_dir = safe_write.fresh_dir(seg_dir)
    st = StageStats(stage.name)
    try:
        names, rejected = _fill_global_segment(stage, records, tmp_dir, chunk_size, st, report, keep_rejected)
    # a stage error, a full disk: the space back now (a killed run's is swept on resume)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    safe_write.replace_dir(tmp_dir, seg_dir)
    stats_by_name[stage.name].add(st.as_dict())
    return [seg_dir / n for n in names], [seg_dir / n for n in rejected]


def _fill_global_segment(stage, records, tmp_dir, chunk_size, st, report, keep_rejected):
    """The global stage's output chunks, rejected records and ``done.json``, written into ``tmp_dir``."""
    rejects = _Rejects(tmp_dir / "rejected.jsonl") if keep_rejected else None
    report([st])
    # Reported per record read too: a global stage may read everything before it yields its first record.
    out = instrumented(stage, records, st, rejects, tick=lambda: report([st]))
    names = []
    i = 0
    while chunk := list(islice(out, chunk_size)):
        name = f"chunk-{i:06d}.jsonl"
        _write_atomic_jsonl(tmp_dir / name, chunk)
        names.append(name)
        report([st])
        i += 1
    rejected = [rejects.commit().name] if rejects is not None else []
    _write_atomic_json(tmp_dir / "done.json", {"files": names, "stats": [st.as_dict()], "rejected": rejected})
    return names, rejected

"""Progress of long loops and builds: rich bars on a terminal, ``logging`` lines off it, nothing when quiet.

Under ``nohup``, Slurm or CI stderr is not a terminal: there a bar would print nothing until the end, so
progress goes to the ``tansaku`` logger instead, one INFO line per stage at most every
``TANSAKU_LOG_EVERY`` seconds (default 10; 0 = every update) once the stage has received a record, plus a
final line per stage (a stage that is waiting for its input logs nothing, not ``received 0, kept 0``)::

    2026-11-30 06:20:01 tansaku multihop · chains: received 1200/5000, kept 900, dropped 300 (cap_subject=280,
        …), 410.2 rec/s, ETA 0:00:09
    2026-11-30 06:20:10 tansaku multihop · chains done: received 5000, kept 3700, dropped 1300 (…),
        402.7 rec/s, 0:00:12

``quiet=True`` (``--quiet``) or ``TANSAKU_QUIET=1`` silences both. When nothing has configured logging
(no handler on ``tansaku`` or the root logger), the first progress off a terminal adds one stderr handler
to ``tansaku`` (:func:`ensure_log_handler`); a user's own logging config is left as it is.

Builds (``tansaku.core.store.build_dataset``) use :class:`BuildProgress`, one bar or line series per stage
with its own total; other loops use :func:`progress_bar`::

    with progress_bar("index", total=n, quiet=quiet) as advance:
        for doc in docs:
            ...
            advance(1)
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tansaku.core.errors import InputError
from tansaku.core.redact import redact_text

log = logging.getLogger("tansaku")

DEFAULT_LOG_EVERY = 10.0
_BAR_REFRESH = 0.1  # seconds between two updates of one bar (rich redraws at 10 Hz anyway)
_SHOWN_REASONS = 3  # drop reasons named per line; a long tail would bury the counts
_building: list[BuildProgress] = []  # the build being reported, if any: loops inside it defer to it


class StageCounts(Protocol):
    """What a progress update reads (``tansaku.core.engine.StageStats`` has it)."""

    name: str
    received: int
    kept: int
    dropped: Mapping[str, int]


def is_quiet(quiet: bool = False) -> bool:
    return quiet or os.environ.get("TANSAKU_QUIET") == "1"


def on_terminal() -> bool:
    return sys.stderr.isatty()


def log_every() -> float:
    """Seconds between two progress lines of one stage, from ``TANSAKU_LOG_EVERY`` (InputError if invalid)."""
    raw = os.environ.get("TANSAKU_LOG_EVERY", "").strip()
    if not raw:
        return DEFAULT_LOG_EVERY
    try:
        every = float(raw)
    except ValueError:
        every = math.nan
    if not math.isfinite(every) or every < 0:
        raise InputError(f"TANSAKU_LOG_EVERY={raw!r}: give the seconds between progress lines, a number >= 0")
    return every


class RedactingFormatter(logging.Formatter):
    """Log lines with secrets masked (``tansaku.core.redact``): a warning may quote an LLM error that names
    its endpoint with ``user:pass@`` or ``?api-key=``, and logs are kept and shared."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def ensure_log_handler() -> None:
    """Send ``tansaku`` INFO lines to stderr, unless logging is configured already (by the user, a framework,
    or an earlier call): a handler on ``tansaku`` or the root logger means someone chose where lines go."""
    if log.hasHandlers():
        return
    handler = logging.StreamHandler()  # stderr: stdout may carry a command's own output
    handler.setFormatter(RedactingFormatter("%(asctime)s %(name)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:.1f} rec/s" if seconds > 0 else "- rec/s"


def _drops(dropped: Mapping[str, int]) -> str:
    n = sum(dropped.values())
    if not n:
        return "dropped 0"
    top = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
    named = ", ".join(f"{reason}={count}" for reason, count in top[:_SHOWN_REASONS])
    return f"dropped {n} ({named}{', …' if len(top) > _SHOWN_REASONS else ''})"


def stage_line(label: str, stats: StageCounts, total: int | None, seconds: float, final: bool = False) -> str:
    """One progress line of a build stage.

    >>> class S: name, received, kept, dropped = "dedup", 50, 40, {"duplicate": 10}
    >>> stage_line("corpus", S(), 200, 5.0)
    'corpus · dedup: received 50/200, kept 40, dropped 10 (duplicate=10), 10.0 rec/s, ETA 0:00:15'
    >>> stage_line("corpus", S(), None, 5.0, final=True)
    'corpus · dedup done: received 50, kept 40, dropped 10 (duplicate=10), 10.0 rec/s, 0:00:05'
    """
    received = stats.received
    parts = [f"received {received}" + (f"/{total}" if total is not None and not final else ""),
             f"kept {stats.kept}", _drops(stats.dropped), _rate(received, seconds)]
    if final:
        parts.append(_clock(seconds))
    elif total is not None and received and seconds > 0:
        parts.append(f"ETA {_clock(max(total - received, 0) * seconds / received)}")
    return f"{label} · {stats.name}{' done' if final else ''}: " + ", ".join(parts)


def llm_part(counts: Mapping[str, int], seconds: float) -> str:
    """What an LLM stage's calls are doing (``LLMClient.stage_stats``).

    >>> llm_part({"requests": 120, "hits": 30, "tokens": 6000, "in_flight": 64}, 10.0)
    'LLM 64 in flight, 12.0 req/s, 600 tok/s, cache hits 25%'
    """
    rate = (lambda n: n / seconds) if seconds > 0 else (lambda n: 0.0)
    hits = counts["hits"] / counts["requests"] if counts["requests"] else 0.0
    return (f"LLM {counts['in_flight']} in flight, {rate(counts['requests']):.1f} req/s, "
            f"{rate(counts['tokens']):.0f} tok/s, cache hits {hits:.0%}")


def _bars(*extra) -> Progress:
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), *extra,
               TimeElapsedColumn(), TimeRemainingColumn()]
    return Progress(*columns, console=Console(stderr=True), transient=False)


class BuildProgress:
    """Per-stage progress of one build, given to ``tansaku.core.runner.run_pipeline(progress=…)``.

    Called as ``progress(stats, total, final)`` with a stage's running counts (received, kept, dropped by
    reason) and the number of records it will receive when known: a rich bar per stage on a terminal,
    throttled log lines off it (see the module docstring), nothing when quiet.
    """

    def __init__(self, label: str, quiet: bool = False, every: float | None = None):
        self.label = label
        self.quiet = is_quiet(quiet)
        self.every = log_every() if every is None else every
        self.bars: Progress | None = None
        self.tasks: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.logged: dict[str, float] = {}
        self.clients: dict = {}  # stage name → the LLM client it calls (watch)

    def watch(self, stages) -> None:
        """Add an LLM part to the lines of the stages that call a client (``Stage.client``)."""
        self.clients = {s.name: s.client for s in stages
                        if getattr(s.client, "stage_stats", None) is not None}

    def __enter__(self) -> BuildProgress:
        _building.append(self)
        if self.quiet:
            return self
        if on_terminal():
            self.bars = _bars(TextColumn("{task.fields[counts]}"))
            self.bars.start()
        else:
            ensure_log_handler()
        return self

    def __exit__(self, *exc) -> None:
        _building.remove(self)
        if self.bars is not None:
            self.bars.stop()

    def __call__(self, stats: StageCounts, total: int | None = None, final: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        started = self.started.setdefault(stats.name, now)
        # Off a terminal, a line before the stage has read anything says nothing ("received 0, kept 0"): its
        # first line comes with its first records, or at its end.
        if self.bars is None and not final and not stats.received:
            return
        # Throttled: a global stage reports after every record it reads.
        every = _BAR_REFRESH if self.bars is not None else self.every
        if not final and now - self.logged.get(stats.name, -math.inf) < every:
            return
        self.logged[stats.name] = now
        client = self.clients.get(stats.name)
        llm = client.stage_stats(stats.name) if client is not None else None
        if self.bars is not None:
            self._bar(stats, total, final, llm)
        else:
            extra = f", {llm_part(llm, now - started)}" if llm is not None else ""
            log.info(stage_line(self.label, stats, total, now - started, final) + extra)

    def _bar(self, stats: StageCounts, total: int | None, final: bool,
             llm: Mapping[str, int] | None = None) -> None:
        assert self.bars is not None
        if stats.name not in self.tasks:
            self.tasks[stats.name] = self.bars.add_task(f"{self.label} · {stats.name}", total=total,
                                                        counts="")
        # A finished stage's total is what it received (it was unknown for stages fed mid-segment).
        self.bars.update(self.tasks[stats.name], completed=stats.received,
                         total=stats.received if final else total,
                         counts=f"kept {stats.kept} dropped {sum(stats.dropped.values())}")
        if llm is not None:  # a row of its own under the stage's bar: the calls it has out
            key = f"{stats.name}\x00llm"
            if key not in self.tasks:
                self.tasks[key] = self.bars.add_task("  └ LLM", total=None, counts="")
            seconds = time.monotonic() - self.started[stats.name]
            self.bars.update(self.tasks[key], counts=llm_part(llm, seconds).removeprefix("LLM "))


@contextmanager
def quiet_loops(quiet: bool = False) -> Iterator[None]:
    """The loops (:func:`progress_bar`) run inside report nothing when quiet: for a command whose callee
    takes no ``quiet`` of its own (``synth index build --quiet`` over ``tansaku.envs.search.build_index``)."""
    if not is_quiet(quiet):
        yield
        return
    with BuildProgress("", quiet=True):  # a quiet build: the loops inside it defer to it and say nothing
        yield


@contextmanager
def progress_bar(description: str, total: int | None = None,
                 quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` counts ``n`` more items: a bar on a terminal, throttled log lines off it (a final one
    with the count and rate), nothing when quiet. Inside a build (rollouts of a stage, its search index) the
    loop is a passing bar under the build's own, and logs nothing: the stage lines already count it."""
    if _building:
        bars = _building[-1].bars
        if bars is None:  # quiet or logging: the build's lines say how far it is
            yield lambda n=1: None
            return
        task = bars.add_task(description, total=total, counts="")
        try:
            yield lambda n=1: bars.advance(task, n)
        finally:
            bars.remove_task(task)
        return
    if is_quiet(quiet):
        yield lambda n=1: None
        return
    if on_terminal():
        with _bars() as progress:
            task = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task, n)
        return

    ensure_log_handler()
    every, started = log_every(), time.monotonic()
    done, last = 0, started

    def advance(n: int = 1) -> None:
        nonlocal done, last
        done += n
        now = time.monotonic()
        if now - last >= every:
            last = now
            eta = f", ETA {_clock(max(total - done, 0) * (now - started) / done)}" if total and done else ""
            log.info(f"{description}: {done}" + (f"/{total}" if total is not None else "")
                     + f", {_rate(done, now - started)}{eta}")

    yield advance
    seconds = time.monotonic() - started
    log.info(f"{description} done: {done}, {_rate(done, seconds)}, {_clock(seconds)}")

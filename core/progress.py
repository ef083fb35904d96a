"""Progress bars (rich) for long loops, quiet in CI.

    with progress_bar("index", total=n, quiet=quiet) as advance:
        for doc in docs:
            ...
            advance(1)

Bars are shown only on a terminal; ``quiet=True``, ``TANSAKU_QUIET=1`` or a non-TTY stderr (CI, pipes)
turn them off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def is_quiet(quiet: bool = False) -> bool:
    return quiet or os.environ.get("TANSAKU_QUIET") == "1" or not sys.stderr.isatty()


@contextmanager
def progress_bar(description: str, total: int | None = None, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    if is_quiet(quiet):
        yield lambda n=1: None
        return

    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)
